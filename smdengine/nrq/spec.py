"""Spec of the ``nrq`` kind: SGD / heavy-ball SGDM + weight decay on the Noisy Rayleigh Quotient."""
from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from smdengine._declare import Model, Outputs, PlotDef
from smdengine._science import (
    EQUILIBRIUM_BAND,
    MAX_RECORDED_POINTS,
    NO_EQUILIBRIUM_AU,
    Phase,
    _step,
    check_recording,
    check_schedule,
    rate_phases,
    regime_warnings,
    relaxation_time,
    tail_start,
    tail_warnings,
)
from smdengine._spec_base import SpecBase, StrictModel


class ScheduleEntry(StrictModel):
    """From ``step`` on, the rates in force are multiplied by the factors (cumulative)."""

    step: int = Field(..., ge=1, description="First update that uses the new rates.")
    lr_factor: float = Field(..., gt=0, le=1e6, description="Multiplies η from step on (0.1: a tenfold decay).")
    weight_decay_factor: float = Field(1.0, ge=0, le=1e6, description="0 switches weight decay off from step on "
                                                                      "(|X|⁴ then grows by 2η²(p−1)σ² per update).")
    rescale: bool = Field(False, description="Move |X| straight to the new equilibrium: X ← X·(lr_factor/weight_decay_factor)^(1/4).")

    @model_validator(mode="after")
    def _check(self) -> ScheduleEntry:
        if self.rescale and self.weight_decay_factor == 0:
            raise ValueError("rescale: expected weight_decay_factor > 0 (without weight decay there is no "
                             "equilibrium norm to move to), got 0")
        return self


