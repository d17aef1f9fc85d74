"""neurontrace.capture records torch.compile's evidence into the capture (compile/), and diagnose reads it there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.torch

# A capture of a function compiled with the eager backend (cheap) and fed two shapes: one recompile.
_PROGRAM = """
import sys, torch, neurontrace
def f(x):
    return x * 2 + 1
g = torch.compile(f, backend="eager", dynamic=False)
with neurontrace.capture(sys.argv[1], schedule=(0, 0, 4, 1)) as cap:
    for n in (2, 2, 3, 3):
        g(torch.randn(n))
        cap.step()
print(cap.path)
"""


def test_capture_records_compile_logs_and_diagnose_reads_them(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("TORCH_TRACE", "TORCH_LOGS")}
    proc = subprocess.run([sys.executable, "-c", _PROGRAM, str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300, check=True)
    cap = Path(proc.stdout.strip().splitlines()[-1])
    run = json.loads((cap / "run.json").read_text())
    assert run["compile"]["recorded_by_capture"] is True and run["compile"]["dynamo"] == "compile/dynamo.json"
    assert list((cap / "compile" / "torch_trace").glob("*.log"))
    assert "Recompiling function f" in (cap / "compile" / "torch_logs.txt").read_text()
    counters = json.loads((cap / "compile" / "dynamo.json").read_text())["counters"]
    out = subprocess.run([sys.executable, "-m", "neurontrace", "diagnose", str(cap), "--json"], capture_output=True,
                         text=True, cwd=ROOT, timeout=300, check=True)
    comp = json.loads(out.stdout)["compile"]
    assert comp["recompiles"] == 1 and "torch_trace" in comp["evidence"]
    assert sum(len(f["compiles"]) for f in comp["frames"]) == counters["stats"]["unique_graphs"] == 2
