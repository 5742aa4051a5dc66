"""The machinery of checks: what an evaluator sees of a study (:class:`Study`), what it returns per check
(:class:`Outcome`), the Monte-Carlo error rules (:func:`over_seeds`) and the verdict.

Findings. A claim of a seed may not hold on the model a preset runs (a small net on digits), for a cause the
preset can measure. Such a check's outcome names the cause (``Outcome.finding``, one sentence) and the
diagnostic checks that show it (``Outcome.diagnostics``: ids of ordinary checks of the same preset, each with
its own claim, prediction, measurement and tolerance, whose claim is the cause). The verdict is ``finding``
only when the measurement contradicts the claim (its own verdict is ``not_reproduced``) and every diagnostic
is ``reproduced``; otherwise the check keeps its own verdict and its note says which diagnostic did not show
the cause (:func:`resolve_findings`)."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from smdengine._compare import ChildRecord

if TYPE_CHECKING:
    from smdengine.presets import CheckDef

CONFIDENCE = 0.9973   # two-sided, the "3 standard errors" of a normal law
TAIL_BLOCKS = 10      # one seed: batch means of the tail records in this many blocks


class Missing(Exception):
    """A child a check needs is missing or did not succeed (or has no such result)."""


@dataclass(frozen=True)
class Stat:
    """A measured mean, its standard error and the factor k that turns it into a tolerance (k·se)."""

    mean: float
    se: float
    k: float
    how: str          # how se was obtained, for the tolerance rule

    @property
    def tolerance(self) -> float:
        return self.k * self.se

    def rule(self) -> str:
        return f"{self.k:.2f} × the standard error ({self.how}; Student t, {CONFIDENCE:.2%} two-sided)"


def t_factor(df: int) -> float:
    from scipy import stats
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, df))


def over_seeds(values: Sequence[float], what: str = "seeds") -> Stat:
    """Mean of independent per-seed values and its standard error, sample sd/√n (n ≥ 2)."""
    n = len(values)
    if n < 2:
        raise Missing(f"a standard error needs at least 2 {what}, got {n}")
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return Stat(mean, sd / math.sqrt(n), t_factor(n - 1), f"over {n} {what}: sample sd/√{n}")


def ratio(a: Stat, b: Stat) -> Stat:
    """a/b with the first-order standard error √((se_a/a)² + (se_b/b)²)·|a/b| (independent a, b), and
    the larger of the two factors k (the smaller degrees of freedom)."""
    r = a.mean / b.mean
    se = abs(r) * math.hypot(a.se / a.mean, b.se / b.mean)
    return Stat(r, se, max(a.k, b.k), f"propagated to first order from {a.how} and {b.how}")


@dataclass
class Outcome:
    """What an evaluator measured for one check. ``effect``: the size of the effect the check tests (the
    verdict is inconclusive when the tolerance is wider), named by ``effect_what``. ``sense``: "equal"
    (|measured − predicted| ≤ tolerance), "below" (the claim is measured < predicted, by more than the
    tolerance) or "above" (measured > predicted by more than the tolerance; ``predicted`` is then the
    threshold the claim names). ``finding`` and ``diagnostics``: the module note."""

    predicted: float
    measured: float
    tolerance: float
    rule: str
    effect: float | None = None
    effect_what: str = ""
    note: str | None = None
    sense: str = "equal"
    finding: str | None = None             # the cause, if the claim does not hold on this model (module note)
    diagnostics: tuple[str, ...] = ()      # the checks that show it (for a finding: that must be reproduced)

    def __post_init__(self) -> None:
        if self.finding is not None and not self.diagnostics:
            raise ValueError("a finding needs the diagnostic checks that show its cause")


@dataclass
class Study:
    """The children and documents of a study, by point (what an evaluator reads)."""

    children: Sequence[ChildRecord]
    documents: Sequence[Mapping[str, Any]]
    by_point: dict[int, list[tuple[ChildRecord, Mapping[str, Any]]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for child, doc in zip(self.children, self.documents, strict=True):
            self.by_point.setdefault(child.point, []).append((child, doc))
        for members in self.by_point.values():
            members.sort(key=lambda m: m[0].index)

    def members(self, point: int) -> list[tuple[ChildRecord, Mapping[str, Any]]]:
        members = self.by_point.get(point)
        if not members:
            raise Missing(f"point {point} has no child")
        bad = [c for c, d in members if c.status != "succeeded" or not d.get("series")]
        if bad:
            raise Missing(f"point {point}: child {bad[0].index} {bad[0].status}")
        return members

    def params(self, point: int) -> Any:
        """The params of the point's spec (what its children were asked to run, whatever their status)."""
        from smdengine._registry import parse_spec
        members = self.by_point.get(point)
        if not members:
            raise Missing(f"point {point} has no child")
        return parse_spec(dict(members[0][0].spec)).params

    def seeds(self, point: int) -> list[int]:
        return [c.seed for c, _ in self.members(point)]

    def series(self, point: int, key: str) -> tuple[list[float], list[list[float]]]:
        """(steps, one list of values per child of the point)."""
        members = self.members(point)
        steps = members[0][1]["series"]["step"]
        out = []
        for child, doc in members:
            values = doc["series"].get(key)
            if values is None:
                raise Missing(f"point {point}: child {child.index} has no series {key!r}")
            out.append([math.nan if v is None else float(v) for v in values])
        return list(steps), out

    def tail(self, point: int, key: str) -> Stat:
        """The summary (tail mean) of ``key`` over the point's seeds; with one seed, the batch means of
        its tail records in 10 blocks stand for independent values."""
        members = self.members(point)
        values = []
        for child, doc in members:
            value = (doc.get("summary") or {}).get(key)
            if value is None:
                raise Missing(f"point {point}: child {child.index} has no summary {key!r}")
            values.append(float(value))
        if len(values) > 1:
            return over_seeds(values)
        params = self.params(point)
        start = params.tail_start()
        # the regular records, as the summary averages them: not the final row at the run's end (the state after
        # the last update, NaN for a metric of an update such as au_rms)
        end = getattr(params, "total_steps", None) or params.steps
        steps, [values_t] = self.series(point, key)
        tail = [v for s, v in zip(steps, values_t, strict=True) if start <= s < end]
        blocks = [tail[i * len(tail) // TAIL_BLOCKS:(i + 1) * len(tail) // TAIL_BLOCKS] for i in range(TAIL_BLOCKS)]
        blocks = [b for b in blocks if b]
        stat = over_seeds([math.fsum(b) / len(b) for b in blocks], "blocks of the one seed's tail records")
        return Stat(values[0], stat.se, stat.k, stat.how + " (assumes blocks longer than the correlation time)")


Evaluator = Callable[[Study], dict[str, Callable[[], Outcome]]]


def _number(x: float) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


def verdict(o: Outcome) -> tuple[str, str | None]:
    """The verdict of an outcome, and a sentence on why when it is not plainly reproduced."""
    if not (math.isfinite(o.measured) and math.isfinite(o.predicted) and math.isfinite(o.tolerance)):
        return "not_reproduced", "the measured value is not finite"
    if o.sense in ("below", "above"):
        gap = (o.predicted - o.measured) if o.sense == "below" else (o.measured - o.predicted)
        word = "below" if o.sense == "below" else "above"
        if gap > o.tolerance:
            return "reproduced", None
        if gap > 0:
            return "inconclusive", f"measured {word} predicted by {gap:.3g}, within the tolerance {o.tolerance:.3g}"
        return "not_reproduced", f"measured not {word} predicted ({o.measured:.4g} vs {o.predicted:.4g})"
    if o.effect is not None and o.tolerance > abs(o.effect):
        return "inconclusive", (f"the tolerance {o.tolerance:.3g} is wider than the effect tested, "
                                f"{o.effect_what} = {abs(o.effect):.3g}")
    if abs(o.measured - o.predicted) <= o.tolerance:
        return "reproduced", None
    return "not_reproduced", f"|measured − predicted| = {abs(o.measured - o.predicted):.3g} > tolerance {o.tolerance:.3g}"


def run_checks(checks: Sequence[CheckDef], evaluator: Evaluator, children: Sequence[ChildRecord],
               documents: Sequence[Mapping[str, Any]]) -> list[dict]:
    study = Study(children, documents)
    measures = evaluator(study)
    out = []
    outcomes: dict[str, Outcome] = {}
    for check in checks:
        row: dict[str, Any] = {"id": check.id, "claim": check.claim, "predicted": None, "measured": None,
                               "tolerance": None, "tolerance_rule": None, "verdict": "inconclusive", "note": None}
        try:
            measure = measures.get(check.id)
            if measure is None:   # the evaluator could not even set it up (e.g. the point it reads is absent)
                raise Missing("the study has no run this check can read")
            outcome = measure()
        except Missing as exc:
            row["note"] = f"not measurable: {exc}"
            out.append(row)
            continue
        outcomes[check.id] = outcome
        why, extra = verdict(outcome)
        notes = [n for n in (outcome.note, extra) if n]
        row.update(predicted=_number(outcome.predicted), measured=_number(outcome.measured),
                   tolerance=_number(outcome.tolerance), tolerance_rule=outcome.rule, verdict=why,
                   note="; ".join(notes) or None)
        out.append(row)
    return resolve_findings(out, outcomes)


def resolve_findings(rows: list[dict], outcomes: Mapping[str, Outcome]) -> list[dict]:
    """Turn ``not_reproduced`` into ``finding`` where the outcome names a cause and every one of its diagnostic
    checks is ``reproduced`` (in ``rows``, by id); the note then opens with the cause. Where a diagnostic is
    not reproduced (or absent) the verdict stays and the note says so; the note of any other row that is not
    reproduced and names diagnostics lists their verdicts. Rows are updated in place and returned."""
    verdicts = {row["id"]: row["verdict"] for row in rows}
    for row in rows:
        outcome = outcomes.get(row["id"])
        if outcome is None or not outcome.diagnostics or row["verdict"] == "reproduced":
            continue
        states = {d: verdicts.get(d, "absent") for d in outcome.diagnostics}
        listed = ", ".join(f"{d} {v}" for d, v in states.items())
        if outcome.finding is not None and row["verdict"] == "not_reproduced":
            if all(v == "reproduced" for v in states.values()):
                row["verdict"] = "finding"
                row["note"] = "; ".join(n for n in (f"finding: {outcome.finding} (shown by {listed})", row["note"]) if n)
            else:
                row["note"] = "; ".join(n for n in (row["note"], f"the known cause ({outcome.finding}) is not shown: "
                                                    f"diagnostic {listed}") if n)
        else:
            row["note"] = "; ".join(n for n in (row["note"], f"diagnostic {listed}") if n)
    return rows
