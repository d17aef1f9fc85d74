"""table_memo.per_table: a result computed once per table object, never kept past the table, handed out read-only;
and what sections share through it (the driving host events) is what computing it afresh gives."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from neurontrace.analysis import table_memo
from neurontrace.analysis.driving import driving_host_events
from neurontrace.load import load


def test_one_computation_per_table_object_and_none_kept_after_it() -> None:
    calls: list[int] = []
    t = pa.table({"x": [1, 2, 3]})

    def compute() -> np.ndarray:
        calls.append(1)
        return np.arange(1, 4) * 2

    first = table_memo.per_table(t, "double", compute)
    again = table_memo.per_table(t, "double", compute)
    assert again is first and len(calls) == 1
    assert not first.flags.writeable  # shared between sections: nobody may change it
    with pytest.raises(ValueError):
        first[0] = 0
    other = pa.table({"x": [1, 2, 3]})  # equal, but another object: computed again
    table_memo.per_table(other, "double", lambda: np.zeros(1))
    assert len(calls) == 1 and id(other) in table_memo._KEPT
    key = id(t)
    del t, first, again
    gc.collect()
    assert key not in table_memo._KEPT  # the table is gone, and its results with it


def test_driving_host_events_shared_equal_a_fresh_filter(corpus: Path) -> None:
    """On the corpus ResNet-50 GPU trace: attribution, dominant and overlap ask for the same device's driving host
    events; the second ask gets the first's table, and it equals the filter computed afresh."""
    trace = load(next(corpus.rglob("worker0.*.pt.trace.json.gz")))
    dev = trace.device_events
    first = driving_host_events(trace, dev)
    assert driving_host_events(trace, dev) is first
    assert 0 < first.num_rows < trace.system_events.num_rows  # the launching process only, not every host row
    table_memo._KEPT.pop(id(trace.system_events))  # forget it: computed again from the tables
    fresh = driving_host_events(trace, dev)
    assert fresh is not first and fresh.equals(first)
