"""``diagnose --compile-log`` on the Dask path (``--workers``): every rank reads its own compile logs, and the job's
report is the single-process one. The job is TRANSFORMED REAL FILES: the real compile run's trace
(tests/compile_scenarios.py) copied as ranks 0 and 1 (``distributedInfo.rank`` added), and its real TORCH_TRACE log
copied under the per-rank names torch writes (``dedicated_log_torch_trace_rank_<R>_<suffix>.log``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from neurontrace.errors import MixedRunsError
from tests.conftest import ROOT

pytestmark = pytest.mark.torch
distributed = pytest.importorskip("distributed")


def _job(run: Path, tmp: Path, log_ranks: tuple[int, ...]) -> tuple[Path, Path]:
    job, logs = tmp / "job", tmp / "logs"
    job.mkdir()
    logs.mkdir()
    doc = json.loads((run / "recompile.pt.trace.json").read_text())
    for r in (0, 1):
        (job / f"rank-{r}.pt.trace.json").write_text(json.dumps({**doc, "distributedInfo": {
            "backend": "gloo", "rank": r, "world_size": 2}}))
    (log,) = (run / "compile" / "torch_trace").glob("*.log")
    for r in log_ranks:
        shutil.copy(log, logs / f"dedicated_log_torch_trace_rank_{r}_{r}abc.log")
    return job, logs


def _diagnose(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "neurontrace", "diagnose", *args, "--json"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, check=False)


def test_compile_logs_per_rank_on_the_dask_path_match_the_single_process_report(compile_run: Path,
                                                                              tmp_path: Path) -> None:
    job, logs = _job(compile_run, tmp_path, (0, 1))
    one = _diagnose(str(job), "--compile-log", str(logs))
    many = _diagnose(str(job), "--compile-log", str(logs), "--workers", "1")
    assert one.returncode == 0, one.stderr
    assert many.returncode == 0, many.stderr
    a: dict[str, Any] = json.loads(one.stdout)
    b: dict[str, Any] = json.loads(many.stdout)
    assert b["compile"] == a["compile"] and b["findings"] == a["findings"]
    # each rank read its own log: the same compiles on both, so the job's counts are twice one log's
    per_rank = b["compile"]["per_rank"]
    assert set(per_rank) == {"0", "1"} and per_rank["0"] == per_rank["1"] > 0
    assert {f["rank"] for f in b["compile"]["frames"]} == {0, 1}
    assert b["compile"]["recompiles"] == 2 * sum(
        1 for f in b["compile"]["frames"] if f["rank"] == 0 for c in f["compiles"]
        if c["compile_id"] and c["compile_id"].split("/")[-1].split("_")[0] != "0")
    assert "recompiles" in {f["id"] for f in b["findings"]}


def test_logs_of_a_rank_the_job_lacks_are_refused_on_the_dask_path(compile_run: Path, tmp_path: Path) -> None:
    job, logs = _job(compile_run, tmp_path, (0, 1, 2))
    proc = _diagnose(str(job), "--compile-log", str(logs), "--workers", "1")
    assert proc.returncode == MixedRunsError.exit_code, proc.stderr
    assert "rank(s) [2]" in proc.stderr and "another run" in proc.stderr and "Traceback" not in proc.stderr
