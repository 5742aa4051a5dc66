"""The simulator protocol: what a kind or model writes; the run itself is :func:`smdengine._driver.run`.

A simulator is built from a validated spec and a :class:`Context` (device, dtype and the run's seeded
generator), builds its state, and then implements only what is its own:

- ``step(n, record)``: advance the state by update n (n → n + 1). ``record`` is true when n is a
  multiple of ``record_every``. Return a record row (a dict name → 0-d or 1-d tensor over every name
  of :attr:`names`) or None. A row is labelled with the step ``n − n % record_every``: a simulator
  that measures the state before update n returns it when ``record`` is true; one that aggregates a
  window [m, m + r) returns it at the window's last update.
- ``final_row()``: the row of the state after the last update, labelled ``steps`` (every series ends
  there). It holds the metrics of a state (risk, norm, test accuracy, …); those of an update or a
  window (angular updates, train loss over a window) are NaN in it (null in a result document).
  Summaries average the regular rows only (``steps`` need not be a multiple of ``record_every``, and an
  end point would weigh the tail unevenly), so the final row changes no summary value.
- ``span(n)`` (optional, default 1): how many updates ``step(n, record)`` makes, n … n + span − 1, for a
  simulator that advances several updates at once; a span never crosses a multiple of
  ``record_every`` (the driver checkpoints, reports and polls between spans).
- ``state()`` / ``load_state(state, step)``: the checkpoint contract. ``state()`` is called after any
  update (never mid-update) and returns everything the rest of the run depends on — tensors as CPU
  copies (:func:`smdengine._runtime.saved`), generator states, numbers. ``load_state`` is called
  once, before the first ``step``, on a freshly built simulator, with the state of a run that had
  done ``step`` updates; the run then continues at update ``step`` and must produce exactly the
  points and result of an uninterrupted run (tests/engine/test_checkpoint.py,
  test_train_checkpoint.py).
- ``predict(spec)`` (class method): theory aligned on the record steps, without simulating;
  ``theory()``: the run's own theory (default ``predict``; may use realised quantities).
- ``summarize(series, theory)``, ``distributions()``: at the end.

Fused sweeps (optional): a simulator whose ``fuse_key(spec)`` is not None can run several specs of
equal key as one batched run, ``fuse(specs, ctxs)`` (each member with its own generator). The driver
then speaks to it through the ``member_*`` methods and ``step_members``, which for a plain simulator
are its own methods as member 0 (``member_theories``: the theory of several members at once, each
exactly its own); member c's points, checkpoint state, theory and summary must be
exactly those of its run alone (tests/engine/test_fused.py). A fused simulator whose theory needs only
the specs and what its constructor built sets ``THEORY_AT_START``: the driver then computes the members'
theory on a thread of its own while the updates go on, instead of after the last one.

The driver owns everything else: device and dtype resolution, seeding, resume and the fingerprint
check, recording, progress events, cancellation, checkpoint timing, the final flush and the result.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from smdengine._runtime import saved
from smdengine._science import tail_means

if TYPE_CHECKING:
    import torch

Row = dict[str, "torch.Tensor"]
SpecT = TypeVar("SpecT")


@dataclass(frozen=True, eq=False)
class RowTable:
    """Every member's row of one record step as one tensor: ``values`` (members, len(names)) on the
    run's device, column k the metric ``names[k]`` (each a number per point). A fused simulator may
    return it from ``step_members`` and ``final_members`` instead of a list of Rows: the driver then
    moves a flush's points to the host in one copy, where Rows cost a copy per member and metric. A
    run returns tables at every record step and at the end, or at none."""

    names: tuple[str, ...]
    values: torch.Tensor

    def row(self, member: int) -> Row:
        """Member ``member``'s row as a Row."""
        return dict(zip(self.names, self.values[member], strict=True))

    @classmethod
    def stack(cls, rows: list[Row]) -> RowTable:
        """The table of rows of 0-d tensors with the same names (one per member)."""
        import torch

        names = tuple(rows[0])
        return cls(names, torch.stack([torch.stack([row[name] for name in names]) for row in rows]))


