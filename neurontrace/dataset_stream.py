"""One Kineto trace of any size streamed into a dataset in bounded memory (``convert TRACE -o DATASET --dataset``).

Two passes over the trace, each holding one piece at a time:

1. the file is read in chunks (``parsers.kineto.iter_chunks``): each chunk's raw event columns are spilled as
   the scanner routed them (``dataset_stream_spill``: lz4 Arrow IPC, each batch's first and last start time
   kept) and its start times sampled (a uniform sample of at most ``_SAMPLES``); the process/thread names
   (``M`` events, few) are kept, and so are the top-level keys torch.profiler writes after ``traceEvents``
   (``baseTimeNanoseconds``, ...), known only at the end;
2. the sampled quantiles cut the time line into parts of about ``part_bytes`` of raw columns; each part
   reads the spilled batches whose times reach into it (a file far from time order is routed to one spill
   file per part first), is normalized alone by the parser's own ``normalize`` (the whole trace's names,
   backend and time origin given; the routed tables handed over as the whole-file parse hands its own),
   sorted by start time and written as ``part-<k>`` of every table.

So the parts of the rank are time-ordered (every event of part k starts no later than any event of part
k+1) and the marker records each part's ``span_ns`` (its events' first start and last end). What crosses
a part boundary is carried so the tables are those of the whole-file parse: event ids are the file's
event index (unique in the rank); a Python frame or op still open when a part starts is handed to that
part as context (the innermost enclosing frame, the op a memory event falls in), and frames are numbered
once for the whole trace (one id per calling context); a kernel launched in the previous part takes the
frame of its op through the carried External ids; flow markers bind in their part (a marker binds to an
event at its own time, so both are in one part) and are paired for the whole trace at the end, from the
markers alone, a bucket at a time (``dataset_stream_flows``); launch flows that fall back to correlation
ids read only the ``event_id`` and ``correlation`` columns of the parts. Flows, frames and the metadata
(the parse accounting, equal to the whole-file parse's) are in part 0; counters and memory events are in
the part of their time.

A cut-off trace streams the complete events before the cut (with iter_chunks' warning), as the whole-file
parse salvages them. Limits: input the compiled scanner declines is read whole by the reference decoder
(iter_chunks: not bounded then); memory is bounded by the part size and fixed caps (markers per bucket,
samples, carried External ids), but for the distinct frames and the launch flows found only by their
correlation id (docs/scale.md).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from neurontrace import dataset, schema
from neurontrace import dataset_stream_flows as stream_flows
from neurontrace.dataset_stream_spill import IPC, MIN, Sample, Spill, SpillWriter, read_ipc, write_ipc
from neurontrace.errors import TruncatedTraceWarning
from neurontrace.parsers import _kineto_chunks, _kineto_json, kineto
from neurontrace.parsers._normalized_meta import derive
from neurontrace.parsers.kineto import TraceEnd
from neurontrace.progress import Progress, no_progress
from neurontrace.run_record import read_run_record
from neurontrace.trace import _ID_COLUMNS, ACCOUNTING_KEY, ParseAccounting, Trace, conform, metadata_table

DEFAULT_PART_BYTES = 128 << 20  # raw event columns per part: a part's normalize peaks at a few times this
_SAMPLES = 1 << 20  # start times kept for the part cuts, whatever the size (a uniform sample: 16 MB at most)
_REREADS = 3  # spilled batches read per part, on average, at most; more (a file far from time order): route first
_CONTEXT_CATS = pa.array(["python_function", *sorted(c for c, v in kineto.HOST_CATEGORIES.items()
                                                     if v == "framework_op")])
_OP_CATS = pa.array(["cpu_op", "Operator"])  # the ops whose frame a kernel inherits (parsers/_kineto_frames.py)
_EXTERNAL_IDS = 1 << 20  # External ids carried from part to part (16 MB)
_MARKER_COLUMNS = ["index", "ph", "cat", "flow_id", "pid", "tid", "ts_ns"]
_LAST_TABLES = ("flows", "frames", "metadata")  # whole-trace tables: written last, into part 0


def convert_trace(path: str | Path, out: str | Path, *, part_bytes: int = DEFAULT_PART_BYTES,
                  chunk_bytes: int = _kineto_chunks.CHUNK_BYTES, force: bool = False,
                  rank: int | None = None, progress: Progress = no_progress) -> tuple[Path, list[dict[str, Any]],
                                                                                  ParseAccounting]:
    """Stream one single-rank Kineto trace (plain or gz) into a dataset of time-ordered parts; returns the
    dataset, the marker's part entries and the parse accounting (module docstring)."""
    src = Path(path)
    tmp = dataset.start(out, force=force)
    try:
        spill = tmp / ".spill"
        spill.mkdir()
        read = _read(src, spill, chunk_bytes, progress)
        writer = _Writer(src, tmp, read, rank, part_bytes, progress)
        entries, acct = writer.run()
        shutil.rmtree(spill)
        return dataset.finish(tmp, out, entries, force=force), entries, acct
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already unless something failed


