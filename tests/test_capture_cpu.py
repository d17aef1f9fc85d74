"""Real captures on the CPU: a small training loop with a deliberate host round trip, then loaded."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import neurontrace
from neurontrace import cli
from neurontrace.capture import Capture, Schedule, capture, current
from neurontrace.errors import CaptureWarning
from neurontrace.run_record import SCHEMA, read_run_record

pytest.importorskip("torch")
import torch  # after the skip: the module is skipped where torch is not installed

pytestmark = pytest.mark.torch


class TinyMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))

    def forward(self, x: Any) -> Any:
        return self.body(x)


def host_side_metric(logits: Any) -> float:
    """A deliberate host round trip: pull the logits to NumPy and compute on the CPU."""
    return float((logits.detach().numpy().argmax(axis=1) == 0).mean())


def train(steps: int, cap: Capture | None = None) -> list[float]:
    torch.manual_seed(0)
    model = TinyMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    losses = []
    for _ in range(steps):
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward has no annotations
        opt.step()
        host_side_metric(logits)
        losses.append(loss.item())  # the CPU round trip every step
        (cap or current()).step()
    return losses


def run_json(cap: Capture) -> dict[str, Any]:
    assert cap.path is not None
    record: dict[str, Any] = json.loads((cap.path / "run.json").read_text())
    return record


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Capture, list[float]]]:
    out = tmp_path_factory.mktemp("captures")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TORCH_NEURONX_LOG_LEVEL", "2")  # recorded even on the CPU: it is the evidence of the setup
        mp.setenv("CUDA_VISIBLE_DEVICES", "")
        with capture(out, notes="baseline", tags=["cpu", "test"]) as cap:
            losses = train(8, cap)
    yield cap, losses


def test_one_directory_per_run_and_rank_with_traces_and_run_json(captured: tuple[Capture, list[float]]) -> None:
    cap, losses = captured
    assert len(losses) == 8 and cap.warnings == []
    assert cap.path is not None and re.fullmatch(r".+_pid\d+_rank0", cap.path.name)
    assert sorted(p.name for p in cap.path.iterdir()) == [
        "rank0_w00_startup_steps0-0.pt.trace.json.gz", "rank0_w01_steady_steps3-5.pt.trace.json.gz", "run.json"]


def test_run_json_keeps_the_evidence(captured: tuple[Capture, list[float]]) -> None:
    cap, _ = captured
    r = run_json(cap)
    assert r["schema"] == SCHEMA and r["status"] == "complete"
    assert datetime.fromisoformat(r["start_time"].replace("Z", "+00:00")).tzinfo is not None
    assert r["end_time"] >= r["start_time"]
    assert r["rank"] == 0 and r["world_size"] == 1 and r["rank_source"] in ("env", "default")
    assert r["backend"] == "cpu" and r["versions"]["torch"] == torch.__version__
    assert r["environment"]["TORCH_NEURONX_LOG_LEVEL"] == "2" and "CUDA_VISIBLE_DEVICES" in r["environment"]
    assert r["notes"] == "baseline" and r["tags"] == ["cpu", "test"]
    assert r["profiler"] == {"activities": ["CPU"], "schedule": Schedule().as_dict(), "step_on": "manual",
                             "record_shapes": True, "with_stack": True, "profile_memory": True}
    assert r["steps_marked"] == 8 and r["exit"] == {"status": "ok", "exit_code": 0}
    assert [(w["label"], w["first_step"], w["last_step"], w["complete"]) for w in r["windows"]] == [
        ("startup", 0, 0, True), ("steady", 3, 5, True)]
    assert r["fallback_ops"] is None and r["neuron"] is None and r["failures"] == []
    assert r["command"] and r["argv"]


def test_each_trace_names_its_window(captured: tuple[Capture, list[float]]) -> None:
    cap, _ = captured
    assert cap.path is not None
    doc = json.loads(gzip.decompress((cap.path / "rank0_w01_steady_steps3-5.pt.trace.json.gz").read_bytes()))
    assert doc["neurontrace"] == {"capture": cap.path.name, "window": 1, "phase": "steady",
                                  "planned_steps": [3, 5], "run_record": "run.json"}
    assert doc["with_stack"] == 1 and doc["record_shapes"] == 1 and doc["profile_memory"] == 1


def test_the_capture_keeps_its_own_work_out_of_the_windows(captured: tuple[Capture, list[float]]) -> None:
    cap, _ = captured
    assert cap.path is not None
    doc = json.loads(gzip.decompress((cap.path / "rank0_w00_startup_steps0-0.pt.trace.json.gz").read_bytes()))
    frames = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "python_function"}
    assert not [f for f in frames if "run_record.py" in f or "_capture_backend.py" in f or ": _write" in f]


def test_the_capture_directory_loads_with_steps_frames_and_the_round_trip(
        captured: tuple[Capture, list[float]]) -> None:
    cap, _ = captured
    assert cap.path is not None
    trace = neurontrace.load(cap.path)
    ev = trace.to_pandas("system_events")
    steps = sorted(ev[ev.category == "step"].name.astype(str))
    assert steps == ["ProfilerStep#0", "ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"]
    assert set(ev["rank"].dropna().astype(int)) == {0}
    frames = trace.to_pandas("frames")
    user = set(frames[frames.is_user].function.astype(str))
    assert {"train", "host_side_metric", "forward"} <= user
    assert (ev.name == "aten::item").sum() >= 4  # loss.item() in every recorded step
    assert trace.meta("kineto.neurontrace")["phase"] in ("startup", "steady")


def test_read_run_record_from_a_trace_file(captured: tuple[Capture, list[float]]) -> None:
    cap, _ = captured
    assert cap.path is not None
    record = read_run_record(cap.path / "rank0_w00_startup_steps0-0.pt.trace.json.gz")
    assert record == run_json(cap)


def test_info_reads_the_capture_directory(captured: tuple[Capture, list[float]],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    cap, _ = captured
    assert cli.main(["info", str(cap.path)]) == 0
    out = capsys.readouterr().out
    assert "rank0_w00_startup_steps0-0" in out and "rank0_w01_steady_steps3-5" in out and "skipped none" in out


def test_a_block_that_marks_no_steps_is_one_whole_run_window(tmp_path: Path) -> None:
    with capture(tmp_path) as cap:
        torch.ones(4).sum().item()
    r = run_json(cap)
    assert [(w["label"], w["first_step"], w["last_step"]) for w in r["windows"]] == [("whole_run", 0, 0)]
    assert r["steps_marked"] == 0 and r["status"] == "complete"


def test_schedule_all_records_every_step_in_one_window(tmp_path: Path) -> None:
    with capture(tmp_path, schedule="all", with_stack=False, profile_memory=False) as cap:
        train(3)
    r = run_json(cap)
    assert [(w["label"], w["first_step"], w["last_step"]) for w in r["windows"]] == [("whole_run", 0, 3)]
    trace = neurontrace.load(cap.path)  # type: ignore[arg-type]
    ev = trace.to_pandas("system_events")
    assert sorted(ev[ev.category == "step"].name.astype(str)) == [f"ProfilerStep#{i}" for i in range(4)]


def test_optimizer_steps_mark_steps(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with capture(tmp_path, step_on="optimizer", schedule=(0, 1, 1), with_stack=False) as cap:
        for _ in range(4):
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
    opt.step()  # after the capture: the hook is gone
    r = run_json(cap)
    assert r["steps_marked"] == 4 and r["profiler"]["step_on"] == "optimizer"
    assert [(w["label"], w["first_step"]) for w in r["windows"]] == [("startup", 0), ("steady", 2)]


def test_a_run_too_short_for_steady_state_says_so(tmp_path: Path) -> None:
    with pytest.warns(CaptureWarning, match="no steady-state window was captured: the run marked 2 steps"), \
            capture(tmp_path, with_stack=False) as cap:
        train(2, cap)
    assert [w["label"] for w in run_json(cap)["windows"]] == ["startup"]


def test_an_exception_in_the_block_is_recorded_and_propagates(tmp_path: Path) -> None:
    with pytest.raises(ZeroDivisionError), capture(tmp_path, schedule=(0, 1, 5), with_stack=False) as cap:
        train(3, cap)
        raise ZeroDivisionError("user bug")
    r = run_json(cap)
    assert r["exit"]["status"] == "exception" and "user bug" in r["exit"]["exception"]
    # The open steady window (steps 2-6 planned) was cut at step 3 and still exported.
    assert [(w["label"], w["first_step"], w["last_step"], w["complete"]) for w in r["windows"]] == [
        ("startup", 0, 0, True), ("steady", 2, 3, False)]
    assert all((cap.path / f).is_file() for w in r["windows"] for f in w["files"])


def test_a_capture_inside_a_capture_joins_it(tmp_path: Path) -> None:
    with capture(tmp_path / "outer", schedule="all", with_stack=False) as outer:
        with capture(tmp_path / "inner") as inner:
            assert inner.path == outer.path and current() is outer
            inner.step()
        outer.step()
    assert run_json(outer)["steps_marked"] == 2
    assert not (tmp_path / "inner").exists()


def test_a_handle_records_one_run(tmp_path: Path) -> None:
    cap = capture(tmp_path, schedule="all", with_stack=False)
    with cap:
        pass
    with pytest.raises(RuntimeError, match="records one run"), cap:
        pass


def test_two_captures_never_share_a_directory(tmp_path: Path) -> None:
    paths = []
    for _ in range(2):
        with capture(tmp_path, with_stack=False, profile_memory=False) as cap:
            torch.ones(2).sum()
        paths.append(cap.path)
    assert paths[0] != paths[1] and paths[1].name == f"{paths[0].name}_2"  # type: ignore[union-attr]


# -- fail soft ----------------------------------------------------------------------------------------


def test_export_failure_warns_and_the_program_finishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Any, path: str, *args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", broken)
    with pytest.warns(CaptureWarning) as caught, capture(tmp_path, with_stack=False) as cap:
        losses = train(7, cap)
    assert len(losses) == 7  # the user's program ran to the end
    assert [str(w.message) for w in caught] == [
        f"neurontrace capture: window {i} ({name}) was not exported (OSError: [Errno 28] No space left on "
        "device); its trace is missing; the program continues"
        for i, name in ((0, "startup, steps 0-0"), (1, "steady, steps 3-5"))]
    r = run_json(cap)
    assert r["status"] == "failed" and r["exit"]["status"] == "ok"
    assert [f["stage"] for f in r["failures"]] == ["export", "export"]
    assert all(w["files"] == [] and "No space left" in w["error"] for w in r["windows"])
    assert len(cap.warnings) == 2 and r["warnings"] == cap.warnings


def test_start_failure_warns_and_the_program_finishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Any) -> None:
        raise RuntimeError("another profiler is already running")

    monkeypatch.setattr(torch.profiler.profile, "__enter__", refuse)
    with pytest.warns(CaptureWarning, match="the profiler could not start .*already running.*nothing is captured"), \
            capture(tmp_path) as cap:
        assert not cap.active
        losses = train(3, cap)
    assert len(losses) == 3
    r = run_json(cap)
    assert r["status"] == "failed" and r["failures"][0]["stage"] == "start" and r["windows"] == []
    assert r["steps_marked"] == 3


def test_an_unusable_output_directory_warns_and_the_program_finishes(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the captures should go")
    with pytest.warns(CaptureWarning, match="cannot create the capture directory"), capture(blocker) as cap:
        losses = train(2, cap)
    assert len(losses) == 2 and cap.path is None and not cap.active
