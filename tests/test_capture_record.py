"""`neurontrace record -- python script.py ...` on small scripts, run as users run it (a subprocess)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from neurontrace import cli

pytestmark = pytest.mark.torch

SCRIPT = textwrap.dedent("""\
    import sys
    import torch
    import neurontrace

    def step(model, opt, x):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()  # a host round trip

    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16)
    for _ in range(int(sys.argv[1])):
        step(model, opt, x)
        neurontrace.capture.current().step()
    print("script argv", sys.argv[1:])
    sys.exit(int(sys.argv[2]))
""")


def record_command() -> list[str]:
    assert any(c.name == "record" for c in cli.commands())
    return [sys.executable, "-m", "neurontrace", "record"]


def record(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*record_command(), *args], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)


def only_capture(out: Path) -> tuple[Path, dict[str, Any]]:
    (cap,) = out.iterdir()
    return cap, json.loads((cap / "run.json").read_text())


def test_record_runs_the_script_and_returns_its_exit_code(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    res = record(tmp_path, "-o", "caps", "--note", "first try", "--tag", "demo", "--", "python", "train.py", "7", "3")
    assert res.returncode == 3, res.stderr
    assert "script argv ['7', '3']" in res.stdout
    cap, run = only_capture(tmp_path / "caps")
    assert f"wrote caps/{cap.name}/ (startup step 0, steady steps 3-5; run.json)" in res.stderr
    assert f"next: neurontrace diagnose caps/{cap.name}" in res.stderr
    assert run["argv"] == ["train.py", "7", "3"] and run["notes"] == "first try" and run["tags"] == ["demo"]
    assert run["exit"] == {"status": "exit", "exit_code": 3} and run["status"] == "complete"
    assert [w["label"] for w in run["windows"]] == ["startup", "steady"]
    assert sorted(p.name for p in cap.glob("*.pt.trace.json.gz")) == [
        "rank0_w00_startup_steps0-0.pt.trace.json.gz", "rank0_w01_steady_steps3-5.pt.trace.json.gz"]
    # The first capture of a process: torch's lazy import inside its first record_function is not
    # traced (it would leave a frame with a garbage name, sometimes breaking the JSON).
    startup = json.loads(gzip.decompress((cap / "rank0_w00_startup_steps0-0.pt.trace.json.gz").read_bytes()))
    assert not [e for e in startup["traceEvents"] if str(e.get("name", "")).startswith("torch/profiler/_cupti_monitor.py(0)")]


def test_a_crashing_script_shows_its_own_traceback_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "crash.py").write_text("import torch\n\ndef f():\n    raise ValueError('boom')\n\ntorch.ones(2).sum()\nf()\n")
    res = record(tmp_path, "-o", "caps", "--", "python", "crash.py")
    assert res.returncode == 1
    traceback = res.stderr[res.stderr.index("Traceback"):]
    assert 'File "crash.py", line 7, in <module>' in traceback and "ValueError: boom" in traceback
    assert "runpy" not in traceback and "neurontrace" not in traceback.split("ValueError: boom")[0]
    _, run = only_capture(tmp_path / "caps")
    assert run["exit"]["status"] == "exception" and run["exit"]["exception"] == "ValueError: boom"
    assert [w["label"] for w in run["windows"]] == ["whole_run"]  # it marked no steps
    assert "the script marked no steps, so the whole run is one window" in res.stderr


def test_record_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    res = record(tmp_path, "--", "torchrun", "train.py")
    assert res.returncode == 2 and "torchrun ... -m neurontrace record" in res.stderr
    assert not (tmp_path / "neurontrace-captures").exists()  # validated before any work
