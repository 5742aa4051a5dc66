"""The envelope every experiment spec shares."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag


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


def tagged_union(field: str, members: dict[str, type]) -> Any:
    """A union discriminated by ``field`` whose error, when the tag is missing or unknown, names
    the field and the choices: "kind: expected one of 'nrq', 'sde'"."""
    def tag(value: Any) -> Optional[str]:
        found = value.get(field) if isinstance(value, dict) else getattr(value, field, None)
        return found if isinstance(found, str) and found in members else None  # a dict tag is unhashable

    choices = ", ".join(map(repr, members))
    return Annotated[Union[tuple(Annotated[cls, Tag(name)] for name, cls in members.items())],
                     Discriminator(tag, custom_error_type=f"invalid_{field}",
                                   custom_error_message=f"{field}: expected one of {choices}")]
