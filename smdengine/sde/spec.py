"""Spec of the ``sde`` kind: ``params.model`` selects one of four models, each with its own params."""
from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from smdengine.nrq.spec import NRQPhysics
from smdengine.spec_base import SpecBase, StrictModel, tagged_union

DT_DESCRIPTION = "Euler–Maruyama step in units of SGD steps; 1/k for an integer k (1, 0.5, 0.1, …)."


def substeps(dt: float) -> int:
    """k = 1/dt, checked to be an integer so that every whole step lies on the integration grid."""
    if not 1e-9 <= dt <= 1:  # 1/dt would overflow (or be absurd) before the integer check
        raise ValueError(f"dt: expected 1/k for an integer k (1, 0.5, 0.1, …), got {dt}")
    k = round(1.0 / dt)
    if k < 1 or abs(k * dt - 1.0) > 1e-9:
        raise ValueError(f"dt: expected 1/k for an integer k (1, 0.5, 0.1, …), got {dt}")
    return k


class _Recording(StrictModel):
    """Horizon and recording shared by the models: ``steps`` and ``record_every`` count SGD steps."""

    steps: int = Field(10_000, ge=1, le=100_000_000, description="Horizon, in SGD steps.")
    record_every: int = Field(100, ge=1, description="Record the series every this many SGD steps.")
    dtype: Literal["float64", "float32"] = "float64"

    def _check_recording(self) -> None:
        if self.record_every > self.steps:
            raise ValueError(f"record_every: expected ≤ steps ({self.steps}), got {self.record_every}")
        if self.steps // self.record_every > 1_000_000:
            raise ValueError("record_every: expected at most 1 000 000 recorded points (steps/record_every)")


class NRQSDEParams(NRQPhysics):
    """Seed 000 eq. 9: dX = −η(PAX̄/|X| + λX)dt + (ησ/|X|)P dB, t in SGD steps."""

    model: Literal["nrq"]
    method: Literal["euler_maruyama"] = "euler_maruyama"
    dt: float = Field(1.0, gt=0, le=1, description=DT_DESCRIPTION)
    f_bins: int = Field(50, ge=2, le=1000, description="Bins of the histogram of f = X̄₁² over the tail.")

    @model_validator(mode="after")
    def _check_dt(self) -> NRQSDEParams:
        substeps(self.dt)
        return self

    @property
    def work(self) -> int:
        return self.trials * self.steps * substeps(self.dt) * self.dim


class NormalizedLinearParams(_Recording):
    """Seed 002 §6.1: F_z(x) = ⟨x/|x|, z⟩, N = D − 2 random inputs, ℓ2 loss plus the noise ⟨x/|x|, ε⟩."""

    model: Literal["normalized_linear"]
    dim: int = Field(10, ge=3, le=10_000, description="D; N = D − 2 samples, so Γ₁ is a circle.")
    noise_std: float = Field(0.3, gt=0, le=1e3, description="σ̂, with ε ~ N(0, σ̂²I).")
    lr: float = Field(1e-2, gt=0, le=10, description="η.")
    weight_decay: float = Field(0.05, gt=0, le=100, description="λ.")
    trials: int = Field(60, ge=1, le=1_000_000, description="Independent runs from the same start.")
    integrator: Literal["sgd", "sde"] = Field("sgd", description="sgd: eq. 18 (discrete); sde: eq. 19 by Euler–Maruyama.")
    dt: float = Field(1.0, gt=0, le=1, description=DT_DESCRIPTION + " Used by integrator sde.")
    init_norm: float = Field(1.0, gt=0, le=1e3, description="|x₀|; every trial starts at init_norm·x*/|x*| on Γ.")
    data_seed: int = Field(0, ge=0, le=2**63 - 1, description="Seed of the inputs z_i and target x* (kept fixed across η).")
    record_trials: int = Field(60, ge=1, le=1000, description="Trials whose angle θ is stored at every record.")
    steps: int = Field(20_000, ge=1, le=100_000_000, description="Horizon, in SGD steps.")

    @model_validator(mode="after")
    def _check(self) -> NormalizedLinearParams:
        self._check_recording()
        substeps(self.dt)
        if self.integrator == "sgd" and self.dt != 1.0:
            raise ValueError(f"dt: expected 1 with integrator sgd (it has no step size), got {self.dt}")
        return self

    def substeps(self) -> int:
        return substeps(self.dt) if self.integrator == "sde" else 1

    @property
    def work(self) -> int:
        return self.trials * self.steps * self.substeps() * self.dim * (self.dim - 2)


