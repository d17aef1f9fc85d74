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
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from neurontrace import schema
from neurontrace.errors import InputNotFoundError, MalformedTraceError, OutputExistsError
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import Trace

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
    rows = {}
    for name, table in trace.tables.items():
        out = Path(directory) / name / partition(rank)
        out.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out / f"part-{part}.parquet", compression="zstd")
        rows[name] = table.num_rows
    return {"rank": rank, "partition": partition(rank), "part": part,
            "sources": [a.source for a in trace.accounting], "rows": rows}


def start(directory: str | Path, *, force: bool = False) -> Path:
    """The dataset's temporary sibling to write into (finish() renames it), refusing to clobber."""
    out = Path(directory)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise OutputExistsError(f"{out} already exists and is not empty; pass --force to replace it")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def finish(tmp: Path, directory: str | Path, ranks: list[dict[str, Any]]) -> Path:
    """Write the marker and move the finished dataset into place (a failure never leaves half a dataset)."""
    out = Path(directory)
    ranks = sorted(ranks, key=lambda r: (r["rank"] is None, r["rank"] or 0, r["part"]))
    marker = {"layout": LAYOUT, "tables": list(schema.TABLES), "ranks": ranks}
    (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out) if out.is_dir() else out.unlink()
    tmp.rename(out)
    return out


def write_dataset(traces: list[Trace], directory: str | Path, *, force: bool = False) -> Path:
    """A dataset from traces held in memory (one or more ranks each); ``convert`` streams instead."""

    tmp = start(directory, force=force)
    seen: dict[int | None, int] = {}
    ranks = []
    for t in traces:
        for one in t.split_ranks():
            r = rank_of(one)
            ranks.append(write_rank(one, tmp, seen.get(r, 0)))
            seen[r] = seen.get(r, 0) + 1
    return finish(tmp, directory, ranks)


def rank_of(trace: Trace) -> int | None:
    ranks = {r for t in (trace.system_events, trace.device_events) for r in t["rank"].to_pylist()}
    return next(iter(ranks), None)


@dataclass(frozen=True)
class Dataset:
    """A neurontrace dataset opened lazily: nothing is read until a table is scanned or a rank loaded."""

    path: Path
    ranks: list[dict[str, Any]]  # the marker's entries: rank, partition, part, sources, rows per table

    @property
    def tables(self) -> list[str]:
        return list(schema.TABLES)

    def dataset(self, table: str = "system_events") -> pads.Dataset:
        """A ``pyarrow.dataset`` over one table's partitions (``rank`` is the partition key)."""
        if table not in schema.TABLES:
            raise KeyError(f"no table {table!r}; tables are {', '.join(schema.TABLES)}")
        spec = schema.TABLES[table]
        if spec.optional and not (self.path / table).is_dir():  # a dataset written before the table existed
            return pads.dataset(spec.empty())
        return pads.dataset(self.path / table, format="parquet", partitioning=PARTITIONING, schema=spec.schema)

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
        return Trace.concat([self.load_part(e["partition"], e["part"]) for e in entries])

    def load_part(self, partition: str, part: int = 0) -> Trace:
        """One part file set (``partition`` as in the marker, e.g. ``rank=3``) as a Trace."""
        tables = {}
        for name in schema.TABLES:
            f = self.path / name / partition / f"part-{part}.parquet"
            if schema.TABLES[name].optional and not f.is_file():
                continue  # a dataset written before this table existed
            try:
                tables[name] = pq.read_table(f)
            except (OSError, pa.ArrowException) as exc:
                raise MalformedTraceError(f"{f}: not readable Parquet ({exc}); convert the original trace again")\
                    from exc
        try:
            return Trace(**tables)
        except (ValueError, TypeError, pa.ArrowException) as exc:  # a column added, missing or of another type
            raise MalformedTraceError(f"{self.path / partition}: a partition that is not as neurontrace wrote it "
                                      f"({exc}); convert the original trace again") from exc


def open_dataset(path: str | Path) -> Dataset:
    """Open a dataset written by ``neurontrace convert DIR -o DATASET`` (reads only its marker)."""
    p = Path(path)
    marker = p / MARKER
    if not marker.is_file():
        raise InputNotFoundError(f"{p} is not a neurontrace dataset (no {MARKER}); make one with "
                                 f"`neurontrace convert DIR -o {p}`")
    try:
        doc = json.loads(marker.read_text())
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past the parser's limit
        raise MalformedTraceError(f"{marker}: unreadable ({exc})") from exc
    if not isinstance(doc, dict):
        raise MalformedTraceError(f"{marker}: holds {type(doc).__name__}, not the object neurontrace writes")
    if doc.get("layout") != LAYOUT:
        raise MalformedTraceError(f"{p}: layout {doc.get('layout')!r}, this neurontrace reads {LAYOUT}; "
                                  "convert the original traces again")
    return Dataset(p, _ranks(marker, doc.get("ranks")))


_PARTITION = re.compile(rf"^rank=(-?\d{{1,10}}|{NULL_PARTITION})$")


def _ranks(marker: Path, ranks: Any) -> list[dict[str, Any]]:
    """The marker's ranks, each checked: a partition name other than ``rank=N`` (a path such as
    ``../x`` would read outside the dataset), a rank that is no int32, a part that is no small int are
    named errors."""
    if not isinstance(ranks, list):
        raise MalformedTraceError(f"{marker}: 'ranks' holds {type(ranks).__name__}, not the list neurontrace writes")
    for e in ranks:
        ok = isinstance(e, dict) and isinstance(e.get("partition"), str) and _PARTITION.match(e["partition"]) \
            and (e.get("rank") is None or (type(e["rank"]) is int and -(2**31) <= e["rank"] < 2**31)) \
            and type(e.get("part")) is int and 0 <= e["part"] < 1 << 20
        if not ok:
            raise MalformedTraceError(f"{marker}: a rank entry that is not as neurontrace writes it "
                                      f"({json.dumps(e, default=str)[:120]}); convert the original traces again")
    return ranks


# -- the load() registry entry (neurontrace.load: format "neurontrace-dataset") -------------------

def sniff(probe: Any) -> bool:
    return bool(probe.is_dir and (probe.path / MARKER).is_file())


def parse(path: Path, *, progress: Progress = no_progress, partition: str | None = None, part: int = 0) -> Trace:
    """Every rank of the dataset as one Trace, or only one ``partition`` (``rank=3``: what a map task reads)."""
    ds = open_dataset(path)
    return ds.load() if partition is None else ds.load_part(partition, part)
