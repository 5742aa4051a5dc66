"""Keyset cursors of the list endpoints: the position of the last item of a page in the
(created_at, id) order, newest first."""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import Query

from store.models import EPOCH, as_utc

_MAX_MICROS = (as_utc(datetime.max) - EPOCH) // timedelta(microseconds=1)
# "<created_at in microseconds since the epoch>.<id>" of the last item of a page. Every string of this
# form is a position in the (created_at, id) order, so every one the pattern admits is valid.
CURSOR_PATTERN = r"^[0-9]{1,18}\.[0-9a-f]{1,32}$"
CursorQuery = Annotated[str | None, Query(pattern=CURSOR_PATTERN, description=(
    "Where the previous page ended: its next_cursor."))]


def encode(created_at: datetime, item_id: str) -> str:
    return f"{(as_utc(created_at) - EPOCH) // timedelta(microseconds=1)}.{item_id}"


def decode(cursor: str) -> tuple[datetime, str]:
    micros, _, item_id = cursor.partition(".")
    return EPOCH + timedelta(microseconds=min(int(micros), _MAX_MICROS)), item_id
