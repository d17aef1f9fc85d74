"""`Trace`: lossless Parquet round trip, selection, combining, accounting."""

from __future__ import annotations

from pathlib import Path

import pytest

import neurontrace
from neurontrace import Trace
from neurontrace.errors import InputNotFoundError, MalformedTraceError, OutputExistsError
from tests.conftest import SAMPLES
from tests.micro import load, rows, write, x

SAMPLE = SAMPLES / "cpu_train_loop.pt.trace.json.gz"


def _gpu_trace(tmp_path: Path) -> Trace:
    return load(tmp_path, [
        x("cpu_op", "aten::mm", 10, 5, **{"External id": 1}),
        x("cuda_runtime", "cudaLaunchKernel", 11, 2, correlation=5),
        {"ph": "s", "id": 5, "pid": 1, "tid": 1, "ts": 11, "cat": "ac2g", "name": "ac2g"},
        x("kernel", "k0", 20, 4, pid=0, tid=7, device=0, correlation=5),
        {"ph": "f", "id": 5, "pid": 0, "tid": 7, "ts": 20, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        x("kernel", "k1", 40, 4, pid=1, tid=7, device=1),
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 12,
         "args": {"Device Type": 1, "Device Id": 0, "Bytes": 8}},
    ], distributedInfo={"rank": 2})


def test_parquet_round_trip_is_lossless(tmp_path: Path) -> None:
    trace = neurontrace.load(SAMPLE)
    out = trace.to_parquet(tmp_path / "out")
    back = Trace.from_parquet(out)
    assert back.equals(trace)
    for name, table in trace.tables.items():
        assert back.tables[name].schema.equals(table.schema, check_metadata=True), name
    assert back.accounting == trace.accounting
    assert neurontrace.load(out).equals(trace)  # load() recognizes the layout too


def test_to_parquet_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    trace = neurontrace.load(SAMPLE)
    out = trace.to_parquet(tmp_path / "out")
    with pytest.raises(OutputExistsError, match="--force"):
        trace.to_parquet(out)
    trace.to_parquet(out, force=True)
    assert Trace.from_parquet(out).equals(trace)
    assert not (tmp_path / "out.partial").exists()


def test_from_parquet_names_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(InputNotFoundError, match="not a neurontrace Parquet directory"):
        Trace.from_parquet(tmp_path)
    out = neurontrace.load(SAMPLE).to_parquet(tmp_path / "out")
    (out / "frames.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(MalformedTraceError, match=r"frames\.parquet: not readable Parquet"):
        Trace.from_parquet(out)
    (out / "frames.parquet").unlink()
    with pytest.raises(MalformedTraceError, match=r"frames\.parquet is missing"):
        Trace.from_parquet(out)


def test_accounting_covers_every_input_event() -> None:
    (acct,) = neurontrace.load(SAMPLE).accounting
    acct.check()
    assert acct.events_read > 1000 and acct.skipped == {}
    assert set(acct.kept) == {"system_events", "counters", "flows", "metadata"}


def test_filter_by_window_device_and_rank(tmp_path: Path) -> None:
    trace = _gpu_trace(tmp_path)
    late = trace.filter(start_ns=19_000, end_ns=30_000)
    assert rows(late, "device_events", "name") == [("k0",)]
    assert rows(late, "system_events", "name") == []
    assert late.flows.num_rows == 1  # its destination survived
    assert rows(trace.filter(device="cuda:1"), "device_events", "name") == [("k1",)]
    assert trace.filter(device="cuda:1").counters.num_rows == 0
    assert trace.filter(rank=2).num_events == trace.num_events
    assert trace.filter(rank=3).num_events == 0


def test_concat_renumbers_ids_and_keeps_links(tmp_path: Path) -> None:
    a = _gpu_trace(tmp_path)
    b = neurontrace.load(SAMPLE)
    both = Trace.concat([a, b])
    ids = both.system_events["event_id"].to_pylist() + both.device_events["event_id"].to_pylist()
    assert len(ids) == len(set(ids)) == a.num_events + b.num_events
    assert both.frames.num_rows == b.frames.num_rows
    user = [f for f in both.system_events["frame_id"].to_pylist() if f is not None]
    frame_ids = set(both.frames["frame_id"].to_pylist())
    assert user and set(user) <= frame_ids
    assert [acc.source for acc in both.accounting] == [a.accounting[0].source, str(SAMPLE)]


def test_pandas_and_polars_views() -> None:
    trace = neurontrace.load(SAMPLE)
    df = trace.to_pandas("system_events")
    assert len(df) == trace.system_events.num_rows and "ts_ns" in df
    pytest.importorskip("polars")
    assert trace.to_polars("frames").height == trace.frames.num_rows
    with pytest.raises(KeyError, match="tables are system_events"):
        trace.to_pandas("nope")


def test_directory_of_ranks_loads_as_one_trace(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    for r in (0, 1):
        write(d, [x("cpu_op", f"op{r}", 1, 1)], name=f"rank{r}.json", distributedInfo={"rank": r})
    (d / "notes.txt").write_text("not a trace")
    trace = neurontrace.load(d)
    assert sorted(rows(trace, "system_events", "name", "rank")) == [("op0", 0), ("op1", 1)]
    assert len(trace.accounting) == 2


def test_the_loader_checks_every_parsers_accounting(tmp_path: Path) -> None:
    from neurontrace.load import FORMATS, load, register

    register("unbalanced", "tests._unbalanced_parser", "a parser whose counts do not add up")
    try:
        (tmp_path / "x.bin").write_bytes(b"x")
        with pytest.raises(AssertionError, match="read 3 events but kept 1 and skipped 1"):
            load(tmp_path / "x.bin", format="unbalanced")
    finally:
        FORMATS.pop("unbalanced")
