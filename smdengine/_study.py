"""Studies: one base spec fanned out over parameter axes into child experiment specs (torch-free).

A study spec (README: Studies)::

    {"name": ..., "base": {<experiment spec>},
     "grid": {"<dotted.path>": [v1, v2, ...] | {"linspace"|"logspace": [a, b], "num": n}, ...},
     "zip":  {"<dotted.path>": [...], ...},          # equal lengths, varied together
     "points": [{"<dotted.path>": value, ...}, ...],  # an explicit list instead of grid/zip
     "seeds": [0, 1, 2]}                              # every point repeated per seed (or an axis on `seed`)

Expansion order: grid (row-major, in the order the axes are written, the first axis slowest) × zip ×
seeds. A *point* is one combination of axis values; a *child* is one point at one seed. Every child's
spec is the base with the point's values set at their paths (list indices allowed:
``params.lr_schedule.0.lr_factor``) and is validated by the kind's strict spec model.
"""
from __future__ import annotations

import difflib
import itertools
import math
import types
import typing
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from smdengine._registry import AnySpec, parse_spec
from smdengine._spec_base import Label, StrictModel, error_location, error_message

MAX_AXIS_VALUES = 10_000


class Span(StrictModel):
    """``num`` evenly spaced values from a to b (both included): linearly or, for logspace, geometrically."""

    linspace: list[float] | None = Field(None, min_length=2, max_length=2, description="[a, b]")
    logspace: list[float] | None = Field(None, min_length=2, max_length=2, description="[a, b], both > 0")
    num: int = Field(..., ge=1, le=MAX_AXIS_VALUES)

    @model_validator(mode="after")
    def _one(self) -> Span:
        if (self.linspace is None) == (self.logspace is None):
            raise ValueError("expected exactly one of linspace or logspace, with num")
        if self.logspace is not None and not (self.logspace[0] > 0 and self.logspace[1] > 0):
            raise ValueError(f"logspace: expected positive ends, got {self.logspace}")
        return self

    def values(self) -> list[float]:
        a, b = self.linspace or self.logspace or (0.0, 0.0)
        if self.num == 1:
            return [a]
        if self.linspace is not None:
            inner = [a + (b - a) * i / (self.num - 1) for i in range(1, self.num - 1)]
        else:
            inner = [math.exp(math.log(a) + (math.log(b) - math.log(a)) * i / (self.num - 1))
                     for i in range(1, self.num - 1)]
        return [a, *(float(f"{x:.12g}") for x in inner), b]   # 12 digits: 0.01, not 0.010000000000000004


def _axis_form(values: Any) -> str | None:
    """Which form an axis is written in: a list of values, or a span (an object)."""
    return "list" if isinstance(values, list) else "span" if isinstance(values, dict | Span) else None


# One form per input, so that a bad span is reported as that (not also as "should be a valid list"); a span's
# errors are located under "span"
AxisValues = Annotated[Annotated[list[Any], Field(min_length=1, max_length=MAX_AXIS_VALUES), Tag("list")]
                       | Annotated[Span, Tag("span")], Discriminator(
    _axis_form, custom_error_type="axis_values",
    custom_error_message='expected a list of values or {"linspace"|"logspace": [a, b], "num": n}')]


