"""``diagnose DATASET`` out of core: a streamed rank read one time slice at a time (docs/scale.md).

A rank that ``convert TRACE -o DATASET --dataset`` streamed is stored as time-ordered parts, each with its
events' ``span_ns`` (first start, last end) in the marker. :class:`PartReader` reads the events overlapping
a slice from only the parts whose span meets it, row-filtered in the Parquet scan (an event begun in an
earlier part, the whole run's outer Python frame say, is carried in by the filter, the rest of that part is
never held), plus the launch and forward/backward flows touching those events; frames and metadata (a
rank's few distinct frames, its facts) are read once. The slices are cut at the starts of the profiled steps
(analysis/sliced.step_cuts), grouped to about ``slice_events`` events each, and diagnosed by
analysis/sliced.py; memory grows with the largest slice, not with the trace. A rank of another kind (written
by ``convert DIR -o DATASET``, or by a version without ``span_ns``) is read whole, as before.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from neurontrace import schema
from neurontrace._allocator import release_pool
from neurontrace._io import check_parquet_expansion, identity
from neurontrace.analysis.attribution import default_origin
from neurontrace.analysis.contract import Options
from neurontrace.analysis.diagnose import Diagnosis, RankResult, combine, compiles_of_rank, diagnose_rank
from neurontrace.analysis.runs_check import check_one_run
from neurontrace.analysis.slice_plan import plan_rank
from neurontrace.analysis.sliced import diagnose_slices, slices_of, step_cuts
from neurontrace.analysis.stalls import TOP_STALLS
from neurontrace.analysis.window import WindowSpec, resolve_span, trace_span
from neurontrace.dataset import Dataset, file_order, open_dataset, time_parts
from neurontrace.errors import InputChangedError
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import _EVENT_TABLES, _TIMED_TABLES, Trace, checked, conform

ID_RANGES = 8  # id ranges a slice's flows are read in (_id_ranges)
SLICE_EVENTS = 200_000  # host + device events per slice: measured, a slice of them peaks near 1 GB (docs/scale.md)


def streamed(path: str | Path) -> bool:
    """Whether ``path`` is a dataset holding a rank streamed as time parts (diagnosed out of core)."""
    p = Path(path)
    if not (p / "neurontrace-dataset.json").is_file():
        return False
    ds = open_dataset(p)
    return any(time_parts(e) for e in ds.ranks)


@dataclass
class PartReader:
    """The events of one streamed rank overlapping a time slice (a ``Reader`` of analysis/slice_plan.py)."""

    ds: Dataset
    partition: str
    rows_read: list[int] = field(default_factory=list)  # host + device rows each call read

    def __post_init__(self) -> None:
        self.entries = sorted((e for e in self.ds.ranks if e["partition"] == self.partition), key=lambda e: e["part"])
        for e in self.entries:  # each part as the marker lists it, and sane, before any slice reads it
            for name in schema.TABLES:
                f = self._file(name, e)
                if f.is_file():
                    _check(f, e, name)
        self._fixed = {name: self._whole(name) for name in ("frames", "metadata")}

    @property
    def span(self) -> tuple[int, int]:
        spans = [e["span_ns"] for e in self.entries if e.get("span_ns")]
        return (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else (0, 0)

    def steps(self) -> list[tuple[int, int]]:
        """(start, end) of the rank's profiled steps (its step rows: few), read through a filtered scan."""
        got = self._scan("system_events", self.entries, pc.field("category") == "step", ["ts_ns", "dur_ns"])
        return [(int(t), int(t + d)) for t, d in zip(got["ts_ns"].to_pylist(), got["dur_ns"].to_pylist(),
                                                     strict=True)]

    def sizes(self) -> list[tuple[int, int]]:
        """(first start, host + device events) of each part: what the slices are grouped by."""
        return [(e["span_ns"][0], int(e["rows"]["system_events"]) + int(e["rows"]["device_events"]))
                for e in self.entries if e.get("span_ns")]

    def __call__(self, owned: tuple[int, int]) -> Trace:
        release_pool()  # the previous slice is dropped: its pages go back before this one's are taken
        a, b = owned
        parts = [e for e in self.entries if e.get("span_ns") and e["span_ns"][0] < b and e["span_ns"][1] >= a]
        tables: dict[str, pa.Table] = dict(self._fixed)
        for name in (*_EVENT_TABLES, *_TIMED_TABLES):
            ts = pc.field("ts_ns")
            cols = schema.TABLES[name].column_names
            reach = (ts + pc.field("dur_ns") > a) | (ts >= a) if "dur_ns" in cols else ts >= a
            tables[name] = self._scan(name, parts, (ts < b) & reach)
        self.rows_read.append(sum(tables[n].num_rows for n in _EVENT_TABLES))
        ids = pa.concat_arrays([tables[n]["event_id"].combine_chunks() for n in _EVENT_TABLES])
        touching = pc.field("src_event_id").isin(ids) | pc.field("dst_event_id").isin(ids)
        tables["flows"] = self._scan("flows", self.entries, _id_ranges(ids) & touching)
        trace = checked(Trace(**tables), str(self.ds.path / self.partition)).filter(start_ns=a, end_ns=b)
        return self.ds._own_warnings(trace, self.entries[0])

    def _file(self, name: str, e: dict[str, Any]) -> Path:
        return self.ds.path / name / self.partition / f"part-{e['part']}.parquet"

    def _whole(self, name: str) -> pa.Table:
        return self._scan(name, self.entries, None)

    def _scan(self, name: str, entries: Sequence[dict[str, Any]], where: pc.Expression | None,
              columns: list[str] | None = None) -> pa.Table:
        spec = schema.TABLES[name]
        # A part the marker says holds none of this table's rows is not opened (the flows are all in part 0: each
        # slice's flows read opened all 334 parts' files at 31.8 GB, 0.34-0.52 s against 0.18-0.26 s).
        files = [str(self._file(name, e)) for e in entries
                 if (e.get("rows") or {}).get(name) != 0 and self._file(name, e).is_file()]
        if not files:
            table = spec.empty()
            return table if columns is None else table.select(columns)
        got = pads.dataset(files, format="parquet", schema=spec.schema).to_table(filter=where, columns=columns)
        return got if columns is not None else file_order(name, conform(got, spec))


