"""The Python client of the SMD Lab service.

    from smdlab import Client
    client = Client()                       # SMD_URL (default http://127.0.0.1:8000) and SMD_KEY
    exp = client.submit({"kind": "nrq", "params": {"lr": 0.1, "weight_decay": 0.01}})
    exp.wait()                              # a progress bar (terminal or notebook) until it ends
    exp.series()                            # a pandas DataFrame indexed by step
    exp.plot("au")                          # the PNG, shown inline in a notebook
    study = client.study(base, grid={"params.lr": [0.05, 0.1]}, seeds=[0, 1])
    study.wait(); study.table()             # one row per child

HTTP is handled here (:mod:`smdlab._http`): the Bearer key, timeouts, 429 waited out (or
:class:`~smdlab.errors.QuotaExceeded` with ``retry_429=False``), idempotent requests retried on 5xx and
connection errors, errors raised with the server's field and reason (:mod:`smdlab.errors`), cursor pages
as iterators. It uses httpx (already a dependency of the service's tests, and it streams Server-Sent
Events, which urllib does not do well).
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from smdlab._http import Transport
from smdlab.errors import SMDError
from smdlab.options import EXPERIMENT_OPTIONS

ID = re.compile(r"[A-Za-z0-9_-]{1,200}")
PAGE = 100   # experiments asked of GET /v1/experiments at once (it gives up to 500)

ENDED = ("succeeded", "failed", "cancelled")
STUDY_ENDED = ("succeeded", "failed", "cancelled", "partial")


class Client:
    """``Client(url=None, key=None, timeout=30)``; ``retry_429=False`` raises QuotaExceeded at once instead
    of waiting (at most ``max_quota_wait`` seconds in all) for the time the server's Retry-After gives; a
    request over the work quota (too big to ever fit) raises at once either way."""

    def __init__(self, url: str | None = None, key: str | None = None, timeout: float = 30.0, *,
                 retry_429: bool = True, max_quota_wait: float = 600.0,
                 on_quota_wait: Callable[[float, str | None, Any], None] | None = None,
                 on_retry: Callable[[str, float], None] | None = None):
        """``on_quota_wait(seconds, quota, detail)`` is called before each wait on a 429 (e.g. to say so);
        ``on_retry(reason, seconds)`` before a request that failed (unreachable, 5xx) is retried, for at most
        ``seconds`` more (inf: a wait that rides out the outage until the service answers again)."""
        self.url = service_root(url or os.environ.get("SMD_URL") or "http://127.0.0.1:8000")
        key = key if key is not None else os.environ.get("SMD_KEY")
        self.http = Transport(self.url, key, timeout, retry_429=retry_429, max_quota_wait=max_quota_wait,
                              on_quota_wait=on_quota_wait, on_retry=on_retry)

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # experiments
    SUBMIT_OPTIONS = ("name", *EXPERIMENT_OPTIONS)   # name: the spec's, given beside it as the others

    def submit(self, spec: dict[str, Any], **options: Any) -> Experiment:
        """POST the spec with ``options`` merged into it (``name``, ``visibility``, ``priority``, ``keep_checkpoint``,
        ``tags``, ``note``); the queued :class:`Experiment`. An option of another name is a TypeError here (it was
        sent, and refused as a field of the spec)."""
        unknown = sorted(set(options) - set(self.SUBMIT_OPTIONS))
        if unknown:
            raise TypeError(f"submit: unknown option {', '.join(unknown)}: expected {', '.join(self.SUBMIT_OPTIONS)} "
                            "(spec fields go in the spec)")
        return Experiment(self, self.http.json("POST", "/v1/experiments", json={**spec, **options}))

    def experiment(self, experiment_id: str) -> Experiment:
        return Experiment(self, self.http.json("GET", f"/v1/experiments/{valid_id(experiment_id, 'experiment')}"))

    def experiments(self, *, status: str | None = None, kind: str | None = None, name: str | None = None,
                    tag: str | list[str] | None = None, limit: int | None = None, page_size: int = PAGE,
                    **filters: Any) -> Iterator[Experiment]:
        """The experiments you may see, newest first (at most ``limit``; None: every one), fetched ``page_size``
        at a time. ``filters`` are passed as query parameters as they are (e.g. ``**{"param.params.lr": 0.1}``)."""
        for what, value in (("limit", limit), ("page_size", page_size)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise SMDError(f"{what}: expected a whole number ≥ 1, got {value!r}")
        params: dict[str, Any] = {"status": status, "kind": kind, "name": name, "tag": tag,
                                  "limit": min(limit or page_size, page_size), **filters}
        left = limit
        while True:
            page = self.http.json("GET", "/v1/experiments", params=params)
            for item in page["items"]:
                if left is not None:
                    if left == 0:
                        return
                    left -= 1
                yield Experiment(self, item)
            if not page.get("next_cursor") or left == 0:
                return
            params = {**params, "cursor": page["next_cursor"]}

    # studies and presets
    def study(self, base: dict[str, Any] | str, *, grid: dict[str, Any] | None = None,
              zip: dict[str, Any] | None = None, points: list[dict[str, Any]] | None = None,
              seeds: list[int] | None = None, name: str | None = None, **options: Any) -> Study:
        """POST a study (README: Studies): ``base`` spec over ``grid``/``zip`` axes or explicit ``points``,
        each with every one of ``seeds``; ``options``: ``visibility``, ``priority``, ``fuse``. Given a study's
        id instead of a spec, reopen that study (as :meth:`get_study`)."""
        if isinstance(base, str):
            given = [k for k, v in (("grid", grid), ("zip", zip), ("points", points), ("seeds", seeds),
                                    ("name", name), *options.items()) if v is not None]
            if given:
                raise TypeError(f"study: expected a spec to submit or a study id alone, got an id with {given}")
            return self.get_study(base)
        body: dict[str, Any] = {"base": base, **options}
        for key, value in (("grid", grid), ("zip", zip), ("points", points), ("seeds", seeds), ("name", name)):
            if value is not None:
                body[key] = value
        return Study(self, self.http.json("POST", "/v1/studies", json=body))

    def get_study(self, study_id: str) -> Study:
        return Study(self, self.http.json("GET", f"/v1/studies/{valid_id(study_id, 'study')}"))

    def presets(self) -> list[dict[str, Any]]:
        """The seeds' figures as presets: id, seed, figure, description, checks, cost estimates."""
        return self.http.json("GET", "/v1/presets")

    def preset(self, preset_id: str) -> dict[str, Any]:
        """One preset in full: its catalog entry, each size with the study spec it expands to."""
        return self.http.json("GET", f"/v1/presets/{valid_id(preset_id, 'preset')}")

    def run_preset(self, preset_id: str, size: str = "quick", **options: Any) -> Study:
        """Run a preset (``options``: ``seeds``, ``overrides``, ``visibility``); its study, with checks."""
        return Study(self, self.http.json("POST", f"/v1/presets/{valid_id(preset_id, 'preset')}/run", json={"size": size, **options}))


