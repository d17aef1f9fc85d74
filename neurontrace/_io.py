"""Reading inputs: whole files, transparently gunzipped, with progress for big ones.

Three rules keep a hostile or changing file from taking the process down:

- **No file-backed memory map.** A map of a file that another process truncates kills the reader
  with SIGBUS on the next page it touches. A plain file is copied into an anonymous private map
  instead (:class:`Snapshot`): one copy, whose scanned pages can still be handed back to the OS.
- **Bounded inflation.** Gzip is inflated in a stream into one growing buffer (about one copy of
  the output), and refused with :class:`~neurontrace.errors.InputTooLargeError` beyond
  ``min(cap, max(GZIP_FLOOR_BYTES, ratio * compressed size))``; the ratio is ``NEURONTRACE_GZIP_MAX_RATIO``
  (default :data:`DEFAULT_GZIP_MAX_RATIO`; real traces inflate 10-30x), the absolute cap
  ``NEURONTRACE_GZIP_MAX_BYTES`` (default :data:`DEFAULT_GZIP_MAX_BYTES`), so a 50 MB bomb stops at the
  cap, not at 10 GB.
- **Read once, or refuse.** The file's identity (device, inode, size, modification and change times) is
  taken from the open descriptor before reading and again after; a file rewritten, truncated or
  replaced meanwhile is refused with :class:`~neurontrace.errors.InputChangedError`, never parsed into
  a table mixing old and new bytes. A snapshot's released pages are read again only from a file of the
  same identity (:meth:`Snapshot.restore`).
- **Damage is named, and what comes before it is kept.** A gzip stream that breaks off or turns
  corrupt gives back every byte inflated before the damage, with ``complete=False`` and a note
  saying which; bytes after a complete stream are ignored with a note; a UTF-8 byte-order mark is
  dropped. Notes end up in the parse accounting's warnings.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from neurontrace.errors import (
    EmptyInputError,
    InputChangedError,
    InputNotFoundError,
    InputTooLargeError,
    MalformedTraceError,
)
from neurontrace.progress import Progress, no_progress

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
_CHUNK = 8 << 20
_GZIP_PIECE = 64 << 10  # compressed bytes inflated per call: output before a corruption is kept
_REPLAY_STEP = 64  # ... to within this many compressed bytes (a damaged piece is inflated again in steps)
GZIP_RATIO_ENV = "NEURONTRACE_GZIP_MAX_RATIO"
DEFAULT_GZIP_MAX_RATIO = 200  # inflated bytes per compressed byte; deflate's own ceiling is ~1032
GZIP_FLOOR_BYTES = 256 << 20  # any gzip may inflate to this much, whatever its ratio
GZIP_CAP_ENV = "NEURONTRACE_GZIP_MAX_BYTES"
DEFAULT_GZIP_MAX_BYTES = 8 << 30  # no gzip inflates beyond this, whatever its size (the env var raises it)

PARQUET_RATIO_ENV = "NEURONTRACE_PARQUET_MAX_RATIO"
DEFAULT_PARQUET_MAX_RATIO = 64  # expanded bytes per file byte; real neurontrace and Neuron files: 1-6
PARQUET_FLOOR_BYTES = 256 << 20  # any Parquet file may expand to this much, whatever its ratio
PARQUET_CELL_BYTES = 8  # the least an expanded cell is counted as (a row's value in one column)

Data = bytes | bytearray | mmap.mmap

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


@dataclass
class Content:
    """A file's content (gunzipped, without a byte-order mark) and what was wrong with its container."""

    data: Data
    damage: str | None = None  # why the content ends early (cut off, or corrupt from some byte on)
    notes: list[str] = field(default_factory=list)  # anything else odd, for the accounting's warnings

    @property
    def complete(self) -> bool:
        return self.damage is None


