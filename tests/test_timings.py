"""``diagnose --timings`` / ``diagnose(timings=...)``: every stage and registered section timed, the result unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import neurontrace
from neurontrace.analysis import registry
from neurontrace.analysis.diagnose import diagnose
from neurontrace.analysis.timings import Timings, stage
from tests.conftest import SAMPLES

SAMPLE = SAMPLES / "cpu_train_loop.pt.trace.json.gz"  # a real CPU training run (README)
RESNET = "kineto-tb_plugin/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
CORE = ("sanitize", "frames", "fallback", "attribution", "combine", "findings")


def _cli(*args: str | Path) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "neurontrace", "diagnose", *map(str, args)], capture_output=True,
                         text=True, timeout=120, check=False)
    return res, time.perf_counter() - t0


def _table(stderr: str) -> dict[str, float]:
    lines = stderr.split("neurontrace diagnose: timings\n", 1)[1].splitlines()
    rows = [line.split() for line in lines if line.strip()]
    return {r[0]: float(r[1]) for r in rows}


def test_every_registered_section_is_timed_and_the_document_is_unchanged(corpus: Path) -> None:
    trace = corpus / RESNET  # a real GPU trace: kernels, copies, launches, allocator records
    plain, _ = _cli(trace, "--json")
    timed, wall = _cli(trace, "--json", "--timings")
    assert plain.returncode == timed.returncode == 0, timed.stderr[-2000:]
    assert timed.stdout == plain.stdout  # timing changes nothing the user reads
    assert "timings" not in plain.stderr
    table = _table(timed.stderr)
    expected = {"load", "compile_logs", "render", *CORE, *(f"section:{s.key}" for s in registry.SECTIONS),
                *(f"device:{s.key}" for s in registry.DEVICE_SECTIONS)}
    assert expected | {"total"} == set(table)
    stages = {k: v for k, v in table.items() if k != "total"}
    assert all(v >= 0 for v in stages.values())
    assert table["total"] == pytest.approx(sum(stages.values()), abs=0.002 * len(stages))
    assert table["total"] <= wall  # the stages are inside the child's run, never more than it
    assert table["load"] > 0 and table["attribution"] > 0  # the trace was parsed and attributed here
    doc = json.loads(timed.stdout)
    assert doc["devices"] and doc["critical_path"] is not None and doc["memory"] is not None


def test_timings_argument_fills_the_stages_in_run_order() -> None:
    trace = neurontrace.load(SAMPLE)
    timings = Timings()
    timed = diagnose(trace, timings=timings)
    untimed = diagnose(trace)
    assert timed.as_dict() == untimed.as_dict()
    order = list(timings)
    assert order[:4] == list(CORE[:4])
    assert order.index("section:" + registry.SECTIONS[-1].key) < order.index("combine") < order.index("findings")
    assert [k for k in order if k.startswith("section:")] == [f"section:{s.key}" for s in registry.SECTIONS]
    lines = timings.lines()
    assert lines[-1].split()[0] == "total" and len(lines) == len(timings) + 1


def test_a_stage_run_twice_adds_up_and_none_times_nothing() -> None:
    timings = Timings()
    for _ in range(2):
        with stage(timings, "sleep"):
            time.sleep(0.02)
    assert 0.04 <= timings["sleep"] < 1.0
    with stage(None, "ignored"):
        pass
    assert list(timings) == ["sleep"]
