"""The in-memory reference of ``diagnose`` out of core: a rank cut into time slices, each diagnosed alone with
``Options.owned``, merged (analysis/sliced.py), gives the whole rank's ``Diagnosis`` (docs/scale.md).

Proven on the corpus H100 Qwen trace (GPU: launch lag, the ``launched_in_steps`` window, launch flows), a real
CPU torch run (tests/outofcore_workload.py: 6 steps, Python frames), with ``--fallback-ops`` naming a real op
of it, and the corpus Triton example (a ProfilerStep of another process lasting 13 s in a 0.36 s trace:
sanitize's ``longer_than_trace``, a whole-rank rule).
"""

from __future__ import annotations

import itertools
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import neurontrace
from neurontrace.analysis import critical_path
from neurontrace.analysis import sliced as sliced_module
from neurontrace.analysis.contract import Options
from neurontrace.analysis.diagnose import combine, diagnose_rank
from neurontrace.analysis.id_bits import IdBits
from neurontrace.analysis.sliced import (
    diagnose_sliced,
    host_step_starts,
    host_steps,
    slices_of,
    step_cuts,
)
from neurontrace.analysis.window import trace_span
from neurontrace.trace import Trace
from tests.conftest import corpus_root
from tests.sliced_support import comparable

QWEN = "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
TRITON = "HolisticTraceAnalysis/tests/data/triton_example/triton_example.json.gz"


def _corpus(rel: str) -> Trace:
    root = corpus_root()
    if root is None or not (root / rel).is_file():
        pytest.skip("the real-trace corpus is not beside this checkout")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return neurontrace.load(root / rel)


@pytest.fixture(scope="module")
def qwen() -> Trace:
    return _corpus(QWEN)


@pytest.fixture(scope="module")
def cpu_run(outofcore_run: Path) -> Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return neurontrace.load(outofcore_run)


# Sections exact only at step starts (the planner's cuts): a cut inside a step breaks that step's critical path
# (docs/critical_path.md, "Out of core"); tests/test_sliced_sections.py checks what stays exact there.
AT_STEPS_ONLY = (critical_path.SECTION.key,)


def same_answer(trace: Trace, cuts: list[int], options: Options | None = None,
                ignore: tuple[str, ...] = (), at_steps_only: tuple[str, ...] = ()) -> dict[str, Any]:
    whole = comparable(combine([diagnose_rank(trace, options)], options).as_dict(), sliced=False)
    parts = comparable(combine([diagnose_sliced(trace, cuts, options)], options).as_dict(), sliced=True)
    for key in ignore:
        whole["phases"]["split"].pop(key), parts["phases"]["split"].pop(key)
    for key in at_steps_only:
        whole.pop(key, None), parts.pop(key, None)
    assert parts == whole
    return whole


def test_cuts_at_every_step_give_the_whole_rank_answer(cpu_run: Trace) -> None:
    cuts = host_step_starts(cpu_run)[1:]
    assert len(cuts) >= 5
    doc = same_answer(cpu_run, cuts)
    assert doc["devices"][0]["window_rule"] == "steps" and len(doc["phases"]["steps"]) == 6
    assert doc["devices"][0]["top_stalls"] and doc["phases"]["split"]["steps"]