class NRQPhysics(StrictModel):
    """The NRQ problem and plain-SGD rates shared by the ``nrq`` kind and the ``sde`` kind's nrq model."""

    # a study axis that sets eigenvalues replaces the two-level default the validator fills in, whether the base
    # left it to the validator or spelled it out (a "sweep from here" base is a stored spec, defaults written); a
    # base that gave another two-level spectrum is refused for both: smdengine._study.expand_study
    REPLACED_DEFAULTS: ClassVar[dict[str, dict[str, float]]] = {"eigenvalues": {"eig_low": 1.0, "eig_high": 2.0}}

    dim: int = Field(10, ge=2, le=100_000, description="p, the dimension of X.")
    eig_low: float | None = Field(None, ge=0, le=1e6, description=(
        "a_1 of a two-level spectrum, given with eig_high (both unset and no eigenvalues: 1 and 2)."))
    eig_high: float | None = Field(None, ge=0, le=1e6, description=(
        "a_2 = … = a_p of a two-level spectrum, given with eig_low (both unset and no eigenvalues: 1 and 2)."))
    eigenvalues: list[float] | None = Field(None, description="Explicit ascending spectrum a_1 < a_2 ≤ … ≤ a_p (length dim).")
    noise_std: float = Field(1.0, gt=0, le=1e6, description="σ, with Σ = σ²I.")
    lr: float = Field(0.1, gt=0, le=1e3, description="η, the learning rate.")
    weight_decay: float = Field(0.01, ge=0, le=1e3, description="λ, the weight decay.")
    init_std: float = Field(1.0, gt=0, le=1e6, description="X₀ ~ N(0, init_std²·I).")
    trials: int = Field(1000, ge=1, le=10_000_000, description="Independent trials, simulated together.")
    steps: int = Field(10_000, ge=1, le=100_000_000, description="Number of updates.")
    record_every: int = Field(100, ge=1, description="Record the series every this many updates.")
    dtype: Literal["float64", "float32"] = Field("float64", description="Floating-point type of the state; "
                                                                   "float32 is faster, on a GPU most of all.")
    lr_schedule: list[ScheduleEntry] = Field(default_factory=list, max_length=1000, description=(
        "Phases: from each entry's step on, the rates are multiplied by its factors (at most 1000 entries, "
        "steps increasing)."))

    @model_validator(mode="after")
    def _check(self) -> NRQPhysics:
        two_level = self.eig_low is not None or self.eig_high is not None
        if self.eigenvalues is not None:
            if two_level:
                raise ValueError("eigenvalues: expected either eigenvalues or eig_low/eig_high, got both")
            eig = self.eigenvalues
            if len(eig) != self.dim:
                raise ValueError(f"eigenvalues: expected {self.dim} values (dim), got {len(eig)}")
            if any(x < 0 or x != x or x > 1e6 for x in eig):
                raise ValueError("eigenvalues: expected finite values in [0, 1e6]")
            if not eig[0] < eig[1]:
                raise ValueError(f"eigenvalues: expected a_1 < a_2, got a_1={eig[0]}, a_2={eig[1]}")
            if any(b < a for a, b in zip(eig[1:], eig[2:], strict=False)):
                raise ValueError("eigenvalues: expected ascending order a_2 ≤ … ≤ a_p")
        else:
            if self.eig_low is None and self.eig_high is None:
                # the default, and not marked as given (null is unset): a study axis may still set eigenvalues
                self.__dict__.update(self.REPLACED_DEFAULTS["eigenvalues"])
                self.__pydantic_fields_set__.difference_update({"eig_low", "eig_high"})
            if self.eig_low is None or self.eig_high is None:
                raise ValueError("eig_low/eig_high: expected both or neither")
            if not self.eig_low < self.eig_high:
                raise ValueError(f"eig_low: expected eig_low < eig_high, got {self.eig_low} ≥ {self.eig_high}")
        check_recording(self.steps, self.record_every)
        check_schedule("lr_schedule", self.lr_schedule, self.lr, self.weight_decay, self.steps, lr_max=1e3,
                       weight_decay_max=1e3, strict_weight_decay=True, bounds="[1e-12, 1e3]")
        return self

    def spectrum(self) -> list[float]:
        """a_1..a_p as a list (length dim)."""
        if self.eigenvalues is not None:
            return list(self.eigenvalues)
        assert self.eig_low is not None and self.eig_high is not None   # set by the validator
        return [self.eig_low] + [self.eig_high] * (self.dim - 1)

    def phases(self) -> list[Phase]:
        return rate_phases(self.lr, self.weight_decay, self.lr_schedule)

    def tail_start(self) -> float:
        return tail_start(self.phases(), self.steps)

    def tail_warnings(self) -> list[dict[str, Any]]:
        """``sparse_tail`` when the summary's tail holds fewer than two records (:func:`smdengine._science.tail_warnings`)."""
        return tail_warnings(self.steps, self.record_every, self.tail_start())

    def unsettled_tail(self, momentum: float | None, dt: float = 1.0) -> list[dict[str, Any]]:
        """``[unsettled_tail]`` when the tail's mean angular update is predicted more than ±10% off its
        equilibrium (:func:`smdengine.nrq.predict.tail_forecast`: SGD with heavy-ball ``momentum``, None where
        the spec has none, or the SDE integrated in steps of ``dt``): |X| still relaxing from |X₀| or from the
        previous phase, the tail means are not equilibrium values. Else ``[]``."""
        from smdengine.nrq.predict import LONGEST_DOUBLINGS, MAX_STEPS, tail_forecast  # numpy: not at import

        alpha = momentum or 0.0
        ratio, need = tail_forecast(self, alpha, dt)
        if ratio is None or abs(ratio - 1.0) <= EQUILIBRIUM_BAND:
            return []
        final = self.phases()[-1]
        tau = relaxation_time(final.lr, final.weight_decay, alpha)
        phase = "" if final.start == 0 else f" (its final phase, from step {final.start}, lengthened)"
        advice = (f"with steps ≥ {need}{phase} it is predicted within ±{EQUILIBRIUM_BAND:.0%}" if need is not None
                  else f"no run up to {2**LONGEST_DOUBLINGS:,} times as long (at most {MAX_STEPS:,} steps) is predicted "
                       f"within ±{EQUILIBRIUM_BAND:.0%}")
        if need is not None and need // self.record_every > MAX_RECORDED_POINTS:   # a spec that could be run
            advice += f" (and record_every ≥ {-(-need // MAX_RECORDED_POINTS)}: at most {MAX_RECORDED_POINTS:,} records)"
        earlier = " and the earlier phases" if final.start else ""
        formula = "1/(4λη)" if momentum is None else "(1−α)/(4λη)"
        return [{"code": "unsettled_tail", "omits": [], "message": (
            f"the summary's tail (steps ≥ {_step(self.tail_start())}) is predicted to average an angular update "
            f"{ratio:.3g}× its equilibrium: |X| is still relaxing to its equilibrium norm from |X₀|² ~ "
            f"init_std²·χ²_p{earlier} (the final phase's relaxation time τ = {formula} = {tau:.4g} steps), so "
            f"au_rms and the other tail means are not equilibrium values; {advice}.")}]

    def two_level(self) -> tuple[float, float] | None:
        """(a_l, a_h) when the spectrum has two levels a_1 < a_2 = … = a_p, else None."""
        eig = self.spectrum()
        return (eig[0], eig[1]) if all(x == eig[1] for x in eig[1:]) else None


    def regime_omits(self, momentum: float, sde_lines: tuple[str, ...] = ()) -> dict[str, list[str]]:
        """The theory names each out-of-regime condition omits (:func:`smdengine._science.phase_regime`):
        every line for the two without an equilibrium AU; the continuous-time closed forms (M_t, κ, r*,
        and ``sde_lines``) when λη (with momentum λη/(1−α)) is beyond the small-ηλ regime."""
        closed = ["norm_sq_theory", *sde_lines, *(("risk_stationary", "kappa") if self.two_level() is not None else ())]
        return {**{code: ["au_equilibrium", *closed] for code in NO_EQUILIBRIUM_AU}, "continuous_time": closed}

    def phase_warnings(self, momentum: float, h: float = 1.0, sde_lines: tuple[str, ...] = (),
                       summary: bool = True) -> list[dict[str, Any]]:
        notes = ({code: "those phases have no equilibrium_steps in the summary" for code in NO_EQUILIBRIUM_AU}
                 | {"continuous_time": "those phases have no equilibrium_steps_predicted in the summary"}
                 if summary else None)
        return regime_warnings(self.phases(), self.regime_omits(momentum, sde_lines), momentum, h,
                               "lr_schedule", self.steps, notes)


