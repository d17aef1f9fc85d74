"""Capture pieces that need no torch: the schedule, run.json, the script command line, lazy import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from neurontrace import _capture_script as script
from neurontrace._capture_record import REDACTED, behaviour_env, rank_from_env, write_run_record
from neurontrace._capture_schedule import STARTUP, STEADY, WHOLE_RUN, Schedule, Window, label
from neurontrace.errors import InputNotFoundError, MissingDependencyError, TraceWarning, UsageError
from neurontrace.run_record import SCHEMA, read_run_record

# -- schedule ---------------------------------------------------------------------------------------


def test_default_schedule_records_startup_then_one_steady_window() -> None:
    s = Schedule()
    actions = [s.action(i) for i in range(9)]
    assert actions == ["save", "none", "warmup", "record", "record", "save", "none", "none", "none"]
    assert s.window(0) == Window(0, STARTUP, 0, 0)
    assert s.window(4) == Window(1, STEADY, 3, 5)
    assert s.window(1) is None and s.window(2) is None and s.window(7) is None


def test_repeat_and_startup_steps() -> None:
    s = Schedule(wait=0, warmup=1, active=2, repeat=2, startup=2)
    #          startup      cycle 0          cycle 1
    assert [s.action(i) for i in range(9)] == [
        "record", "save", "warmup", "record", "save", "warmup", "record", "save", "none"]
    assert [s.window(i) for i in (1, 3, 7)] == [
        Window(0, STARTUP, 0, 1), Window(1, STEADY, 3, 4), Window(2, STEADY, 6, 7)]
    assert s.next_window(2) == Window(1, STEADY, 3, 4)
    assert s.next_window(8) is None


def test_without_startup_the_first_cycle_starts_at_step_zero() -> None:
    s = Schedule(wait=0, warmup=0, active=2, repeat=0, startup=0)
    assert [s.action(i) for i in range(5)] == ["record", "save", "record", "save", "record"]
    assert s.window(0) == Window(0, STARTUP, 0, 1)  # it holds step 0: compilation lands there
    assert s.window(2) == Window(1, STEADY, 2, 3)
    assert s.window(1000) is not None  # repeat=0: forever


def test_everything_is_one_window_and_a_window_open_at_exit_from_step_zero_is_the_whole_run() -> None:
    s = Schedule.everything()
    assert all(s.action(i) == "record" for i in (0, 1, 10_000))
    w = s.window(7)
    assert w is not None and w.first_step == 0
    assert w.phase == WHOLE_RUN and label(w, last_step=7, at_exit=True) == WHOLE_RUN
    assert label(Window(0, STARTUP, 0, 0), last_step=0, at_exit=False) == STARTUP
    assert label(Window(1, STEADY, 3, 5), last_step=4, at_exit=True) == STEADY
    assert s.as_dict()["active"] == "all"


@pytest.mark.parametrize("value", [(1, 1, 3), (1, 1, 3, 2), "all", None])
def test_schedule_coercion(value: object) -> None:
    s = Schedule.coerce(value)  # type: ignore[arg-type]
    assert isinstance(s, Schedule)
    if isinstance(value, tuple):
        assert (s.wait, s.warmup, s.active) == value[:3] and s.startup == 1


@pytest.mark.parametrize("kwargs", [{"active": 0}, {"wait": -1}, {"startup": 1.5}])
def test_bad_schedules_say_what_is_wrong(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="schedule"):
        Schedule(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected a Schedule"):
        Schedule.coerce((1, 2))


# -- run.json ---------------------------------------------------------------------------------------


def test_behaviour_env_keeps_what_changes_behaviour_and_redacts_credentials() -> None:
    env = {"TORCH_NEURONX_LOG_LEVEL": "1", "NEURON_RT_VISIBLE_CORES": "0-3", "NEURON_CC_FLAGS": "-O2",
           "CUDA_VISIBLE_DEVICES": "0", "NCCL_DEBUG": "INFO", "HOME": "/somewhere", "PATH": "x",
           "NEURON_ACCESS_TOKEN": "hunter2", "OMP_NUM_THREADS": "4"}
    got = behaviour_env(env)
    assert list(got) == sorted(got)
    assert got == {"CUDA_VISIBLE_DEVICES": "0", "NCCL_DEBUG": "INFO", "NEURON_ACCESS_TOKEN": REDACTED,
                   "NEURON_CC_FLAGS": "-O2", "NEURON_RT_VISIBLE_CORES": "0-3", "OMP_NUM_THREADS": "4",
                   "TORCH_NEURONX_LOG_LEVEL": "1"}


def test_rank_from_the_launcher_environment() -> None:
    assert rank_from_env({"RANK": "3", "WORLD_SIZE": "8"}) == (3, 8, "env")
    assert rank_from_env({}) == (0, 1, "default")
    assert rank_from_env({"RANK": "x"}) == (0, 1, "default")


def test_read_run_record_finds_it_beside_or_above_a_trace(tmp_path: Path) -> None:
    cap = tmp_path / "host_pid1_rank0"
    nested = cap / "neuron" / "i-1_pid_1" / "20260101_000000_000"
    nested.mkdir(parents=True)
    write_run_record(cap, {"schema": SCHEMA, "rank": 0})
    (cap / "rank0_w00_startup_steps0-0.pt.trace.json.gz").write_bytes(b"")
    (nested / "trace.json").write_text("{}")
    assert read_run_record(cap / "rank0_w00_startup_steps0-0.pt.trace.json.gz") == {"schema": SCHEMA, "rank": 0}
    assert read_run_record(nested / "trace.json") == {"schema": SCHEMA, "rank": 0}
    assert read_run_record(cap) == {"schema": SCHEMA, "rank": 0}
    assert not list(cap.glob(".*.tmp"))  # written atomically, nothing left behind


def test_read_run_record_ignores_foreign_files_and_stops_looking(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    (deep / "t.json").write_text("{}")
    (tmp_path / "run.json").write_text(json.dumps({"schema": SCHEMA}))  # 4 levels up: too far
    (deep / "run.json").write_text(json.dumps({"some": "other tool"}))
    assert read_run_record(deep / "t.json") is None


def test_a_broken_run_record_warns_and_gives_none(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text('{"schema": "neurontrace.run/1", "cut')
    (tmp_path / "t.json").write_text("{}")
    with pytest.warns(TraceWarning, match="unreadable run record"):
        assert read_run_record(tmp_path / "t.json") is None


# -- the script command line ------------------------------------------------------------------------


def test_parse_command_accepts_python_script_module_and_bare_script(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    train = tmp_path / "train.py"
    train.write_text("")
    t = script.parse_command(["--", "python", str(train), "--lr", "3"])
    assert (t.kind, t.args, t.argv) == ("path", ("--lr", "3"), [str(train), "--lr", "3"])
    assert script.parse_command(["python3.11", str(train)]).kind == "path"
    assert script.parse_command([str(train), "x"]).args == ("x",)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "localmod.py").write_text("")
    m = script.parse_command(["python", "-m", "localmod", "a"])
    assert (m.kind, m.name, m.args) == ("module", "localmod", ("a",))


@pytest.mark.parametrize(("words", "error", "match"), [
    ([], UsageError, "no script"),
    (["python"], UsageError, "no script after"),
    (["python", "-X", "dev", "t.py"], UsageError, "interpreter option '-X'"),
    (["torchrun", "t.py"], UsageError, "torchrun ... -m neurontrace record"),
    (["python", "-m"], UsageError, "needs a module"),
    (["python", "missing_script.py"], InputNotFoundError, "no such script"),
    (["python", "-m", "no_such_module_here_xyz"], InputNotFoundError, "no module named"),
])
def test_parse_command_rejects_what_it_cannot_run(words: list[str], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        script.parse_command(words)


def test_exit_codes_follow_python(capsys: pytest.CaptureFixture[str]) -> None:
    t = script.Target("path", "s.py", (), "/nowhere/s.py")
    assert script.exit_code(None, t) == 0
    assert script.exit_code(SystemExit(4), t) == 4
    assert script.exit_code(SystemExit(None), t) == 0
    assert script.exit_code(SystemExit("bad input"), t) == 1
    assert script.exit_code(KeyboardInterrupt(), t) == 130
    try:
        raise ValueError("boom")
    except ValueError as exc:
        assert script.exit_code(exc, t) == 1
    err = capsys.readouterr().err
    assert "bad input" in err and "ValueError: boom" in err


# -- import and options that need nothing installed -------------------------------------------------


def test_capture_is_lazy_and_callable_without_importing_torch() -> None:
    code = ("import sys, neurontrace; c = neurontrace.capture; assert callable(c); "
            "assert neurontrace.capture.current().active is False; neurontrace.capture.step(); "
            "from neurontrace.capture import capture, current, Schedule; assert current() is c.current(); "
            "import neurontrace.cli, neurontrace.cli.record; assert 'torch' not in sys.modules, 'torch imported'")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("kwargs", [{"neuron_cores": "0-3"}, {"activities": ["cpu", "neuron"]},
                                    {"neuron_modes": ["device"]}])
def test_neuron_options_without_torch_neuronx_name_what_is_needed(kwargs: dict[str, object]) -> None:
    import neurontrace.capture
    from neurontrace._capture_backend import neuron_installed

    if neuron_installed():
        pytest.skip("torch_neuronx is installed here")
    with pytest.raises(MissingDependencyError, match="needs torch-neuronx"):
        neurontrace.capture(**kwargs)  # type: ignore[operator]


# -- the backend side, with a stand-in for torch (no GPU here) --------------------------------------


def _fake_cuda_torch(log: list[str]) -> object:
    from types import SimpleNamespace

    props = SimpleNamespace(name="Fake GPU", total_memory=80 << 30, major=9, minor=0)
    cuda = SimpleNamespace(synchronize=lambda: log.append("cuda.synchronize"), device_count=lambda: 2,
                           get_device_properties=lambda i: props, is_available=lambda: True)
    return SimpleNamespace(
        __version__="2.13.0+cu128", version=SimpleNamespace(cuda="12.8", hip=None, git_version=None), cuda=cuda,
        backends=SimpleNamespace(cudnn=SimpleNamespace(version=lambda: 91000)),
        _C=SimpleNamespace(_cuda_getDriverVersion=lambda: 12080),
    )


def test_cuda_activities_synchronize_versions_and_devices() -> None:
    from neurontrace import _capture_backend as backend

    log: list[str] = []
    torch = _fake_cuda_torch(log)
    assert backend.activity_names(None, cuda=True, neuron=False) == ["CPU", "CUDA"]
    assert backend.activity_names(["cpu", "CUDA", "cpu"], cuda=False, neuron=False) == ["CPU", "CUDA"]
    with pytest.raises(ValueError, match="unknown profiler activity 'tpu'"):
        backend.activity_names(["tpu"], cuda=False, neuron=False)
    assert backend.cuda_available(torch)  # type: ignore[arg-type]
    backend.synchronize(torch, cuda=True, neuron=False)  # type: ignore[arg-type]
    assert log == ["cuda.synchronize"]
    assert backend.versions(torch, cuda=True, neuron=False) == {  # type: ignore[arg-type]
        "torch": "2.13.0+cu128", "cuda": "12.8", "cudnn": 91000, "cuda_driver": 12080}
    assert backend.devices(torch, cuda=True, neuron=False) == [  # type: ignore[arg-type]
        {"device": f"cuda:{i}", "name": "Fake GPU", "total_memory_bytes": 80 << 30, "capability": "9.0"}
        for i in range(2)]
