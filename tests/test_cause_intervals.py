"""``attribution.cause_intervals``: the attribution cut in time, adding up to ``attribute``'s totals.

The viewer draws these runs (the stall-cause row, the highlight); they must be the same numbers
``diagnose`` prints, on real traces of each kind: the CPU sample, a real H100 trace, fallback ops.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import neurontrace
from neurontrace.analysis.attribution import CauseIntervals, cause_intervals
from neurontrace.analysis.diagnose import diagnose
from neurontrace.causes import CAUSES
from tests.conftest import SAMPLES

H100 = Path("TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")


def _check(trace: neurontrace.Trace, fallback_ops: tuple[str, ...] = ()) -> list[CauseIntervals]:
    diag = diagnose(trace, fallback_ops=fallback_ops)
    ids = np.array([i for op in diag.fallback_ops for i in op.event_ids], dtype=np.int64)
    out = []
    for d in diag.devices:
        runs = cause_intervals(trace, d.device, d.rank, d.window, fallback_event_ids=ids)
        assert runs.total_ns() == d.causes_ns  # the same numbers diagnose prints, cut in time
        assert runs.starts[0] == d.window[0] and runs.ends[-1] == d.window[1]
        assert np.all(runs.starts[1:] == runs.ends[:-1]) and np.all(runs.ends > runs.starts)
        for k, name in enumerate(CAUSES):  # of_cause() is the runs of that cause, nothing else
            s, e = runs.of_cause(name)
            assert int((e - s).sum()) == d.causes_ns[name] and len(s) == int((runs.cause == k).sum())
        details: dict[str, int] = {}
        for det, ns in zip(runs.detail.tolist(), (runs.ends - runs.starts).tolist(), strict=True):
            details[runs.details[det]] = details.get(runs.details[det], 0) + ns
        assert details == d.detail_ns
        out.append(runs)
    return out


def test_cpu_sample_host_as_device() -> None:
    (runs,) = _check(neurontrace.load(SAMPLES / "cpu_train_loop.pt.trace.json.gz"))
    assert runs.device == "cpu" and runs.total_ns()["compute"] > 0


@pytest.mark.corpus
def test_real_h100_trace(corpus: Path) -> None:
    path = corpus / H100
    if not path.exists():
        pytest.skip(f"{H100} is not in the corpus")
    trace = neurontrace.load(path)
    (runs, *_rest) = _check(trace)
    assert runs.device.startswith("cuda") and runs.total_ns()["compute"] > 0
    # A named fallback op: its host time becomes host_fallback, still adding up exactly. (aten::linear runs
    # inside the window; the embedding lookup precedes the device work the step launched.)
    (runs, *_rest) = _check(trace, ("aten::linear",))
    assert runs.total_ns()["host_fallback"] > 0
