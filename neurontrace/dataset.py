"""Trace datasets larger than memory: one hive-partitioned Parquet dataset for a job of many ranks.

Layout (written by ``neurontrace convert DIR -o DATASET``, one rank at a time)::

    DATASET/
      neurontrace-dataset.json              # layout version, tables, ranks with their sources and row counts
      system_events/rank=0/part-0.parquet   # every table of docs/schema.md, one partition per rank
      system_events/rank=1/part-0.parquet
      device_events/rank=0/part-0.parquet
      ...
      metadata/rank=0/part-0.parquet        # that rank's facts, its parse accounting among them

Each part file is that rank's table exactly as ``Trace`` holds it (the ``rank`` column included), so a
partition read alone is a whole Trace of one rank; ids (``event_id``, ``frame_id``) are unique within
a rank. An input without a rank goes to the hive null partition (``rank=__HIVE_DEFAULT_PARTITION__``).

:func:`open_dataset` gives lazy access for notebooks: a ``pyarrow.dataset`` per table (filters on
``rank`` skip the other ranks' files unopened), ``.to_polars()`` a ``LazyFrame``, ``.to_duckdb()`` a
DuckDB relation. ``neurontrace.load(DATASET)`` and ``neurontrace diagnose DATASET`` read it like any trace.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from neurontrace import _replace, schema
from neurontrace._io import check_parquet_expansion, identity, unchanged
from neurontrace.errors import (
    InputChangedError,
    InputNotFoundError,
    MalformedTraceError,
    OutputExistsError,
    TraceWarning,
)
from neurontrace.parsers._normalized_meta import with_normalized
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import ACCOUNTING_KEY, ParseAccounting, Trace, checked, conform, metadata_table

MARKER = "neurontrace-dataset.json"
LAYOUT = "neurontrace-dataset/1"
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"  # the hive convention for a null partition value
PARTITIONING = pads.HivePartitioning(pa.schema([("rank", pa.int32())]), null_fallback=NULL_PARTITION)


def partition(rank: int | None) -> str:
    return f"rank={NULL_PARTITION if rank is None else rank}"


def write_rank(trace: Trace, directory: str | Path, part: int = 0) -> dict[str, Any]:
    """Write one rank's trace as its partition of every table; returns what the marker records of it."""
    ranks = {r for t in (trace.system_events, trace.device_events) for r in t["rank"].to_pylist()}
    if len(ranks) > 1:
        raise ValueError(f"write_rank takes one rank's trace, got ranks {sorted(ranks, key=str)}")
    rank = next(iter(ranks), None)
    rows, sizes = {}, {}
    for name, table in trace.tables.items():
        out = Path(directory) / name / partition(rank)
        out.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out / f"part-{part}.parquet", compression="zstd")
        rows[name] = table.num_rows
        sizes[name] = (out / f"part-{part}.parquet").stat().st_size
    return {"rank": rank, "partition": partition(rank), "part": part,
            "sources": [a.source for a in trace.accounting], "rows": rows, "bytes": sizes}