def _id_ranges(ids: pa.Array) -> pc.Expression:
    """Flows with an end in one of ``ID_RANGES`` id ranges covering the slice's events (cut at the widest gaps
    between their ids): the same rows as ``isin`` alone, but the flows table (one file of the whole rank, its
    row groups in file order, as event ids are) is read only where its row groups' statistics overlap a range,
    not whole for every slice (issue #28: that read's peak grew with the rank, 69 MB at 2.1 GB to 254 MB at
    8.5 GB). Several ranges, because a slice also holds the long events around it (a step, an outer Python
    frame), whose ids lie far from the rest."""
    got = np.unique(ids.to_numpy(zero_copy_only=False))
    if not len(got):
        return pc.scalar(False)
    gaps = np.diff(got)
    cut = np.sort(np.argsort(gaps, kind="stable")[max(len(gaps) - ID_RANGES + 1, 0):])  # the widest gaps
    cut = cut[gaps[cut] > 1]
    near = pc.scalar(False)
    for lo, hi in zip(np.r_[got[0], got[cut + 1]].tolist(), np.r_[got[cut], got[-1]].tolist(), strict=True):
        for end in ("src_event_id", "dst_event_id"):
            near = near | ((pc.field(end) >= lo) & (pc.field(end) <= hi))
    return near


def _check(f: Path, entry: dict[str, Any], name: str) -> None:
    """A part file as the marker wrote it (its size) and sane (its footer does not declare a bomb)."""
    with f.open("rb") as fh:
        size = identity(os.fstat(fh.fileno()))[2]
        want = (entry.get("bytes") or {}).get(name)
        if isinstance(want, int) and want != size:
            raise InputChangedError(f"{f}: {size} bytes, the marker says {want}: the partition changed since it "
                                    "was written; convert the original traces again")
        check_parquet_expansion(f, pq.read_metadata(fh), size)


def diagnose_dataset(path: str | Path, *, window: WindowSpec | None = None, fallback_ops: Sequence[str] = (),
                     top: int = TOP_STALLS, compiles: pa.Table | None = None, compile_warnings: Sequence[str] = (),
                     progress: Progress = no_progress, slice_events: int = SLICE_EVENTS,
                     ) -> tuple[Diagnosis, str | None]:
    """``diagnose DATASET``: each streamed rank out of core, slice by slice, any other rank read whole; the
    ranks combined as ``diagnose`` combines them. Returns the diagnosis and the warning a ``--window`` cut to
    the trace gives (None otherwise)."""
    ds = open_dataset(path)
    partitions = list(dict.fromkeys(e["partition"] for e in ds.ranks))
    options = Options(None, tuple(sorted(set(fallback_ops))), top, compile_warnings=tuple(compile_warnings))
    ranks: list[tuple[PartReader, list[tuple[int, int]]] | Trace] = []
    for p in partitions:
        if all(time_parts(e) for e in ds.ranks if e["partition"] == p):
            reader = PartReader(ds, p)
            cuts = step_cuts(reader.steps(), reader.sizes(), slice_events, reader.span[1])
            ranks.append((reader, slices_of(reader.span, cuts)))
        else:
            trace = ds.load_partition(p)
            check_one_run(trace)
            ranks.append(trace)
    cut_warning = None
    if window is not None:
        options, cut_warning = _windowed(options, window, ranks)
    parts: list[RankResult] = []
    for p, rank in zip(partitions, ranks, strict=True):
        n_ranks = len(partitions)
        if isinstance(rank, Trace):
            parts.append(diagnose_rank(rank, replace(options, compiles=compiles_of_rank(compiles, rank, n_ranks))))
            continue
        reader, slices = rank
        mine = _compiles_of(compiles, next(e["rank"] for e in ds.ranks if e["partition"] == p), n_ranks)
        parts.append(diagnose_slices(reader, slices, replace(options, compiles=mine), progress=progress))
    return combine(parts, options), cut_warning


def _windowed(options: Options, spec: WindowSpec, ranks: list[Any]) -> tuple[Options, str | None]:
    """The options with ``--window`` on the trace clock, counted from the job's time 0 (the default windows'
    earliest start, found by each streamed rank's plan) and cut to the job's span."""
    origins, spans = [], []
    for rank in ranks:
        if isinstance(rank, Trace):
            origins.append(default_origin(rank))
            spans.append(trace_span(rank))
        else:
            reader, slices = rank
            plan = plan_rank(reader, slices)
            origins.append(min((d.window.span[0] for d in plan.devices), default=None))
            spans.append(reader.span)
    span = (min(s[0] for s in spans), max(s[1] for s in spans))
    origin = min((o for o in origins if o is not None), default=span[0])
    cut, warning = resolve_span(spec, span, origin)
    return replace(options, window=cut, origin_ns=origin), warning


def _compiles_of(compiles: pa.Table | None, rank: int | None, n_ranks: int) -> pa.Table | None:
    """compiles_of_rank for a rank that is not held: its compile rows (rank-less ones go with rank 0)."""
    if compiles is None or n_ranks == 1:
        return compiles
    col = compiles["rank"].to_pylist()
    return compiles.filter(pa.array([(r == rank) or (r is None and rank in (0, None)) for r in col], pa.bool_()))