class UnitGradSq(StrictModel):
    """L_t, the squared unit-gradient norm fed to the map: mean + amplitude·sin(2πt/period) + U(−h, h)."""

    mean: float = Field(10.0, gt=0, le=1e6)
    noise: Literal["none", "uniform"] = "none"
    noise_half_width: float = Field(3.0, ge=0, le=1e6, description="h of the uniform noise (used when noise is uniform).")
    sine_amplitude: float = Field(0.0, ge=0, le=1e6)
    sine_period: float = Field(2 * math.pi * 1e5, gt=0, le=1e12, description="In steps; seed 004 uses sin(t/10⁵).")

    @model_validator(mode="after")
    def _positive(self) -> UnitGradSq:
        low = self.mean - self.sine_amplitude - (self.noise_half_width if self.noise == "uniform" else 0.0)
        if low <= 0:
            raise ValueError(f"unit_grad_sq: expected mean > sine_amplitude + noise_half_width so that L_t > 0, "
                             f"got a lowest value of {low:.6g}")
        return self


class NormMapParams(_Recording):
    """Seed 004 App. G: x ← (1−2λη)x + L_t η²/x (SGD, x = |w|²) or the 3-state SGDM map (eq. 72–76)."""

    model: Literal["norm_map"]
    lr: float = Field(0.1, gt=0, le=10, description="η.")
    weight_decay: float = Field(0.001, gt=0, le=100, description="λ.")
    momentum: float = Field(0.0, ge=0, lt=1, description="α; 0 selects the SGD map, > 0 the SGDM map.")
    init_norm_sq: float = Field(10.0, gt=0, le=1e12, description="x₀ = |w₀|² (and |w₋₁|² = ⟨w₀, w₋₁⟩ = x₀).")
    trials: int = Field(1, ge=1, le=1_000_000, description="Independent noise sequences, averaged.")
    unit_grad_sq: UnitGradSq = Field(default_factory=UnitGradSq)
    steps: int = Field(100_000, ge=1, le=100_000_000, description="Number of map iterations.")

    @model_validator(mode="after")
    def _check(self) -> NormMapParams:
        self._check_recording()
        if not 0 < 2 * self.weight_decay * self.lr < 1:
            raise ValueError(f"weight_decay: expected 2λη < 1 so the map contracts, got {2 * self.weight_decay * self.lr:.6g}")
        return self

    @property
    def work(self) -> int:
        return self.trials * self.steps * 3


class Toy2DParams(_Recording):
    """Seed 001 §4: GD + weight decay on L(x, y) = x²/(x² + y²) from a cloud of nearby starts."""

    model: Literal["toy2d"]
    lr: float = Field(0.1, gt=0, le=10, description="η.")
    weight_decay: float = Field(0.5, ge=0, le=100, description="λ.")
    center: tuple[float, float] = Field((0.1, 1.0), strict=False,  # a JSON list makes the pair
                                        description="Centre (x₀, y₀) of the cloud of starts.")
    cloud_radius: float = Field(1e-6, ge=0, le=1e3, description="Starts are centre + N(0, radius²I).")
    trials: int = Field(100, ge=1, le=1_000_000, description="Points in the cloud.")
    integrator: Literal["gd", "flow"] = Field("gd", description="gd: one step per unit time; flow: Euler with small dt.")
    dt: float = Field(0.01, gt=0, le=1, description="Flow step in units of GD steps; 1/k. Used by integrator flow.")
    steps: int = Field(400, ge=1, le=100_000_000, description="Horizon, in GD steps.")
    record_every: int = Field(1, ge=1, description="Record every this many GD steps.")

    @model_validator(mode="after")
    def _check(self) -> Toy2DParams:
        self._check_recording()
        substeps(self.dt)
        if not all(math.isfinite(c) and abs(c) <= 1e6 for c in self.center) or self.center == (0.0, 0.0):
            raise ValueError(f"center: expected a finite point other than the origin, got {self.center}")
        return self

    def substeps(self) -> int:
        return substeps(self.dt) if self.integrator == "flow" else 1

    @property
    def work(self) -> int:
        return self.trials * self.steps * self.substeps() * 2


MODELS = ("nrq", "normalized_linear", "norm_map", "toy2d")
SDEParams = tagged_union("model", dict(zip(MODELS, (NRQSDEParams, NormalizedLinearParams, NormMapParams,
                                                    Toy2DParams), strict=False)))


class SDESpec(SpecBase):
    kind: Literal["sde"]
    params: SDEParams

    @property
    def work(self) -> int:
        return self.params.work