def start(directory: str | Path, *, force: bool = False) -> Path:
    """The writer's own new directory beside the dataset (finish() swaps it in), refusing to clobber.

    A killed writer's leftovers beside it are dealt with first (neurontrace._replace: an old dataset it had
    moved aside is put back, its partial directory removed)."""
    out = Path(directory).resolve()
    _replace.clean_leftovers(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise OutputExistsError(f"{out} already exists and is not empty; pass --force to replace it")
    return _replace.make_partial(out)


def finish(tmp: Path, directory: str | Path, ranks: list[dict[str, Any]], *, force: bool = True) -> Path:
    """Write the marker and swap the finished dataset in: at every moment the output is the whole old
    dataset or the whole new one, whenever the process is killed (neurontrace._replace)."""
    out = Path(directory)
    ranks = sorted(ranks, key=lambda r: (r["rank"] is None, r["rank"] or 0, r["part"]))
    marker = {"layout": LAYOUT, "tables": list(schema.TABLES), "ranks": ranks}
    (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    final = out.resolve()
    try:
        _replace.swap(tmp, final, force=force)
    except FileExistsError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputExistsError(f"{out} was written by someone else meanwhile; pass --force to replace it") \
            from None
    return out


def write_dataset(traces: list[Trace], directory: str | Path, *, force: bool = False) -> Path:
    """A dataset from traces held in memory (one or more ranks each); ``convert`` streams instead."""

    tmp = start(directory, force=force)
    try:
        return _write_ranks(traces, tmp, directory, force)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already unless something failed


def _write_ranks(traces: list[Trace], tmp: Path, directory: str | Path, force: bool) -> Path:
    seen: dict[int | None, int] = {}
    ranks = []
    for t in traces:
        for one in t.split_ranks():
            r = rank_of(one)
            ranks.append(write_rank(one, tmp, seen.get(r, 0)))
            seen[r] = seen.get(r, 0) + 1
            last = one
    if len(ranks) == 1:  # one Trace, as the viewer shows it: its index stored beside (neurontrace/app/index_store.py)
        from neurontrace.app import index_store

        index_store.store_for(last, tmp, ranks[0]["partition"])
    return finish(tmp, directory, ranks, force=force)


def rank_of(trace: Trace) -> int | None:
    ranks = {r for t in (trace.system_events, trace.device_events) for r in t["rank"].to_pylist()}
    return next(iter(ranks), None)


@dataclass(frozen=True)
class Dataset:
    """A neurontrace dataset opened lazily: nothing is read until a table is scanned or a rank loaded.

    Only the part files its marker lists are ever read: a partition added beside them (by hand, or by
    another writer) is left out and listed in ``extra`` (and a TraceWarning says how many); one the marker
    lists that is missing is a named error when the dataset is opened; one that changed since it was
    written (its size), or while it is read, or that holds another schema (a newer neurontrace's), is a
    named error when it is loaded."""

    path: Path
    ranks: list[dict[str, Any]]  # the marker's entries: rank, partition, part, sources, rows per table
    extra: tuple[str, ...] = ()  # part files (relative paths) beside the listed ones, never read

    @property
    def warnings(self) -> list[str]:
        """What opening the dataset warned about (the part files left out), as every loaded Trace's
        accounting carries it: one accounting entry of the dataset itself, so every report shows it."""
        if not self.extra:
            return []
        n = len(self.extra)
        return [(f"{self.path}: {n} part file{'s' if n != 1 else ''} not in its marker "
                 f"({', '.join(self.extra[:3])}{', ...' if n > 3 else ''}) left out; only the listed ranks are read")]

    @property
    def tables(self) -> list[str]:
        return list(schema.TABLES)

    def files(self, table: str) -> list[Path]:
        """The part files of one table that the marker lists, in its order."""
        return [self.path / table / e["partition"] / f"part-{e['part']}.parquet" for e in self.ranks]

    def dataset(self, table: str = "system_events") -> pads.Dataset:
        """A ``pyarrow.dataset`` over one table's listed partitions (``rank`` is the partition key)."""
        if table not in schema.TABLES:
            raise KeyError(f"no table {table!r}; tables are {', '.join(schema.TABLES)}")
        spec = schema.TABLES[table]
        if spec.optional and not (self.path / table).is_dir():  # a dataset written before the table existed
            return pads.dataset(spec.empty())
        return pads.dataset([str(f) for f in self.files(table)], format="parquet", partitioning=PARTITIONING,
                            partition_base_dir=str(self.path / table), schema=spec.schema)

    def to_polars(self, table: str = "system_events") -> Any:
        """One table as a polars ``LazyFrame`` (filters and projections pushed into the scan)."""
        from neurontrace._optional import require

        pl = require("polars", extra="polars")
        return pl.scan_pyarrow_dataset(self.dataset(table))

    def to_duckdb(self, table: str = "system_events", connection: Any = None) -> Any:
        """One table as a DuckDB relation over the dataset (needs ``duckdb`` installed)."""
        from neurontrace._optional import require

        duckdb = require("duckdb", extra="duckdb")
        con = connection if connection is not None else duckdb.connect()
        return con.from_arrow(self.dataset(table))

    def load(self, rank: int | None = None) -> Trace:
        """One rank as a Trace (only its files are read), or every rank combined when ``rank`` is None."""
        entries = self.ranks if rank is None else [e for e in self.ranks if e["rank"] == rank]
        if not entries:
            have = ", ".join(str(e["rank"]) for e in self.ranks)
            raise InputNotFoundError(f"{self.path}: no rank {rank} in this dataset (ranks: {have})")
        traces, done = [], set()
        for e in entries:
            if time_parts(e):
                if e["partition"] not in done:
                    traces.append(self._partition(e["partition"]))
                    done.add(e["partition"])
            else:
                traces.append(self._part(e["partition"], e["part"]))
        return self._own_warnings(Trace.concat(traces), entries[0])

    def load_partition(self, partition: str) -> Trace:
        """Every part of one partition as one Trace. The time parts of one streamed trace
        (``convert TRACE -o DATASET --dataset``, neurontrace.dataset_stream) share one id space: their
        tables are concatenated as they are and put back in the file's order, so the Trace equals the
        whole-file parse's; other parts are concatenated as separate traces (ids renumbered)."""
        entries = [e for e in self.ranks if e["partition"] == partition]
        if not entries:
            raise InputNotFoundError(f"{self.path}: no {partition} in this dataset's marker")
        return self._own_warnings(self._partition(partition), entries[0])

    def _partition(self, partition: str) -> Trace:
        entries = [e for e in self.ranks if e["partition"] == partition]
        if not all(time_parts(e) for e in entries):
            return Trace.concat([self._part(partition, e["part"]) for e in entries])
        tables = {}
        for name, spec in schema.TABLES.items():
            files = [(self.path / name / partition / f"part-{e['part']}.parquet", e) for e in entries]
            if spec.optional and not all(f.is_file() for f, _ in files):
                continue
            tables[name] = file_order(name, pa.concat_tables([_read_part(f, spec, e, name) for f, e in files]))
        if len(entries) > 1:
            tables["metadata"] = _warned(tables["metadata"], WHOLE_RANK.format(
                where=self.path / partition, parts=len(entries),
                events=sum(e["rows"]["system_events"] + e["rows"]["device_events"] for e in entries)))
        return checked(Trace(**tables), str(self.path / partition))

    def load_part(self, partition: str, part: int = 0) -> Trace:
        """One part file set (``partition`` as in the marker, e.g. ``rank=3``) as a Trace."""
        found = next((e for e in self.ranks if e["partition"] == partition and e["part"] == part), None)
        return self._own_warnings(self._part(partition, part), found)

    def _own_warnings(self, trace: Trace, entry: dict[str, Any] | None) -> Trace:
        """``trace`` with the dataset's own warnings in its accounting: an entry that read no events, of the
        rank of ``entry`` (the first rank loaded), so a job's report, split by rank, shows them once."""
        if not self.warnings or entry is None:
            return trace
        acct = ParseAccounting(str(self.path), "neurontrace-dataset", warnings=self.warnings)
        own = metadata_table({ACCOUNTING_KEY: acct.as_dict()}, source=str(self.path), rank=entry.get("rank"))
        tables = trace.tables
        tables["metadata"] = pa.concat_tables([tables["metadata"], own])
        return Trace(**tables)

    def _part(self, partition: str, part: int) -> Trace:
        entry = next((e for e in self.ranks if e["partition"] == partition and e["part"] == part), None)
        if entry is None:
            raise InputNotFoundError(f"{self.path}: no {partition} part {part} in this dataset's marker")
        tables = {}
        for name in schema.TABLES:
            f = self.path / name / partition / f"part-{part}.parquet"
            if schema.TABLES[name].optional and not f.is_file():
                continue  # a dataset written before this table existed
            tables[name] = _read_part(f, schema.TABLES[name], entry, name)
        # A dataset written before the normalized metadata keys existed gets them here.
        return with_normalized(checked(Trace(**tables), str(self.path / partition)))


# Said in every report of a streamed trace read back whole (load(DATASET), and what is made of it): what is not
# bounded is said, not hidden (docs/scale.md).
WHOLE_RANK = ("{where}: its {parts} time-ordered parts ({events} events) were read whole, so memory grows with "
              "the trace; `neurontrace diagnose` reads such a dataset slice by slice in bounded memory "
              "(docs/scale.md, 'diagnose DATASET')")


def _warned(metadata: pa.Table, message: str) -> pa.Table:
    """The metadata with ``message`` added to the warnings of its parse accounting."""
    keys, values = metadata["key"].to_pylist(), metadata["value"].to_pylist()
    for i, k in enumerate(keys):
        if k == ACCOUNTING_KEY:
            acct = json.loads(values[i])
            acct["warnings"] = [*acct.get("warnings", []), message]
            values[i] = json.dumps(acct, sort_keys=True)
    return metadata.set_column(metadata.schema.get_field_index("value"), "value",
                               pa.array(values, metadata.schema.field("value").type))


def time_parts(entry: dict[str, Any]) -> bool:
    """Whether a marker entry is one time part of a streamed trace (it records its ``span_ns``)."""
    return "span_ns" in entry


# The memory counters of a trace come field by field (parsers/kineto.py), then its C events.
_COUNTER_GROUPS = pa.array(["Bytes", "Total Allocated", "Total Reserved"])


def file_order(name: str, table: pa.Table) -> pa.Table:
    """A streamed trace's table, concatenated from its time parts, in the order the whole-file parse gives."""
    if name in ("system_events", "device_events"):
        return table.sort_by("event_id")
    if name == "counters" and table.num_rows:
        memory = pc.and_(pc.equal(table["unit"].cast(pa.string()), "bytes"), pc.is_valid(pc.index_in(
            table["field"].cast(pa.string()), _COUNTER_GROUPS)))
        group = pc.if_else(pc.fill_null(memory, False), pc.index_in(table["field"].cast(pa.string()), _COUNTER_GROUPS),
                           len(_COUNTER_GROUPS))
        order = np.argsort(group.to_numpy(zero_copy_only=False), kind="stable")
        return table.take(pa.array(order))
    return table


def _read_part(f: Path, spec: schema.TableSpec, entry: dict[str, Any], name: str) -> pa.Table:
    """One part file, read once from one open descriptor and checked against the marker and the schema."""
    again = "convert the original traces again"
    try:
        with f.open("rb") as fh:
            before = identity(os.fstat(fh.fileno()))
            want = (entry.get("bytes") or {}).get(name)
            if isinstance(want, int) and want != before[2]:
                raise InputChangedError(f"{f}: {before[2]} bytes, the marker says {want}: the partition changed "
                                        f"since it was written; {again}")
            check_parquet_expansion(f, pq.read_metadata(fh), before[2])
            fh.seek(0)
            table = pq.read_table(fh)
            unchanged(f, before, os.fstat(fh.fileno()))
    except (OSError, pa.ArrowException) as exc:
        raise MalformedTraceError(f"{f}: not readable Parquet ({exc}); {again}") from exc
    try:
        table = conform(table, spec)
    except ValueError as exc:  # a column missing, added or of another type: another version wrote it
        raise MalformedTraceError(f"{f}: not the schema this neurontrace reads ({exc}); written by another "
                                  f"version? {again}") from exc
    rows = (entry.get("rows") or {}).get(name)
    if isinstance(rows, int) and rows != table.num_rows:
        raise InputChangedError(f"{f}: {table.num_rows} rows, the marker says {rows}: the partition changed since "
                                f"it was written; {again}")
    return table


def open_dataset(path: str | Path) -> Dataset:
    """Open a dataset written by ``neurontrace convert DIR -o DATASET`` (reads only its marker, and lists its
    files: a listed part file that is missing is a named error, one not listed is left out with a warning)."""
    p = Path(path)
    marker = p / MARKER
    if not marker.is_file():
        raise InputNotFoundError(f"{p} is not a neurontrace dataset (no {MARKER}); make one with "
                                 f"`neurontrace convert DIR -o {p}`")
    try:
        doc = json.loads(marker.read_text())
    except (ValueError, UnicodeError, RecursionError) as exc:  # RecursionError: nested past the parser's limit
        raise MalformedTraceError(f"{marker}: unreadable ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("layout") != LAYOUT:
        got = doc.get("layout") if isinstance(doc, dict) else type(doc).__name__
        raise MalformedTraceError(f"{p}: layout {got!r}, this neurontrace reads {LAYOUT}; "
                                  "convert the original traces again")
    ranks = doc.get("ranks")
    if not isinstance(ranks, list) or not all(_entry_ok(e) for e in ranks):
        raise MalformedTraceError(f"{marker}: 'ranks' is not a list of entries with a partition (rank=N), a "
                                  "part number and, for a time part, its span_ns [start, end]; convert the "
                                  "original traces again")
    ds = Dataset(p, list(ranks))
    listed = {str(f.relative_to(p)) for t in schema.TABLES for f in ds.files(t)}
    missing = sorted(f for f in listed if not (p / f).is_file())
    if missing:
        raise MalformedTraceError(f"{p}: {len(missing)} part file{'s' if len(missing) != 1 else ''} its marker lists "
                                  f"{'are' if len(missing) != 1 else 'is'} missing ({', '.join(missing[:3])}"
                                  f"{', ...' if len(missing) > 3 else ''}); convert the original traces again")
    found = {str(f.relative_to(p)) for f in p.glob("*/rank=*/*.parquet")}
    opened = Dataset(p, list(ranks), tuple(sorted(found - listed)))
    for message in opened.warnings:
        warnings.warn(TraceWarning(message), stacklevel=2)
    return opened


def _entry_ok(e: Any) -> bool:
    if not isinstance(e, dict):
        return False
    part, where, span = e.get("part"), e.get("partition"), e.get("span_ns")
    if span is not None and not (isinstance(span, list) and len(span) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in span) and span[0] <= span[1]):
        return False  # a time part's span: [first start, last end] in ns, or null for a part without events
    return (isinstance(part, int) and not isinstance(part, bool) and 0 <= part < 1 << 20 and isinstance(where, str)
            and where.startswith("rank=") and "/" not in where and "\\" not in where and ".." not in where
            and (e.get("rank") is None or (isinstance(e.get("rank"), int) and not isinstance(e.get("rank"), bool)
                                           and -(1 << 31) <= e["rank"] < 1 << 31)))  # ranks are int32


# -- the load() registry entry (neurontrace.load: format "neurontrace-dataset") -------------------

def sniff(probe: Any) -> bool:
    return bool(probe.is_dir and (probe.path / MARKER).is_file())


def parse(path: Path, *, progress: Progress = no_progress, partition: str | None = None,
          part: int | None = 0) -> Trace:
    """Every rank of the dataset as one Trace, or only one ``partition`` (``rank=3``: what a map task reads):
    its part ``part``, or all its parts when ``part`` is None (a streamed trace's time parts)."""
    ds = open_dataset(path)
    if partition is None:
        return ds.load()
    return ds.load_partition(partition) if part is None else ds.load_part(partition, part)
