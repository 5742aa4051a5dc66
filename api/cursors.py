"""Cursors of the list endpoints: keyset cursors, the position of the last item of a page in the
(created_at, id) order, newest first; and for a list sorted by another value (``order_by``), the
offset of the next page, ``o<offset>``."""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import Query

from store.models import EPOCH, as_utc

_MAX_MICROS = (as_utc(datetime.max) - EPOCH) // timedelta(microseconds=1)
# "<created_at in microseconds since the epoch>.<id>" of the last item of a page. Every string of this
# form is a position in the (created_at, id) order, so every one the pattern admits is valid.
CURSOR_PATTERN = r"^[0-9]{1,18}\.[0-9a-f]{1,32}$"
SORTED_CURSOR_PATTERN = r"^([0-9]{1,18}\.[0-9a-f]{1,32}|o[0-9]{1,9})$"   # lists that may be sorted (order_by)
CursorQuery = Annotated[str | None, Query(pattern=CURSOR_PATTERN, description=(
    "Where the previous page ended: its next_cursor."))]
SortedCursorQuery = Annotated[str | None, Query(pattern=SORTED_CURSOR_PATTERN, description=(
    "Where the previous page ended: its next_cursor."))]


def encode(created_at: datetime, item_id: str) -> str:
    return f"{(as_utc(created_at) - EPOCH) // timedelta(microseconds=1)}.{item_id}"


def encode_offset(offset: int) -> str:
    return f"o{offset}"


def decode_sorted(cursor: str) -> tuple[datetime, str] | int:
    """The keyset position, or the offset of an ``o<offset>`` cursor."""
    return int(cursor[1:]) if cursor.startswith("o") else decode(cursor)


def decode(cursor: str) -> tuple[datetime, str]:
    micros, _, item_id = cursor.partition(".")
    return EPOCH + timedelta(microseconds=min(int(micros), _MAX_MICROS)), item_id