def read_head(path: Path, size: int = 1 << 16) -> bytes:
    """The first ``size`` bytes of the file's content (decompressed when gzip'd, no byte-order mark);
    for a corrupt gzip, what inflates before the damage."""
    with path.open("rb") as f:
        raw = f.read(size)
    if raw.startswith(GZIP_MAGIC):
        d = zlib.decompressobj(wbits=31)
        out = bytearray()
        for i in range(0, len(raw), _REPLAY_STEP):  # small steps: the output before a corruption survives
            try:
                out += d.decompress(raw[i:i + _REPLAY_STEP], size + len(UTF8_BOM) - len(out))
            except zlib.error:
                break
            if len(out) >= size or d.eof:
                break
        raw = bytes(out)
    return raw[len(UTF8_BOM):] if raw.startswith(UTF8_BOM) else raw


def is_corrupt_gzip(path: Path) -> str | None:
    """Why a gzip file's first bytes do not inflate, or None (not gzip, or they do)."""
    with path.open("rb") as f:
        raw = f.read(1 << 16)
    if not raw.startswith(GZIP_MAGIC):
        return None
    try:
        zlib.decompressobj(wbits=31).decompress(raw, 1)
    except zlib.error as exc:
        return str(exc)
    return None


def read_all(path: Path, progress: Progress = no_progress) -> tuple[bytes | bytearray, bool]:
    """The whole content, gunzipped when needed; returns (content, complete).

    ``complete`` is False when a gzip stream ended early (a killed job): the bytes that could be
    decompressed are returned so the parser can salvage complete events.
    """
    content = read_content(path, progress)
    assert not isinstance(content.data, mmap.mmap)  # only snapshot=True gives a map
    return content.data, content.complete


def read_content(path: Path, progress: Progress = no_progress, *, snapshot: bool = False) -> Content:
    """The whole content with notes. ``snapshot``: a plain file comes as a :class:`Snapshot`
    (whose scanned pages can be released) rather than a bytearray. A file that changes while it is
    read is refused (:class:`~neurontrace.errors.InputChangedError`)."""
    with path.open("rb") as f:
        before = identity(os.fstat(f.fileno()))
        size = before[2]
        if size == 0:
            raise EmptyInputError(f"{path}: the file is empty (0 bytes); was the profiler stopped before export?")
        head = f.read(len(UTF8_BOM))
        if head.startswith(GZIP_MAGIC):
            f.seek(0)
            content = _gunzip(f, size, path, progress)
            if bytes(content.data[:len(UTF8_BOM)]) == UTF8_BOM:
                del content.data[:len(UTF8_BOM)]  # type: ignore[union-attr]  # always a bytearray here
        else:
            start = len(UTF8_BOM) if head == UTF8_BOM else 0
            f.seek(start)
            content = _copy(f, path, size, start, progress, snapshot and os.name == "posix")
        unchanged(path, before, os.fstat(f.fileno()))
        if isinstance(content.data, Snapshot):
            content.data.identity = before
    return content


Identity = tuple[int, int, int, int, int]