# -- pass 1: read the file once, spill its events --------------------------------------------------

@dataclass
class _Read:
    final: TraceEnd
    spill: Spill | None
    meta: pa.Table
    cats: set[str]
    samples: np.ndarray
    nbytes: int
    device_rows: int


def _read(src: Path, spill: Path, chunk_bytes: int, progress: Progress) -> _Read:
    writer = SpillWriter(spill)
    meta: list[pa.Table] = []
    cats: set[str] = set()
    sample = Sample(_SAMPLES)
    nbytes = device_rows = 0
    final = None
    device_cats = pa.array(sorted(kineto.DEVICE_CATEGORIES))
    try:
        for chunk in kineto.iter_chunks(src, chunk_bytes=chunk_bytes, progress=progress):
            if isinstance(chunk, TraceEnd):
                final = chunk
                continue
            # spilled as the scanner routed them, by kind (host, device, allocator, the rest): the normalizer
            # keeps such parts whole (a chunk without host events has no host part: kinds says which is which)
            for r, routed in zip(chunk.kinds or range(len(chunk.parts)), chunk.parts, strict=True):
                if not routed.num_rows:
                    continue
                part = writer.cast(routed)
                cats |= {c for c in pc.unique(part["cat"]).to_pylist() if c is not None}
                is_meta = pc.fill_null(pc.equal(part["ph"], "M"), False)
                if pc.any(is_meta).as_py():
                    meta.append(part.filter(is_meta))
                    part = part.filter(pc.invert(is_meta))
                writer.write(part, r)
                nbytes += part.nbytes
                timed = pc.is_valid(part["ts_ns"])
                sample.add(pc.filter(part["index"], timed).to_numpy(), pc.filter(part["ts_ns"], timed).to_numpy())
                dev = pc.and_(pc.and_(pc.equal(part["ph"], "X"), pc.is_in(part["cat"], device_cats)), timed)
                device_rows += kineto._count(dev)
    finally:
        spilled = writer.close()
    assert final is not None  # iter_chunks ends with its TraceEnd or raises
    schema_ = meta[0].schema if meta else pa.schema([])
    return _Read(final, spilled, pa.concat_tables(meta).sort_by("index").cast(schema_) if meta else pa.table({}),
                 cats, sample.values(), nbytes, device_rows)


# -- pass 2: route to time parts, normalize each ---------------------------------------------------

