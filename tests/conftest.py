"""Shared fixtures: where the real-trace corpus lives, and real CPU traces made with PyTorch."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"


def corpus_root() -> Path | None:
    """shared/corpus/kineto beside the project (or $NEURONTRACE_CORPUS), if present."""
    env = os.environ.get("NEURONTRACE_CORPUS")
    candidates = [Path(env)] if env else []
    candidates += [ROOT.parent / "shared" / "corpus" / "kineto"]
    return next((c for c in candidates if c.is_dir()), None)


def corpus_files() -> list[Path]:
    root = corpus_root()
    if root is None:
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))


@pytest.fixture
def corpus() -> Path:
    root = corpus_root()
    if root is None:
        pytest.skip("the real-trace corpus (../shared/corpus/kineto) is not beside this checkout")
    return root


def run_workload(script: str, *args: str | Path, timeout: float = 600) -> None:
    """Run ``tests/SCRIPT ARGS`` (a real torch workload) in a process of its own; a failure fails the test with
    the workload's exit and the end of its output (a fixture's bare CalledProcessError says neither)."""
    cmd = [sys.executable, str(ROOT / "tests" / script), *map(str, args)]
    try:
        res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"tests/{script} ran past {timeout:.0f} s")
    if res.returncode:
        pytest.fail(f"tests/{script} exited {res.returncode}:\n{(res.stdout + res.stderr)[-3000:]}")


@pytest.fixture(scope="session")
def outofcore_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real CPU run of tests/outofcore_workload.py (6 recorded steps, frames, memory events), once per
    session in a process of its own: what the out-of-core tests stream and slice."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("outofcore_run")
    run_workload("outofcore_workload.py", out)
    return out / "train.pt.trace.json"


@pytest.fixture(scope="session")
def verdict_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real CPU runs of tests/verdict_runs.py (one per session, in a process of its own): a training loop
    with a sleeping data loader, a 2-rank DDP job with a sleeping rank, and what each measured itself."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("verdict_runs")
    run_workload("verdict_runs.py", out)
    return out


@pytest.fixture(scope="session")
def memory_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The two real CPU runs of tests/memory_workload.py (a leak, no leak; profile_memory=True), in a process of
    their own (torch.profiler records every thread's frames), once per session."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("memory_runs")
    run_workload("memory_workload.py", out)
    return {kind: out / f"{kind}.pt.trace.json" for kind in ("leak", "noleak")}


@pytest.fixture(scope="session")
def compile_run(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """The real torch.compile runs of tests/compile_scenarios.py (one subprocess per session), with TORCH_TRACE
    and TORCH_LOGS captured where a capture keeps them (compile/ beside the traces). Inductor's cache directory
    is kept between sessions (its headers compile once); the scenario's graph is new each session, so its first
    compile still misses."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("compile_run")
    (out / "compile").mkdir()
    kept = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    cache = kept.mkdir("neurontrace-inductor") if kept else out / "inductor"
    env = {**os.environ, "TORCH_TRACE": str(out / "compile" / "torch_trace"),
           "TORCH_LOGS": "recompiles,graph_breaks", "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    with (out / "compile" / "torch_logs.txt").open("w") as err:
        subprocess.run([sys.executable, str(ROOT / "tests" / "compile_scenarios.py"), str(out),
                        f"{time.time() % 1000 + 1:.6f}"], cwd=ROOT, env=env, stderr=err, check=True, timeout=400)
    return out


@pytest.fixture
def no_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Neuron Explorer anywhere: an empty PATH and an empty documented install directory."""
    from neurontrace.parsers import _neuron_tool

    empty = tmp_path / "emptybin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("NEURONTRACE_NEURON_EXPLORER", raising=False)
    monkeypatch.setattr(_neuron_tool, "DOCUMENTED_DIR", empty)
