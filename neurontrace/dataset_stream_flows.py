"""The flow markers of a streamed trace paired for the whole trace, in memory bounded by a bucket's markers.

``dataset_stream`` binds each flow marker to its event within the marker's time part (a marker binds to an
event at its own time, so both are in one part) and spills the part's markers (index, ph, cat, flow_id, pid,
tid, ts_ns, and the event found: ``bound``). Pairing follows ``kineto._flows`` exactly: the n-th start of a
(category, id) pairs with its n-th end in file order, and the flows are ordered by their first marker in
the file. Markers of one (category, id) never meet another's, so a trace with more markers than
``MARKERS_PER_BUCKET`` is paired a bucket at a time:

1. every part's markers go to one of B spill files by a hash of their (category, id) (B = markers /
   MARKERS_PER_BUCKET, rounded up), and their file indices are sampled;
2. each bucket is sorted by file index and paired by ``kineto._flows`` alone; its flows go, with the file
   index of their first marker, to one of B range files cut at the sampled quantiles of that index;
3. each range file, sorted by that index, is appended to the flows table (part 0): ranges are in file order,
   so the table is the whole-file parse's, row for row.

Memory is that of one bucket or one range (about 150 bytes a marker at the pairing's peak), whatever the size
of the trace; a trace with fewer markers pairs them in one go, as before. The launch flows whose end is not
found at its time fall back to the first event of their correlation id (kineto.md §1.9): those ids are
looked up once, in two columns of the parts (their count is the one thing here that grows with the trace;
0 on the corpus's GPU traces, whose launch markers all bind at their time).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from neurontrace import schema
from neurontrace.dataset_stream_spill import IPC, read_ipc
from neurontrace.parsers import kineto
from neurontrace.parsers._arrow import codes
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import conform

MARKERS_PER_BUCKET = 1 << 18  # markers paired at once (about 60 MB over the parts' own peak)
_SAMPLE = 1 << 16  # file indices sampled per bucket, for the range cuts
# The parts' Parquet: zstd at level 1 writes the tables 30% faster than its default level, as small
# (measured on a streamed 310 MB tiled ResNet-50 trace: 0.74 s against 1.07 s, 11.6 MB either way).
PARQUET: dict[str, Any] = {"compression": "zstd", "compression_level": 1}
_NUMERIC = r"^-?\d{1,18}$"

FirstOf = Callable[[str, pa.Array], pa.Table]  # (table, correlation ids) -> event_id, correlation: the first


def pair(files: list[Path], total: int, first_of: FirstOf, rank: int | None, out: Path, spill: Path,
         progress: Progress = no_progress) -> int:
    """Pair the markers spilled in ``files`` (``total`` in all), write the flows table to ``out`` (Parquet);
    returns its rows."""
    extra = _fallback(files, first_of)
    buckets = max(1, math.ceil(total / MARKERS_PER_BUCKET))
    if buckets == 1:
        markers = pa.concat_tables([read_ipc(f) for f in files]).sort_by("index") if files else None
        flows = None if markers is None else _flows(markers, extra, rank)[0]
        table = conform(flows, schema.FLOWS)
        pq.write_table(table, out, **PARQUET)
        return int(table.num_rows)
    bucket_files, cuts = _bucket(files, buckets, spill, progress)
    range_files = _pair_buckets(bucket_files, cuts, extra, rank, spill, progress)
    return _append_ranges(range_files, out, progress)


def _fallback(files: list[Path], first_of: FirstOf) -> tuple[pa.Table, pa.Table]:
    """The first system and device event of each correlation id a launch flow left unbound falls back to."""
    wanted = []
    for f in files:
        t = read_ipc(f).select(["cat", "flow_id", "bound"])
        launch = pc.and_(pc.is_in(pc.fill_null(t["cat"], ""), pa.array(sorted(kineto.LAUNCH_FLOWS))),
                         pc.less(t["bound"], 0))
        if kineto._count(launch):
            ids = pc.filter(t["flow_id"], launch)
            corr = pc.cast(pc.if_else(pc.match_substring_regex(pc.fill_null(ids, ""), _NUMERIC), ids, None),
                           pa.int64())
            wanted.append(pc.unique(pc.drop_null(corr)))
    if not wanted:
        empty = _events(pa.array([], pa.int64()), pa.array([], pa.int64()))
        return empty, empty
    ids = pc.unique(pa.chunked_array(wanted, pa.int64()).combine_chunks())
    sys_, dev = first_of("system_events", ids), first_of("device_events", ids)
    return _events(sys_["event_id"], sys_["correlation"]), _events(dev["event_id"], dev["correlation"])


def _events(event_id: pa.Array, correlation: pa.Array) -> pa.Table:
    """Events as kineto._flows reads them, found by correlation only (on no marker's thread)."""
    n = len(event_id)
    nowhere = pa.array(["\x00"] * n, pa.string())
    return pa.table({"event_id": event_id, "pid": nowhere, "tid": nowhere, "ts_ns": pa.array([0] * n, pa.int64()),
                     "correlation": correlation})


def _flows(markers: pa.Table, extra: tuple[pa.Table, pa.Table], rank: int | None
           ) -> tuple[pa.Table | None, np.ndarray]:
    """The parser's pairing (kineto._flows) of markers in file order, each bound to its event already; and
    each flow's first marker's file index. The events handed to it are the bound ones alone, plus the fallbacks."""
    bound = markers["bound"]
    markers = markers.drop_columns(["bound"])
    has = pc.greater_equal(bound, 0)
    found = pa.table({"event_id": pc.filter(bound, has), "pid": pc.filter(markers["pid"], has),
                      "tid": pc.filter(markers["tid"], has), "ts_ns": pc.filter(markers["ts_ns"], has),
                      "correlation": pa.nulls(kineto._count(has), pa.int64())})
    flows = kineto._flows(markers, pa.concat_tables([found, extra[0]]), extra[1], rank)
    # kineto._flows orders its flows by their first marker: the first row of each (pair, n) key
    cat, flow_id = pc.fill_null(markers["cat"], ""), pc.fill_null(markers["flow_id"], "")
    is_src = pc.equal(markers["ph"], "s").to_numpy(zero_copy_only=False)
    pair_ = codes(pc.binary_join_element_wise(cat, flow_id, "\x1f"))
    key = pair_ * (markers.num_rows + 1) + kineto._ordinal(pair_ * 2 + is_src)
    first = np.sort(np.unique(key, return_index=True)[1])
    return flows, markers["index"].to_numpy()[first]


def _bucket_of(t: pa.Table, buckets: int) -> np.ndarray:
    """A bucket per marker from its (category, id): equal pairs, equal buckets."""
    ids = pc.fill_null(t["flow_id"], "")
    numeric = pc.match_substring_regex(ids, _NUMERIC).to_numpy(zero_copy_only=False)
    h = pc.fill_null(pc.cast(pc.if_else(numeric, ids, None), pa.int64()), 0).to_numpy().astype(np.uint64)
    if not numeric.all():
        rows = np.flatnonzero(~numeric)
        h[rows] = [zlib.crc32(s.encode()) for s in pc.take(ids, pa.array(rows)).to_pylist()]
    cats = pc.fill_null(t["cat"], "")
    names = pc.unique(cats).to_pylist()
    cat_h = np.array([zlib.crc32(c.encode()) for c in names], np.uint64)
    h = h * np.uint64(0x9E3779B97F4A7C15) + cat_h[pc.index_in(cats, pa.array(names, pa.string())).to_numpy()]
    out: np.ndarray = ((h >> np.uint64(29)) % np.uint64(buckets)).astype(np.int64)
    return out


def _bucket(files: list[Path], buckets: int, spill: Path, progress: Progress) -> tuple[list[Path], np.ndarray]:
    """Step 1: the markers to their bucket files; the cuts of the file index into as many ranges."""
    paths = [spill / f"flow-bucket-{b}.arrow" for b in range(buckets)]
    writers: dict[int, tuple[pa.OSFile, pa.ipc.RecordBatchFileWriter]] = {}
    samples = []
    try:
        for i, f in enumerate(files):
            t = read_ipc(f)
            idx = np.sort(t["index"].to_numpy())
            samples.append(idx[:: max(1, len(idx) * buckets // _SAMPLE)])
            where = _bucket_of(t, buckets)
            for b in np.unique(where):
                if b not in writers:
                    sink = pa.OSFile(str(paths[b]), "wb")
                    writers[b] = (sink, pa.ipc.new_file(sink, t.schema, options=IPC))
                writers[b][1].write_table(t.filter(pa.array(where == b)))
            f.unlink()
            progress("pair flows", i + 1, 3 * len(files))
    finally:
        for sink, w in writers.values():
            w.close()
            sink.close()
    sample = np.sort(np.concatenate(samples))
    cuts = np.unique(np.quantile(sample, np.arange(1, buckets) / buckets, method="lower").astype(np.int64))
    return [p for b, p in enumerate(paths) if b in writers], cuts


def _pair_buckets(bucket_files: list[Path], cuts: np.ndarray, extra: tuple[pa.Table, pa.Table],
                  rank: int | None, spill: Path, progress: Progress) -> list[Path]:
    """Step 2: each bucket paired alone; its flows to the range files of their first markers' index."""
    paths = [spill / f"flow-range-{r}.arrow" for r in range(len(cuts) + 1)]
    writers: dict[int, tuple[pa.OSFile, pa.ipc.RecordBatchFileWriter]] = {}
    try:
        for i, f in enumerate(bucket_files):
            flows, first = _flows(read_ipc(f).sort_by("index"), extra, rank)
            f.unlink()
            if flows is None:
                continue
            flows = _plain(conform(flows, schema.FLOWS)).append_column("first_index", pa.array(first, pa.int64()))
            where = np.searchsorted(cuts, first, side="right")
            for r in np.unique(where):
                if r not in writers:
                    sink = pa.OSFile(str(paths[r]), "wb")
                    writers[r] = (sink, pa.ipc.new_file(sink, flows.schema, options=IPC))
                writers[r][1].write_table(flows.filter(pa.array(where == r)))
            progress("pair flows", len(bucket_files) + i + 1, 3 * len(bucket_files))
    finally:
        for sink, w in writers.values():
            w.close()
            sink.close()
    return [p for r, p in enumerate(paths) if r in writers]


def _plain(t: pa.Table) -> pa.Table:
    """Dictionary columns decoded: an IPC file holds one dictionary per column, and buckets differ."""
    for i, f in enumerate(t.schema):
        if pa.types.is_dictionary(f.type):
            t = t.set_column(i, f.name, t.column(i).cast(f.type.value_type))
    return t


def _append_ranges(range_files: list[Path], out: Path, progress: Progress) -> int:
    """Step 3: the ranges in file order, each sorted by its flows' first marker, into one Parquet file."""
    rows = 0
    with pq.ParquetWriter(out, schema.FLOWS.schema, **PARQUET) as w:
        for i, ranged in enumerate(_ranges(range_files)):
            t = conform(ranged.sort_by("first_index").drop_columns(["first_index"]), schema.FLOWS)
            w.write_table(t)
            rows += t.num_rows
            progress("pair flows", 2 * len(range_files) + i + 1, 3 * len(range_files))
        if rows == 0:
            w.write_table(schema.FLOWS.empty())
    return rows


def _ranges(files: list[Path]) -> Iterator[pa.Table]:
    for f in files:
        t = read_ipc(f)
        f.unlink()
        yield t
