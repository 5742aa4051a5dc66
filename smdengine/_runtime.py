"""The records of a run, torch-free: progress events, checkpoints and their hooks, results, and the
result document helpers (layer keys, JSON safety). torch is imported only to (de)serialise a
checkpoint."""
from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


class Cancelled(Exception):
    """Raised by :func:`smdengine.run` when ``should_stop()`` returned true (every point recorded
    before the stop was already delivered through ``on_progress``)."""

    def __init__(self, step: int):
        super().__init__(f"cancelled at step {step}")
        self.step = step


@dataclass
class Progress:
    """One progress event. step: updates done so far; total_steps: updates the run will do; points:
    series points recorded since the previous event, ``{"step": [...], "<metric>": [...]}`` (aligned)."""

    step: int
    total_steps: int
    points: dict[str, list] = field(default_factory=dict)

    @property
    def fraction(self) -> float:
        return self.step / self.total_steps if self.total_steps else 1.0


ProgressCallback = Callable[[Progress], None]
StopCheck = Callable[[], bool]


class IncompatibleCheckpoint(ValueError):
    """A checkpoint was made by another spec, device type or engine format: it cannot be resumed."""


CHECKPOINT_FORMAT = 1


@dataclass
class Checkpoint:
    """A run's whole state after ``step`` updates, from which :func:`smdengine.run` resumes.
    n_points: recorded points delivered before it; state: ``Simulator.state()``; series: the series
    so far; fingerprint: spec + device type + format, checked on resume; lineage: the same without the
    spec's step count, which lets a continuable run resume it with more steps (:func:`smdengine.run`)."""

    step: int
    n_points: int
    state: dict[str, Any]
    series: dict[str, list]
    fingerprint: str = ""
    lineage: str = ""

    def to_bytes(self) -> bytes:
        import torch

        buffer = io.BytesIO()
        torch.save(vars(self), buffer)   # {"step": …, "n_points": …, "state": …, "series": …, "fingerprint": …}
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> Checkpoint:
        """Tensors, numbers, strings and lists only (``weights_only``): a checkpoint cannot run code."""
        import torch

        try:
            raw = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
            return cls(step=int(raw["step"]), n_points=int(raw["n_points"]), state=raw["state"],
                       series=raw["series"], fingerprint=str(raw["fingerprint"]),
                       lineage=str(raw.get("lineage", "")))
        except Exception as exc:
            raise IncompatibleCheckpoint(f"checkpoint: expected a saved run state, got unreadable data ({exc})") from exc


@dataclass
class CheckpointHooks:
    """Checkpointing of one run: ``save`` is called with a :class:`Checkpoint` at most every
    ``interval`` seconds (right after a progress event, so the points it holds were delivered);
    ``resume`` is a checkpoint to start from; with ``final``, ``save`` is also called once at the end
    with the state after the last update (kept to continue the run later with more steps)."""

    save: Callable[[Checkpoint], None] | None = None
    interval: float = 30.0
    resume: Checkpoint | None = None
    final: bool = False
    fingerprint: str = ""   # set by smdengine.run when save or resume is
    lineage: str = ""       # set by smdengine.run when save or resume is


def fingerprint(spec_json: str, device_type: str) -> str:
    """What a checkpoint must match to be resumed: the spec, the device type and the format."""
    text = f"{CHECKPOINT_FORMAT}|{device_type}|{spec_json}"
    return hashlib.sha256(text.encode()).hexdigest()


def saved(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU copy of a tensor for a checkpoint (never a view of live state)."""
    return tensor.detach().to("cpu", copy=True)


@dataclass
class RunResult:
    """What a run produces: series aligned on ``step``, theory predictions, a summary, and
    distributions (not aligned on ``step``). Plain floats; NaN/inf become ``None`` in :meth:`to_document`."""

    series: dict[str, list]
    theory: dict[str, Any]
    summary: dict[str, Any]
    distributions: dict[str, Any] = field(default_factory=dict)

    def identical_to(self, other: RunResult) -> bool:
        """Series, theory, summary and distributions equal bit for bit (:func:`identical`): what a fused
        member, a resumed run or a rerun on the same device promises against its plain run."""
        return all(identical(getattr(self, name), getattr(other, name))
                   for name in ("series", "theory", "summary", "distributions"))

    def to_document(self) -> dict[str, Any]:
        series, layers = split_layers(self.series)
        doc: dict[str, Any] = {"series": json_safe(series), "theory": json_safe(self.theory),
               "summary": json_safe(self.summary), "distributions": json_safe(self.distributions)}
        if layers:
            doc["layers"] = json_safe(layers)
        return doc


def identical(a: Any, b: Any) -> bool:
    """Equal bit for bit, through dicts, lists and tuples: NaN equal to NaN at the same place (``==`` says
    two NaN differ) and −0.0 not equal to 0.0 (``==`` says they are equal)."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=False))
    return type(a) is type(b) and a == b


LAYER_SEPARATOR = "/"


def layer_key(layer: str, metric: str) -> str:
    """The flat series name of a per-layer metric: ``"<layer>/<metric>"`` (layer names have no "/")."""
    return f"{layer}{LAYER_SEPARATOR}{metric}"


def split_layers(series: dict[str, list]) -> tuple[dict[str, list], dict[str, dict[str, list]]]:
    """Split flat series into the global ones and ``{layer: {metric: values}}`` (keys "<layer>/<metric>")."""
    flat: dict[str, list] = {}
    layers: dict[str, dict[str, list]] = {}
    for key, values in series.items():
        layer, sep, metric = key.rpartition(LAYER_SEPARATOR)
        if sep:
            layers.setdefault(layer, {})[metric] = values
        else:
            flat[key] = values
    return flat, layers


def json_safe(value: Any) -> Any:
    """Replace non-finite floats by None, recursively (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
