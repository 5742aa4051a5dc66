"""The retry policy for transient database errors lives here (a placeholder until it is written).

:func:`store.db.run` calls every unit of work through :func:`run`, so the policy applies to every
transaction of the service: a unit of work is a whole transaction that can be run again from the
start.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def run(fn: Callable[[], T]) -> T:
    """Run one unit of work (a whole transaction); the placeholder runs it once."""
    return fn()
