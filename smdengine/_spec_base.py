"""The envelope every experiment spec shares."""
from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationInfo, model_validator

WORK_UNITS = "trials·steps·dim; × 1/dt and × samples where they apply"   # what a spec's work counts, in words


class StrictModel(BaseModel):
    """Unknown fields are an error: a typo in a spec must not be silently ignored. Types are strict:
    ``true`` or ``"10"`` is not a number (lax mode would run ``"lr": true`` with lr 1.0); an integer
    still passes where a float is expected. NaN and ±Infinity (which Python's JSON reads) are refused as not
    finite, not as out of a range they are not in."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _integral_floats(cls, data: Any) -> Any:
        """``3.0`` for an integer field is an integer (JSON Schema counts it as one), which strict mode
        would refuse."""
        if not isinstance(data, dict):
            return data
        ints = {name for name, field in cls.model_fields.items() if field.annotation in (int, int | None)}
        return {key: int(value) if key in ints and isinstance(value, float) and value.is_integer() else value
                for key, value in data.items()}


# the bidirectional embeddings, overrides and isolates ("Trojan Source"): one reverses what follows it on a page
# or in a terminal, so a name can read as another. The marks (LRM, RLM, ALM), which Hebrew and Arabic text
# types and which reorder nothing, and the other format characters (a zero-width joiner in an emoji) are kept
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def printable(value: str, info: ValidationInfo, keep: str = "") -> str:
    """``value`` when it has no control character but those in ``keep``, and no bidirectional control: labels
    show in terminals (an ESC recolours one, a newline breaks a table's row), tables and pages."""
    bad = next((i for i, ch in enumerate(value)
                if (unicodedata.category(ch) == "Cc" or ch in BIDI_CONTROLS) and ch not in keep), None)
    if bad is not None:
        kind = " (a bidirectional control)" if value[bad] in BIDI_CONTROLS else ""
        raise ValueError(f"{info.field_name}: expected text without control characters, got U+{ord(value[bad]):04X}"
                         f"{kind} at index {bad}")
    return value


Label = Annotated[str, Field(max_length=200), AfterValidator(printable)]
"""A name: at most 200 characters, none of them a control character."""


class SpecBase(StrictModel):
    name: Label | None = Field(None, description="Free-form label.")
    seed: int = Field(0, ge=0, le=2**63 - 1, description="RNG seed; same seed, device and dtype give identical results.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Where the simulation runs; auto picks cuda when present.")

    @property
    def work(self) -> int:
        """Size of the job in elementary updates (:data:`WORK_UNITS`), compared against the service's work limit."""
        raise NotImplementedError

    def missing_data(self, data_dir: str | Path | None) -> dict[str, str] | None:
        """``{"field", "message"}`` when the spec reads data that ``data_dir`` does not hold (checked on
        disk, without reading the files), else None. Only the ``train`` kind reads data from disk."""
        return None


def tagged_union(field: str, members: dict[str, type]) -> Any:
    """A union discriminated by ``field`` whose error, when the tag is missing or unknown, names
    the field and the choices: "kind: expected one of 'nrq', 'sde'"."""
    def tag(value: Any) -> str | None:
        found = value.get(field) if isinstance(value, dict) else getattr(value, field, None)
        return found if isinstance(found, str) and found in members else None  # a dict tag is unhashable

    choices = ", ".join(map(repr, members))
    # a Union of a runtime-built tuple has no `X | Y` spelling
    return Annotated[Union[tuple(Annotated[cls, Tag(name)] for name, cls in members.items())],  # noqa: UP007
                     Discriminator(tag, custom_error_type=f"invalid_{field}",
                                   custom_error_message=f"{field}: expected one of {choices}")]


_MESSAGE_FIELD = re.compile(r"Value error, ([A-Za-z_]\w*(?:\.\w+)*): ")


def error_location(error: Mapping[str, Any]) -> tuple[Any, ...]:
    """A spec validation error's location. A check across the fields of a kind's params (a model validator:
    ``record_every > steps``) is reported by pydantic at the params (or its model's tag); its message names the
    field first (``"record_every: expected …"``), and that field is appended, so that a form or a client can
    show the error beside it."""
    loc = tuple(error.get("loc", ()))
    named = _MESSAGE_FIELD.match(str(error.get("msg", "")))
    if error.get("type") == "value_error" and "params" in loc[-2:] and named:
        field = tuple(int(p) if p.isdigit() else p for p in named.group(1).split("."))
        if loc[-len(field):] != field:
            return (*loc, *field)
    return loc


def error_message(error: Mapping[str, Any]) -> str:
    """A spec validation error's message without pydantic's "Value error, " before the engine's own messages,
    which say the field and the reason themselves ("record_every: expected ≤ steps (100), got 1000"); a union's
    missing or unknown tag (:func:`tagged_union`) with what was given: "kind: expected one of 'nrq', 'sde',
    'train', got 'nrqq'"."""
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    kind, given = str(error.get("type", "")), error.get("input")
    if kind.startswith("invalid_") and isinstance(given, dict):   # the tag's own field holds what was given
        tag = kind.removeprefix("invalid_")
        value = given.get(tag)   # a string quoted as the choices are; anything else as JSON writes it (null, true)
        shown = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
        message += f", got {shown}" if tag in given else f", got none (no {tag} given)"
    return message

