"""The spill of a streamed trace (``dataset_stream``): its raw event rows, written once and read back by time part.

Rows are spilled as the Kineto scanner routed them (host, device, allocator, the rest: the normalizer keeps
such tables whole, without filtering them again) into Arrow IPC files compressed with lz4: written and read
back at memory speed, 8-12x smaller than the raw columns on the corpus's traces (Parquet's encoding cost
more than the rest of the spill together). A file is closed at ``FILE_BYTES`` of raw columns and the next
begun; each record batch's first and last start time (and whether it has rows without one) is kept in
memory (a few numbers per batch), so a time part reads only the batches that reach into it, and a file is
deleted as soon as no later part needs it: on a trace written about in time order, the spill on disk is a
few files at any time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

IPC = pa.ipc.IpcWriteOptions(compression="lz4")
FILE_BYTES = 1 << 30  # raw column bytes per spill file (about 100 MB on disk)
MIN, MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def write_ipc(table: pa.Table, path: Path) -> None:
    """One table to a spill file."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema, options=IPC) as w:
        w.write_table(table)


def read_ipc(path: Path) -> pa.Table:
    with pa.OSFile(str(path), "rb") as f:
        return pa.ipc.open_file(f).read_all()


@dataclass
class Spill:
    """The spilled batches: per batch its file, its place in the file, its times and its route."""

    paths: list[Path]
    file: np.ndarray
    pos: np.ndarray
    lo: np.ndarray  # first start time (MAX when none)
    hi: np.ndarray  # last start time (MIN when none)
    untimed: np.ndarray  # has rows without a start time
    route: np.ndarray
    routes: int
    _open: dict[int, tuple[pa.OSFile, Any]] = field(default_factory=dict)

    def batch(self, i: int) -> pa.RecordBatch:
        j = int(self.file[i])
        if j not in self._open:
            f = pa.OSFile(str(self.paths[j]), "rb")
            self._open[j] = (f, pa.ipc.open_file(f))
        return self._open[j][1].get_batch(int(self.pos[i]))

    def release(self, needed: np.ndarray) -> None:
        """Delete the files none of whose batches is ``needed`` any more."""
        keep = set(np.unique(self.file[needed]).tolist())
        for j, path in enumerate(self.paths):
            if j not in keep:
                self._drop(j, path)

    def close(self) -> None:
        for j, path in enumerate(self.paths):
            self._drop(j, path)

    def _drop(self, j: int, path: Path) -> None:
        if j in self._open:
            self._open.pop(j)[0].close()
        path.unlink(missing_ok=True)


class SpillWriter:
    def __init__(self, folder: Path, file_bytes: int | None = None) -> None:
        self.folder, self.file_bytes = folder, FILE_BYTES if file_bytes is None else file_bytes
        self.schema: pa.Schema | None = None
        self.paths: list[Path] = []
        self._sink: pa.OSFile | None = None
        self._writer: Any = None
        self._bytes = 0
        self._in_file = 0
        self.cols: dict[str, list[Any]] = {k: [] for k in ("file", "pos", "lo", "hi", "untimed", "route")}

    def cast(self, table: pa.Table) -> pa.Table:
        """The table in the spill's columns: the first table's, dictionary columns as their text (an IPC file
        holds one dictionary a column, and each chunk's decode has its own)."""
        if self.schema is None:
            self.schema = pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f
                                     for f in table.schema])
        return table if table.schema == self.schema else table.cast(self.schema)

    def write(self, table: pa.Table, route: int) -> None:
        for batch in self.cast(table).to_batches():
            if not batch.num_rows:
                continue
            if self._writer is None or self._bytes >= self.file_bytes:
                self._roll()
            self._writer.write_batch(batch)
            bounds = pc.min_max(batch["ts_ns"]).as_py()
            for k, v in (("file", len(self.paths) - 1), ("pos", self._in_file),
                         ("lo", MAX if bounds["min"] is None else bounds["min"]),
                         ("hi", MIN if bounds["max"] is None else bounds["max"]),
                         ("untimed", batch["ts_ns"].null_count > 0), ("route", route)):
                self.cols[k].append(v)
            self._in_file += 1
            self._bytes += batch.nbytes

    def _roll(self) -> None:
        self._close_file()
        path = self.folder / f"events-{len(self.paths)}.arrow"
        assert self.schema is not None
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = pa.ipc.new_file(self._sink, self.schema, options=IPC)
        self.paths.append(path)
        self._bytes = self._in_file = 0

    def _close_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._sink is not None:
            self._sink.close()
        self._writer = self._sink = None

    def close(self) -> Spill | None:
        self._close_file()
        if not self.paths:
            return None
        c = self.cols
        route = np.array(c["route"], np.int64)
        return Spill(self.paths, np.array(c["file"], np.int64), np.array(c["pos"], np.int64),
                     np.array(c["lo"], np.int64), np.array(c["hi"], np.int64), np.array(c["untimed"], bool),
                     route, int(route.max()) + 1)


class Sample:
    """Start times of the events whose file index is a multiple of a stride, the stride doubled while more
    than ``cap`` are kept: a uniform sample of bounded size, the same whatever the chunks."""

    def __init__(self, cap: int) -> None:
        self.cap, self.stride, self.count = cap, 1, 0
        self.index: list[np.ndarray] = []
        self.ts: list[np.ndarray] = []

    def add(self, index: np.ndarray, ts: np.ndarray) -> None:
        keep = index % self.stride == 0
        self.index.append(index[keep])
        self.ts.append(ts[keep])
        self.count += int(keep.sum())
        while self.count > self.cap:
            self.stride *= 2
            index_, ts_ = np.concatenate(self.index), np.concatenate(self.ts)
            keep = index_ % self.stride == 0
            self.index, self.ts, self.count = [index_[keep]], [ts_[keep]], int(keep.sum())

    def values(self) -> np.ndarray:
        return np.concatenate(self.ts) if self.ts else np.zeros(0, np.int64)