def identity(st: os.stat_result) -> Identity:
    """What says a file is still the one read: device, inode, size, modification and change times."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def unchanged(path: Path, before: Identity, now: os.stat_result) -> None:
    """Refuse a file whose identity changed since ``before`` (InputChangedError)."""
    after = identity(now)
    if after != before:
        what = ("was replaced by another file" if after[:2] != before[:2] else
                f"changed size from {before[2]} to {after[2]} bytes" if after[2] != before[2] else "was rewritten")
        raise InputChangedError(f"{path}: the file {what} while it was read, so what was read may mix old and new "
                                "content; read it again once whatever writes it has finished")


class Snapshot(mmap.mmap):
    """A private copy of a file in anonymous memory: a file that changes or shrinks afterwards
    cannot fault it. Pages the parser is done with go back to the OS (:meth:`release`; they then
    read as zeros); a parser that needs them again after all calls :meth:`restore`, which reads
    them from the file again."""

    path: Path
    offset: int  # file offset of byte 0 (a skipped byte-order mark)
    released: tuple[int, int]  # the byte range handed back, page-aligned ((0, 0): none)
    identity: Identity | None = None  # the file's, when read (restore() reads only from that same file)

    def release(self, start: int, end: int) -> None:
        """Hand back the whole pages within [start, end); one growing range per snapshot."""
        lo = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
        hi = end // mmap.PAGESIZE * mmap.PAGESIZE
        if self.released != (0, 0):
            lo = self.released[0]
        if hi > max(lo, self.released[1]) and hasattr(self, "madvise"):
            with contextlib.suppress(OSError, ValueError):  # only a memory optimisation
                self.madvise(mmap.MADV_DONTNEED, lo, hi - lo)  # private anonymous memory: freed
                self.released = (lo, hi)

    def restore(self) -> None:
        lo, hi = self.released
        if hi <= lo:
            return
        with self.path.open("rb") as f:
            if self.identity is not None:  # the pages come back from the file read, or not at all
                unchanged(self.path, self.identity, os.fstat(f.fileno()))
            f.seek(self.offset + lo)
            got = f.readinto(memoryview(self)[lo:hi])
            if self.identity is not None:
                unchanged(self.path, self.identity, os.fstat(f.fileno()))
        if got != hi - lo:
            raise MalformedTraceError(f"{self.path}: the file shrank while it was read; read it again once "
                                      "whatever writes it has finished")
        self.released = (0, 0)


def _copy(f: BinaryIO, path: Path, size: int, start: int, progress: Progress, snapshot: bool) -> Content:
    n = size - start
    buf: bytearray | Snapshot
    if snapshot and n:
        # Private anonymous memory: MADV_DONTNEED really frees it (shared anonymous memory keeps the pages).
        snap = Snapshot(-1, n, flags=mmap.MAP_PRIVATE)
        snap.path, snap.offset, snap.released = path, start, (0, 0)
        buf = snap
    else:
        buf = bytearray(n)
    view = memoryview(buf)
    done = 0
    while done < n:
        got = f.readinto(view[done:done + _CHUNK])  # type: ignore[attr-defined]
        if not got:
            break
        done += got
        progress("read", done, n)
    view.release()
    if done != n:  # it shrank while read (read_content names the change)
        raise InputChangedError(f"{path}: the file shrank from {size} to {start + done} bytes while it was read "
                                "(still being written?); read it again once whatever writes it has finished")
    return Content(buf)


def _ratio(env: str, default: float) -> float:
    """The positive ratio set in ``env``, else ``default``; anything else is a named error."""
    raw = os.environ.get(env, "")
    try:
        ratio = float(raw) if raw else default
    except ValueError:
        ratio = float("nan")
    if not ratio > 0:
        raise InputTooLargeError(f"{env}={raw!r}: expected a positive number (default {default})")
    return ratio


def gzip_limit(compressed: int) -> int:
    """The most bytes a gzip file of ``compressed`` bytes may inflate to (module docstring)."""
    ratio = _ratio(GZIP_RATIO_ENV, DEFAULT_GZIP_MAX_RATIO)
    raw_cap = os.environ.get(GZIP_CAP_ENV, "")
    try:
        cap = int(float(raw_cap)) if raw_cap else DEFAULT_GZIP_MAX_BYTES
    except (ValueError, OverflowError):
        cap = 0
    if cap <= 0:
        raise InputTooLargeError(f"{GZIP_CAP_ENV}={raw_cap!r}: expected a positive number of bytes (default "
                                 f"{DEFAULT_GZIP_MAX_BYTES})")
    return min(cap, max(GZIP_FLOOR_BYTES, int(min(ratio * compressed, 2.0**62))))


def _gunzip(f: BinaryIO, size: int, path: Path, progress: Progress) -> Content:
    """Inflate every gzip member into one bytearray, a piece at a time, within gzip_limit()."""
    inflater = _Inflater(f, size, path, progress)
    out = bytearray()
    while piece := inflater.read(_CHUNK):
        out += piece
    return Content(out, inflater.damage, inflater.notes)


class _Inflater:
    """Every gzip member of a file, inflated a bounded piece at a time (never more than
    gzip_limit() in all). Damage ends the stream: what inflated before it is delivered, and
    ``damage`` (corrupt from some byte on, or cut off) or ``notes`` (bytes after the gzip data) say why."""

    def __init__(self, f: BinaryIO, size: int, path: Path, progress: Progress) -> None:
        self.f, self.size, self.path, self.progress = f, size, path, progress
        self.limit = gzip_limit(size)
        self.d = zlib.decompressobj(wbits=31)
        self.pending = b""  # compressed bytes read and not yet inflated
        self.pos = 0  # compressed bytes read so far
        self.total = 0  # bytes inflated so far
        self.done = False
        self.damage: str | None = None
        self.notes: list[str] = []

    def read(self, want: int) -> bytes:
        """Up to about ``want`` more inflated bytes (b"" at the end)."""
        while not self.done:
            if not self.pending:
                self.pending = self.f.read(_GZIP_PIECE)
                self.pos += len(self.pending)
                if not self.pending:
                    self.done = True
                    if not self.d.eof:
                        self.damage = f"{self.path}: the gzip data ends early (cut off after {self.size} compressed bytes)"
                    break
            if self.d.eof:  # a member ended: another member follows, or bytes that are not gzip
                if not self.pending.startswith(GZIP_MAGIC[:len(self.pending)]):
                    self.notes.append(f"{self.path}: ignored {len(self.pending) + self.size - self.pos} bytes after the "
                                      "end of the gzip data (they are not another gzip member)")
                    self.done = True
                    break
                self.d = zlib.decompressobj(wbits=31)
            got = self._inflate(max(want, 1 << 16))
            self.progress("decompress", self.pos, self.size)
            if got:
                return got
        return b""

    def _inflate(self, want: int) -> bytes:
        saved = self.d.copy()
        try:
            out = self.d.decompress(self.pending, want)
        except zlib.error as exc:  # keep what the piece inflated before the damage: replay it in small steps
            kept = bytearray()
            d = saved
            try:
                for j in range(0, len(self.pending), _REPLAY_STEP):
                    kept += d.decompress(self.pending[j:j + _REPLAY_STEP])
            except zlib.error:
                pass
            self._count(len(kept))
            self.done = True
            if not self.total:
                raise MalformedTraceError(f"{self.path}: corrupt gzip data ({exc}); nothing could be inflated. Copy "
                                          "or export the file again") from exc
            self.damage = (f"{self.path}: the gzip data is corrupt after {self.total} inflated bytes ({exc}); kept "
                           "what inflated before the damage")
            return bytes(kept)
        self.pending = self.d.unused_data if self.d.eof else self.d.unconsumed_tail
        self._count(len(out))
        return out

    def _count(self, n: int) -> None:
        self.total += n
        if self.total > self.limit:
            raise InputTooLargeError(
                f"{self.path}: inflates to more than {self.limit} bytes ({self.limit // max(self.size, 1)}x its "
                f"compressed size): a gzip bomb, or a trace bigger than the limit. Set {GZIP_RATIO_ENV} (default "
                f"{DEFAULT_GZIP_MAX_RATIO}) to allow a higher inflation ratio, {GZIP_CAP_ENV} (default "
                f"{DEFAULT_GZIP_MAX_BYTES // (1 << 30)} GiB) a higher absolute cap")


class ContentReader:
    """A file's content a chunk at a time, into the caller's buffer: gunzipped when needed (within
    gzip_limit()), without a byte-order mark, never a memory map. The file's identity is checked
    after every read and at the end (:meth:`finish`): a file that changes, shrinks or grows while
    it is read is refused with :class:`~neurontrace.errors.InputChangedError`. Gzip damage ends the
    content early, said by ``damage``; ``notes`` hold anything else odd."""

    def __init__(self, path: Path, progress: Progress = no_progress) -> None:
        self.path, self.progress = path, progress
        self._f = path.open("rb")
        try:
            self.before = identity(os.fstat(self._f.fileno()))
            self.size = self.before[2]
            if self.size == 0:
                raise EmptyInputError(f"{path}: the file is empty (0 bytes); was the profiler stopped before export?")
            head = self._f.read(len(UTF8_BOM))
            self.gzip = head.startswith(GZIP_MAGIC)
            self._f.seek(0 if self.gzip or head != UTF8_BOM else len(UTF8_BOM))
            self._inflater = _Inflater(self._f, self.size, path, progress) if self.gzip else None
        except BaseException:
            self._f.close()
            raise
        self._pending = b""  # inflated bytes not yet delivered
        self._bom = self.gzip  # a gzip's content may still start with a byte-order mark
        self.delivered = 0  # content bytes handed out
        self.eof = False

    @property
    def damage(self) -> str | None:
        return self._inflater.damage if self._inflater else None

    @property
    def notes(self) -> list[str]:
        return self._inflater.notes if self._inflater else []

    def readinto(self, view: memoryview) -> int:
        """Fill ``view`` with the next content bytes; fewer only at the end (0: the end)."""
        n = 0
        while n < len(view) and not self.eof:
            if self._inflater is None:
                got = self._f.readinto(view[n:])
                unchanged(self.path, self.before, os.fstat(self._f.fileno()))
                if not got:
                    self.eof = True
                    done = self._f.tell()
                    if done != self.size:
                        raise InputChangedError(f"{self.path}: the file shrank from {self.size} to {done} bytes "
                                                "while it was read (still being written?); read it again once "
                                                "whatever writes it has finished")
                n += got
                self.progress("read", self._f.tell(), self.size)
                continue
            if not self._pending:
                self._pending = self._inflater.read(len(view) - n)
                if self._bom:
                    while len(self._pending) < len(UTF8_BOM) and (more := self._inflater.read(1 << 16)):
                        self._pending += more
                    if self._pending.startswith(UTF8_BOM):
                        self._pending = self._pending[len(UTF8_BOM):]
                    self._bom = False
                if not self._pending:
                    self.eof = True
                    unchanged(self.path, self.before, os.fstat(self._f.fileno()))
                    continue
            take = min(len(self._pending), len(view) - n)
            view[n:n + take] = self._pending[:take]
            self._pending = self._pending[take:]
            n += take
        self.delivered += n
        return n

    def finish(self) -> None:
        """The file is the one whose reading began (InputChangedError if not); closes it."""
        try:
            unchanged(self.path, self.before, os.fstat(self._f.fileno()))
        finally:
            self._f.close()

    def close(self) -> None:
        self._f.close()


def check_parquet_expansion(path: Path, meta: Any, file_size: int) -> None:
    """Refuse, from its footer alone, a Parquet file that would expand beyond
    ``max(PARQUET_FLOOR_BYTES, ratio * its size)`` (``NEURONTRACE_PARQUET_MAX_RATIO``, default
    :data:`DEFAULT_PARQUET_MAX_RATIO`): a few MB of constant columns can declare 40 M rows. The expanded
    size counts the larger of what the footer declares and ``PARQUET_CELL_BYTES`` per row and column."""
    ratio = _ratio(PARQUET_RATIO_ENV, DEFAULT_PARQUET_MAX_RATIO)
    declared = sum(max(0, meta.row_group(i).total_byte_size) for i in range(meta.num_row_groups))
    expanded = max(declared, PARQUET_CELL_BYTES * max(0, meta.num_rows) * max(1, meta.num_columns))
    limit = max(PARQUET_FLOOR_BYTES, int(min(ratio * file_size, 2.0**62)))
    if expanded > limit:
        raise InputTooLargeError(
            f"{path}: {meta.num_rows:,} rows of {meta.num_columns} columns would expand to about {expanded:,} bytes, "
            f"{expanded / max(file_size, 1):,.0f}x its {file_size:,} bytes (the limit is {limit:,}): a Parquet bomb, "
            f"or a table bigger than the limit. Set {PARQUET_RATIO_ENV} (default {DEFAULT_PARQUET_MAX_RATIO}) to "
            "allow more")
