"""The envelope every experiment spec shares."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field


class StrictModel(BaseModel):
    """Unknown fields are an error: a typo in a spec must not be silently ignored."""

    model_config = ConfigDict(extra="forbid")


class SpecBase(StrictModel):
    name: Optional[str] = Field(None, max_length=200, description="Free-form label.")
    seed: int = Field(0, ge=0, le=2**63 - 1, description="RNG seed; same seed, device and dtype give identical results.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Where the simulation runs; auto picks cuda when present.")

    @property
    def work(self) -> int:
        """Size of the job in elementary updates, compared against the service's work limit."""
        raise NotImplementedError