class NRQParams(NRQPhysics):
    momentum: float = Field(0.0, ge=0, lt=1, description="α of heavy-ball SGDM; 0 is plain SGD.")

    def regime_warnings(self) -> list[dict[str, Any]]:
        """Out-of-regime warnings of each phase's (η, λ, α) (:func:`smdengine._science.phase_regime`)."""
        return self.phase_warnings(self.momentum)

    def tail_warnings(self) -> list[dict[str, Any]]:
        """``sparse_tail`` (:meth:`NRQPhysics.tail_warnings`), then ``unsettled_tail``
        (:meth:`NRQPhysics.unsettled_tail`)."""
        return [*super().tail_warnings(), *self.unsettled_tail(self.momentum)]


class NRQSpec(SpecBase):
    kind: Literal["nrq"]
    params: NRQParams = Field(default_factory=lambda: NRQParams.model_validate({}))

    @property
    def work(self) -> int:
        p = self.params
        return p.trials * p.steps * p.dim


# plots shared with the sde kind's nrq model
RISK_PLOT = PlotDef("Risk r_t = 1 − E[X̄₁²]", "risk", ("risk",), ("risk_stationary",), log_y=True)
NORM_PLOT = PlotDef("Squared weight norm", "|X|²", ("norm_sq",), ("norm_sq_theory",), log_y=True)

OUTPUTS = Outputs(
    metrics=("risk", "loss", "au_mean", "au_rms", "norm_sq", "eff_lr"),
    theory=("au_equilibrium", "norm_sq_theory", "risk_stationary", "kappa"),
    summary=("nonfinite_from_step",),   # only where the numbers broke (smdengine._science.nonfinite_from)
    plots={
        "risk": RISK_PLOT,
        "au": PlotDef("Angular update per step", "radians", ("au_rms", "au_mean"), ("au_equilibrium",), log_y=True),
        "norm": NORM_PLOT,
    },
)
# continuable: schedules are in absolute steps and the summary is computed at the end
MODEL = Model("nrq", NRQParams, "smdengine.nrq.simulate:NRQRun", OUTPUTS, continuable=True)
