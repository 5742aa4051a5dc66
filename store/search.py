"""Typed predicates and sort keys on the JSON columns of the experiments table (the list filters).

A value in a stored spec or summary is compared only where it has the type of the value asked for:
``param.params.lr.lt=0.2`` compares numbers, and a row whose ``params.lr`` is text, a list or absent
does not match (rather than being cast: SQLite reads the text "float32" as the number 0, and
PostgreSQL refuses the cast and fails the whole query). Each comparison is a ``CASE`` on the JSON
type of the value (``json_type`` on SQLite, ``json_typeof`` on PostgreSQL), so the cast is never
evaluated on a value of another type. Everything is a bound parameter, never SQL text.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, case, false, func, not_, or_, true

from store.models import Experiment

OPS = ("eq", "ne", "lt", "le", "gt", "ge")

# The JSON type names of each dialect's type function, per Python type of the compared value.
_TYPES: dict[str, dict[str, tuple[str, ...]]] = {"sqlite": {"number": ("integer", "real"), "string": ("text",), "boolean": ("true", "false")},
          "postgresql": {"number": ("number",), "string": ("string",), "boolean": ("boolean",)}}


@dataclass(frozen=True)
class Predicate:
    """``<column>[path] <op> value`` on a JSON column: ``column`` "spec" or "summary", ``path`` its keys
    (list indices as ints), ``op`` one of :data:`OPS`. A number compares with numbers, a bool with
    booleans, text with text (eq and ne only); for eq/ne a number also matches text spelled as
    ``text`` (the query string as given). ``ne`` matches rows that hold a value there, other than this one."""

    column: str
    path: tuple[str | int, ...]
    op: str
    value: float | str | bool
    text: str | None = None


@dataclass(frozen=True)
class Position:
    """A row's place in a list's order: newest first by (created_at, id), or first by its ``order_by``
    value (``sort_value``; None: the row has none, and such rows come last)."""

    created_at: datetime
    id: str
    sort_value: float | None = None


class Typed:
    """The typed values at one JSON path of one column, in one SQL dialect."""

    def __init__(self, dialect: str, column: str, path: tuple[str | int, ...]):
        self.column = Experiment.spec if column == "spec" else Experiment.summary
        self.element = self.column[path]
        self.types = _TYPES["postgresql" if dialect == "postgresql" else "sqlite"]
        self.sqlite = dialect != "postgresql"
        self.path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f'."{p}"' for p in path)
        if self.sqlite:
            self.json_type: ColumnElement[Any] = func.json_type(self.column, self.path)
        else:
            self.json_type = func.json_typeof(self.element)

    def of(self, kind: str) -> ColumnElement[Any]:
        """The value where it is a ``kind`` ("number", "string", "boolean"), else NULL."""
        if self.sqlite and kind == "number":
            # One JSON read for the common case: json_extract gives an SQL real for a JSON real; an SQL
            # integer is a JSON integer or true/false (1/0), so only then does json_type tell them apart.
            value = func.json_extract(self.column, self.path)
            kind_of = func.typeof(value)
            return case((kind_of == "real", value),
                        (and_(kind_of == "integer", self.json_type == "integer"), value), else_=None)
        value = {"number": self.element.as_float, "string": self.element.as_string,
                 "boolean": self.element.as_boolean}[kind]()
        return case((self.json_type.in_(self.types[kind]), value), else_=None)

    def present(self) -> ColumnElement[bool]:
        return and_(self.json_type.is_not(None), self.json_type != "null")


def condition(dialect: str, p: Predicate) -> ColumnElement[bool]:
    typed = Typed(dialect, p.column, p.path)
    kind = "boolean" if isinstance(p.value, bool) else "number" if isinstance(p.value, (int, float)) else "string"
    left = typed.of(kind)
    if p.op in ("eq", "ne"):
        equal = left == p.value
        if kind == "number" and p.text is not None:
            equal = or_(equal, typed.of("string") == p.text)
        # NULL (another type) counts as not equal, so that ne matches a value of another type.
        equal = case((equal, true()), else_=false())
        return equal if p.op == "eq" else and_(typed.present(), not_(equal))
    return {"lt": left < p.value, "le": left <= p.value, "gt": left > p.value, "ge": left >= p.value}[p.op]


def sort_value(dialect: str, name: str) -> ColumnElement[Any]:
    """The summary value ``name`` where it is a number, else NULL: what ``order_by`` sorts by."""
    return Typed(dialect, "summary", (name,)).of("number")


def after_newest(position: Position) -> ColumnElement[bool]:
    """The rows after ``position`` in the order (created_at desc, id desc)."""
    return or_(Experiment.created_at < position.created_at,
               and_(Experiment.created_at == position.created_at, Experiment.id < position.id))


def after_sorted(value: ColumnElement[Any], descending: bool, position: Position) -> ColumnElement[bool]:
    """The rows after ``position`` in the order (value missing last, value, created_at desc, id desc)."""
    tie = after_newest(position)
    if position.sort_value is None:
        return and_(value.is_(None), tie)
    v = position.sort_value
    beyond = value < v if descending else value > v
    return or_(value.is_(None), beyond, and_(value == v, tie))