@dataclass
class _Frames:
    """Frames numbered once for the whole trace: one id per (caller, location)."""

    ids: dict[tuple[Any, ...], int] = field(default_factory=dict)
    rows: list[tuple[Any, ...]] = field(default_factory=list)

    def remap(self, local: pa.Table | None) -> np.ndarray:
        """Global id of each of a part's frames (the part's ids are 0..n-1, callers before callees)."""
        if local is None or local.num_rows == 0:
            return np.zeros(0, np.int64)
        order = np.argsort(local["frame_id"].to_numpy())
        cols = {c: local[c].to_pylist() for c in ("frame_id", "parent_id", "file", "line", "function", "kind",
                                                  "is_user")}
        out = np.full(local.num_rows, -1, np.int64)
        for i in order:
            parent = cols["parent_id"][i]
            gparent = None if parent is None else int(out[parent])
            key = (gparent, cols["file"][i], cols["line"][i], cols["function"][i], cols["kind"][i], cols["is_user"][i])
            g = self.ids.get(key)
            if g is None:
                g = self.ids[key] = len(self.rows)
                self.rows.append(key)
            out[cols["frame_id"][i]] = g
        return out

    def table(self) -> pa.Table:
        cols = list(zip(*self.rows, strict=True)) if self.rows else [()] * 6
        return conform(pa.table({
            "frame_id": pa.array(np.arange(len(self.rows), dtype=np.int64)),
            "parent_id": pa.array(cols[0], pa.int64()), "file": pa.array(cols[1], pa.string()),
            "line": pa.array(cols[2], pa.int32()), "function": pa.array(cols[3], pa.string()),
            "kind": pa.array(cols[4], pa.string()), "is_user": pa.array(cols[5], pa.bool_())}), schema.FRAMES)


