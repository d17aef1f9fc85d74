"""``diagnose --compile-log`` on the Dask path (``--workers``): every rank reads its own compile logs, and the job's
report is the single-process one. The job is TRANSFORMED REAL FILES: the real compile run's trace
(tests/compile_scenarios.py) copied as ranks 0 and 1 (``distributedInfo.rank`` added), and its real TORCH_TRACE log
copied under the per-rank names torch writes (``dedicated_log_torch_trace_rank_<R>_<suffix>.log``). The Dask
path runs on one LocalCluster shared by both tests (``--scheduler``; ``--workers N`` starts the same cluster)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neurontrace.cli import main
from neurontrace.errors import MixedRunsError

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


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """One real LocalCluster (1 worker process) for both tests; module-scoped as tests/test_distributed.py's."""
    from neurontrace import distributed as nt_distributed

    with nt_distributed.local_cluster(1) as client:
        yield str(client.scheduler.address)


def _diagnose(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``neurontrace diagnose ARGS --json`` as the command runs it (in this process: the cluster is shared)."""
    code = main(["diagnose", *args, "--json"])
    out, err = capsys.readouterr()
    return code, out, err


def test_compile_logs_per_rank_on_the_dask_path_match_the_single_process_report(
        compile_run: Path, tmp_path: Path, scheduler: str, capsys: pytest.CaptureFixture[str]) -> None:
    job, logs = _job(compile_run, tmp_path, (0, 1))
    code, one, err = _diagnose(capsys, str(job), "--compile-log", str(logs))
    assert code == 0, err
    code, many, err = _diagnose(capsys, str(job), "--compile-log", str(logs), "--scheduler", scheduler)
    assert code == 0, err
    a: dict[str, Any] = json.loads(one)
    b: dict[str, Any] = json.loads(many)
    assert b["compile"] == a["compile"] and b["findings"] == a["findings"]
    # each rank read its own log: the same compiles on both, so the job's counts are twice one log's
    per_rank = b["compile"]["per_rank"]
    assert set(per_rank) == {"0", "1"} and per_rank["0"] == per_rank["1"] > 0
    assert {f["rank"] for f in b["compile"]["frames"]} == {0, 1}
    assert b["compile"]["recompiles"] == 2 * sum(
        1 for f in b["compile"]["frames"] if f["rank"] == 0 for c in f["compiles"]
        if c["compile_id"] and c["compile_id"].split("/")[-1].split("_")[0] != "0")
    assert "recompiles" in {f["id"] for f in b["findings"]}


def test_logs_of_a_rank_the_job_lacks_are_refused_on_the_dask_path(
        compile_run: Path, tmp_path: Path, scheduler: str, capsys: pytest.CaptureFixture[str]) -> None:
    job, logs = _job(compile_run, tmp_path, (0, 1, 2))
    code, _out, err = _diagnose(capsys, str(job), "--compile-log", str(logs), "--scheduler", scheduler)
    assert code == MixedRunsError.exit_code, err
    assert "rank(s) [2]" in err and "another run" in err and "Traceback" not in err
