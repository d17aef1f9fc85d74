"""neurontrace.distributed and datasets on a real Dask LocalCluster (2 processes, shared by the run).

The job is the real 8-rank gloo run in sample_traces/gloo_8rank/ (sample_traces/make_multirank.py).
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as pads
import pytest

import neurontrace
from neurontrace import errors
from neurontrace.analysis.diagnose import diagnose
from neurontrace.cli import main
from tests.conftest import SAMPLES

distributed = pytest.importorskip("neurontrace.distributed")
dd = pytest.importorskip("distributed")
JOB = SAMPLES / "gloo_8rank"
INPUTS = [{"path": str(JOB), "format": "a directory of traces"}]


@pytest.fixture(scope="module")
def dask_client():  # type: ignore[no-untyped-def]
    """One real LocalCluster (2 worker processes) for every test here. Module-scoped, not session-scoped:
    its scheduler and client threads live in the test process, and torch.profiler captures in later tests
    (test_real_cpu.py) would record their Python frames."""
    with distributed.local_cluster(2) as client:
        yield client


def _corrupt(src: Path, dst: Path, rank: int) -> Path:
    """A copy of the job whose rank file is damaged in the middle (not merely cut off: not salvageable)."""
    shutil.copytree(src, dst)
    f = dst / f"rank-{rank}.pt.trace.json.gz"
    raw = gzip.decompress(f.read_bytes())
    f.write_bytes(gzip.compress(raw[: len(raw) // 2] + b"}}]]garbage{{" + raw[len(raw) // 2:]))
    return dst


def test_identical_to_the_single_process_path(dask_client: Any) -> None:
    want = diagnose(neurontrace.load(JOB), inputs=INPUTS).as_dict()
    got = distributed.diagnose(JOB, client=dask_client).as_dict()
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
    assert [d["rank"] for d in got["devices"]] == list(range(8)) and got["cross_rank"]["straggler_rank"] == 7


def test_two_jobs_at_once_on_one_client_keep_their_own_results(dask_client: Any) -> None:
    """Each job's task keys are its own: Dask hands back the result of a key still held by anyone, so two
    jobs sharing keys (rank-0, rank-1 ...) would get each other's ranks."""
    from concurrent.futures import ThreadPoolExecutor

    pair = [SAMPLES / "compare/baseline.pt.trace.json.gz", SAMPLES / "compare/slowed.pt.trace.json.gz"]
    want = {"job": diagnose(neurontrace.load(JOB), inputs=INPUTS).as_dict(),
            "pair": distributed.diagnose(pair, client=dask_client).as_dict()}
    with ThreadPoolExecutor(2) as pool:
        for _ in range(2):
            job = pool.submit(distributed.diagnose, JOB, client=dask_client)
            two = pool.submit(distributed.diagnose, pair, client=dask_client)
            assert json.dumps(job.result().as_dict(), sort_keys=True) == json.dumps(want["job"], sort_keys=True)
            assert json.dumps(two.result().as_dict(), sort_keys=True) == json.dumps(want["pair"], sort_keys=True)
    assert len(want["pair"]["devices"]) == 2 and want["pair"]["devices"] != want["job"]["devices"][:2]


def test_a_corrupt_rank_is_reported_and_the_others_complete(dask_client: Any, tmp_path: Path) -> None:
    job = _corrupt(JOB, tmp_path / "job", rank=3)
    result = distributed.diagnose([job, tmp_path / "rank-9.missing.json"], client=dask_client)
    assert {Path(f.path).name for f in result.failed} == {"rank-3.pt.trace.json.gz", "rank-9.missing.json"}
    doc = result.as_dict()
    assert [d["rank"] for d in doc["devices"]] == [0, 1, 2, 4, 5, 6, 7]
    failed = {Path(f["path"]).name: f for f in doc["failed_ranks"]}
    assert failed["rank-3.pt.trace.json.gz"]["exit_code"] == errors.EXIT_MALFORMED
    assert failed["rank-9.missing.json"]["exit_code"] == errors.EXIT_NOT_FOUND
    assert any("rank-3" in w["source"] and "not analysed" in w["message"] for w in doc["warnings"])
    assert doc["cross_rank"]["ranks"] == [0, 1, 2, 4, 5, 6, 7]