class _Writer:
    def __init__(self, src: Path, tmp: Path, read: _Read, rank: int | None, part_bytes: int,
                 progress: Progress) -> None:
        self.src, self.tmp, self.read, self.progress = src, tmp, read, progress
        self.source = str(src)
        top = dict(read.final.top)
        run = _quiet_run_record(src)
        if run is not None:
            top["neurontrace_run"] = run
        self.top = top
        self.backend = kineto._backend(top, [pa.table({"cat": pa.array(sorted(read.cats), pa.string())})])
        self.base = kineto._base_time(dict(top), ParseAccounting(self.source, kineto.FORMAT))
        n = max(1, math.ceil(read.nbytes / max(part_bytes, 1)))
        qs = np.quantile(read.samples, np.arange(1, n) / n, method="lower") if len(read.samples) and n > 1 else []
        self.bounds = np.unique(np.asarray(qs, dtype=np.int64))
        self.frames = _Frames()
        self.rank = rank
        self.counted = 0  # counters kept (the accounting's count: one per input event)
        self.devices: set[str] = set()  # the device ids the device events name (the normalized metadata's)
        self.activity: dict[str, Any] | None = None  # schema.DEVICE_ACTIVITY, summed over the parts
        self.markers = 0  # flow markers spilled (the accounting's count of flows)
        self.entries: list[dict[str, Any]] = []  # the parts written (their marker entries)
        self.empty = self._normalize([])
        self.rank_value = kineto._rank(self.top, self.source, rank, ParseAccounting(self.source, kineto.FORMAT))[0]

    def _normalize(self, rows: list[pa.Table]) -> tuple[Trace, list[str]]:
        """The parser's normalize of the trace's metadata events and a part's rows: tables each in file
        order (the routes of the spill, the context), as the whole-file parse hands its routed parts over."""
        parts = [t for t in (self.read.meta, *rows) if t.num_columns and t.num_rows]
        decoded = _kineto_json.Decoded(dict(self.top), parts or [_kineto_json._empty_events()],
                                       decoder=self.read.final.decoder)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tr = kineto.normalize(decoded, source=self.source, rank=self.rank, known_backend=self.backend,
                                  device_elsewhere=self.read.device_rows > 0)
        return tr, list(tr.accounting[0].warnings)

    def run(self) -> tuple[list[dict[str, Any]], ParseAccounting]:
        ctx: pa.Table | None = None
        ext_prev: tuple[np.ndarray, np.ndarray] | None = None  # External id -> frame of earlier parts' ops
        entries, notes, marker_files = [], [], []
        base_notes = self.empty[1]
        lows: list[int] = []
        n = len(self.bounds) + 1
        for k, raw in enumerate(self._raw_parts()):
            entry, ctx, ext_prev, part_notes, markers, low = self._part(k, raw, ctx, ext_prev)
            entries.append(entry)
            notes.append(_without(part_notes, base_notes))
            if markers is not None:
                marker_files.append(markers)
            if low is not None:
                lows.append(low)
            self.progress("write parts", k + 1, n)
        if self.read.spill is not None:
            self.read.spill.close()
        self.entries = entries
        acct = self._last(entries, marker_files, base_notes + _merged(notes), lows)
        return entries, acct

    def _raw_parts(self) -> Iterator[list[pa.Table]]:
        """Each time part's spilled rows in file order (rows without a time in part 0): read from the spill
        batches whose times reach into the part; in a file far from time order (batches read for more than
        _REREADS parts on average), routed to one spill file per part first."""
        n = len(self.bounds) + 1
        spill = self.read.spill
        if spill is None:
            yield from ([] for _ in range(n))
            return
        first = np.where(spill.untimed, 0, np.searchsorted(self.bounds, spill.lo, side="right"))
        last = np.maximum(first, np.searchsorted(self.bounds, spill.hi, side="right"))
        if int((last - first + 1).sum()) > _REREADS * len(first) + n:
            yield from self._routed(spill)
            return
        for k in range(n):
            pieces: list[list[pa.RecordBatch]] = [[] for _ in range(spill.routes)]
            for i in np.flatnonzero((first <= k) & (last >= k)):
                batch = spill.batch(int(i))
                rows = self._part_of(batch["ts_ns"]) == k
                if rows.all():
                    pieces[spill.route[i]].append(batch)
                elif rows.any():
                    pieces[spill.route[i]].append(batch.filter(pa.array(rows)))
            spill.release(last > k)  # the files no later part reads are deleted
            yield [pa.Table.from_batches(p) for p in pieces if p]

    def _part_of(self, ts: pa.Array) -> np.ndarray:
        out: np.ndarray = np.searchsorted(self.bounds, pc.fill_null(ts, MIN).to_numpy(), side="right")
        return out

    def _routed(self, spill: Spill) -> Iterator[list[pa.Table]]:
        n = len(self.bounds) + 1
        paths = [spill.paths[0].parent / f"part-{k}.arrow" for k in range(n)]
        routes: list[list[int]] = [[] for _ in range(n)]  # the route of each batch of each part's file
        writers: dict[int, tuple[pa.OSFile, pa.ipc.RecordBatchFileWriter]] = {}
        try:
            for i in range(len(spill.file)):
                batch = spill.batch(i)
                part = self._part_of(batch["ts_ns"])
                for k in np.unique(part):
                    if k not in writers:
                        sink = pa.OSFile(str(paths[k]), "wb")
                        writers[k] = (sink, pa.ipc.new_file(sink, batch.schema, options=IPC))
                    writers[k][1].write_batch(batch.filter(pa.array(part == k)))
                    routes[k].append(int(spill.route[i]))
                self.progress("route events", i + 1, len(spill.file))
        finally:
            for sink, w in writers.values():
                w.close()
                sink.close()
        spill.close()
        for k in range(n):
            if k not in writers:
                yield []
                continue
            batches = read_ipc(paths[k]).to_batches()
            paths[k].unlink()
            yield [pa.Table.from_batches([b for b, r in zip(batches, routes[k], strict=True) if r == route])
                   for route in sorted(set(routes[k]))]

    def _part(self, k: int, raw: list[pa.Table], ctx: pa.Table | None,
              ext_prev: tuple[np.ndarray, np.ndarray] | None
              ) -> tuple[dict[str, Any], pa.Table | None, tuple[np.ndarray, np.ndarray] | None,
                                          list[str], Path | None, int | None]:
        found, events = [], []
        for t in raw:  # the flow markers are paired for the whole trace (dataset_stream_flows)
            is_marker = pc.fill_null(pc.and_(pc.is_in(t["ph"], pa.array(["s", "f", "t"])),
                                             pc.is_valid(t["ts_ns"])), False)
            if pc.any(is_marker).as_py():
                found.append(t.select(_MARKER_COLUMNS).filter(is_marker))
                events.append(t.filter(pc.invert(is_marker)))
            else:
                events.append(t)
        markers = pa.concat_tables(found).sort_by("index") if found else None
        ctx_ids = ctx["index"] if ctx is not None and ctx.num_rows else None
        tr, part_notes = self._normalize(events if ctx is None else [ctx, *events])
        tables = dict(tr.tables)
        if ctx_ids is not None:
            keep = pc.invert(pc.is_in(tables["system_events"]["event_id"], ctx_ids))
            tables["system_events"] = tables["system_events"].filter(keep)
        self.counted += tr.accounting[0].kept.get("counters", 0)
        self.devices |= {str(d) for d in pc.unique(tables["device_events"]["device"]).to_pylist() if d is not None}
        self._add_activity(tr.meta(schema.DEVICE_ACTIVITY.key))
        mapping = self.frames.remap(tr.frames)
        for name, cols in _ID_COLUMNS.items():
            if name == "frames":
                continue
            for col, kind in cols:
                if kind == "frame" and tables[name].num_rows:
                    tables[name] = _remapped(tables[name], col, mapping)
        tables["device_events"], ext_now = _inherit(tables["system_events"], tables["device_events"], ext_prev)
        marker_file = self._bind(k, markers, tables)
        for name in ("system_events", "device_events"):
            tables[name] = tables[name].sort_by([("ts_ns", "ascending"), ("event_id", "ascending")])
        for name in _LAST_TABLES:
            tables[name] = schema.TABLES[name].empty()
        entry = self._write(k, tables)
        next_ctx = self._carry(ctx, events, None if k >= len(self.bounds) else int(self.bounds[k]))
        low = min((int(pc.min(t["ts_ns"]).as_py()) for t in (tables["system_events"], tables["device_events"])
                   if t.num_rows), default=None)
        return entry, next_ctx, ext_now, part_notes, marker_file, low

    def _add_activity(self, fact: dict[str, Any] | None) -> None:
        if fact is None:
            return
        if self.activity is None:
            self.activity = dict(fact)
        else:
            self.activity["transfers"] += fact["transfers"]
            self.activity["shapes"] = self.activity["shapes"] or fact["shapes"]

    def _carry(self, ctx: pa.Table | None, events: list[pa.Table], upper: int | None) -> pa.Table | None:
        """The frames and ops still open where the next part starts: that part's context (in file order)."""
        if upper is None:
            return None
        pieces = []
        for t in (ctx, *events):
            if t is None or not t.num_rows:
                continue
            end = pc.add(t["ts_ns"], pc.fill_null(pc.max_element_wise(t["dur_ns"], 0), 0))
            is_ctx = pc.and_(pc.and_(pc.equal(t["ph"], "X"), pc.is_in(t["cat"], _CONTEXT_CATS)),
                             pc.greater(end, upper))
            open_ = t.filter(pc.fill_null(is_ctx, False))
            if open_.num_rows:
                pieces.append(open_)
        return pa.concat_tables(pieces, promote_options="permissive").sort_by("index") if pieces else None

    def _bind(self, k: int, markers: pa.Table | None, tables: dict[str, pa.Table]) -> Path | None:
        """Each flow marker's event in this part (kineto._bind: same thread and time, written before it)."""
        if markers is None:
            return None
        if self.base:
            markers = markers.set_column(markers.schema.get_field_index("ts_ns"), "ts_ns",
                                         kineto._shifted(markers["ts_ns"], self.base))
        events = pa.concat_tables([tables["system_events"].select(["event_id", "pid", "tid", "ts_ns"]),
                                   tables["device_events"].select(["event_id", "pid", "tid", "ts_ns"])])
        bound = kineto._bind(markers, markers["index"].to_numpy(), events)
        out = self.tmp / ".spill" / f"markers-{k}.arrow"
        write_ipc(markers.append_column("bound", pa.array(bound, pa.int64())), out)
        self.markers += markers.num_rows
        return out

    def _write(self, k: int, tables: dict[str, pa.Table]) -> dict[str, Any]:
        rows, sizes = {}, {}
        where = dataset.partition(self.rank_value)
        for name, table in tables.items():
            d = self.tmp / name / where
            d.mkdir(parents=True, exist_ok=True)
            f = d / f"part-{k}.parquet"
            pq.write_table(conform(table, schema.TABLES[name]), f, **stream_flows.PARQUET)
            rows[name], sizes[name] = table.num_rows, f.stat().st_size
        return {"rank": self.rank_value, "partition": where, "part": k, "sources": [self.source], "rows": rows,
                "bytes": sizes, "span_ns": _span(tables)}

    def _last(self, entries: list[dict[str, Any]], marker_files: list[Path], notes: list[str],
              lows: list[int]) -> ParseAccounting:
        """The whole-trace tables (flows, frames, metadata) into part 0, and the accounting."""
        first = entries[0]
        rows = stream_flows.pair(marker_files, self.markers, self._first_of, self.rank_value,
                                 self.tmp / "flows" / first["partition"] / "part-0.parquet", self.tmp / ".spill",
                                 self.progress)
        f = self.tmp / "flows" / first["partition"] / "part-0.parquet"
        first["rows"]["flows"], first["bytes"]["flows"] = rows, f.stat().st_size
        end = self.read.final
        acct = ParseAccounting(self.source, kineto.FORMAT, events_read=end.events + end.partial_events)
        acct.skip("cut in half by truncation", end.partial_events)
        acct.warnings += end.notes + notes
        for e in entries:
            acct.keep("system_events", e["rows"]["system_events"])
            acct.keep("device_events", e["rows"]["device_events"])
        acct.keep("counters", self.counted)
        acct.keep("flows", self.markers)
        acct.keep("metadata", self.read.meta.num_rows)
        acct.skip("no timestamp", end.events + end.partial_events - acct.kept_total - acct.skipped_total)
        if end.truncated_at is not None:  # worded as kineto.normalize words it
            msg = (f"{self.source}: the trace was cut off at byte {end.truncated_at}; kept the "
                   f"{acct.kept_total} complete events before the cut (metadata "
                   "written after the events is lost)" + (f". Why: {end.damage}" if end.damage else ""))
            acct.warnings.append(msg)
            warnings.warn(msg, TruncatedTraceWarning, stacklevel=3)
        derived = {k.key for k in (*schema.NORMALIZED_KEYS, schema.DEVICE_ACTIVITY)}
        facts = {r["key"]: json.loads(r["value"]) for r in self.empty[0].metadata.to_pylist()
                 if r["key"] not in derived}
        facts[ACCOUNTING_KEY] = acct.as_dict()
        facts["clock"] = "unix_epoch_ns" if self.base is not None or (lows and min(lows) > 10**18) \
            else "trace_relative_ns"
        if self.activity is not None:  # placed as kineto.normalize places it: after the accounting (and run record)
            items = list(facts.items())
            at = [k for k, _ in items].index("run" if "run" in facts else ACCOUNTING_KEY) + 1
            facts = dict([*items[:at], (schema.DEVICE_ACTIVITY.key, self.activity), *items[at:]])
        meta = metadata_table(facts, source=self.source, rank=self.rank_value)
        raw = {k: json.dumps(v, sort_keys=True, default=str) for k, v in facts.items()}
        meta = pa.concat_tables([meta, metadata_table(derive(raw, (), sorted(self.devices)), source=self.source,
                                                      rank=self.rank_value)])
        tables = {"frames": self.frames.table() if self.frames.rows else None, "metadata": meta}
        for name, table in tables.items():
            f = self.tmp / name / first["partition"] / "part-0.parquet"
            t = conform(table, schema.TABLES[name])
            pq.write_table(t, f, **stream_flows.PARQUET)
            first["rows"][name], first["bytes"][name] = t.num_rows, f.stat().st_size
        return acct

    def _first_of(self, table: str, wanted: pa.Array) -> pa.Table:
        """The smallest event id of each wanted correlation id, reading two columns of each part."""
        pieces = []
        for e in self.entries:
            f = self.tmp / table / e["partition"] / f"part-{e['part']}.parquet"
            t = pq.read_table(f, columns=["event_id", "correlation"])
            t = t.filter(pc.fill_null(pc.is_in(t["correlation"], wanted), False))
            if t.num_rows:
                pieces.append(t)
        if not pieces:
            return pa.table({"event_id": pa.array([], pa.int64()), "correlation": pa.array([], pa.int64())})
        t = pa.concat_tables(pieces).group_by("correlation").aggregate([("event_id", "min")])
        return pa.table({"event_id": t["event_id_min"], "correlation": t["correlation"]})


