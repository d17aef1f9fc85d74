"""`Trace`: the normalized tables of one profiled run, plus what parsing kept and skipped."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from neurontrace import _replace, schema
from neurontrace._io import check_parquet_expansion
from neurontrace.errors import InputNotFoundError, MalformedTraceError, OutputExistsError

ACCOUNTING_KEY = "neurontrace.accounting"
PARQUET_MARKER = "neurontrace.json"
PARQUET_LAYOUT_VERSION = 1
_EVENT_TABLES = ("system_events", "device_events")
# Tables of samples at instants, filtered by time, rank and device alike.
_TIMED_TABLES = tuple(n for n, t in schema.TABLES.items()
                      if n not in _EVENT_TABLES and "ts_ns" in t.column_names and "rank" in t.column_names
                      and "device" in t.column_names)


@dataclass
class ParseAccounting:
    """What one parse of one input did with every event it read.

    The invariant (:meth:`check`, which the loader runs on every parse): ``events_read == kept_total + skipped_total``.
    ``kept`` counts input events by the table they went to; ``skipped`` by reason.
    """

    source: str
    format: str
    events_read: int = 0
    kept: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def kept_total(self) -> int:
        return sum(self.kept.values())

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    def keep(self, table: str, n: int) -> None:
        if n:
            self.kept[table] = self.kept.get(table, 0) + n

    def skip(self, reason: str, n: int) -> None:
        if n:
            self.skipped[reason] = self.skipped.get(reason, 0) + n

    def check(self) -> None:
        if self.kept_total + self.skipped_total != self.events_read:
            raise AssertionError(
                f"{self.source}: read {self.events_read} events but kept {self.kept_total} "
                f"and skipped {self.skipped_total}"
            )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def metadata_table(facts: Mapping[str, Any], *, source: str | None = None, rank: int | None = None) -> pa.Table:
    """Key/value facts as a ``metadata`` table; values are stored as JSON text."""
    keys = list(facts)
    return pa.table(
        {
            "key": pa.array(keys, pa.string()),
            "value": pa.array([json.dumps(facts[k], sort_keys=True, default=str) for k in keys], pa.string()),
            "source": pa.array([source] * len(keys), pa.string()),
            "rank": pa.array([rank] * len(keys), pa.int32()),
        },
        schema=schema.METADATA.schema,
    )


def conform(table: pa.Table | None, spec: schema.TableSpec) -> pa.Table:
    """Cast ``table`` to the declared schema (column order, types, field docs); missing → empty."""
    if table is None:
        return spec.empty()
    extra = set(table.column_names) - set(spec.column_names)
    if extra:
        raise ValueError(f"{spec.name}: columns not in the schema: {sorted(extra)}")
    n = table.num_rows
    cols = []
    for col in spec.columns:
        if col.name in table.column_names:
            arr = table.column(col.name)
            if arr.type != col.type:
                arr = arr.cast(col.type)
        else:
            if not col.nullable:
                raise ValueError(f"{spec.name}: required column {col.name!r} is missing")
            arr = pa.nulls(n, col.type)
        cols.append(arr)
    # One dictionary per column across chunks (concatenated traces differ), so selections and
    # group-bys never meet "differing dictionaries".
    return pa.Table.from_arrays(cols, schema=spec.schema).unify_dictionaries()


class Trace:
    """The normalized tables of a profiled run (see ``docs/schema.md``).

    Tables are pyarrow Tables conforming to :mod:`neurontrace.schema`. Per-input parse accounting
    lives in ``metadata`` (key ``neurontrace.accounting``) so it survives a Parquet round trip.
    """

    system_events: pa.Table
    device_events: pa.Table
    flows: pa.Table
    counters: pa.Table
    frames: pa.Table
    metadata: pa.Table
    memory_events: pa.Table

    def __init__(self, **tables: pa.Table | None) -> None:
        """One keyword per table of ``schema.TABLES`` (each optional: a missing table is empty)."""
        unknown = set(tables) - set(schema.TABLES)
        if unknown:
            raise TypeError(f"no table {sorted(unknown)}; tables are {', '.join(schema.TABLES)}")
        for name, spec in schema.TABLES.items():
            setattr(self, name, conform(tables.get(name), spec))

    # -- access ---------------------------------------------------------------------------------

    @property
    def tables(self) -> dict[str, pa.Table]:
        return {name: getattr(self, name) for name in schema.TABLES}

    @property
    def accounting(self) -> list[ParseAccounting]:
        rows = self.metadata.filter(pc.equal(self.metadata["key"], ACCOUNTING_KEY))
        return [ParseAccounting(**json.loads(v)) for v in rows["value"].to_pylist()]

    def meta(self, key: str, default: Any = None) -> Any:
        """The first value recorded for ``key`` (JSON-decoded), or ``default``."""
        rows = self.metadata.filter(pc.equal(self.metadata["key"], key))
        return json.loads(rows["value"][0].as_py()) if rows.num_rows else default

    def meta_all(self, key: str) -> list[Any]:
        rows = self.metadata.filter(pc.equal(self.metadata["key"], key))
        return [json.loads(v) for v in rows["value"].to_pylist()]

    def to_pandas(self, table: str = "system_events") -> Any:
        """One table as a pandas DataFrame (dictionary columns become categoricals)."""
        return self._table(table).to_pandas()

    def to_polars(self, table: str = "system_events") -> Any:
        """One table as a polars DataFrame; needs ``pip install neurontrace[polars]``."""
        from neurontrace._optional import require

        pl = require("polars", extra="polars")
        return pl.from_arrow(self._table(table))

    def _table(self, name: str) -> pa.Table:
        if name not in schema.TABLES:
            raise KeyError(f"no table {name!r}; tables are {', '.join(schema.TABLES)}")
        return getattr(self, name)

    @property
    def num_events(self) -> int:
        return int(self.system_events.num_rows + self.device_events.num_rows)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{n}={t.num_rows}" for n, t in self.tables.items())
        return f"<Trace {sizes}>"

    def equals(self, other: Trace) -> bool:
        """Same rows in the same order with the same values (dictionary layout aside)."""
        return all(_plain(t).equals(_plain(other.tables[n])) for n, t in self.tables.items())

    # -- selection ------------------------------------------------------------------------------

    def filter(
        self,
        *,
        start_ns: int | None = None,
        end_ns: int | None = None,
        device: str | None = None,
        rank: int | None = None,
    ) -> Trace:
        """Events overlapping ``[start_ns, end_ns)``, on ``device``, of ``rank``.

        Host events are kept for a device filter unless they name another device; flows are kept
        when either end survives.
        """
        out = {}
        for name in _EVENT_TABLES:
            t = self.tables[name]
            mask = _overlap_mask(t, start_ns, end_ns)
            if rank is not None:
                mask = pc.and_(mask, pc.fill_null(pc.equal(t["rank"], rank), False))
            if device is not None:
                dev = pc.equal(pc.cast(t["device"], pa.string()), device)
                if name == "system_events":
                    dev = pc.or_(pc.is_null(t["device"]), pc.fill_null(dev, False))
                mask = pc.and_(mask, pc.fill_null(dev, False))
            out[name] = t.filter(mask)
        kept_ids = pa.concat_arrays(
            [out[n]["event_id"].combine_chunks() for n in _EVENT_TABLES]
        )
        fl = self.flows
        fmask = pc.or_(
            pc.fill_null(pc.is_in(fl["src_event_id"], kept_ids), False),
            pc.fill_null(pc.is_in(fl["dst_event_id"], kept_ids), False),
        )
        timed = {name: _timed_filter(self.tables[name], start_ns, end_ns, device, rank) for name in _TIMED_TABLES}
        return Trace(**out, **timed, flows=fl.filter(fmask), frames=self.frames, metadata=self.metadata)

    # -- persistence ----------------------------------------------------------------------------

    def to_parquet(self, directory: str | Path, *, force: bool = False) -> Path:
        """Write every table as ``<table>.parquet`` in ``directory`` (lossless, see from_parquet).

        Refuses to write into an existing non-empty directory unless ``force``. The tables are
        written to a temporary directory beside it (a unique one per writer) and renamed into place,
        so a failure never leaves half a trace and two writers never mix their files: the last to
        finish wins (or, without ``force``, the later one is refused).
        """
        out = Path(directory)
        if out.resolve() in (Path.cwd(), *Path.cwd().parents):  # replacing it would pull the floor away
            raise OutputExistsError(f"{out} is the current directory or one above it; write to a new directory")
        if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
            raise OutputExistsError(f"{out} already exists and is not empty; pass --force to replace it")
        final = out.resolve()
        _replace.clean_leftovers(final)  # a killed writer's old output put back, dead writers' partials removed
        tmp = _replace.make_partial(final)  # unique per writer, with its pid in the name
        try:
            for name, table in self.tables.items():
                pq.write_table(table, tmp / f"{name}.parquet", compression="zstd")
            marker = {"layout_version": PARQUET_LAYOUT_VERSION, "tables": list(schema.TABLES)}
            (tmp / PARQUET_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
            try:
                _replace.swap(tmp, final, force=force)
            except FileExistsError:
                raise OutputExistsError(f"{out} was written by someone else meanwhile; pass --force to "
                                        "replace it") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # gone already unless something failed
        return out

    @classmethod
    def from_parquet(cls, directory: str | Path) -> Trace:
        """Read a directory written by :meth:`to_parquet`; the tables compare equal to the original."""
        d = Path(directory)
        marker = d / PARQUET_MARKER
        if not marker.is_file():
            raise InputNotFoundError(f"{d} is not a neurontrace Parquet directory (no {PARQUET_MARKER})")
        try:
            layout = json.loads(marker.read_text())["layout_version"]
        except (ValueError, KeyError, TypeError, IndexError, RecursionError) as exc:  # TypeError: not an object
            raise MalformedTraceError(f"{marker}: unreadable marker file ({exc!r}); expected an object with a "
                                      "layout_version. Convert the original trace again") from exc
        if layout != PARQUET_LAYOUT_VERSION:
            raise MalformedTraceError(
                f"{d}: layout version {layout}, this neurontrace reads {PARQUET_LAYOUT_VERSION}; "
                "convert the original trace again"
            )
        tables = {}
        for name in schema.TABLES:
            path = d / f"{name}.parquet"
            if not path.is_file() and schema.TABLES[name].optional:
                continue  # written before this table existed: it reads back empty
            if not path.is_file():
                raise MalformedTraceError(f"{d}: {path.name} is missing; convert the original trace again")
            try:
                with path.open("rb") as fh:
                    check_parquet_expansion(path, pq.read_metadata(fh), os.fstat(fh.fileno()).st_size)
                    fh.seek(0)
                    tables[name] = conform(pq.read_table(fh), schema.TABLES[name])
            except (pa.ArrowException, OSError) as exc:
                raise MalformedTraceError(f"{path}: not readable Parquet ({exc})") from exc
            except ValueError as exc:  # a column missing, added or of another type
                raise MalformedTraceError(f"{path}: not the layout this neurontrace writes ({exc}); convert the "
                                          "original trace again") from exc
        return checked(cls(**tables), str(d))

    # -- combining ------------------------------------------------------------------------------

    def split_ranks(self) -> list[Trace]:
        """One Trace per rank, in rank order (no rank last); the trace itself when it holds one rank.

        Each part holds that rank's events, counters and metadata, the flows between its events, and the
        frames its events name (with their callers). One sort per table, then slices: the cost grows with
        the events, not with events x ranks.
        """
        ranks = sorted(set(self.system_events["rank"].to_pylist()) | set(self.device_events["rank"].to_pylist()),
                       key=lambda r: (r is None, r or 0))
        if len(ranks) <= 1:
            return [self]
        parts: dict[str, list[pa.Table]] = {
            name: _slices(self.tables[name], _rank_key(self.tables[name]["rank"]), ranks)
            for name, spec in schema.TABLES.items() if name != "flows" and "rank" in spec.column_names}
        parts["flows"] = _slices(self.flows, _flow_rank_key(self), ranks)
        out = []
        for i in range(len(ranks)):
            tables = {name: parts[name][i] for name in parts}
            ids = np.concatenate([_ids(tables[n]["frame_id"]) for n in _FRAME_USERS])
            out.append(Trace(**tables, frames=_frames_for(self.frames, ids)))
        return out


    @classmethod
    def concat(cls, traces: Iterable[Trace]) -> Trace:
        """One trace from several (ranks, hosts, device + host profiles); ids are renumbered."""
        parts = list(traces)
        if len(parts) == 1:
            return parts[0]
        events: dict[str, list[pa.Table]] = {n: [] for n in schema.TABLES}
        event_offset = frame_offset = 0
        for t in parts:
            for name, table in t.tables.items():
                offsets = {c: event_offset if kind == "event" else frame_offset for c, kind in _ID_COLUMNS[name]}
                events[name].append(_shift(table, offsets))
            event_offset += _next_id(t.system_events, t.device_events, column="event_id")
            frame_offset += _next_id(t.frames, column="frame_id")
        return cls(**{n: pa.concat_tables(ts, promote_options="permissive") for n, ts in events.items()})


def _id_columns(spec: schema.TableSpec) -> list[tuple[str, str]]:
    """The columns of a table holding event ids or frame ids (its own, or references to them), which
    concatenating traces renumbers: (column, "event" | "frame")."""
    out = []
    for c in spec.columns:
        if (c.name == "event_id" and spec.name in _EVENT_TABLES) or "event_id" in c.references:
            out.append((c.name, "event"))
        elif (c.name == "frame_id" and spec.name == "frames") or c.references == "frames.frame_id":
            out.append((c.name, "frame"))
    return out


_ID_COLUMNS = {name: _id_columns(spec) for name, spec in schema.TABLES.items()}
# Tables whose rows name frames: a rank's part keeps the frames they name.
_FRAME_USERS = tuple(n for n, cols in _ID_COLUMNS.items() if n != "frames" and ("frame_id", "frame") in cols)


def _timed_filter(t: pa.Table, start_ns: int | None, end_ns: int | None, device: str | None,
                  rank: int | None) -> pa.Table:
    mask = _overlap_mask(t, start_ns, end_ns)
    if rank is not None:
        mask = pc.and_(mask, pc.fill_null(pc.equal(t["rank"], rank), False))
    if device is not None:
        mask = pc.and_(mask, pc.fill_null(pc.equal(pc.cast(t["device"], pa.string()), device), True))
    return t.filter(mask)


def checked(trace: Trace, source: str) -> Trace:
    """The trace, once every table passes ``validate(full=True)``; for parsers reading Parquet, whose
    readers do not check UTF-8 (a flipped byte in a string page would otherwise reach the tables).
    Cheap next to parsing (about 4% of a Neuron load), since repeated strings are dictionaries."""
    for name, table in trace.tables.items():
        try:
            table.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise MalformedTraceError(f"{source}: the {name} read from it are damaged ({exc}); a Parquet page "
                                      "was corrupted. Regenerate or copy the files again") from exc
    return trace


def _plain(t: pa.Table) -> pa.Table:
    """Dictionary columns decoded, so tables compare by value, not by dictionary layout."""
    cols = [c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in t.columns]
    return pa.Table.from_arrays(cols, names=t.column_names)


def _overlap_mask(t: pa.Table, start_ns: int | None, end_ns: int | None) -> pa.ChunkedArray | pa.Array:
    mask = pa.array([True] * t.num_rows, pa.bool_())
    if start_ns is not None:
        end = pc.add(t["ts_ns"], t["dur_ns"]) if "dur_ns" in t.column_names else t["ts_ns"]
        # Instants at exactly start_ns belong to the window; spans must reach into it.
        mask = pc.and_(mask, pc.or_(pc.greater(end, start_ns), pc.greater_equal(t["ts_ns"], start_ns)))
    if end_ns is not None:
        mask = pc.and_(mask, pc.less(t["ts_ns"], end_ns))
    return mask


def _shift(t: pa.Table, offsets: Mapping[str, int]) -> pa.Table:
    for col, off in offsets.items():
        if off:
            i = t.schema.get_field_index(col)
            t = t.set_column(i, t.schema.field(i), pc.add(t[col], off))
    return t


def _next_id(*tables: pa.Table, column: str) -> int:
    top = -1
    for t in tables:
        if t.num_rows:
            top = max(top, int(pc.max(t[column]).as_py()))
    return top + 1


_NO_RANK = np.iinfo(np.int64).max  # sorts after every rank, as None does in split_ranks


def _rank_key(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(col.cast(pa.int64()), _NO_RANK).to_numpy())


def _flow_rank_key(trace: Trace) -> np.ndarray:
    """Each flow's rank: that of the event it starts at (else ends at), so flows stay with their events."""
    ids = [trace.tables[n]["event_id"].to_numpy() for n in ("system_events", "device_events")]
    keys = [_rank_key(trace.tables[n]["rank"]) for n in ("system_events", "device_events")]
    top = max((int(i.max()) for i in ids if len(i)), default=-1)
    rank_of = np.full(top + 2, _NO_RANK, dtype=np.int64)  # the last slot answers ids that are null or unknown
    for i, k in zip(ids, keys, strict=True):
        rank_of[i] = k
    fl = trace.flows

    def at(col: str) -> np.ndarray:
        e = np.asarray(pc.fill_null(fl[col], -1).to_numpy())
        return np.asarray(rank_of[np.where((e >= 0) & (e <= top), e, top + 1)])

    src = at("src_event_id")
    return np.where(src != _NO_RANK, src, at("dst_event_id"))