@dataclass(frozen=True)
class Context:
    """What the driver gives a simulator: where it runs, its dtype, the run's generator (seeded with
    the spec's seed), the data directory of datasets that are not bundled (``SMD_DATA_DIR``), and
    whether checkpoints may be asked for (a simulator may skip bookkeeping that only they need)."""

    device: torch.device
    dtype: torch.dtype
    gen: torch.Generator
    data_dir: str | None = None
    checkpointing: bool = False


class Simulator(ABC, Generic[SpecT]):
    """Base of every simulator (module docstring). ``__init__`` sets :attr:`p` (the spec's params),
    :attr:`total_steps` and :attr:`record_every` from them; a subclass sets :attr:`names` (by default
    the metrics it declares). The defaults: a checkpoint state of the tensor attributes named in
    :attr:`STATE` (CPU copies, restored in place), no distributions, and the tail-means summary over
    the recorded steps ≥ ``p.tail_start()``."""

    names: tuple[str, ...]
    total_steps: int
    record_every: int
    p: Any
    STATE: tuple[str, ...] = ()
    # True: the theory (``member_theories``) needs only the specs and what the constructor built, reads nothing
    # that ``step_members`` or ``member_load_state`` change, and is safe on another thread: a fused run
    # (:func:`smdengine._driver.run_fused`) computes it there beside its updates
    THEORY_AT_START = False
    # series that are finite at every regular record of a sound run: where one is not, the summary says from
    # which step (:func:`smdengine._science.nonfinite_from`)
    FINITE: tuple[str, ...] = ()

    def __init__(self, spec: SpecT, ctx: Context):
        self.spec, self.ctx = spec, ctx
        self.p = p = cast(Any, spec).params
        self.total_steps, self.record_every = p.steps, p.record_every

    @abstractmethod
    def step(self, n: int, record: bool) -> Row | None: ...

    @abstractmethod
    def final_row(self) -> Row:
        """The state after the last update, a row over every name (module docstring)."""

    def span(self, n: int) -> int:
        """Updates the next ``step(n, …)`` makes (module docstring)."""
        return 1

    def state(self) -> dict[str, Any]:
        return {k: saved(getattr(self, k)) for k in self.STATE}

    def load_state(self, state: dict[str, Any], step: int) -> None:
        for k in self.STATE:
            getattr(self, k).copy_(state[k])

    @classmethod
    @abstractmethod
    def predict(cls, spec: SpecT) -> dict[str, Any]: ...

    def theory(self) -> dict[str, Any]:
        return self.predict(self.spec)

    def summarize(self, series: dict[str, list], theory: dict[str, Any]) -> dict[str, Any]:
        return tail_means(series, theory, self.p.tail_start())

    def distributions(self) -> dict[str, Any]:
        return {}

    # fused sweeps (module docstring): the defaults make any simulator a group of one member
    @classmethod
    def fuse_key(cls, spec: SpecT) -> str | None:
        """Specs of equal key (not None) may run fused, as one :meth:`fuse` run."""
        return None

    @classmethod
    def fuse(cls, specs: list[SpecT], ctxs: list[Context]) -> Simulator[SpecT]:
        raise NotImplementedError(f"{cls.__name__} does not run fused")

    def step_members(self, n: int, record: bool) -> list[Row] | RowTable | None:
        row = self.step(n, record)
        return None if row is None else [row]

    def final_members(self) -> list[Row] | RowTable:
        return [self.final_row()]

    def member_state(self, c: int) -> dict[str, Any]:
        return self.state()

    def member_load_state(self, c: int, state: dict[str, Any], step: int) -> None:
        self.load_state(state, step)

    def member_theory(self, c: int) -> dict[str, Any]:
        return self.theory()

    def member_theories(self, members: list[int]) -> list[dict[str, Any]]:
        """:meth:`member_theory` of each of ``members``; a fused simulator may compute them together."""
        return [self.member_theory(c) for c in members]

    def member_summary(self, c: int, series: dict[str, list], theory: dict[str, Any]) -> dict[str, Any]:
        return self.summarize(series, theory)

    def member_distributions(self, c: int) -> dict[str, Any]:
        return self.distributions()
