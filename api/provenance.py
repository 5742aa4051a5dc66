"""The ``provenance`` part of a result document: what ran each attempt (store: ``attempts.provenance``),
and a note when attempts of one run differ in engine version, code or device type (a run resumed by
another worker)."""
from __future__ import annotations

from typing import Any

from store.models import Attempt

# facts whose change between attempts is worth a note: another engine or code, or another device type
_COMPARED = ("engine_version", "git_commit", "torch", "device", "dtype")


def provenance_of(attempts: list[Attempt]) -> dict[str, Any]:
    """{"attempts": [{number, outcome, resumed_from_step, **provenance}], "note": str | None}."""
    rows = [{"number": a.number, "outcome": a.outcome, "resumed_from_step": a.resumed_from_step,
             **(a.provenance or {})} for a in attempts]
    known = [a for a in attempts if a.provenance]
    note = None
    if known:
        first = known[0].provenance or {}
        for later in known[1:]:
            facts = later.provenance or {}
            changed = [f"{k} {first.get(k)} → {facts.get(k)}" for k in _COMPARED if facts.get(k) != first.get(k)]
            if changed:
                note = (f"attempt {later.number} (resumed from step {later.resumed_from_step}) ran other code than "
                        f"attempt {known[0].number}: " + ", ".join(changed))
    return {"attempts": rows, "note": note}
