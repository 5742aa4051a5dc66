"""Presets on the ``sde`` kind's models (seed 000 Thm 2, seed 001 Fig. 5a, seed 002 Fig. 2, seed 004 App. G)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from smdengine.presets._checks import Outcome, Study

PRESETS: list[tuple[Any, Callable[[Study], dict[str, Callable[[], Outcome]]]]] = []
