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


def test_overlapping_waits_are_a_union_per_engine_never_a_sum() -> None:
    # evt_wait_time_ns overlaps across instructions (a real profile summed 390 ms of waits in a 105 ms
    # window, formats/neuron.md addendum): three waits on the vector engine cover 100..300 once.
    timeline = [
        ("execution", "executions", "nc_exec_running", 0, 1000),
        ("dma", "dma q0", "dma load", 0, 300),
        ("sync_wait", "vector", "semaphore wait", 100, 200),
        ("sync_wait", "vector", "semaphore wait", 150, 150),
        ("sync_wait", "vector", "semaphore wait", 200, 100),
        ("sync_wait", "scalar", "semaphore wait", 250, 50),  # another engine waits too: its own time
    ]
    result = engine_waits(_device(timeline), "neuron:nc0", None, (0, 1000))
    assert result is not None
    assert result["waits_ns"] == {"collectives": 0, "data_movement": 250, "compute_dependency": 0, "unknown": 0}
    assert result["waits_by_engine_ns"] == {"vector": {"data_movement": 200}, "scalar": {"data_movement": 50}}
    assert result["wait_wall_ns"] == 200 and result["wait_count"] == 4


def test_one_wait_interval_is_charged_once_when_producers_differ() -> None:
    # Two overlapping waits on one engine, released by a collective and by a DMA: the overlap goes to
    # the collective (first in priority), the rest to data movement; never both.
    timeline = [
        ("execution", "executions", "nc_exec_running", 0, 1000),
        ("collective", "cc stream 0", "all_reduce", 0, 400),
        ("dma", "dma q0", "dma load", 0, 300),
        ("sync_wait", "tensor", "semaphore wait", 200, 200),  # ends at 400: the collective
        ("sync_wait", "tensor", "semaphore wait", 100, 200),  # ends at 300: the DMA
    ]
    result = engine_waits(_device(timeline), "neuron:nc0", None, (0, 1000))
    assert result is not None
    assert result["waits_ns"]["collectives"] == 200 and result["waits_ns"]["data_movement"] == 100
    assert sum(result["waits_ns"].values()) == result["wait_wall_ns"] == 300