class Experiment:
    """One experiment; :attr:`data` is the last document read (``refresh()`` reads it again)."""

    def __init__(self, client: Client, data: dict[str, Any]):
        self.client, self.data = client, data
        self.id: str = data["id"]

    def __repr__(self) -> str:
        return f"<Experiment {self.id} {self.data.get('kind')} {self.data.get('status')}>"

    def refresh(self) -> Experiment:
        self.data = self.client.http.json("GET", f"/v1/experiments/{self.id}")
        return self

    def status(self) -> str:
        return str(self.refresh().data["status"])

    def wait(self, timeout: float | None = None, progress: bool | None = None, poll: float = 1.0) -> Experiment:
        """Block until it ends (or ``timeout`` seconds: TimeoutError), following its event stream with a
        progress bar (tqdm: a terminal bar, or a widget in a notebook; by default only there, not into a
        file or pipe); when the stream cannot be read, polling with ETags. An outage of the service (a restart)
        is waited out, said once through the client's ``on_retry``. Returns self, refreshed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = _bar(progress, self.data.get("name") or self.id)
        try:
            try:
                for state in self._events(deadline):
                    _show(bar, state)
                    if state.get("status") in ENDED:
                        break
            except SMDError:
                raise
            except Exception:   # the stream broke (proxy, network): poll instead
                pass
            etag = None
            while self.data.get("status") not in ENDED:
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"experiment {self.id} still {self.data.get('status')} after {timeout} s")
                response = self.client.http.outlast("GET", f"/v1/experiments/{self.id}", deadline=deadline,
                                                    headers={"If-None-Match": etag} if etag else None)
                if response.status_code != 304:
                    self.data, etag = response.json(), response.headers.get("ETag")
                    _show(bar, self.data)
                if self.data.get("status") not in ENDED:
                    time.sleep(poll)
        finally:
            if bar is not None:
                bar.close()
        return self

    def _events(self, deadline: float | None) -> Iterator[dict[str, Any]]:
        timeout = None if deadline is None else max(1.0, deadline - time.monotonic())
        params = {"timeout": timeout} if timeout is not None else None
        with self.client.http.http.stream("GET", f"/v1/experiments/{self.id}/events", params=params,
                                          timeout=None) as response:
            if response.status_code != 200:
                return
            for line in response.iter_lines():
                if line.startswith("data:"):
                    state = json.loads(line[5:])
                    if "status" in state:
                        self.data = {**self.data, **state}
                        yield state
        if deadline is not None and time.monotonic() >= deadline and self.data.get("status") not in ENDED:
            raise TimeoutError(f"experiment {self.id} still {self.data.get('status')}")

    def results(self, fields: list[str] | None = None, max_points: int | None = None,
                since_step: int | None = None) -> dict[str, Any]:
        """The result document: series, layers, theory, summary, distributions, provenance."""
        params = {"fields": ",".join(fields) if fields else None, "max_points": max_points, "since_step": since_step}
        return self.client.http.json("GET", f"/v1/experiments/{self.id}/results", params=params)

    def series(self, fields: list[str] | None = None, max_points: int | None = None) -> Any:
        """The series as a pandas DataFrame indexed by step; theory series as ``theory/<name>`` columns. For
        ``train``, per-layer series as MultiIndex columns (metric, layer), global series under layer ""."""
        import pandas as pd

        doc = self.results(fields, max_points)
        steps = doc["series"].get("step", [])
        columns = {name: values for name, values in doc["series"].items() if name != "step"}
        columns.update({f"theory/{name}": values for name, values in doc["theory"].items()
                        if isinstance(values, list)})
        frame = pd.DataFrame(columns, index=pd.Index(steps, name="step"))
        if not doc.get("layers"):
            return frame
        per_layer = {(metric, layer): values for layer, metrics in doc["layers"].items()
                     for metric, values in metrics.items()}
        frame.columns = pd.MultiIndex.from_tuples([(name, "") for name in frame.columns], names=["metric", "layer"])
        layers = pd.DataFrame(per_layer, index=frame.index)
        layers.columns = pd.MultiIndex.from_tuples(list(per_layer), names=["metric", "layer"])
        return pd.concat([frame, layers], axis=1)

    def plot(self, name: str, fmt: str = "png") -> Plot:
        """A plot of its kind (``GET .../plots``: the names); in a notebook it shows inline."""
        response = self.client.http.request("GET", f"/v1/experiments/{self.id}/plots/{name}.{fmt}")
        return Plot(response.content, fmt)

    def plots(self) -> list[str]:
        return [p["name"] for p in self.client.http.json("GET", f"/v1/experiments/{self.id}/plots")]

    def attempts(self) -> list[dict[str, Any]]:
        return self.client.http.json("GET", f"/v1/experiments/{self.id}/attempts")

    def cancel(self) -> Experiment:
        self.data = self.client.http.json("POST", f"/v1/experiments/{self.id}/cancel")
        return self

    def rerun(self, overrides: dict[str, Any] | None = None, *, name: str | None = None,
              visibility: str | None = None, priority: str | None = None, keep_checkpoint: bool | None = None,
              tags: list[str] | None = None, note: str | None = None, **kwargs: Any) -> Experiment:
        """A new experiment from this one's spec with ``overrides`` by dotted path (``{"params.lr": 0.2}``);
        keyword arguments use ``__`` for the dots (``params__lr=0.2``); ``name``: the new one's (default: the
        spec's); ``visibility``, ``priority``, ``keep_checkpoint`` (to :meth:`continue_` it), ``tags``, ``note``:
        as :meth:`Client.submit`'s."""
        changes = {**(overrides or {}), **{k.replace("__", "."): v for k, v in kwargs.items()}}
        options = {"name": name, "visibility": visibility, "priority": priority, "keep_checkpoint": keep_checkpoint,
                   "tags": tags, "note": note}
        body: dict[str, Any] = {"overrides": changes, **{k: v for k, v in options.items() if v is not None}}
        return Experiment(self.client, self.client.http.json("POST", f"/v1/experiments/{self.id}/rerun", json=body))

    def continue_(self, steps: int) -> Experiment:
        """Run a succeeded experiment submitted with ``keep_checkpoint=True`` for ``steps`` more updates."""
        self.data = self.client.http.json("POST", f"/v1/experiments/{self.id}/continue", json={"steps": steps})
        return self