def _quiet_run_record(src: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_run_record(src)


def _remapped(t: pa.Table, col: str, mapping: np.ndarray) -> pa.Table:
    ids = t[col]
    if ids.null_count == len(ids):
        return t
    local = pc.fill_null(ids, 0).to_numpy()
    glob = mapping[local] if len(mapping) else local
    return t.set_column(t.schema.get_field_index(col), col, pa.array(glob, pa.int64(), mask=pc.is_null(ids).to_numpy(
        zero_copy_only=False)))


def _inherit(system: pa.Table, device: pa.Table, prev: tuple[np.ndarray, np.ndarray] | None
             ) -> tuple[pa.Table, tuple[np.ndarray, np.ndarray] | None]:
    """Device ops without a frame take that of the op (External id) in an earlier part that launched them;
    returns the device table and the External id -> frame map of the latest ops for the next part (the
    _EXTERNAL_IDS largest ids: a device runs at most that many launches behind its host)."""
    is_op = pc.fill_null(pc.and_(pc.is_in(system["raw_category"].cast(pa.string()), _OP_CATS),
                                 pc.is_valid(system["frame_id"])), False)
    ops = system.select(["external_id", "frame_id"]).filter(pc.and_(is_op, pc.is_valid(system["external_id"])))
    now = prev
    if ops.num_rows:
        keys, vals = ops["external_id"].to_numpy(), ops["frame_id"].to_numpy()
        if prev is not None:
            keys, vals = np.r_[prev[0], keys], np.r_[prev[1], vals]
        order = np.lexsort((vals, keys))  # by id, then frame: the first of each id is its smallest frame
        keys, vals = keys[order], vals[order]
        first = np.r_[True, keys[1:] != keys[:-1]]
        keys, vals = keys[first][-_EXTERNAL_IDS:], vals[first][-_EXTERNAL_IDS:]
        now = (keys, vals)
    if prev is None or device.num_rows == 0:
        return device, now
    frame = device["frame_id"]
    ext = device["external_id"]
    need = pc.and_(pc.is_null(frame), pc.is_valid(ext)).to_numpy(zero_copy_only=False)
    if not need.any():
        return device, now
    keys, vals = prev
    e = pc.fill_null(ext, -1).to_numpy()
    pos = np.minimum(np.searchsorted(keys, e), len(keys) - 1)
    hit = need & (keys[pos] == e)
    if not hit.any():
        return device, now
    f = pc.fill_null(frame, -1).to_numpy()
    f = np.where(hit, vals[pos], f)
    col = pa.array(f, pa.int64(), mask=f < 0)
    return device.set_column(device.schema.get_field_index("frame_id"), "frame_id", col), now


def _span(tables: dict[str, pa.Table]) -> list[int] | None:
    lo, hi = [], []
    for name in ("system_events", "device_events"):
        t = tables[name]
        if t.num_rows:
            lo.append(int(pc.min(t["ts_ns"]).as_py()))
            hi.append(int(pc.max(pc.add(t["ts_ns"], t["dur_ns"])).as_py()))
    return [min(lo), max(hi)] if lo else None


_NUMBER = re.compile(r"\d+")


def _without(notes: list[str], base: list[str]) -> list[str]:
    """A part's warnings less those every part gives (of the trace's top-level keys, not its events)."""
    rest = list(notes)
    for b in base:
        if b in rest:
            rest.remove(b)
    return rest


def _merged(per_part: list[list[str]]) -> list[str]:
    """The parts' warnings as the whole-file parse words them: the counts in the same warning are added."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for notes in per_part:
        for n in notes:
            key = tuple(_NUMBER.split(n))
            nums = [int(x) for x in _NUMBER.findall(n)]
            groups[key] = [a + b for a, b in zip(groups[key], nums, strict=True)] if key in groups else nums
    return [key[0] + "".join(f"{n}{text}" for n, text in zip(nums, key[1:], strict=True))
            for key, nums in groups.items()]
