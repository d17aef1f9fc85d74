"""Reading inputs: whole files, transparently gunzipped, with progress for big ones."""

from __future__ import annotations

import mmap
import os
import zlib
from pathlib import Path
from typing import BinaryIO

from neurontrace.errors import EmptyInputError, InputNotFoundError, MalformedTraceError
from neurontrace.progress import Progress, no_progress

GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 8 << 20

# Magic numbers of formats people hand us by mistake, so the error can say what the file is.
_KNOWN_MAGIC = {
    b"\x89PNG": "a PNG image",
    b"\xff\xd8\xff": "a JPEG image",
    b"%PDF": "a PDF document",
    b"PK\x03\x04": "a zip archive",
    b"PAR1": "a Parquet file",
    b"\x7fELF": "an ELF binary",
    b"SQLite format 3": "an SQLite database",
}


def describe_magic(head: bytes) -> str | None:
    for magic, what in _KNOWN_MAGIC.items():
        if head.startswith(magic):
            return what
    return None


def existing(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise InputNotFoundError(f"{p}: no such file or directory")
    return p


def read_head(path: Path, size: int = 1 << 16) -> bytes:
    """The first ``size`` bytes of the file's content (decompressed when gzip'd)."""
    with path.open("rb") as f:
        raw = f.read(size)
    if raw.startswith(GZIP_MAGIC):
        d = zlib.decompressobj(wbits=31)
        try:
            return d.decompress(raw, size)
        except zlib.error:
            return b""
    return raw


def read_all(path: Path, progress: Progress = no_progress) -> tuple[bytes, bool]:
    """The whole content, gunzipped when needed; returns (content, complete).

    ``complete`` is False when a gzip stream ended early (a killed job): the bytes that could be
    decompressed are returned so the parser can salvage complete events.
    """
    size = path.stat().st_size
    if size == 0:
        raise EmptyInputError(f"{path}: the file is empty (0 bytes); was the profiler stopped before export?")
    with path.open("rb") as f:
        head = f.read(2)
        f.seek(0)
        if head != GZIP_MAGIC:
            data = f.read()
            progress("read", size, size)
            return data, True
        return _gunzip(f, size, path, progress)


def map_all(path: Path, progress: Progress = no_progress) -> tuple[bytes | mmap.mmap, bool]:
    """Like :func:`read_all`, but a plain file is memory-mapped (read-only) instead of copied.

    The kernel's page cache is used in place: no second copy of a large trace in memory and no
    time spent copying it. Gzip'd files are decompressed into bytes as by :func:`read_all`.
    """
    with path.open("rb") as f:
        if f.read(2) == GZIP_MAGIC or os.name != "posix" or path.stat().st_size == 0:
            return read_all(path, progress)
        populate = getattr(mmap, "MAP_POPULATE", 0)  # Linux: fault the pages in up front, in bulk
        try:
            data = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED | populate, prot=mmap.PROT_READ)
        except (OSError, ValueError):  # a file system that cannot map files: read it instead
            return read_all(path, progress)
    progress("read", len(data), len(data))
    return data, True


def _gunzip(f: BinaryIO, size: int, path: Path, progress: Progress) -> tuple[bytes, bool]:
    parts: list[bytes] = []
    d = zlib.decompressobj(wbits=31)
    done = 0
    try:
        while chunk := f.read(_CHUNK):
            done += len(chunk)
            parts.append(d.decompress(chunk))
            progress("decompress", done, size)
            while d.eof and d.unused_data:  # concatenated gzip members
                rest = d.unused_data
                d = zlib.decompressobj(wbits=31)
                parts.append(d.decompress(rest))
    except zlib.error as exc:
        if not parts:
            raise MalformedTraceError(f"{path}: corrupt gzip data ({exc})") from exc
        return b"".join(parts), False
    parts.append(d.flush())
    return b"".join(parts), d.eof


