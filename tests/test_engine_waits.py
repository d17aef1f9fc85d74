"""Neuron engine waits charged to their producers, on a hand-built NeuronCore timeline."""

from __future__ import annotations

import pyarrow as pa

from neurontrace import Trace
from neurontrace.analysis.diagnose import diagnose
from neurontrace.analysis.engine_waits import engine_waits


def _device(rows: list[tuple[str, str, str, int, int]]) -> Trace:
    cat, track, name, ts, dur = zip(*rows, strict=True)
    n = len(rows)
    return Trace(device_events=pa.table({
        "event_id": pa.array(range(n), pa.int64()), "ts_ns": pa.array(ts, pa.int64()),
        "dur_ns": pa.array(dur, pa.int64()), "name": pa.array(name), "category": pa.array(cat),
        "device": pa.array(["neuron:nc0"] * n), "track": pa.array(track),
    }))


TIMELINE = [
    #  category      track       name                 ts    dur
    ("execution", "executions", "nc_exec_running", 0, 1000),
    ("dma", "dma q0", "dma load", 0, 100),
    ("sync_wait", "vector", "semaphore wait", 50, 50),     # released by the DMA ending at 100
    ("compute", "vector", "tensor_tensor", 100, 100),
    ("collective", "cc stream 0", "all_reduce", 150, 250),
    ("sync_wait", "tensor", "semaphore wait", 300, 100),   # released by the collective ending at 400
    ("compute", "tensor", "matmul", 400, 200),
    ("sync_wait", "scalar", "event wait", 550, 50),        # released by the matmul ending at 600
    ("sync_wait", "scalar", "event wait", 800, 20),        # nothing ends near 820: unknown
    ("throttle", "throttle", "power throttle", 900, 50),
]


def test_waits_are_charged_to_the_producer_of_their_signal() -> None:
    result = engine_waits(_device(TIMELINE), "neuron:nc0", None, (0, 1000))
    assert result is not None
    assert result["waits_ns"] == {"data_movement": 50, "collectives": 100, "compute_dependency": 50,
                                  "unknown": 20}
    assert (result["wait_count"], result["throttled_ns"]) == (4, 50)


def test_waits_are_clipped_to_the_window_and_only_for_neuron() -> None:
    result = engine_waits(_device(TIMELINE), "neuron:nc0", None, (0, 350))
    assert result is not None and result["waits_ns"]["collectives"] == 50
    assert engine_waits(_device(TIMELINE), "cuda:0", None, (0, 1000)) is None


def test_diagnose_reports_waits_and_throttling() -> None:
    doc = diagnose(_device(TIMELINE)).as_dict()
    (dev,) = doc["devices"]
    assert dev["window_source"] == "1 device executions"
    assert dev["engine_waits"]["waits_ns"]["collectives"] == 100
    assert "throttling" in {f["id"] for f in doc["findings"]}
    assert sum(dev["causes_ns"].values()) == 1000
