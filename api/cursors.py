"""Cursors of the list endpoints: keyset cursors, the position of the last item of a page. Newest
first, ``<created_at in microseconds since the epoch>.<id>``; for a list sorted by a summary value
(``order_by``), that position prefixed by the value, ``v<number>~<micros>.<id>``, or ``n~<micros>.<id>``
when the item has none (such items come last)."""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import Query

from api.responses import query_error
from store.models import EPOCH, as_utc
from store.search import Position

_MAX_MICROS = (as_utc(datetime.max) - EPOCH) // timedelta(microseconds=1)
# Every string these patterns admit is a position in its order, so every one is valid.
_KEYSET = r"[0-9]{1,18}\.[0-9a-f]{1,32}"
_NUMBER = r"-?[0-9]{1,20}(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?"
CURSOR_PATTERN = f"^{_KEYSET}$"
SORTED_CURSOR_PATTERN = f"^((v{_NUMBER}|n)~)?{_KEYSET}$"   # lists that may be sorted (order_by)
CursorQuery = Annotated[str | None, Query(pattern=CURSOR_PATTERN, description=(
    "Where the previous page ended: its next_cursor."))]
SortedCursorQuery = Annotated[str | None, Query(pattern=SORTED_CURSOR_PATTERN, description=(
    "Where the previous page ended: its next_cursor (of a list in the same order)."))]


def encode(created_at: datetime, item_id: str) -> str:
    return f"{(as_utc(created_at) - EPOCH) // timedelta(microseconds=1)}.{item_id}"


def encode_position(position: Position, sorted_list: bool) -> str:
    keyset = encode(position.created_at, position.id)
    if not sorted_list:
        return keyset
    return ("n" if position.sort_value is None else f"v{position.sort_value!r}") + "~" + keyset


def decode_position(cursor: str, sorted_list: bool) -> Position:
    """The position of a cursor of a list in the order given (sorted by a value or not); a cursor of
    the other order is a 422."""
    prefix, tilde, keyset = cursor.rpartition("~")
    if bool(tilde) != sorted_list:
        raise query_error("cursor", "expected a cursor of a list in the same order (order_by) as this one")
    created_at, item_id = decode(keyset)
    value = None if not tilde or prefix == "n" else float(prefix[1:])
    if value is not None and abs(value) == float("inf"):
        raise query_error("cursor", "expected a finite sort value in the cursor")
    return Position(created_at, item_id, value)


def decode(cursor: str) -> tuple[datetime, str]:
    micros, _, item_id = cursor.partition(".")
    return EPOCH + timedelta(microseconds=min(int(micros), _MAX_MICROS)), item_id