def _slices(table: pa.Table, key: np.ndarray, ranks: list[int | None]) -> list[pa.Table]:
    """Each rank's rows of ``table`` (``key``: their ranks), in trace order. When every rank's rows are
    together (rank files loaded in turn, whatever their order) these are slices, copying nothing; else the
    table is sorted by rank once."""
    runs = _runs(key)
    if runs is None:  # a rank in several runs: sort
        order = np.argsort(key, kind="stable")
        table, key = table.take(pa.array(order)), key[order]
        runs = _runs(key)
        assert runs is not None
    return [table.slice(lo, hi - lo) for lo, hi in (runs.get(_NO_RANK if r is None else r, (0, 0)) for r in ranks)]


def _runs(key: np.ndarray) -> dict[int, tuple[int, int]] | None:
    """{rank: (first row, end row)} when each rank's rows are one run; None when a rank has several."""
    if not len(key):
        return {}
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    ends = np.r_[starts[1:], len(key)]
    runs = {int(key[lo]): (int(lo), int(hi)) for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True)}
    return runs if len(runs) == len(starts) else None


def _ids(col: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(col.drop_null().to_numpy(), dtype=np.int64)


def _frames_for(frames: pa.Table, ids: np.ndarray) -> pa.Table:
    """The frames named by ``ids`` and all their callers."""
    fid = np.asarray(frames["frame_id"].to_numpy(), dtype=np.int64)
    parent = np.asarray(pc.fill_null(frames["parent_id"], -1).to_numpy(), dtype=np.int64)
    keep = np.zeros(len(fid), dtype=bool)
    todo = np.unique(ids)
    while len(todo):  # one pass per stack level
        hit = np.isin(fid, todo) & ~keep
        keep |= hit
        todo = np.unique(parent[hit][parent[hit] >= 0])
    return frames.filter(pa.array(keep))
