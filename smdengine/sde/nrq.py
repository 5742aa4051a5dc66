"""The NRQ SDE (seed 000 eq. 9) by Euler–Maruyama, batched over trials.

    dX = −η(PAX̄/|X| + λX) dt + (ησ/|X|) P dB,   t in SGD steps,

so one step of size dt is the discrete SGD update with drift rate η·dt and noise rate η·√dt
(:class:`smdengine.nrq.stepper.Stepper`); with dt = 1 it *is* SGD. Recorded at whole steps
t = 0, r, 2r, …: risk 1 − E X̄₁², norm_sq E|X|², eff_lr E η/|X|², gamma E(|X|²/η)² (seed 001),
and au_rms, the continuous AU of seed 000 Def. 1, √(E|X̄_{t+dt} − X̄_t|²/dt) (radians per step).
The run's theory conditions the closed-form norm on the realized initial norms.
f = X̄₁² at the records of the tail (last half of the final phase) is histogrammed over [0, 1].
The simulator is the nrq kind's, stepped k = 1/dt times per step: :class:`smdengine.nrq.simulate.NRQSDE`.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from smdengine._declare import Model, Outputs, PlotDef
from smdengine.nrq.spec import NORM_PLOT, RISK_PLOT, NRQPhysics
from smdengine.sde._common import DT_DESCRIPTION, substeps


class NRQSDEParams(NRQPhysics):
    """Seed 000 eq. 9: dX = −η(PAX̄/|X| + λX)dt + (ησ/|X|)P dB, t in SGD steps."""

    model: Literal["nrq"] = Field(..., description="The sde model: the NRQ SDE of seed 000 eq. 9.")
    method: Literal["euler_maruyama"] = Field("euler_maruyama", description="The integrator (the only one): "
                                                                                   "Euler–Maruyama with step dt.")
    dt: float = Field(1.0, gt=0, le=1, description=DT_DESCRIPTION)
    f_bins: int = Field(50, ge=2, le=1000, description="Bins of the histogram of f = X̄₁² over the tail.")

    @model_validator(mode="after")
    def _check_dt(self) -> NRQSDEParams:
        substeps(self.dt)
        return self

    @property
    def work(self) -> int:
        return self.trials * self.steps * substeps(self.dt) * self.dim

    def regime_warnings(self) -> list[dict[str, Any]]:
        """The nrq kind's conditions for SGD with the Euler–Maruyama step's rates: its decay factor is
        1 − ηλ·dt, so x = ηλ·dt (the SDE's closed forms hold for any ηλ; it is the integration that has to
        resolve them). ``f_histogram``'s density_theory is null when the final phase is out of regime."""
        return self.phase_warnings(0.0, self.dt, ("gamma_theory", "au_theory"), summary=False)

    def tail_warnings(self) -> list[dict[str, Any]]:
        """``sparse_tail``, then ``unsettled_tail`` as on the nrq kind, predicted for the Euler–Maruyama steps
        of size dt (:meth:`NRQPhysics.unsettled_tail`)."""
        return [*super().tail_warnings(), *self.unsettled_tail(None, self.dt)]


OUTPUTS = Outputs(
    metrics=("risk", "norm_sq", "au_rms", "eff_lr", "gamma"),
    theory=("norm_sq_theory", "gamma_theory", "au_theory", "au_equilibrium", "risk_stationary", "kappa"),
    distributions=("f_histogram",),
    summary=("nonfinite_from_step",),   # only where the numbers broke (smdengine._science.nonfinite_from)
    plots={
        "risk": RISK_PLOT,
        "au": PlotDef("Continuous angular update (seed 000 Def. 1)", "radians per step", ("au_rms",),
                      ("au_theory", "au_equilibrium"), log_y=True,
                      theory_labels=(("au_theory", "along the run: √(p−1)ση·√E[1/M_t²]"),
                                     ("au_equilibrium", "at equilibrium: √(2λη/(1+α))"))),
        "norm": NORM_PLOT,
        "f_histogram": PlotDef("Stationary law of f = X̄₁² (tail of the run)", "density", ("f_histogram",),
                               xlabel="f = X̄₁² (the progress index)",
                               style="histogram"),
    },
)


MODEL = Model("nrq", NRQSDEParams, "smdengine.nrq.simulate:NRQSDE", OUTPUTS)
