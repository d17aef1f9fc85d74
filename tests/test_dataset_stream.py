"""``convert TRACE -o DATASET --dataset``: one trace streamed into time-ordered parts (neurontrace/dataset_stream.py).

Proven on a real CPU torch run (tests/outofcore_workload.py: python frames, memory events, steps) and on a
real corpus GPU trace (TraceLens H100 Qwen: kernels, launch flows, a device running behind its host), each
cut into many small parts so frames, ops, flows and steps cross part boundaries: the dataset's tables and
parse accounting equal the whole-file parse's, and ``diagnose DATASET --json`` equals ``diagnose TRACE --json``
but for the input's path and format, and the warning that says the parts were read whole.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import shutil
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

import neurontrace
from neurontrace import dataset, distributed, errors, schema
from neurontrace.analysis.sliced import slices_of, step_cuts
from neurontrace.analysis.slices import slice_of
from neurontrace.cli import main
from neurontrace.dataset_slices import PartReader, _id_ranges
from neurontrace.dataset_slices import streamed as streamed_dataset
from neurontrace.dataset_stream import convert_trace
from neurontrace.trace import ACCOUNTING_KEY, Trace, conform
from tests.conftest import corpus_root
from tests.sliced_support import comparable

QWEN = "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
RESNET = "kineto-tb_plugin/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
NCCL = "HolisticTraceAnalysis/tests/data/nccl_parser_config/nccl_data.json.gz"


@pytest.fixture(scope="session")
def torch_run(outofcore_run: Path) -> Path:
    return outofcore_run  # one run per session, shared with tests/test_sliced.py (tests/conftest.py)


@pytest.fixture(scope="session")
def qwen() -> Path:
    root = corpus_root()
    if root is None or not (root / QWEN).is_file():
        pytest.skip("the real-trace corpus is not beside this checkout")
    return root / QWEN


@pytest.fixture(scope="session")
def streamed(torch_run: Path, qwen: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Each trace and its dataset, cut into parts of ~30 KB (torch run) / ~300 KB (Qwen) of raw columns."""
    out = {}
    for name, src, part in (("torch", torch_run, 30_000), ("qwen", qwen, 300_000)):
        ds = tmp_path_factory.mktemp(f"streamed_{name}") / "ds"
        convert_trace(src, ds, part_bytes=part, chunk_bytes=1 << 16)
        out[name] = (src, ds)
    return out


def _whole(src: Path) -> Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return neurontrace.load(src)


def _plain(col: pa.ChunkedArray) -> list[Any]:
    a = col.combine_chunks()
    values: list[Any] = (a.cast(a.type.value_type) if pa.types.is_dictionary(a.type) else a).to_pylist()
    return values


def _stacks(trace: Trace) -> dict[int, tuple[Any, ...]]:
    """Each frame id as its whole stack of locations: frames compared without their numbering."""
    rows = {r["frame_id"]: r for r in trace.frames.to_pylist()}
    out: dict[int, tuple[Any, ...]] = {}
    for fid in rows:
        chain, at = [], fid
        while at is not None:
            r = rows[at]
            chain.append((r["file"], r["line"], r["function"], r["kind"], r["is_user"]))
            at = r["parent_id"]
        out[fid] = tuple(chain)
    return out


@pytest.mark.parametrize("name", ["torch", "qwen"])
def test_the_tables_and_accounting_equal_the_whole_file_parse(streamed: dict[str, tuple[Path, Path]],
                                                               name: str) -> None:
    src, ds = streamed[name]
    whole, parts = _whole(src), dataset.open_dataset(ds).load()
    assert len(dataset.open_dataset(ds).ranks) >= 10  # many parts, so much crosses their boundaries
    acct = [a for a in parts.accounting[0].warnings if "were read whole" not in a]
    assert {**parts.accounting[0].as_dict(), "warnings": acct} == whole.accounting[0].as_dict()
    stacks_w, stacks_p = _stacks(whole), _stacks(parts)
    assert Counter(stacks_w.values()) == Counter(stacks_p.values())
    for table in ("system_events", "device_events", "memory_events"):
        w, p = whole.tables[table], parts.tables[table]
        assert w.num_rows == p.num_rows
        for col in w.column_names:
            if col == "frame_id":
                assert [stacks_w.get(f) for f in _plain(w[col])] == [stacks_p.get(f) for f in _plain(p[col])], table
            else:
                assert _plain(w[col]) == _plain(p[col]), (table, col)
    for table in ("flows", "counters"):
        w, p = whole.tables[table], parts.tables[table]
        assert {c: _plain(w[c]) for c in w.column_names} == {c: _plain(p[c]) for c in p.column_names}, table
    facts = [[(r["key"], r["value"], r["source"], r["rank"]) for r in t.metadata.to_pylist()
              if r["key"] != ACCOUNTING_KEY] for t in (whole, parts)]
    assert facts[0] == facts[1]  # every fact, the normalized ones (devices, ...) included, in the same order
    assert whole.num_events > 1000 and (name != "qwen" or whole.flows.num_rows > 1000)