class Study:
    """One study; :attr:`data` is the last document read."""

    def __init__(self, client: Client, data: dict[str, Any]):
        self.client, self.data = client, data
        self.id: str = data["id"]

    def __repr__(self) -> str:
        return f"<Study {self.id} {self.data.get('status')} {self.data.get('children_count')} children>"

    def refresh(self) -> Study:
        self.data = self.client.http.json("GET", f"/v1/studies/{self.id}")
        return self

    def status(self) -> str:
        return str(self.refresh().data["status"])

    def wait(self, timeout: float | None = None, progress: bool | None = None, poll: float = 1.0) -> Study:
        """Block until every child has ended (polling with ETags), with a bar of the study's progress (its
        children's steps done; by default in a terminal or a notebook only). An outage of the service is waited
        out, as :meth:`Experiment.wait` does."""
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = _bar(progress, self.data.get("name") or self.id)
        etag = None
        try:
            while True:
                response = self.client.http.outlast("GET", f"/v1/studies/{self.id}", deadline=deadline,
                                                    headers={"If-None-Match": etag} if etag else None)
                if response.status_code != 304:
                    self.data, etag = response.json(), response.headers.get("ETag")
                    _show(bar, self.data)
                if self.data.get("status") in STUDY_ENDED:
                    return self
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"study {self.id} still {self.data.get('status')} after {timeout} s")
                time.sleep(poll)
        finally:
            if bar is not None:
                bar.close()

    def children(self) -> list[Experiment]:
        return [self.client.experiment(c["id"]) for c in self.refresh().data["children"]]

    def table(self, group: str | None = None) -> Any:
        """The study table as a pandas DataFrame: one row per child (``group="point"``: per point, mean
        and standard error over seeds)."""
        import pandas as pd

        table = self.client.http.json("GET", f"/v1/studies/{self.id}/table", params={"group": group})
        return pd.DataFrame(table["rows"], columns=table["columns"])

    def checks(self) -> list[dict[str, Any]]:
        """A preset study's checks (claim, predicted, measured, tolerance, verdict); ``pending`` ones until every
        child has ended. A study that is not a preset's has none: an SMDError says so (it was an empty list)."""
        data = self.refresh().data
        if data.get("preset") is None:
            raise SMDError(f"study {self.id} is not a preset's: it has no checks (client.run_preset gives one)")
        return list(data.get("checks") or [])

    def cancel(self) -> Study:
        self.data = self.client.http.json("POST", f"/v1/studies/{self.id}/cancel")
        return self


