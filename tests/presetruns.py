"""Running a preset's children with the engine in the test process, as `smd presets run --local` does."""
from __future__ import annotations

from collections.abc import Iterable

import torch

import smdengine
from smdengine import Child, ChildRecord


def run_children(children: Iterable[Child]) -> tuple[list[ChildRecord], list[dict]]:
    """(records, documents) of the children, each run to success on one torch thread (as the local run's
    workers do: two threads per run on two busy cores spin against each other, several times slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    records, documents = [], []
    try:
        for c in children:
            doc = smdengine.run(c.spec).to_document()
            records.append(ChildRecord(c.index, c.point, c.values, c.seed, "succeeded", c.spec.model_dump(mode="json"),
                                       doc["summary"], doc["theory"]))
            documents.append(doc)
    finally:
        torch.set_num_threads(threads)
    return records, documents