def _diagnose_json(path: Path, *more: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(["diagnose", str(path), "--json", *more])
    assert rc in (errors.EXIT_OK, errors.EXIT_FINDINGS)
    doc: dict[str, Any] = json.loads(out.getvalue())
    return doc


@pytest.mark.parametrize("name", ["torch", "qwen"])
def test_diagnose_of_the_dataset_equals_diagnose_of_the_trace(streamed: dict[str, tuple[Path, Path]],
                                                              name: str) -> None:
    # diagnose DATASET reads the rank slice by slice (neurontrace/dataset_slices.py; the torch run's 6 steps in
    # slices of ~300 events, the Qwen trace's one step whole): the same document as diagnose TRACE, but for the
    # sections without a time merge yet, which one warning names (tests/sliced_support.py)
    src, ds = streamed[name]
    a, b = _diagnose_json(src), _diagnose_json(ds, "--slice-events", "300")
    assert not [w for w in b.get("warnings", []) if "were read whole" in w["message"]]
    for doc in (a, b):
        for i in doc["inputs"]:
            i.pop("path"), i.pop("format")
    assert comparable(b, sliced=True) == comparable(a, sliced=False)
    assert a["devices"] and a["critical_path"] and a["devices"][0]["top_stalls"]


def test_diagnose_of_a_dataset_runs_on_arrows_own_pool(streamed: dict[str, tuple[Path, Path]]) -> None:
    # slice after slice, mimalloc's peak stays lower than malloc's heap (neurontrace._allocator.use_arrow_pool);
    # a trace's diagnose keeps the CLI's system allocator
    src, ds = streamed["torch"]
    code = ("import sys, pyarrow as pa\nfrom neurontrace.cli import main\n"
            "main(['diagnose', sys.argv[1], '--json'])\nprint(pa.default_memory_pool().backend_name)")
    pools = [subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, check=True,
                            timeout=300).stdout.splitlines()[-1] for p in (ds, src)]
    assert pools == ["mimalloc" if "mimalloc" in pa.supported_memory_backends() else "system", "system"]


