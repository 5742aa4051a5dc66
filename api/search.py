"""The list filters of ``GET /v1/experiments`` (and ``.csv``) read from the query string:

    param.<dotted spec path>[.<op>]=value     e.g. param.params.lr=0.1, param.params.steps.ge=1000
    summary.<name>[.<op>]=value               e.g. summary.au_rms.lt=0.02
    order_by=summary.<name> | -summary.<name>  (descending)

``op`` is one of eq (default), ne, lt, le, gt, ge. A path must be one the kind's specs have
(``smdengine.spec_paths``; list entries by index), a summary name one the kind's runs produce
(``smdengine.summary_names``); otherwise a 422 names the query parameter and why. Values that read as
numbers compare with numbers (and, for eq/ne, with text spelled the same), true/false with booleans,
anything else with text (eq, ne only); a stored value of another type does not match (``ne`` matches it).
A path to a list or an object is a 422 (filter on its entries). A query term without "=" is a 422
naming it (:func:`refuse_bare_terms`). They become :class:`store.search.Predicate` (bound parameters)."""
from __future__ import annotations

import math
import re
from collections.abc import Iterable
from urllib.parse import unquote_plus

import smdengine
from api.responses import query_error
from store.search import OPS, Predicate

PREFIXES = ("param.", "summary.")
_PHASE = re.compile(smdengine.PHASE_SUMMARY)


def refuse_bare_terms(query: str) -> None:
    """A 422 naming the first term of the raw ``query`` string that has no "=" (``?foo``, or a filter whose value
    was left off: ``?param.params.lr``): read as an empty value, an unknown name was ignored and a filter matched
    nothing, and the list answered as if it had been a filter that held."""
    for term in query.split("&"):
        if term and "=" not in term:
            _refuse(unquote_plus(term), "has no '=': expected a filter param.<spec path>[.<op>]=value or "
                                        "summary.<name>[.<op>]=value, or a parameter name=value")


def predicates(items: Iterable[tuple[str, str]], kind: str | None) -> list[Predicate]:
    out = []
    for key, raw in items:
        if not key.startswith(PREFIXES):
            continue
        column, _, rest = key.partition(".")
        parts = rest.split(".")
        op = parts.pop() if len(parts) > 1 and parts[-1] in OPS else "eq"
        value = _value(raw)
        if isinstance(value, str) and op not in ("eq", "ne"):
            _refuse(key, f"expected a number for {op}, got {raw!r}")
        if column == "param":
            generic = ".".join("*" if p.isdigit() else p for p in parts)
            paths = smdengine.spec_paths(kind)
            if generic not in paths:
                head = ".".join("*" if p.isdigit() else p for p in parts[:-1])
                _refuse_operator(key, parts, _is_value(head, paths))
                _refuse(key, f"{'.'.join(parts)!r} is not a field of {kind or 'any'} specs" + _nearest(generic, paths))
            inner = sorted(p for p in paths if p.startswith(generic + "."))
            if inner:
                example = inner[0].replace("*", "0")
                _refuse(key, f"{'.'.join(parts)!r} holds a list or an object, not a value; "
                             f"filter on its entries, e.g. param.{example}")
            out.append(Predicate("spec", tuple(int(p) if p.isdigit() else p for p in parts), op, value,
                                 raw if isinstance(value, float) else None))
        else:
            name = ".".join(parts)
            known = smdengine.summary_names(kind)
            if name not in known and not _PHASE.fullmatch(name):
                head = ".".join(parts[:-1])
                _refuse_operator(key, parts, head in known or bool(_PHASE.fullmatch(head)))
            _check_summary(key, name, kind)
            out.append(Predicate("summary", (name,), op, value, raw if isinstance(value, float) else None))
    return out


def order(order_by: str | None, kind: str | None) -> tuple[str, bool] | None:
    """(summary name, descending) of ``order_by``, or None."""
    if order_by is None:
        return None
    descending = order_by.startswith("-")
    column, _, name = order_by.lstrip("-").partition(".")
    if column != "summary" or not name:
        _refuse("order_by", f"expected summary.<name> or -summary.<name>, got {order_by!r}")
    _check_summary("order_by", name, kind)
    return name, descending


def _check_summary(key: str, name: str, kind: str | None) -> None:
    names = smdengine.summary_names(kind)
    if name not in names and not _PHASE.fullmatch(name):
        per_layer = (" (it is recorded per layer, under summary.layers)"
                     if kind in smdengine.KINDS and name in smdengine.layer_metric_names(kind) else "")
        _refuse(key, f"{name!r} is not a summary value of {kind or 'any'} runs{per_layer}" + _nearest(name, names))


def _value(raw: str) -> float | str | bool:
    if raw in ("true", "false"):
        return raw == "true"
    try:
        number = float(raw)
    except ValueError:
        return raw
    return number if math.isfinite(number) else raw   # "nan", "inf": text


def refuse_unknown(keys: Iterable[str], declared: set[str]) -> None:
    """A 422 for the first query parameter that is neither one of the route's own (``declared``) nor a filter
    (param.…, summary.…): one was ignored, and a list unfiltered by it looked filtered (``params.lr=0.1``
    for ``param.params.lr=0.1``)."""
    for key in keys:
        if key in declared or key.startswith(PREFIXES):
            continue
        hint = f"; did you mean param.{key}?" if key.startswith("params.") else _nearest(key, declared)
        _refuse(key, f"not a parameter of this list: expected one of {', '.join(sorted(declared))}, "
                     f"param.<spec path>[.<op>] or summary.<name>[.<op>]{hint}")


def _is_value(path: str, paths: Iterable[str]) -> bool:
    """``path`` is a spec path to a value (not to an object or a list, whose entries are paths too)."""
    paths = set(paths)
    return path in paths and not any(p.startswith(path + ".") for p in paths)


def _refuse_operator(key: str, parts: list[str], head_is_a_value: bool) -> None:
    """A 422 when all but the last part name a value (``head_is_a_value``): the last is then a mistyped
    operator (``param.params.lr.xx``), not part of a path that "is not a field"."""
    if len(parts) > 1 and not parts[-1].isdigit() and head_is_a_value:
        _refuse(key, f"{parts[-1]!r} is not an operator: expected one of {', '.join(OPS)} after "
                     f"{'.'.join(parts[:-1])} (or none, for eq)")


def _nearest(name: str, choices: Iterable[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, sorted(choices), n=3, cutoff=0.5)
    return f"; nearest: {', '.join(close)}" if close else ""


def _refuse(key: str, reason: str) -> None:
    raise query_error(key, reason)