class StudySpec(StrictModel):
    """What the engine needs of a study: the base spec and its axes (the service adds its own options)."""

    name: Label | None = Field(None, description="Free-form label of the study.")
    base: dict[str, Any] = Field(..., description="An experiment spec: every child starts from it.")
    grid: dict[str, AxisValues] = Field(default_factory=dict, description=(
        "Axes forming a Cartesian product, row-major in the order written: dotted path → list of values "
        "or {\"linspace\"|\"logspace\": [a, b], \"num\": n}."))
    zip: dict[str, AxisValues] = Field(default_factory=dict, description=(
        "Axes varied together (equal lengths), multiplying the grid as one axis."))
    points: list[dict[str, Any]] | None = Field(None, max_length=100_000, description=(
        "An explicit list of points ({dotted path: value}) instead of grid and zip."))
    seeds: list[int] | None = Field(None, min_length=1, max_length=10_000, description=(
        "Every point repeated with each of these seeds (default: the base's seed). An axis on `seed` sets each "
        "child's seed instead: a study with both is refused."))
    fuse: bool = Field(True, description=(
        "Let a worker run children that differ only in rates, scales, trials and seeds as one batched run "
        "(nrq kind; each child's result is bit for bit its run alone). false: every child runs alone, e.g. "
        "to time each one."))

    @field_validator("grid", "zip")
    @classmethod
    def _axes(cls, axes: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Each check in the field it is about, so that an error's location names it (not the whole body)."""
        for path, values in axes.items():
            if not path:
                raise ValueError(f"{info.field_name}: expected non-empty dotted paths")
            if path == "seed":   # as for `seeds`: a repeat is the same run again, a false standard error of 0
                distinct_seeds(_values(values), f"{info.field_name} axis seed")
        if info.field_name == "zip":
            both = set(info.data.get("grid") or {}) & set(axes)
            if both:
                raise ValueError(f"zip: {sorted(both)[0]!r} is also a grid axis")
            lengths = {path: len(_values(v)) for path, v in axes.items()}
            if len(set(lengths.values())) > 1:
                raise ValueError("zip: expected axes of equal lengths, got " + ", ".join(f"{p}: {n}" for p, n in lengths.items()))
        return axes

    @field_validator("points")
    @classmethod
    def _points(cls, points: list[dict[str, Any]] | None, info: ValidationInfo) -> list[dict[str, Any]] | None:
        if points is not None and (info.data.get("grid") or info.data.get("zip")):
            raise ValueError("points: expected either points or grid/zip, got both")
        if points is not None and not points:
            raise ValueError("points: expected at least one point")
        return points

    @field_validator("seeds")
    @classmethod
    def _seeds_or_seed_axis(cls, seeds: list[int] | None, info: ValidationInfo) -> list[int] | None:
        """Seeds given twice, as ``seeds`` and as an axis on ``seed``, are refused: the ``seeds`` would set
        every child's seed over the axis's (the same run repeated) while the table showed the axis's."""
        if not seeds:
            return seeds
        if any(s < 0 or s > 2**63 - 1 for s in seeds):
            raise ValueError("seeds: expected integers in [0, 2^63 − 1]")
        distinct_seeds(seeds, "seeds")
        where = next((f"the {name} axis `seed`" for name in ("grid", "zip") if "seed" in (info.data.get(name) or {})),
                     None)
        points = info.data.get("points") or []
        at = next((i for i, point in enumerate(points) if "seed" in point), None)
        if where is None and at is not None:
            where = f"`seed` in point {at}"
        if where is not None:
            raise PydanticCustomError("seeds_and_seed_axis", "give the seeds either as an axis on `seed` or as "
                                      "`seeds`, not both (this study has `seeds` and {where})", {"where": where})
        return seeds

    def axes(self) -> list[str]:
        """The axis paths, in expansion order (for points: every path any point sets, first seen first)."""
        if self.points is not None:
            return list(dict.fromkeys(path for point in self.points for path in point))
        return [*self.grid, *self.zip]

    def size(self) -> int:
        """How many children the study expands to (without expanding it)."""
        if self.points is not None:
            n = len(self.points)
        else:
            n = math.prod(len(_values(v)) for v in self.grid.values())
            if self.zip:
                n *= len(_values(next(iter(self.zip.values()))))
        return n * len(self.seeds or [0])


def _values(values: AxisValues) -> list[Any]:
    return values.values() if isinstance(values, Span) else values


def distinct_seeds(seeds: Sequence[Any], what: str) -> None:
    """ValueError ("<what>: expected distinct seeds, got …") when an integer seed is given twice; values that
    are not integers are left to each child's validation (and to the callers' own type checks)."""
    repeated = sorted(s for s, n in Counter(s for s in seeds if type(s) is int).items() if n > 1)
    if repeated:   # a repeat is the same run again: a point's standard error would be a false 0
        raise ValueError(f"{what}: expected distinct seeds, got {', '.join(map(str, repeated))} more than once")


@dataclass(frozen=True)
class Child:
    """One child experiment of a study: ``index`` in expansion order, ``point`` (the index of its
    combination of axis values), those ``values`` ({path: value}), its ``seed`` and its validated spec."""

    index: int
    point: int
    values: dict[str, Any]
    seed: int
    spec: AnySpec = field(repr=False)


class StudyError(ValueError):
    """A study that cannot be expanded: ``errors`` are pydantic-style dicts (``loc``, ``msg``, ``type``,
    and for a point ``point``: its index and axis values)."""

    def __init__(self, errors: list[dict[str, Any]]):
        super().__init__("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors[:5]))
        self.errors = errors


@dataclass(frozen=True)
class _Words:
    """How expansion errors name the base and what they advise for an index past a list's end."""

    owner: str        # whose list runs short: "the base spec's params.lr_schedule has no entry 3"
    spec: str         # what a path is no field of
    whole_list: str   # the advice for an entry the base does not have


_STUDY_WORDS = _Words("the base spec's", "the base spec", "give the base that entry, or vary the whole list on this axis")
# a rerun's: its base is the experiment, and an override is no axis
_OVERRIDE_WORDS = _Words("the experiment's", "the experiment's spec", "override the whole list instead")


def combinations(study: StudySpec) -> Iterator[dict[str, Any]]:
    """The points' axis values in expansion order (seeds not included)."""
    if study.points is not None:
        yield from (dict(point) for point in study.points)
        return
    axes = [[{path: v} for v in _values(values)] for path, values in study.grid.items()]
    if study.zip:   # one axis whose values are the zipped rows
        columns = [[(path, v) for v in _values(values)] for path, values in study.zip.items()]
        axes.append([dict(row) for row in zip(*columns, strict=True)])
    for combo in itertools.product(*axes):
        values: dict[str, Any] = {}
        for part in combo:
            values.update(part)
        yield values


MAX_ERRORS = 20   # what an expansion reports at most: fix these first


def expand_study(study: StudySpec | Mapping[str, Any], max_children: int | None = None,
           max_errors: int = MAX_ERRORS) -> list[Child]:
    """Every child of a study, validated. Raises :class:`StudyError` naming the axis (an unknown path,
    with the nearest valid ones), the point (its index and values), the field and the reason; or
    pydantic's ``ValidationError`` for a malformed study spec."""
    if not isinstance(study, StudySpec):
        study = StudySpec.model_validate(study)
    return _expand(study, max_children, max_errors, _STUDY_WORDS)


def override_spec(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> AnySpec:
    """``base`` (an experiment's spec) with ``overrides`` set by dotted path (``{"params.lr": 0.2, "seed": 4}``,
    list indices allowed), validated as a one-point study of it. Raises :class:`StudyError` whose errors are
    located at ``["overrides", <the override's path, or the field it made invalid>]``, in a rerun's words
    (the experiment's spec, no axis)."""
    try:
        (child,) = _expand(StudySpec.model_validate({"base": dict(base), "points": [dict(overrides)]}), None,
                           MAX_ERRORS, _OVERRIDE_WORDS)
    except StudyError as exc:
        raise StudyError([_at_override(error) for error in exc.errors]) from None
    return child.spec


def _at_override(error: dict[str, Any]) -> dict[str, Any]:
    """A one-point expansion's error located at the override's field: ``["overrides", "params.lr"]``."""
    loc = [str(part) for part in error.get("loc", [])]
    field = ".".join(loc[1:]) if loc[:1] == ["axis"] else ".".join(loc[2:]) if loc[:1] == ["point"] else ".".join(loc)
    return {"loc": ["overrides", field], "msg": str(error.get("msg", "")), "type": error.get("type", "value_error")}


def _expand(study: StudySpec, max_children: int | None, max_errors: int, words: _Words) -> list[Child]:
    if max_children is not None and study.size() > max_children:
        raise StudyError([{"loc": ["grid" if study.points is None else "points"], "type": "too_many_points",
                           "msg": f"expected at most {max_children} {'child' if max_children == 1 else 'children'} "
                                  "(points × seeds), "
                                  f"got {study.size()}"}])
    try:
        base = parse_spec(study.base)
    except ValidationError as exc:
        raise StudyError([{**_plain(e), "loc": ["base", *field_path(study.base, error_location(e))]}
                          for e in exc.errors()]) from None
    unknown = [_unknown_path(base, path, words) for path in study.axes()]
    if any(unknown):
        raise StudyError([e for e in unknown if e])
    children: list[Child] = []
    errors: list[dict[str, Any]] = []
    # without ``seeds`` each child keeps the seed of its spec: the base's, or a ``seed`` axis value (a study
    # may not have both: StudySpec refuses it)
    seeds: list[int | None] = list(study.seeds) if study.seeds else [None]
    for point, values in enumerate(combinations(study)):
        data = base.model_dump(mode="json")
        _leave_replaced_defaults(base, data, values)
        try:
            for path, value in values.items():
                set_path(data, path, value, owner=words.owner)
        except (KeyError, IndexError, TypeError) as exc:
            errors.append({"loc": ["point", point], "type": "bad_path", "msg": str(exc).strip("'\""),
                           "point": {"index": point, "values": values}})
            continue
        for seed in seeds:
            if seed is not None:
                data["seed"] = seed
            try:
                spec = parse_spec(deepcopy(data))
            except ValidationError as exc:
                errors.extend({**_plain(e), "loc": ["point", point, *field_path(data, error_location(e))],
                               "point": {"index": point, "values": values}} for e in exc.errors())
                break
            children.append(Child(len(children), point, values, spec.seed, spec))
        if len(errors) >= max_errors:
            errors.append({"loc": ["point"], "type": "too_many_errors",
                           "msg": f"stopped after {max_errors} errors; fix these first"})
            break
    if errors:
        raise StudyError(errors)
    return children


def _leave_replaced_defaults(base: Any, data: dict[str, Any], values: Mapping[str, Any]) -> None:
    """An axis that sets a field whose model declares it in ``REPLACED_DEFAULTS`` (an nrq problem's
    ``eigenvalues``: ``eig_low``/``eig_high`` and their default values) replaces those fields where the base left
    them to the validator's defaults or gave the defaults themselves (a stored spec, as "sweep from here" starts
    from, spells every default out): without this every child of a spectrum sweep was refused for giving both.
    A base that gave other values of them is refused so, as before (the conflict is the user's to settle)."""
    for path in values:
        parent, _, last = path.rpartition(".")
        model: Any = base
        node: Any = data
        for part in parent.split(".") if parent else []:
            model = getattr(model, part, None)
            node = node.get(part) if isinstance(node, dict) else None
        replaced: Mapping[str, Any] = getattr(type(model), "REPLACED_DEFAULTS", {}).get(last, {})
        given: set[str] = getattr(model, "model_fields_set", set())
        if replaced and isinstance(node, dict) and all(
                name not in given or getattr(model, name) == default for name, default in replaced.items()):
            node.update(dict.fromkeys(replaced))


def field_path(data: Any, loc: Sequence[Any]) -> list[Any]:
    """A pydantic error location (:func:`error_location`) as the path into the spec ``data`` that a user wrote:
    the union tags pydantic inserts (the kind, an sde model, a dataset name: ``sde.params.normalized_linear.lr``
    for ``params.lr``) are not keys of the data but values of its objects, and are dropped, as is the form
    an axis's values are written in (``grid.params.lr.span.num`` is ``grid.params.lr.num``)."""
    out, node = [], data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str) and part in node.values():
            continue   # the tag of a union member (kind, model, dataset name): a value of this object
        elif isinstance(part, str) and part == _axis_form(node):
            continue   # the form an axis is written in (AxisValues' "list" or "span"): no key of the data
        out.append(part)
    return out


def _plain(error: Any) -> dict[str, Any]:
    """A pydantic error as JSON-safe data (its ``ctx`` may hold an exception)."""
    return {"loc": list(error["loc"]), "msg": error_message(error), "type": error["type"]}


def set_path(data: Any, path: str, value: Any, *, owner: str = _STUDY_WORDS.owner) -> None:
    """Set ``value`` at a dotted path of a JSON-like spec (integer parts index lists; missing dict
    levels are created). An index past a list's end is an IndexError naming the list as ``owner``'s."""
    parts = path.split(".")
    node = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                held = "is empty" if not node else f"has entries 0 to {len(node) - 1}"
                raise IndexError(f"{owner} {'.'.join(parts[:i])} has no entry {part} (it {held})")
            key: Any = int(part)
        elif isinstance(node, dict):
            key = part
            if not last and node.get(key) is None:
                node[key] = {}
        else:
            raise TypeError(f"{'.'.join(parts[:i])}: is a value, not an object or list")
        if last:
            node[key] = value
        else:
            node = node[key]


# ----------------------------------------------------------------------------- valid paths


def valid_paths(spec: BaseModel) -> list[str]:
    """Every dotted path an axis may set on this validated spec: its fields, nested models' fields,
    and list entries by index (the entries it has)."""
    out: list[str] = []

    def walk(obj: Any, prefix: str) -> None:
        if isinstance(obj, BaseModel):
            for name, info in type(obj).model_fields.items():
                path = f"{prefix}{name}"
                out.append(path)
                value = getattr(obj, name)
                if value is None:
                    for model in _models_in(info.annotation):
                        out.extend(f"{path}.{sub}" for sub in model.model_fields)
                walk(value, path + ".")
        elif isinstance(obj, list):
            for i, item in enumerate(obj):
                out.append(f"{prefix}{i}")
                walk(item, f"{prefix}{i}.")

    walk(spec, "")
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def _unknown_path(base: AnySpec, path: str, words: _Words) -> dict[str, Any] | None:
    """None for a path an axis may set; else the error naming the axis and the nearest valid paths."""
    paths = valid_paths(base)
    if path in paths or path == "seed":
        return None
    try:   # on a copy: set_path says where a path runs past the end of a list of the base (its schedule)
        set_path(base.model_dump(mode="json"), path, None, owner=words.owner)
    except IndexError as exc:
        return {"loc": ["axis", path], "type": "unknown_path", "msg": f"{path}: {exc}: {words.whole_list}"}
    except TypeError:   # through a value (params.lr.0): not a field, said below
        pass
    leaves = [p for p in paths if p not in ("kind",)]
    # the name among its siblings first, then whole paths as deep as it: on every path the shared "params." made
    # params and params.dim look near params.lrr
    parent, _, name = path.rpartition(".")
    siblings = {p.rpartition(".")[2]: p for p in leaves if p.rpartition(".")[0] == parent and "." in p}
    near = ([siblings[n] for n in difflib.get_close_matches(name, list(siblings), n=3, cutoff=0.6)]
            or difflib.get_close_matches(path, [p for p in leaves if p.count(".") == path.count(".")], n=3, cutoff=0.5)
            or [p for p in leaves if p.rsplit(".", 1)[-1] == name][:3])
    hint = f"; nearest valid paths: {', '.join(near)}" if near else ""
    return {"loc": ["axis", path], "type": "unknown_path",
            "msg": f"{path}: not a field of {words.spec} ({base.kind}){hint}"}


# ----------------------------------------------------------------------------- derived axes

DERIVED_AXES = ("intrinsic_lr", "lr_over_wd", "effective_intrinsic_lr")
MAX_CURVES = 12   # theory curves of a scatter, one per combination of the values curve_axes names: more, and none


def curve_axes(axes: Sequence[str], x: str) -> list[str]:
    """The axes a theory curve along ``x`` holds fixed, one curve per combination of their values: every other
    axis; along a derived value (ηλ, η/λ, ηλ/(1−α)) every axis but the learning rate, which the curve scales
    (:func:`smdengine.theory_curve`). Combinations whose curves agree share one (:func:`distinct_curves`): a
    theory of ηλ alone draws one curve through a grid of η and λ."""
    if x not in DERIVED_AXES:
        return [a for a in axes if a != x]
    return [a for a in axes if a != "params.lr"]


Key = typing.TypeVar("Key")


def distinct_curves(candidates: Sequence[tuple[Key, list[float], list[float | None]]]
                    ) -> list[tuple[list[Key], list[float], list[float | None]]]:
    """A scatter's theory curves from one candidate per combination of the values of the axes a curve holds
    fixed, as (keys, xs, ys): each distinct curve once, with the keys (labels, children) of every candidate it
    stands for, in order. One curve left means it serves every point (a theory of ηλ alone along
    intrinsic_lr); two candidates can share a curve where their theory reads a combination of their values
    (ηλ/(1−α)). Equal means equal up to rounding, gaps (None, NaN) at the same places."""
    distinct: list[tuple[list[Key], list[float], list[float | None]]] = []
    for key, xs, ys in candidates:
        same = next((keys for keys, _, seen in distinct if same_curve(ys, seen)), None)
        if same is None:
            distinct.append(([key], xs, ys))
        else:
            same.append(key)
    return distinct


def same_curve(a: Sequence[float | None], b: Sequence[float | None]) -> bool:
    """Equal up to rounding, gaps (None, NaN) at the same places."""
    def gap(value: float | None) -> bool:
        return value is None or math.isnan(value)

    return len(a) == len(b) and all(gap(u) and gap(v) or not gap(u) and not gap(v) and math.isclose(
        typing.cast(float, u), typing.cast(float, v), rel_tol=1e-9, abs_tol=1e-300) for u, v in zip(a, b, strict=True))


def _final_rates(params: Any) -> tuple[float, float] | None:
    """(η, λ) in force at the end of a run, or None for a model without those rates."""
    phases = getattr(params, "phases", None)
    if callable(phases):
        final = phases()[-1]
        return final.lr, final.weight_decay
    lr, wd = getattr(params, "lr", None), getattr(params, "weight_decay", None)
    if isinstance(lr, int | float) and isinstance(wd, int | float):
        return float(lr), float(wd)
    return None


def derived_values(spec: AnySpec) -> dict[str, float]:
    """The derived axes of a child: ``intrinsic_lr`` (ηλ of the final phase), ``lr_over_wd`` (η/λ) and,
    for a model with momentum α, ``effective_intrinsic_lr`` = ηλ/(1−α), on which the NRQ's stationary
    risk depends (docs/theory.md). Absent where the model has no such rates (λ = 0: no ``lr_over_wd``)."""
    rates = _final_rates(spec.params)
    if rates is None:
        return {}
    lr, wd = rates
    out = {"intrinsic_lr": lr * wd}
    if wd > 0:
        out["lr_over_wd"] = lr / wd
    momentum = getattr(spec.params, "momentum", None)
    if isinstance(momentum, int | float):
        out["effective_intrinsic_lr"] = lr * wd / (1.0 - momentum)
    return out