class Plot:
    """Image bytes; a notebook shows them inline (``_repr_png_`` / ``_repr_svg_``)."""

    def __init__(self, data: bytes, fmt: str):
        self.data, self.format = data, fmt

    def _repr_png_(self) -> bytes | None:
        return self.data if self.format == "png" else None

    def _repr_svg_(self) -> str | None:
        return self.data.decode() if self.format == "svg" else None

    def save(self, path: str | os.PathLike[str]) -> None:
        with open(path, "wb") as out:
            out.write(self.data)


def _bar(progress: bool | None, label: str) -> Any:
    """A bar where asked; by default (None) where one shows: a terminal or a notebook, not a file or pipe (whose
    reader got its frames as carriage returns)."""
    if progress is None:
        progress = sys.stderr.isatty() or "ipykernel" in sys.modules
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=1.0, desc=str(label)[:40], unit="", bar_format="{desc}: {percentage:3.0f}%|{bar}| "
                "[{elapsed}<{remaining}] {postfix}")


def _show(bar: Any, state: dict[str, Any]) -> None:
    if bar is None:
        return
    progress = float(state.get("progress") or 0.0)
    if not getattr(bar, "shown", False) or progress < bar.initial:   # followed from half way, or resumed from
        bar.shown, bar.initial = True, progress                       # a checkpoint: the pace counts from here
    bar.n = progress
    bar.set_postfix_str(str(state.get("status", "")), refresh=False)
    bar.refresh()


def service_root(url: str) -> str:
    """The service's address as the paths here extend it: without a trailing slash, nor a trailing ``/v1``,
    the prefix every path already has (``http://host:8000/v1``, a natural thing to paste from the API's
    docs, had every request answered 404)."""
    return url.rstrip("/").removesuffix("/v1").rstrip("/")


def valid_id(value: Any, what: str) -> str:
    """An id as a path segment: letters, digits, '-' and '_' (every id and preset id is). Anything else would
    name another route or resource: '../experiments/X' under /v1/studies/ cancelled an experiment, '?x' and
    '' the list."""
    if not isinstance(value, str) or not ID.fullmatch(value):
        raise SMDError(f"{what} id: expected letters, digits, '-' or '_', got {value!r}")
    return value