def test_cuts_at_arbitrary_instants_change_only_the_phase_split(cpu_run: Trace, qwen: Trace) -> None:
    # Every figure but the forward/backward/optimizer split of a step is exact whatever the cuts; that split
    # finds a step's forward pass from its first op to its first backward op, so it needs the whole step in one
    # slice (docs/scale.md): the planner cuts at step starts only (test_the_planner_cuts_at_step_starts).
    for trace, n in ((cpu_run, 9), (qwen, 16)):
        lo, hi = trace_span(trace)
        doc = same_answer(trace, [lo + (hi - lo) * i // n for i in range(1, n)], ignore=("steps", "total"),
                          at_steps_only=AT_STEPS_ONLY)
        assert doc["devices"][0]["top_stalls"]


def test_the_gpu_window_and_a_stall_cut_by_a_slice_come_out_whole(qwen: Trace, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    whole = diagnose_rank(qwen)
    (dev,) = whole.devices
    assert dev.window_rule == "launched_in_steps"  # the device lags: the window comes from launched work
    stalls = dev.top_stalls[:4]
    cuts = [s.start_ns + s.dur_ns // 2 for s in stalls] + [s.start_ns + s.dur_ns // 3 for s in stalls[:2]]
    joined: list[tuple[int, int]] = []
    describer = sliced_module._Describer.__call__

    def spy(self: Any, *args: Any) -> Any:
        joined.append((args[2], args[3]))
        return describer(self, *args)

    monkeypatch.setattr(sliced_module._Describer, "__call__", spy)
    same_answer(qwen, cuts, ignore=("steps", "total"), at_steps_only=AT_STEPS_ONLY)
    # each of those stalls was cut (one of them twice) and put back together from its pieces
    assert sorted(joined) == sorted((s.start_ns, s.start_ns + s.dur_ns) for s in stalls)


def test_named_fallback_ops_count_each_call_once(cpu_run: Trace) -> None:
    # a real op of the run named as a fallback (--fallback-ops): its calls, host time and the device idle time
    # under it are summed over the slices, the calls carried into a slice from before counted where they start
    options = Options(fallback_ops=("aten::addmm", "aten::not_in_this_run"))
    lo, hi = trace_span(cpu_run)
    for cuts, inexact in ((host_step_starts(cpu_run)[1:], ()),
                          ([lo + (hi - lo) * i // 11 for i in range(1, 11)], AT_STEPS_ONLY)):
        doc = same_answer(cpu_run, cuts, options, ignore=("steps", "total"), at_steps_only=inexact)
        ops = {op["name"]: op for op in doc["fallback_ops"]}
        assert ops["aten::addmm"]["calls"] >= 12 and ops["aten::addmm"]["evidence"] == "confirmed"
        assert ops["aten::addmm"]["device_idle_ns"] > 0 and ops["aten::addmm"]["source"]
        assert ops["aten::not_in_this_run"]["evidence"] == "named_not_seen"


def test_a_run_in_whole_microseconds_cut_at_its_steps_gives_the_whole_answer(outofcore_run: Path,
                                                                              tmp_path: Path) -> None:
    # The real CPU run with its timestamps rounded to whole microseconds, as older torch versions wrote
    # them (the corpus's tb_plugin samples): many events tie on the path, and a step starts at the instant of
    # the frames that open it. Which of the tied events the path shows, and where a slice's path leaves its
    # cut, must not depend on the cuts.
    doc = json.loads(outofcore_run.read_text())
    for e in doc["traceEvents"]:
        for key in ("ts", "dur"):
            if isinstance(e.get(key), float):
                e[key] = round(e[key])
    whole_us = tmp_path / "train_us.pt.trace.json"
    whole_us.write_text(json.dumps(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = neurontrace.load(whole_us)
    out = same_answer(trace, host_step_starts(trace)[1:])
    on_path = [e["on_path_ns"] for e in out["critical_path"]["events"]]
    assert len(on_path) == critical_path.TOP_EVENTS and all(n % 1000 == 0 for n in on_path)


def test_a_whole_rank_rule_of_sanitize_holds_in_every_slice() -> None:
    trace = _corpus(TRITON)
    lo, hi = trace_span(trace)
    doc = same_answer(trace, [lo + (hi - lo) * i // 5 for i in range(1, 5)])
    assert doc["event_checks"]["counts"] == {"longer_than_trace": 1}  # counted once, in the slice where it starts
    assert doc["devices"][0]["window_rule"] == "activity"


def test_the_planner_cuts_at_step_starts(cpu_run: Trace) -> None:
    steps = host_steps(cpu_run)
    starts = sorted(s for s, _ in steps)
    assert step_cuts(steps) == starts[1:]
    lo, hi = trace_span(cpu_run)
    # time parts, 40 of them over the trace, of weights 10 and 30 in turn: those inside a step are never cut at
    sizes = [(lo + (hi - lo) * i // 40, 10 + 20 * (i % 2)) for i in range(40)]
    budget = 100
    cuts = step_cuts(steps, sizes, budget, hi)
    inside = [t for t in cuts if any(s < t < e for s, e in steps)]
    assert cuts and not inside and cuts == sorted(set(cuts))
    # as few slices as keep each near the budget: a slice over it holds no step start to cut at, and a slice
    # and the next step's stretch together are over it (where the steps fall depends on the run's timing)
    bounds_of = [*(t for t, _ in sizes), hi]

    def weight(a: float, b: float) -> float:
        return sum(w * max(0, min(b, e) - max(a, s)) / (e - s)
                   for (s, w), e in zip(sizes, bounds_of[1:], strict=True))
    bounds = [float("-inf"), *cuts, float("inf")]
    for a, b in itertools.pairwise(bounds):
        assert weight(a, b) <= budget or not [t for t in starts[1:] if a < t < b]
    for a, b in itertools.pairwise(bounds[:-1]):
        after = min([t for t in starts if t > b], default=float("inf"))
        assert weight(a, after) > budget
    assert set(cuts) - set(starts) <= {t for t, _ in sizes}  # step starts, else part starts outside the steps
    assert step_cuts(steps, sizes, 1 << 40, hi) == []  # everything fits in one slice
    # a part's events count pro rata of its time, so the cuts follow the events, not where the parts happen to end:
    # the same events in 40 parts or in 13 give the same slices (by part bounds, 8 GB of a tiled trace had slices
    # 3.5% larger than 2 GB of it, and its peak was higher: docs/scale.md)
    even = [(lo + (hi - lo) * i // 40, 20) for i in range(40)]
    coarse = [(lo + (hi - lo) * i // 40, 60) for i in range(0, 37, 3)]  # 13 parts: the last spans 4/40 of the time
    coarse[-1] = (coarse[-1][0], 80)
    assert step_cuts(steps, even, 100, hi) == step_cuts(steps, coarse, 100, hi)
    slices = slices_of((lo, hi), cuts)
    assert slices[0][0] == lo and slices[-1][1] == hi + 1
    assert all(a[1] == b[0] for a, b in itertools.pairwise(slices))


@pytest.mark.parametrize("spread", [2_000, 1 << 40, 0])
def test_the_plan_joins_ids_slice_by_slice_into_one_set(spread: int) -> None:
    # the first pass holds each id once, joined as slices arrive: a bit each where they are dense (2,000), a sorted
    # array where they are not (2**40), and a set that starts dense and then gets one id far away (0)
    rng = np.random.default_rng(7)
    held, seen = IdBits(), []
    for k in range(30):
        new = rng.integers(-3, spread or 2_000, int(rng.integers(0, 80)))
        new = np.r_[new, 1 << 44] if spread == 0 and k == 20 else new
        seen.append(new)
        held.add(new)
        every = np.unique(np.concatenate(seen))
        assert len(held) == len(every)
        probe = np.r_[rng.integers(-10, (spread or 2_000) + 10, 200), every[:40], 1 << 44]
        assert held.has(probe).tolist() == np.isin(probe, every).tolist()
    assert (held.bits is not None) == (spread == 2_000)
    if held.bits is not None:
        assert held.nbytes < len(held)  # under a byte an id: 8 bytes each as an array