def test_cli_exit_code_says_the_job_was_partial(dask_client: Any, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    job = _corrupt(JOB, tmp_path / "job", rank=5)
    code = main(["diagnose", str(job), "--json", "--scheduler", dask_client.scheduler.address])
    out, err = capsys.readouterr()
    assert code == errors.EXIT_PARTIAL and "rank-5" in err
    assert len(json.loads(out)["devices"]) == 7


def test_dataset_round_trip_rank_by_rank(dask_client: Any, tmp_path: Path) -> None:
    path, entries, failures = distributed.convert(JOB, tmp_path / "ds", client=dask_client)
    assert not failures and sorted(e["rank"] for e in entries) == list(range(8))
    ds = neurontrace.open_dataset(path)
    for r in range(8):
        assert ds.load(r).equals(neurontrace.load(JOB / f"rank-{r}.pt.trace.json.gz"))
    whole = neurontrace.load(JOB)
    for table in ("system_events", "device_events", "flows", "counters"):
        t = whole.tables[table]
        per_rank = {r: int(pc.sum(pc.equal(t["rank"], r)).as_py() or 0) for r in range(8)}
        got = {r: ds.dataset(table).count_rows(filter=pads.field("rank") == r) for r in range(8)}
        assert got == per_rank, table
    # diagnose DATASET gives the same diagnosis as the directory it came from (only the inputs differ)
    a = diagnose(neurontrace.load(path), inputs=[{"path": str(path), "format": "neurontrace-dataset"}]).as_dict()
    b = diagnose(whole).as_dict()
    assert {k: v for k, v in a.items() if k != "inputs"} == {k: v for k, v in b.items() if k != "inputs"}
    assert distributed.diagnose(path, client=dask_client).as_dict() == a  # on Dask: one task per rank partition


def test_open_dataset_filters_one_rank_without_reading_the_others(tmp_path: Path) -> None:
    path, _, _ = distributed.convert(JOB, tmp_path / "ds", local=True)
    want = neurontrace.load(JOB / "rank-3.pt.trace.json.gz").device_events.num_rows
    for f in path.glob("*/rank=*/part-0.parquet"):
        if f.parent.name != "rank=3":
            f.write_bytes(b"not parquet")  # any read of another rank would now fail
    ds = neurontrace.open_dataset(path)
    assert ds.dataset("device_events").to_table(filter=pads.field("rank") == 3).num_rows == want
    assert ds.to_polars("device_events").filter(rank=3).collect().height == want
    duckdb = pytest.importorskip("duckdb")
    rel = ds.to_duckdb("device_events", duckdb.connect())
    assert rel.filter("rank = 3").aggregate("count(*)").fetchall() == [(want,)]
    assert ds.load(3).device_events.num_rows == want
    with pytest.raises(Exception, match=r"(?i)parquet"):
        ds.dataset("device_events").to_table()  # the unfiltered scan does open them


def test_workers_put_arrow_on_malloc(dask_client: Any) -> None:
    """--workers starts its workers with the allocator setting of neurontrace._allocator (Arrow on malloc,
    whose free pages each map task hands back), so a worker's peak is what it holds at once, and without
    Dask's 64 KiB trim threshold (a third slower on large ranks)."""
    from neurontrace._allocator import ENV, UNSET_ENV

    envs = dask_client.run(lambda: {k: __import__("os").environ.get(k) for k in (*ENV, *UNSET_ENV)})
    assert envs and all(e == {**ENV, **dict.fromkeys(UNSET_ENV)} for e in envs.values())
    pools = dask_client.run(lambda: __import__("pyarrow").default_memory_pool().backend_name)
    assert set(pools.values()) == {"system"}
