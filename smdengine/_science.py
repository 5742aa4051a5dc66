"""Science and checks shared by the kinds (torch-free): the equilibrium angular update, the rate
phases of a schedule, the tail of a run, the record-count and schedule-range validators, and the
summary rules.

Schedules (``nrq``'s ``lr_schedule``, ``train``'s ``schedule``) are lists of entries with ``step``,
``lr_factor``, ``weight_decay_factor`` and ``rescale``: from ``step`` on, the rates in force are
multiplied by the factors (cumulative), and ``rescale`` multiplies the scale-invariant weights by
(lr_factor/weight_decay_factor)^¼, straight to the new equilibrium (docs/theory.md).
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def au_equilibrium(lr: float, weight_decay: float, momentum: float = 0.0) -> float:
    """Root-mean-square angular update at equilibrium, √(2λη/(1+α)) (radians per update; seed 003)."""
    return math.sqrt(2.0 * weight_decay * lr / (1.0 + momentum))


@dataclass(frozen=True)
class Phase:
    start: int            # first update of the phase
    lr: float             # η in force
    weight_decay: float   # λ in force
    rescale: float        # factor applied to the scale-invariant weights at the start (1.0: none)


def rate_phases(lr: float, weight_decay: float, entries: Iterable[Any]) -> list[Phase]:
    """Phases in order; factors are cumulative (each entry, a kind's ScheduleEntry with its step resolved,
    multiplies the rates then in force)."""
    out = [Phase(0, lr, weight_decay, 1.0)]
    for entry in entries:
        prev = out[-1]
        factor = (entry.lr_factor / entry.weight_decay_factor) ** 0.25 if entry.rescale else 1.0
        out.append(Phase(int(entry.step or 0), prev.lr * entry.lr_factor,
                         prev.weight_decay * entry.weight_decay_factor, factor))
    return out


def phase_at(all_phases: Sequence[Phase], step: int) -> Phase:
    """The phase in force at ``step`` (phases are sorted by start, the first starts at 0)."""
    return all_phases[bisect.bisect_right([ph.start for ph in all_phases], step) - 1]


def record_steps(steps: int, record_every: int) -> list[int]:
    """Steps n at which a run records: 0, r, 2r, … < steps (the regular records), then ``steps`` itself
    (the final row: the state after the last update; :mod:`smdengine._simulator`)."""
    return [*range(0, steps, record_every), steps]


def tail_start(all_phases: Sequence[Phase], steps: int) -> float:
    """Summaries average over the last half of the final phase: steps ≥ this value."""
    final = all_phases[-1].start
    return final + (steps - final) / 2.0


# ----------------------------------------------------------------------------- validators


MAX_RECORDED_POINTS = 1_000_000   # steps/record_every of an nrq or sde run


def check_recording(steps: int, record_every: int, max_points: int = MAX_RECORDED_POINTS) -> None:
    """``record_every`` ≤ ``steps`` and at most ``max_points`` recorded points."""
    if record_every > steps:
        raise ValueError(f"record_every: expected ≤ steps ({steps}), got {record_every}")
    if steps // record_every > max_points:
        raise ValueError(f"record_every: expected at most {max_points:,} recorded points (steps/record_every)"
                         .replace(",", " "))


def check_schedule(field: str, entries: Iterable[Any], lr: float, weight_decay: float, steps: int,
                   lr_max: float, weight_decay_max: float, strict_weight_decay: bool, bounds: str) -> None:
    """Entries at strictly increasing steps in [1, steps), and the rates in force within range:
    lr ∈ [1e-12, lr_max]; weight decay ≤ weight_decay_max, and (``strict_weight_decay``) 0 or ≥ 1e-12.
    ``bounds``: the range as the error message states it."""
    last = 0
    for entry in entries:
        step = int(entry.step or 0)
        if step <= last or step >= steps:
            raise ValueError(f"{field}: expected strictly increasing steps in [1, steps), got {entry.step}")
        last, lr, weight_decay = step, lr * entry.lr_factor, weight_decay * entry.weight_decay_factor
        wd_ok = weight_decay <= weight_decay_max and (not strict_weight_decay or weight_decay == 0
                                                      or weight_decay >= 1e-12)
        if not (1e-12 <= lr <= lr_max and wd_ok):
            raise ValueError(f"{field}: expected the rates in force to stay in {bounds}, "
                             f"got lr={lr:.3g}, weight_decay={weight_decay:.3g} from step {step}")


# ----------------------------------------------------------------------------- summary rules


def tail_means(series: dict[str, list], theory: dict[str, Any], start: float) -> dict[str, float]:
    """The summary rule of every scalar series and theory series: the mean over the recorded steps
    ≥ start (the last recorded point when none is). NaN propagates."""
    tail = tail_slice(series["step"], start)
    out = {}
    for key, values in list(series.items()) + list(theory.items()):
        if key == "step" or not isinstance(values, list) or not values or isinstance(values[0], list):
            continue
        picked = values[tail]
        out[key] = math.fsum(picked) / len(picked)
    return out


TAIL_RECORDS_MIN = 2   # regular records in the summary's tail under which a spec is warned (sparse_tail)


def tail_warnings(steps: int, record_every: int, start: float, windows: bool = False) -> list[dict[str, Any]]:
    """``[{"code": "sparse_tail", "message", "omits": []}]`` when fewer than TAIL_RECORDS_MIN regular records lie
    in the summary's tail (steps ≥ ``start``), else ``[]``: the tail means are then one record's values, or,
    with none there, those of the last regular record (step 0 when ``record_every`` ≥ ``steps``), as are the
    other tail summaries (:func:`tail_slice`, :func:`summary_start`). Regular records are n = 0, r, 2r, … < ``steps``, or with
    ``windows`` (a record aggregates the window [n, n + r), the train kind) only the whole windows, n + r ≤
    ``steps``. The message names a bound under which every ``record_every`` puts two records there: the tail's
    records lie in the integers [a, steps − 1] (a = ⌈start⌉), N = steps − a of them, which hold ⌊N/r⌋ ≥ 2
    multiples of r when r ≤ N/2; with windows in [a, steps − r], which holds two when r ≤ (steps − a + 1)/3.
    Under no bound ≥ 1 no record_every can (fewer than two steps, or windows, fit in the tail)."""
    r = record_every
    first, last = math.ceil(start / r) * r, last_record(steps, r, windows)
    count = max(0, (last - first) // r + 1)
    if count >= TAIL_RECORDS_MIN:
        return []
    where = f"the summary's tail (the records at steps ≥ {_step(start)}, the last half of the final phase)"
    if count == 1:
        said = f"one regular record (step {first}) lies in {where}: the tail means are its values, not a mean"
    else:   # check_recording keeps record_every ≤ steps: record 0 at least
        said = (f"no regular record lies in {where}: the record at step {last}, before the tail, stands for it "
                f"in the summary")
    a = math.ceil(start)
    bound = (steps - a + 1) // 3 if windows else (steps - a) // 2
    advice = (f"any record_every ≤ {bound} puts at least {TAIL_RECORDS_MIN} there" if bound >= 1
              else f"the tail is too short to hold {TAIL_RECORDS_MIN} records")
    return [{"code": "sparse_tail", "message": f"record_every = {r}: {said}; {advice}.", "omits": []}]


def tail_slice(steps: Sequence[int], start: float) -> slice:
    """The recorded points a tail summary takes: those at steps ≥ start (``steps`` ascending, so they are a tail
    of every series), or the last point when none is."""
    n = len(steps)
    first = bisect.bisect_left(steps, start)
    return slice(first, n) if first < n else slice(n - 1, n or None)


def last_record(steps: int, record_every: int, windows: bool = False) -> int:
    """The last regular record: the largest multiple of r below ``steps`` (with ``windows``: r ≤ steps − it)."""
    return ((steps - record_every) // record_every if windows else (steps - 1) // record_every) * record_every


def summary_start(start: float, steps: int, record_every: int) -> float:
    """Where a tail summary gathered while the run records (before its steps are known: a histogram) starts:
    ``start``, or the last regular record when none lies at or after it, as :func:`tail_slice` picks them."""
    return min(start, last_record(steps, record_every))


def _step(value: float) -> str:
    """A step or half step as written in full (``:g`` wrote 1500000.5 as 1.5e+06)."""
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def nonfinite_from(series: dict[str, list], names: Sequence[str]) -> dict[str, int]:
    """``{"nonfinite_from_step": n}``, n the first recorded step at which one of the series ``names`` is NaN or
    ±inf: the state under- or overflowed (an init_std near the smallest double, a diverging rate), and the
    measured summary values from there on are null. Empty when they are finite throughout."""
    try:
        if all(math.isfinite(sum(series[name])) for name in names):   # the common case, one pass in C per series
            return {}
    except TypeError:   # a None: a NaN that went through JSON (the points of a checkpoint resumed from)
        pass
    for i, step in enumerate(series["step"]):   # (a sum also overflows where finite values are huge)
        if not all((v := series[name][i]) is not None and math.isfinite(v) for name in names):
            return {"nonfinite_from_step": step}
    return {}


# ----------------------------------------------------------------------------- time to equilibrium

EQUILIBRIUM_BAND = 0.1   # b: the tracked AU is at equilibrium within ±10% of √(2λη/(1+α))


def relaxation_time(lr: float, weight_decay: float, momentum: float = 0.0) -> float:
    """τ = (1−α)/(4λη), in updates: |w|⁴ approaches its equilibrium like e^{−t/τ} (docs/theory.md)."""
    return (1.0 - momentum) / (4.0 * weight_decay * lr)


def norm4_decay(prev: Phase, phase: Phase) -> float:
    """k of a phase: the factor by which it divides the equilibrium |w|⁴ ∝ η/λ, starting from the
    previous phase's equilibrium and after its rescale: (η_prev/λ_prev)/(η/λ)·rescale⁴. It is the lr
    decay factor of a phase that only divides η by k, and 1 for a phase that rescales."""
    return (prev.lr * phase.weight_decay) / (prev.weight_decay * phase.lr) * phase.rescale**4


def predicted_equilibrium_steps(k: float, phase: Phase, momentum: float = 0.0) -> int | None:
    """⌈ln k·(1−α)/(4λη)⌉ (docs/theory.md: at least this many updates to the new equilibrium after η ÷ k; 0
    with rescale, k = 1). None where it does not apply: k < 1 (the phase raises the equilibrium norm)
    or λ = 0 (no equilibrium)."""
    if abs(k - 1.0) <= 1e-9:   # a rescale's k, 1 up to rounding
        k = 1.0
    if phase.weight_decay <= 0 or k < 1.0:
        return None
    return math.ceil(math.log(k) * relaxation_time(phase.lr, phase.weight_decay, momentum))


def band_entry(k: float, band: float = EQUILIBRIUM_BAND) -> float:
    """x_b: the time, in units of the relaxation time τ, at which the AU of a phase that starts a factor
    k off its equilibrium |w|⁴ (:func:`norm4_decay`) enters the band ±b around its equilibrium.

    Derivation (continuous time, unit-gradient norm L constant across the phase): with M = |w|²,
    M_t² = T + (M_0² − T)e^{−t/τ}, T = M_*², and M_0² = k·T; the AU is √L·η/M_t, so
    AU_t/AU_* = M_*/M_t = (1 + (k−1)e^{−x})^{−½}, x = t/τ. For k > 1 it rises to 1 and enters the band
    when 1 + (k−1)e^{−x} ≤ (1−b)^{−2}: x_b = ln((k−1)/((1−b)^{−2} − 1)). For k < 1 it falls to 1 and enters
    when 1 − (1−k)e^{−x} ≥ (1+b)^{−2}: x_b = ln((1−k)/(1 − (1+b)^{−2})). 0 when it starts in the band."""
    if k >= 1.0:
        x = math.log(max(k - 1.0, 1e-300) / ((1.0 - band) ** -2 - 1.0))
    else:
        x = math.log((1.0 - k) / (1.0 - (1.0 + band) ** -2))
    return max(0.0, x)


def band_offset(k: float, band: float = EQUILIBRIUM_BAND) -> float:
    """x_b − ln k (units of τ), how much later than ln k·τ the AU enters the band after η ÷ k (k > 1):
    ln(1 − 1/k) − ln((1−b)^{−2} − 1); at b = 0.1: 0.757 (k = 2), 1.345 (k = 10), 1.440 (k = 100)."""
    return band_entry(k, band) - math.log(k)


def settle_steps(steps: Sequence[int], values: Sequence[float], start: int, end: int, target: float,
                 timescale: float, width: int = 1, band: float = EQUILIBRIUM_BAND) -> int | None:
    """Measured updates from ``start`` until the tracked AU stays within ±``band``·``target`` of the
    equilibrium ``target`` to the end of the phase [start, end).

    ``values[i]`` is an RMS angular update over the ``width`` updates [steps[i], steps[i] + width)
    (nrq: 1 update, the RMS over trials; train: a window of record_every updates); only the records
    inside the phase count. Smoothing: each record is replaced by the RMS of the records whose steps
    lie within ±τ/8 of it (a centred window of τ/4 updates, τ = ``timescale``, cut at the phase's
    ends; at least the record itself), so that window scatter averages out while the relaxation, on
    the scale τ, is hardly smeared (a centred mean over w·τ is biased by f''·w²/24 in units of τ: f''/384
    here). The rule:
    the first phase record from which every smoothed value to the phase's last record is within the
    band; the result is that record's step − start (0 ≤ result < the record spacing when the phase
    starts at equilibrium), None when the last record is outside (or the phase has no record)."""
    inside = [i for i, n in enumerate(steps) if start <= n and n + width <= end]
    if not inside:
        return None
    at = [steps[i] for i in inside]
    squares, unit = _exact_multiples([values[i] ** 2 if math.isfinite(values[i]) else math.nan for i in inside])
    total = count = 0   # the window's sum of finite squares, exact in units of 1/unit, and their number
    half = timescale / 8.0
    lo, hi = 0, -1
    settled = None
    for j, n in enumerate(at):   # the window slides: the smoothing is linear in the records, not records × window
        while hi + 1 < len(at) and at[hi + 1] <= n + half:
            hi += 1
            if (entering := squares[hi]) is not None:
                total, count = total + entering, count + 1
        while at[lo] < n - half:
            if (leaving := squares[lo]) is not None:
                total, count = total - leaving, count - 1
            lo += 1
        # the correctly rounded sum (math.fsum's) over the count: Python's int / int rounds correctly
        ok = count > 0 and abs(math.sqrt(total / unit / count) / target - 1.0) <= band
        if not ok:
            settled = None
        elif settled is None:
            settled = j
    return None if settled is None else at[settled] - start


def _exact_multiples(values: Sequence[float]) -> tuple[list[int | None], int]:
    """Each finite value as an exact integer multiple of 1/unit (None for the others): sums and differences
    of the integers are then exact. ``unit`` = 2^(53 − the least binary exponent among them), at most 2^1074
    (a double's 53-bit significand times 2^exponent is then a whole number of units), so the integers are as
    short as the values' spread of magnitudes allows."""
    least = min((math.frexp(v)[1] for v in values if math.isfinite(v) and v != 0.0), default=53)
    unit = 1 << min(1074, max(0, 53 - least))
    multiples: list[int | None] = []
    for v in values:
        if math.isfinite(v):
            numerator, denominator = v.as_integer_ratio()   # denominator: a power of two that divides unit
            multiples.append(numerator * (unit // denominator))
        else:
            multiples.append(None)
    return multiples, unit


def equilibrium_summary(all_phases: Sequence[Phase], total_steps: int, steps: Sequence[int],
                        tracked: Sequence[Sequence[float]], momentum: float = 0.0,
                        width: int = 1) -> dict[str, int | None]:
    """Per phase i: ``equilibrium_steps_phase<i>``, the measured updates until every tracked AU series
    (nrq: one; train: one per layer) stays in the band (:func:`settle_steps`; the largest over the
    series, None when one never settles), and, from phase 1 on, ``equilibrium_steps_predicted_phase<i>``
    (:func:`predicted_equilibrium_steps` with k = :func:`norm4_decay`; absent where it does not apply).
    Phases without weight decay have no equilibrium: no keys; nor have the phases out of regime with
    no equilibrium AU (:data:`NO_EQUILIBRIUM_AU`), and a phase out of regime, or after one, has no
    prediction (:func:`phase_regime`). Nothing when there is no tracked series."""
    out: dict[str, int | None] = {}
    if not tracked:
        return out
    ends = [ph.start for ph in all_phases[1:]] + [total_steps]
    regimes = out_of_regime_phases(all_phases, momentum)
    for i, (phase, end) in enumerate(zip(all_phases, ends, strict=True)):
        if phase.weight_decay <= 0 or regimes[i] in NO_EQUILIBRIUM_AU:
            continue
        target = au_equilibrium(phase.lr, phase.weight_decay, momentum)
        timescale = relaxation_time(phase.lr, phase.weight_decay, momentum)
        measured = [settle_steps(steps, values, phase.start, end, target, timescale, width) for values in tracked]
        out[f"equilibrium_steps_phase{i}"] = None if None in measured else max(m for m in measured if m is not None)
        if (i > 0 and all_phases[i - 1].weight_decay > 0 and regimes[i] is None
                and regimes[i - 1] not in NO_EQUILIBRIUM_AU):
            predicted = predicted_equilibrium_steps(norm4_decay(all_phases[i - 1], phase), phase, momentum)
            if predicted is not None:
                out[f"equilibrium_steps_predicted_phase{i}"] = predicted
    return out


# ----------------------------------------------------------------------------- out-of-regime warnings

CONTINUOUS_TIME_MAX = 0.1
"""Largest λη/(1−α) at which the continuous-time closed forms (the norm relaxation e^{−4ληt/(1−α)}, the
equilibrium |X|² = √((p−1)σ²η/(2λ)), κ and r*, the relaxation-time predictions) are drawn. Why 0.1: they
replace the per-update factor (1 − λη)⁴ of |w|⁴ by e^{−4λη}, a relative error of the relaxation rate of
−ln(1 − x)/x − 1 ≈ x/2 (5% at x = λη = 0.1), and the equilibrium norm of the discrete map,
ηL/(λ(2 − λη)), by ηL/(2λ) (x/4 in |w|⁴). Measured on nrq (p = 10, a = (1, 2), σ = 1, 4000 trials): the
stationary risk and |X|² exceed r* and the closed form by 0.9% and 1.2% at ηλ = 0.01, 2.2% and 2.7% at
0.05, 2.6% and 4.2% at 0.1, 2.9% and 7.8% at 0.2, 3.0% and 12% at 0.3; the presets run at ηλ ≤ 1e-2
(errors ≤ 0.5% from discretisation, within their Monte-Carlo tolerance). With momentum the relaxation
per update is 4λη/(1−α), hence x = λη/(1−α)."""

REGIME_CODES = ("no_equilibrium", "decay_not_positive", "continuous_time")
"""Out-of-regime conditions of a phase, most severe first (:func:`phase_regime`)."""
NO_EQUILIBRIUM_AU = ("no_equilibrium", "decay_not_positive")
"""The conditions under which √(2λη/(1+α)) is not the equilibrium AU (no line, no time to equilibrium)."""


def phase_regime(lr: float, weight_decay: float, momentum: float = 0.0, h: float = 1.0) -> str | None:
    """The out-of-regime condition of rates (η, λ, α) applied in updates of size h (h = dt for an
    Euler–Maruyama step: its decay factor is 1 − ηλ·dt), or None in regime (and without weight decay):

    ``no_equilibrium``: x = ηλh, x/(1+α) ≥ 2. SGD: |w'|² = (1 − x)²|w|² + η²|g|² with (1 − x)² ≥ 1
    has no fixed point, |w| grows without bound; SGDM: w' = βw − αw₋ − ηg, β = 1 + α − x, has a
    characteristic root of z² − βz + α outside the unit circle once |β| ≥ 1 + α (seed 003 Thm 2's
    2 − λη/(1+α) > 0 fails). No equilibrium: no theory line applies.
    ``decay_not_positive``: 1 ≤ x/(1+α) < 2. The decay factor 1 − x (SGDM: β) is not positive: every
    update reverses the direction of w's own part, the angular update is ≥ π/2 instead of √(2x/(1+α))
    (at equilibrium cos Δ = 1 − x exactly, for SGD), and the small-x expansions behind every line fail.
    ``continuous_time``: x/(1−α) > :data:`CONTINUOUS_TIME_MAX`: the continuous-time closed forms are
    off by more than a few per cent (see there); √(2x/(1+α)) itself still holds to ~10% (arccos(1 − x)
    against √(2x) for SGD: 0.8% at x = 0.1, 11% at x = 1)."""
    x = lr * weight_decay * h
    if not x > 0:
        return None
    tol = 1e-9   # relative: a rate on a boundary, up to rounding (0.01/(1 − 0.9)), is on it
    if x / (1.0 + momentum) >= 2.0 * (1.0 - tol):
        return "no_equilibrium"
    if x / (1.0 + momentum) >= 1.0 - tol:
        return "decay_not_positive"
    if x / (1.0 - momentum) > CONTINUOUS_TIME_MAX * (1.0 + tol):
        return "continuous_time"
    return None


def _regime_text(code: str, momentum: float) -> str:
    """The condition ``code`` in words, for SGD (α = 0) or SGDM."""
    if code == "no_equilibrium":
        return ("λη/(1+α) ≥ 2: the weight norm has no equilibrium (a root of the heavy-ball recursion "
                "w' = (1 + α − λη)w − αw₋ − ηg leaves the unit circle)" if momentum else
                "λη ≥ 2: the weight norm has no equilibrium (|1 − λη| ≥ 1 makes |w| grow without bound)")
    if code == "decay_not_positive":
        return ("λη/(1+α) ≥ 1: the factor 1 + α − λη is not positive, so the update reverses w's own part and "
                "the angular update is not √(2λη/(1+α))" if momentum else
                "λη ≥ 1: the decay factor 1 − λη is not positive, so each update reverses w's own part and the "
                "angular update is ≥ π/2, not √(2λη)")
    return (f"λη{'/(1−α)' if momentum else ''} > {CONTINUOUS_TIME_MAX:g}: outside the small-ηλ regime of the "
            f"continuous-time theory (its relaxation rate and equilibrium are off by more than ~5%)")


def regime_warnings(all_phases: Sequence[Phase], omits: Mapping[str, Sequence[str]], momentum: float = 0.0,
                    h: float = 1.0, schedule: str = "lr_schedule", total_steps: int | None = None,
                    notes: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One warning ``{"code", "message", "omits"}`` per condition of :func:`phase_regime` that some phase
    meets, most severe first; the message names the phases (their steps and rates), the condition, the
    theory names ``omits[code]`` it omits (a code missing from ``omits`` is not reported) and
    ``notes[code]`` (what else it changes)."""
    by_code: dict[str, list[str]] = {}
    ends = [ph.start for ph in all_phases[1:]] + [total_steps]
    for i, (phase, end) in enumerate(zip(all_phases, ends, strict=True)):
        code = phase_regime(phase.lr, phase.weight_decay, momentum, h)
        if code is None or code not in omits:
            continue
        span = f"steps {phase.start}–{end - 1}" if end is not None else f"from step {phase.start}"
        where = "" if len(all_phases) == 1 else f"{schedule} phase {i} ({span}): "
        dt = f"·dt = {phase.lr * phase.weight_decay * h:.3g}" if h != 1.0 else f" = {phase.lr * phase.weight_decay:.3g}"
        by_code.setdefault(code, []).append(f"{where}η = {phase.lr:.3g}, λ = {phase.weight_decay:.3g}"
                                            f"{f', α = {momentum:g}' if momentum else ''}: ηλ{dt}")
    out = []
    for code in REGIME_CODES:
        if code in by_code:
            names = list(omits[code])
            omitted = f"; omitted: {', '.join(names)}" if names else ""
            note = (notes or {}).get(code)
            out.append({"code": code, "message": f"{'; '.join(by_code[code])}. {_regime_text(code, momentum)}{omitted}"
                                                 f"{'; ' + note if note else ''}.",
                        "omits": names})
    return out


def out_of_regime_phases(all_phases: Sequence[Phase], momentum: float = 0.0,
                         h: float = 1.0) -> list[str | None]:
    """:func:`phase_regime` of every phase."""
    return [phase_regime(ph.lr, ph.weight_decay, momentum, h) for ph in all_phases]
