"""Presets on the ``train`` kind: (being written)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from smdengine.presets._checks import Outcome, Study

PRESETS: list[tuple[Any, Callable[[Study], dict[str, Callable[[], Outcome]]]]] = []