def test_a_slice_opens_only_the_parts_that_hold_rows(streamed: dict[str, tuple[Path, Path]],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # the flows (whole-trace tables) are all in part 0: a slice's flows read opened every part's file before
    _, ds = streamed["torch"]
    opened: list[str] = []
    real = pads.dataset  # the module dataset_slices reads through

    def counting(files: list[str], **kw: Any) -> Any:
        opened.extend(files)
        return real(files, **kw)

    monkeypatch.setattr(pads, "dataset", counting)
    opened_ds = dataset.open_dataset(ds)
    reader = PartReader(opened_ds, opened_ds.ranks[0]["partition"])
    empty = {str(reader._file(n, e)) for e in reader.entries for n, rows in e["rows"].items() if rows == 0}
    assert len(reader.entries) > 2 and empty
    opened.clear()
    got = reader(reader.span)
    assert opened and not empty & set(opened)
    assert got.flows.num_rows == _whole(streamed["torch"][0]).flows.num_rows


def test_a_window_of_the_dataset_is_the_window_of_the_trace(streamed: dict[str, tuple[Path, Path]]) -> None:
    # --window counts from the job's time 0: out of core, the earliest default window the slice plans found
    src, ds = streamed["torch"]
    for window in ("--window=5ms:200ms", "--window=-10ms:10s"):  # the second overhangs the trace: cut to it
        a, b = _diagnose_json(src, window), _diagnose_json(ds, window, "--slice-events", "300")
        for doc in (a, b):
            for i in doc["inputs"]:
                i.pop("path"), i.pop("format")
        assert comparable(b, sliced=True) == comparable(a, sliced=False)
        assert a["devices"][0]["window_rule"] == "option"


def test_a_slice_reads_only_the_events_it_holds(streamed: dict[str, tuple[Path, Path]]) -> None:
    _, ds = streamed["torch"]
    opened = dataset.open_dataset(ds)
    partition = opened.ranks[0]["partition"]
    reader = PartReader(opened, partition)
    slices = slices_of(reader.span, step_cuts(reader.steps(), reader.sizes(), 300))
    rank_rows = sum(e["rows"]["system_events"] + e["rows"]["device_events"] for e in opened.ranks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the whole partition, read whole to compare: says so
        whole = opened.load_partition(partition)
    for owned in slices:
        got, want = reader(owned), slice_of(whole, owned)
        for name in ("system_events", "device_events", "flows", "counters", "memory_events", "frames"):
            a, b = got.tables[name], want.tables[name]  # exactly what the whole rank holds there
            assert a.schema == b.schema and all(_plain(a[c]) == _plain(b[c]) for c in a.column_names), name
    assert len(slices) >= 4 and len(reader.rows_read) == len(slices)
    assert max(reader.rows_read) < rank_rows / 2  # each read a few parts, row-filtered, never the rank
    assert not streamed_dataset(opened.path.parent / "missing") and streamed_dataset(ds)


def test_a_slice_reads_the_flows_near_its_events_only(tmp_path: Path) -> None:
    # The flows table is one file of the whole rank (written last, into part 0; its rows in file order, as event
    # ids are): a slice's scan of it is pruned by its row groups' id statistics (dataset_slices._id_ranges), where
    # reading all of it for every slice made diagnose DATASET's peak grow with the rank (issue #28). Shown on the
    # corpus ResNet-50 trace (its ids are local in time, as Kineto writes them), its flows in 16 row groups as a
    # large rank's are; the rows read are those of the unpruned scan.
    root = corpus_root()
    if root is None or not (root / RESNET).is_file():
        pytest.skip("the real-trace corpus is not beside this checkout")
    ds = tmp_path / "ds"
    convert_trace(root / RESNET, ds, part_bytes=8 << 20)
    entry = dataset.open_dataset(ds).ranks[0]
    f = ds / "flows" / entry["partition"] / "part-0.parquet"
    flows = pq.read_table(f)
    pq.write_table(flows, f, row_group_size=flows.num_rows // 16 + 1)
    marker = json.loads((ds / dataset.MARKER).read_text())
    marker["ranks"][0]["bytes"]["flows"] = f.stat().st_size  # the part as the marker lists it
    (ds / dataset.MARKER).write_text(json.dumps(marker))
    reader = PartReader(dataset.open_dataset(ds), entry["partition"])
    lo, hi = reader.span
    slices = slices_of(reader.span, [lo + (hi - lo) * k // 8 for k in range(1, 8)])
    fragment = next(pads.dataset(str(f), format="parquet").get_fragments())
    groups, read = fragment.metadata.num_row_groups, []
    for owned in slices:
        t = reader(owned)
        ids = pa.concat_arrays([t.tables[n]["event_id"].combine_chunks() for n in ("system_events", "device_events")])
        touching = pc.field("src_event_id").isin(ids) | pc.field("dst_event_id").isin(ids)
        pruned = fragment.split_by_row_group(_id_ranges(ids) & touching)
        read.append(len(pruned))
        got = [r for p in pruned for r in p.to_table(filter=touching).to_pylist()]
        assert got == pads.dataset(str(f), format="parquet").to_table(filter=touching).to_pylist()
        assert len(got) == t.flows.num_rows > 0
    assert groups >= 16 and sum(read) <= groups * len(slices) / 4, read  # most row groups are never read


def test_the_parts_are_time_ordered_and_their_spans_recorded(streamed: dict[str, tuple[Path, Path]]) -> None:
    for _, ds in streamed.values():
        entries = dataset.open_dataset(ds).ranks
        last_start = None
        for e in entries:
            starts, ends = [], []
            for table in ("system_events", "device_events"):
                t = pq.read_table(ds / table / e["partition"] / f"part-{e['part']}.parquet",
                                  columns=["ts_ns", "dur_ns"])
                starts += t["ts_ns"].to_pylist()
                ends += [s + d for s, d in zip(t["ts_ns"].to_pylist(), t["dur_ns"].to_pylist(), strict=True)]
            assert e["span_ns"] == ([min(starts), max(ends)] if starts else None)
            if starts:
                assert last_start is None or min(starts) >= last_start  # part k+1 starts no earlier than part k
                last_start = max(starts)


def test_gz_streams_as_the_plain_file_does(streamed: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    src, plain = streamed["torch"]
    gz = tmp_path / "train.pt.trace.json.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    convert_trace(gz, tmp_path / "gz", part_bytes=30_000, chunk_bytes=1 << 14)  # other chunks, the same parts
    a, b = dataset.open_dataset(tmp_path / "gz"), dataset.open_dataset(plain)
    assert [e["span_ns"] for e in a.ranks] == [e["span_ns"] for e in b.ranks]
    ta, tb = a.load(), b.load()
    assert ta.system_events.equals(tb.system_events) and ta.memory_events.equals(tb.memory_events)


def test_the_cli_streams_and_salvages_a_cut_off_trace(torch_run: Path, tmp_path: Path) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(["convert", str(torch_run), "-o", str(tmp_path / "ds"), "--dataset", "--part-mb", "0.05"])
    assert rc == errors.EXIT_OK and "time-ordered parts" in out.getvalue()
    entries = dataset.open_dataset(tmp_path / "ds").ranks
    assert len(entries) > 1 and all("span_ns" in e for e in entries)
    # A map task reads a streamed trace's parts together: one task, not one per part.
    tasks, _ = distributed.plan([str(tmp_path / "ds")])
    assert [t.options for t in tasks] == [{"partition": entries[0]["partition"], "part": None}]
    cut = tmp_path / "cut.pt.trace.json"
    cut.write_bytes(torch_run.read_bytes()[: torch_run.stat().st_size // 2])
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(["convert", str(cut), "-o", str(tmp_path / "cut"), "--dataset", "--part-mb", "0.05"])
    assert rc == errors.EXIT_OK and "Traceback" not in err.getvalue()
    # A cut-off trace streams what is complete before the cut, accounted as the whole-file salvage is.
    salvaged, whole = dataset.open_dataset(tmp_path / "cut").load(), _whole(cut)
    assert salvaged.num_events == whole.num_events > 0
    a, b = salvaged.accounting[0], whole.accounting[0]
    assert (a.events_read, a.kept, a.skipped) == (b.events_read, b.kept, b.skipped)
    assert any("cut off at byte" in w for w in a.warnings)


def test_a_marker_with_a_damaged_span_is_a_named_error(streamed: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    shutil.copytree(streamed["torch"][1], ds)
    marker = json.loads((ds / dataset.MARKER).read_text())
    marker["ranks"][1]["span_ns"] = [5, 1]  # ends before it starts
    (ds / dataset.MARKER).write_text(json.dumps(marker))
    with pytest.raises(errors.MalformedTraceError, match="span_ns"):
        dataset.open_dataset(ds)


# -- bounded memory (issue #28 item 3): the flows paired a bucket at a time, the spill read by time ---------

def _same_tables(src: Path, ds: Path) -> None:
    whole, parts = _whole(src), dataset.open_dataset(ds).load()
    stacks_w, stacks_p = _stacks(whole), _stacks(parts)
    for table in ("system_events", "device_events", "memory_events", "flows", "counters"):
        w, p = whole.tables[table], parts.tables[table]
        assert w.num_rows == p.num_rows, table
        for col in w.column_names:
            if col == "frame_id":
                assert [stacks_w.get(f) for f in _plain(w[col])] == [stacks_p.get(f) for f in _plain(p[col])], table
            else:
                assert _plain(w[col]) == _plain(p[col]), (table, col)
    acct = [a for a in parts.accounting[0].warnings if "were read whole" not in a]
    assert {**parts.accounting[0].as_dict(), "warnings": acct} == whole.accounting[0].as_dict()


def test_flows_paired_a_bucket_at_a_time_equal_the_whole_file_parse(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from neurontrace import dataset_stream_flows

    root = corpus_root()
    src = None if root is None else root / NCCL
    if src is None or not src.is_file():
        pytest.skip("the real-trace corpus is not beside this checkout")
    seen: list[int] = []
    bucket = dataset_stream_flows._bucket

    def spy(files: list[Path], buckets: int, spill: Path, progress: Any) -> tuple[list[Path], Any]:
        out = bucket(files, buckets, spill, progress)
        seen.append(len(out[0]))
        return out

    # a real 8-rank job's rank: 9,283 flows of two categories (ac2g launches, fwdbwd), 18,566 markers
    monkeypatch.setattr(dataset_stream_flows, "MARKERS_PER_BUCKET", 1000)
    monkeypatch.setattr(dataset_stream_flows, "_bucket", spy)
    convert_trace(src, tmp_path / "ds", part_bytes=1_000_000, chunk_bytes=1 << 16)
    assert seen and seen[0] >= 10  # paired in ten buckets or more, each alone
    _same_tables(src, tmp_path / "ds")
    assert not (tmp_path / "ds" / ".spill").exists()


def test_range_files_take_buckets_whose_category_dictionaries_differ(tmp_path: Path) -> None:
    """Synthetic flows (two rows): an Arrow IPC file holds one dictionary per column ("Dictionary
    replacement detected when writing IPC file format"), and two buckets' categories can differ."""
    from neurontrace import dataset_stream_flows
    from neurontrace.dataset_stream_spill import IPC

    def flows(cat: list[str]) -> pa.Table:
        n = len(cat)
        ids = pa.array(list(range(n)), pa.int64())
        return conform(pa.table({"flow_id": pa.array([str(i) for i in range(n)]), "kind": ["other"] * n,
                                 "raw_category": cat, "src_event_id": ids, "dst_event_id": ids,
                                 "src_ts_ns": ids, "dst_ts_ns": ids}), schema.FLOWS)

    a, b = flows(["fwdbwd"]), flows(["ac2g", "fwdbwd"])
    with pa.OSFile(str(tmp_path / "raw"), "wb") as sink, pa.ipc.new_file(sink, a.schema, options=IPC) as w:
        w.write_table(a)
        with pytest.raises(pa.ArrowInvalid, match="Dictionary replacement"):
            w.write_table(b)  # what the range files met before their dictionaries were decoded
    plain = [dataset_stream_flows._plain(t) for t in (a, b)]
    with pa.OSFile(str(tmp_path / "plain"), "wb") as sink, pa.ipc.new_file(sink, plain[0].schema, options=IPC) as w:
        for t in plain:
            w.write_table(t)
    back = conform(pa.ipc.open_file(pa.memory_map(str(tmp_path / "plain"))).read_all(), schema.FLOWS)
    assert _plain(back["raw_category"]) == ["fwdbwd", "ac2g", "fwdbwd"]


def test_a_file_far_from_time_order_is_routed_first_and_spill_files_roll(torch_run: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from neurontrace import dataset_stream, dataset_stream_spill

    routed: list[int] = []
    route = dataset_stream._Writer._routed

    def spy(self: Any, spill: Any) -> Any:
        routed.append(len(spill.paths))
        return route(self, spill)

    monkeypatch.setattr(dataset_stream._Writer, "_routed", spy)
    monkeypatch.setattr(dataset_stream_spill, "FILE_BYTES", 50_000)  # many spill files, deleted as parts pass
    ds = tmp_path / "pruned"
    convert_trace(torch_run, ds, part_bytes=30_000, chunk_bytes=1 << 12)  # chunks smaller than a part
    assert routed == []  # a profiler's file is near enough to time order: each part reads its batches
    _same_tables(torch_run, ds)
    monkeypatch.setattr(dataset_stream, "_REREADS", -10**9)  # as if every batch reached into every part
    convert_trace(torch_run, tmp_path / "routed", part_bytes=30_000, chunk_bytes=1 << 16)
    assert len(routed) == 1 and routed[0] > 1
    _same_tables(torch_run, tmp_path / "routed")


def test_the_start_time_sample_is_bounded_and_the_same_whatever_the_chunks() -> None:
    from neurontrace.dataset_stream_spill import Sample

    index = np.arange(100_000, dtype=np.int64)
    ts = (index * 7919) % 1_000_003  # any times: the sample is by file index
    samples = []
    for cuts in ([100_000], [1, 999, 50_000, 100_000], [*range(997, 100_000, 997), 100_000]):
        s, lo = Sample(1000), 0
        for hi in cuts:
            s.add(index[lo:hi], ts[lo:hi])
            lo = hi
        assert s.count <= 1000
        samples.append(s.values().tolist())
    assert samples[0] == samples[1] == samples[2]
    assert len(samples[0]) == 100_000 // 128 + 1  # stride 128: the least power of two keeping <= 1000
