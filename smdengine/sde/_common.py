"""What the ``sde`` kind's models share: the Euler–Maruyama step ``dt`` = 1/k and the horizon/recording
fields. Each model's params live in its own file; the ``model``-tagged union is built by the registry."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from pydantic import Field, model_validator

from smdengine._science import check_recording, tail_warnings
from smdengine._spec_base import StrictModel

if TYPE_CHECKING:
    from smdengine._registry import SDESpec

P = TypeVar("P")

DT_DESCRIPTION = "Euler–Maruyama step in units of SGD steps; 1/k for an integer k (1, 0.5, 0.1, …)."


def substeps(dt: float) -> int:
    """k = 1/dt, checked to be an integer so that every whole step lies on the integration grid."""
    k = round(1.0 / dt) if 1e-9 <= dt <= 1 else 0   # 1/dt would overflow (or be absurd) outside
    if k < 1 or abs(k * dt - 1.0) > 1e-9:
        raise ValueError(f"dt: expected 1/k for an integer k (1, 0.5, 0.1, …), got {dt}")
    return k


class Recording(StrictModel):
    """Horizon and recording shared by the models: ``steps`` and ``record_every`` count SGD steps."""

    steps: int = Field(10_000, ge=1, le=100_000_000, description="Horizon, in SGD steps.")
    record_every: int = Field(100, ge=1, description="Record the series every this many SGD steps.")
    dtype: Literal["float64", "float32"] = Field("float64", description="Floating-point type of the state.")

    @model_validator(mode="after")
    def _check_recording(self) -> Recording:   # before the model's own checks
        check_recording(self.steps, self.record_every)
        return self

    def tail_start(self) -> float:
        return self.steps / 2.0

    def tail_warnings(self) -> list[dict[str, Any]]:
        """``sparse_tail`` when the summary's tail holds fewer than two records (:func:`smdengine._science.tail_warnings`)."""
        return tail_warnings(self.steps, self.record_every, self.tail_start())


class SDEModelParams(Protocol):
    """What every sde model's params provide (the static type of ``SDESpec.params``)."""

    @property
    def model(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    @property
    def work(self) -> int: ...
    def regime_warnings(self) -> list[dict[str, Any]]: ...
    def tail_warnings(self) -> list[dict[str, Any]]: ...


def params_of(spec: SDESpec, cls: type[P]) -> P:
    """The spec's params as the model's params class (the registry dispatched on ``model``)."""
    params = spec.params
    if not isinstance(params, cls):
        raise TypeError(f"params: expected {cls.__name__}, got {type(params).__name__}")
    return params
