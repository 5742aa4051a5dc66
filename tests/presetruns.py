"""Running a preset's children with the engine in the test process, as `smd presets run --local` does."""
from __future__ import annotations

from collections.abc import Iterable

import torch

import smdengine
from smdengine import Child, ChildRecord


def run_children(children: Iterable[Child], fuse: bool = False) -> tuple[list[ChildRecord], list[dict]]:
    """(records, documents) of the children, each run to success on one torch thread (as the local run's
    workers do: two threads per run on two busy cores spin against each other, several times slower).

    ``fuse``: children of equal :func:`smdengine.fuse_key` run as one batched run (:func:`smdengine.run_fused`,
    as `smd study run` and the service's workers do), whose results are bit for bit those of each child run
    alone (tests/engine/test_fused.py); it saves the per-update overhead of all but one of them."""
    children = list(children)
    groups: dict[str, list[int]] = {}   # by fuse key (a JSON object); a child that runs alone, by its position
    for i, c in enumerate(children):
        key = smdengine.fuse_key(c.spec) if fuse else None
        groups.setdefault(key if key is not None else f"alone {i}", []).append(i)
    documents: list[dict] = [{} for _ in children]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for members in groups.values():
            if len(members) == 1:
                results = [smdengine.run(children[members[0]].spec)]
            else:
                results = smdengine.run_fused([children[i].spec for i in members])
            for i, result in zip(members, results, strict=True):
                assert result is not None   # nothing asked the run to stop
                documents[i] = result.to_document()
    finally:
        torch.set_num_threads(threads)
    records = [ChildRecord(c.index, c.point, c.values, c.seed, "succeeded", c.spec.model_dump(mode="json"),
                           doc["summary"], doc["theory"]) for c, doc in zip(children, documents, strict=True)]
    return records, documents
