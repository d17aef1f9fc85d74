"""Finding and reading the tables of a Neuron Explorer Parquet directory (neuron.md §3.1-§3.2).

A table is one ``<Table>.parquet`` file or several ``<Table>_<n>.parquet`` parts; any table may be
missing. Columns are read by name and only when asked for, string columns that repeat (engines,
opcodes, queue names) as dictionaries, and big tables a few row groups at a time (``batches``) or
a few hundred thousand rows at a time, optionally decoded ahead on a helper thread (``stream``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from neurontrace._io import check_parquet_expansion
from neurontrace.errors import MalformedTraceError

from . import _neuron_conform as conform

_FILE = re.compile(r"^(?P<table>[A-Z][A-Za-z0-9]*?)(?:_(?P<part>\d+))?\.parquet$")

# Every table of schema 7.4.0 (neuron.md §3.3, §3.8); used to recognise a directory and to tell
# a table this neurontrace does not know from one it deliberately leaves out.
KNOWN_TABLES = frozenset({
    "Instruction", "DmaPacket", "DmaPacketAggregated", "SemaphoreUpdate", "Throttle", "Error", "CcOp",
    "CcInstruction", "ActiveTime", "CoreBarriers", "SystemProfileEvents", "SbufAllocation", "DmaUsage",
    "HbmUsage", "PsumUsage", "SbufUsage", "PendingDma", "CpuUsage", "HostMemUsage", "SystemProfileHbmUsage",
    "Flow", "FrameworkInstruction", "HloInstruction", "PenguinInstruction", "BirInstruction", "FrameworkNode",
    "AssemblyInstruction", "Summary", "OpcodeSummary", "ThrottleSummary", "HbmUsageSummaryByType",
    "DmaUsageSummary", "TensorInfo", "DmaQueuesInfo", "CcStream", "StackFrame", "StackFrameFileLocation",
    "StackFrameFileName", "StackFrameFunctionName", "KernelStackFrames", "KernelIterationVariables",
    "KernelInstructions", "DeviceProfileList", "Metadata", "NeffHeader", "SystemProfileMetadata",
    "ExecutionInfo", "Warning", "SchemaFields",
})
# Tables whose rows other tables point at by this column (stack frames, their files and functions):
# without it (or with it, or the row's ``name``, holding lists) the table cannot be used, so it is
# left out (with a warning) as if it were missing.
KEY_COLUMNS = {"StackFrame": "id", "StackFrameFileLocation": "id", "StackFrameFileName": "id",
               "StackFrameFunctionName": "id", "KernelStackFrames": "stack_frame_id"}
# The columns neuron.md documents as lists or structs; any other nested column (an edited or foreign
# file) is left out with a warning, as if missing: the parsers read every other column as scalars.
NESTED_COLUMN = re.compile(r"^(flow_id|stack_frame_ids|series|points|direction)$|_per_interval$")
# Enough to call a directory an Explorer output even without Metadata (system-only profiles).
SIGNATURE_TABLES = frozenset({"Metadata", "Instruction", "SystemProfileEvents", "NeffHeader", "Summary",
                              "SchemaFields", "DmaPacketAggregated", "SystemProfileMetadata"})


def table_files(directory: Path) -> dict[str, list[Path]]:
    """``{table: [part files in order]}`` for the ``*.parquet`` files directly in ``directory``."""
    found: dict[str, list[tuple[int, Path]]] = {}
    for p in directory.iterdir():
        m = _FILE.match(p.name)
        if m and p.is_file():
            found.setdefault(m.group("table"), []).append((int(m.group("part") or -1), p))
    return {t: [p for _, p in sorted(parts)] for t, parts in found.items()}


def looks_like_explorer(directory: Path) -> bool:
    try:
        names = set(table_files(directory))
    except OSError:
        return False
    return bool(names & SIGNATURE_TABLES)


@dataclass
class SourceTable:
    """One logical table over its part files; the footers are read once, the data only on demand."""

    name: str
    files: list[Path]
    _meta: list[pq.FileMetaData] = field(default_factory=list)
    # What the boundary (_neuron_conform) changed, per column: counts the load's warnings report.
    repairs: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        for f in self.files:
            try:
                self._meta.append(pq.read_metadata(f))
                check_parquet_expansion(f, self._meta[-1], f.stat().st_size)
            except (pa.ArrowException, OSError) as exc:
                raise _corrupt(f, exc) from exc

    @property
    def schema(self) -> pa.Schema:
        """The parts' schemas unified, less the columns left out; parts that type one column
        differently (beyond widening an integer or a float) come from different exports and are
        refused by name."""
        return self._schema[0]

    @property
    def left_out(self) -> list[str]:
        """Nested columns that neuron.md does not document as nested (NESTED_COLUMN), not read."""
        return self._schema[1]

    @cached_property
    def _schema(self) -> tuple[pa.Schema, list[str]]:
        try:
            schemas = [m.schema.to_arrow_schema() for m in self._meta]
        except (pa.ArrowException, OSError) as exc:
            raise _corrupt(self.files[0], exc) from exc
        for f, sch in zip(self.files, schemas, strict=True):
            conform.check_names(self.name, str(f), sch.names)
        try:
            unified = schemas[0] if len(schemas) == 1 else pa.unify_schemas(schemas, promote_options="permissive")
        except (pa.ArrowTypeError, pa.ArrowInvalid) as exc:
            raise MalformedTraceError(
                f"{self.files[0].parent}: the part files of table {self.name} "
                f"({', '.join(f.name for f in self.files)}) have incompatible schemas ({exc}); they come from "
                "different exports. Keep the parts of one export only") from exc
        odd = [f.name for f in unified if (pa.types.is_nested(f.type) and not NESTED_COLUMN.search(f.name))
               or (pa.types.is_nested(f.type) and conform.kind(self.name, f.name) == "text"
               and f.name != "stack_frame_ids")]
        for f in unified:
            if f.name not in odd and (expected := conform.stored_ok(self.name, f)):
                raise MalformedTraceError(
                    f"{self.files[0]}: column {f.name!r} of table {self.name} holds {f.type}, where neuron-explorer "
                    f"writes {expected}; the file was edited or is not an Explorer export")
        return (pa.schema([f for f in unified if f.name not in odd], metadata=unified.metadata) if odd else unified,
                odd)

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)

    @property
    def num_rows(self) -> int:
        return sum(m.num_rows for m in self._meta)

    def key_value_metadata(self) -> dict[bytes, bytes]:
        out: dict[bytes, bytes] = {}
        for m in self._meta:
            out.update(m.metadata or {})
        return out

    def _typed(self, t: pa.Table, dictionary: Sequence[str] = ()) -> pa.Table:
        """The batch checked against the declared column kinds (the boundary: _neuron_conform)."""
        return conform.conform(t, self.name, dictionary, self.repairs)

    def has(self, column: str | None) -> bool:
        return column is not None and column in self.schema.names

    def present(self, columns: Sequence[str | None]) -> list[str]:
        return [c for c in dict.fromkeys(columns) if c is not None and self.has(c)]

    def read(self, columns: Sequence[str] | None = None, *, dictionary: Sequence[str] = ()) -> pa.Table:
        """The whole table (or ``columns`` of it); parts are concatenated in order."""
        parts = list(self.batches(columns, dictionary=dictionary, batch_rows=1 << 62))
        if not parts:
            return self.schema.empty_table().select(list(columns) if columns is not None else self.columns)
        return pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]

    def batches(self, columns: Sequence[str] | None = None, *, dictionary: Sequence[str] = (),
                batch_rows: int = 1 << 20) -> Iterator[pa.Table]:
        """The table a few row groups at a time (about ``batch_rows`` rows), in file order.

        (Reading the next row groups on a helper thread while these are processed costs a whole
        batch of row groups in memory; :meth:`stream` reads ahead in small batches instead.)
        """
        cols = list(columns) if columns is not None else None
        for read in self._reads(cols, dictionary, batch_rows):
            yield self._typed(self._fill(read(), cols), dictionary)

    def stream(self, columns: Sequence[str] | None = None, *, dictionary: Sequence[str] = (),
               batch_rows: int = 1 << 18, read_ahead: bool = False) -> Iterator[pa.Table]:
        """The table about ``batch_rows`` rows at a time, in file order, decoded as it goes (a row
        group is not decoded whole first): for big tables, whose batches should stay small.

        ``read_ahead`` decodes the next batch on a helper thread while the caller works on this one
        (Arrow's reader and kernels release the GIL), at the cost of one more small batch in memory.
        """
        cols = list(columns) if columns is not None else None
        parts = self._stream(cols, dictionary, batch_rows)
        if not read_ahead:
            yield from parts
            return
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="neurontrace-read") as pool:
            ahead = pool.submit(next, parts, None)
            try:
                while (part := ahead.result()) is not None:
                    ahead = pool.submit(next, parts, None)
                    yield part
                    del part
            finally:
                ahead.cancel()

    def _stream(self, cols: list[str] | None, dictionary: Sequence[str], batch_rows: int) -> Iterator[pa.Table]:
        for f, meta in zip(self.files, self._meta, strict=True):
            try:
                pf = pq.ParquetFile(f, read_dictionary=[c for c in dictionary if c in meta.schema.names])
                want = self._want(pf, cols)
                for b in pf.iter_batches(batch_size=batch_rows, columns=want):
                    yield self._typed(self._fill(pa.Table.from_batches([b]), cols), dictionary)
            except (pa.ArrowException, OSError) as exc:
                raise _corrupt(f, exc) from exc

    def _reads(self, cols: list[str] | None, dictionary: Sequence[str], batch_rows: int) -> Iterator[_Read]:
        """One reader call per batch of row groups."""
        for f, meta in zip(self.files, self._meta, strict=True):
            try:
                pf = pq.ParquetFile(f, read_dictionary=[c for c in dictionary if c in meta.schema.names])
            except (pa.ArrowException, OSError) as exc:
                raise _corrupt(f, exc) from exc
            want = self._want(pf, cols)
            groups: list[int] = []
            rows = 0
            for g in range(meta.num_row_groups):
                groups.append(g)
                rows += meta.row_group(g).num_rows
                if rows >= batch_rows or g == meta.num_row_groups - 1:
                    yield _Read(f, pf, tuple(groups), want)
                    groups, rows = [], 0
            if meta.num_row_groups == 0:
                yield _Read(f, pf, (), want)

    def _want(self, pf: pq.ParquetFile, cols: list[str] | None) -> list[str] | None:
        """The columns to read from one part: those asked for (or all) that it has and that are kept."""
        names = [c for c in (cols if cols is not None else pf.schema_arrow.names) if c in pf.schema_arrow.names]
        kept = [c for c in names if c in self.schema.names]
        return None if cols is None and len(kept) == len(pf.schema_arrow.names) else kept

    def _fill(self, t: pa.Table, cols: list[str] | None) -> pa.Table:
        """Columns a part lacks (parts written by different versions) come back as nulls."""
        if cols is None:
            return t
        for c in cols:
            if c not in t.column_names and c in self.schema.names:
                t = t.append_column(self.schema.field(c), pa.nulls(t.num_rows, self.schema.field(c).type))
        return t.select([c for c in cols if c in t.column_names])

    def null_count(self, column: str) -> int | None:
        """Nulls in a column from the row-group statistics (no data read); None when unknown."""
        total = 0
        for m in self._meta:
            names = m.schema.names
            if column not in names:
                return None
            j = names.index(column)
            for g in range(m.num_row_groups):
                st = m.row_group(g).column(j).statistics
                if st is None or not st.has_null_count:
                    return None
                total += st.null_count
        return total

    def column_min(self, column: str) -> int | None:
        """The smallest value of an integer column: from the row-group statistics when every group
        has them, else from the first row group's data (enough to tell time bases apart)."""
        if self.has(column) and not pa.types.is_integer(self.schema.field(column).type):
            return self._first_group_min(column)  # stored as text, a timestamp, floats: statistics not usable
        lows = []
        for m in self._meta:
            names = m.schema.names
            if column not in names:
                continue
            j = names.index(column)
            for g in range(m.num_row_groups):
                st = m.row_group(g).column(j).statistics
                if st is None or not st.has_min_max:
                    return self._first_group_min(column)
                lows.append(int(st.min))
        if lows and abs(min(lows)) >= conform.TIME_LIMIT:  # out of range: the boundary nulls it, so read the data
            return self._first_group_min(column)
        return min(lows) if lows else None

    def _first_group_min(self, column: str) -> int | None:
        for f, m in zip(self.files, self._meta, strict=True):
            if m.num_row_groups and column in m.schema.names:
                try:
                    group = self._typed(pq.ParquetFile(f).read_row_group(0, columns=[column]))
                    low = pc.min(group[column]).as_py()
                except (pa.ArrowException, OSError) as exc:
                    raise _corrupt(f, exc) from exc
                return None if low is None else int(low)
        return None


@dataclass(frozen=True)
class _Read:
    """Reading some row groups of one part file."""

    path: Path
    pf: pq.ParquetFile
    groups: tuple[int, ...]
    want: list[str] | None

    def __call__(self) -> pa.Table:
        try:
            if not self.groups:
                return self.pf.schema_arrow.empty_table().select(self.want or self.pf.schema_arrow.names)
            return self.pf.read_row_groups(list(self.groups), columns=self.want)
        except (pa.ArrowException, OSError) as exc:
            raise _corrupt(self.path, exc) from exc


def _corrupt(path: Path, exc: BaseException) -> MalformedTraceError:
    return MalformedTraceError(
        f"{path}: not a readable Parquet file ({exc}); the file is damaged or was cut off while "
        "copying. Run `neuron-explorer view ... --output-format parquet` again to regenerate the "
        "directory, or remove this file to load the other tables"
    )


def open_tables(directory: Path) -> tuple[dict[str, SourceTable], list[str], list[str]]:
    """The tables of an Explorer directory, the names of files in it that are not tables, and
    warnings about tables left out (a table without its key column, see KEY_COLUMNS)."""
    files = table_files(directory)
    tables = {name: SourceTable(name, parts) for name, parts in sorted(files.items())}
    problems = []
    for name, table in list(tables.items()):
        if table.left_out:  # (computed here: parts of different schemas are refused before any work)
            problems.append(f"{directory}: table {name}: column(s) {', '.join(table.left_out)} hold lists or "
                            "structs where neuron-explorer writes single values; left out, as if missing")
        key = KEY_COLUMNS.get(name)
        if key is None:
            continue
        nested = [c for c in (key, "name") if table.has(c) and pa.types.is_nested(table.schema.field(c).type)]
        if not table.has(key) or nested:
            del tables[name]
            found = f"a nested {nested[0]!r} column" if nested else f"no {key!r} column"
            problems.append(f"{directory}: table {name} has {found} (columns: {', '.join(table.columns[:8])}); it "
                            "was left out, as if missing")
    others = sorted(p.name for p in directory.iterdir()
                    if p.is_file() and p.suffix == ".parquet" and not _FILE.match(p.name))
    return tables, others, problems
