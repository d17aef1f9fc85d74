"""What the compile-log readers share: the glog line prefix, the graph-break text, rows into a ``compiles`` table.

Each reader (torch_trace, torch_logs, neuron_compile) returns a :class:`CompileLog`: the rows it found (one dict
per row of :data:`neurontrace.schema.COMPILES`) and what it skipped, counted, with the first few lines named.
"""

from __future__ import annotations

import gzip
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from neurontrace import schema
from neurontrace.errors import InputNotFoundError
from neurontrace.trace import conform

# The glog prefix torch._logging writes on every record: level, MMDD, time, thread id, file:line.
GLOG = re.compile(r"^(?P<level>[VIWEC])(?P<md>\d{4}) (?P<time>\d\d:\d\d:\d\d\.\d+)\s+(?P<tid>\d+) "
                  r"(?P<file>[^\s:\]]+):(?P<lineno>\d+)\] (?P<rest>.*)$")
# A compile id as torch prints it inside a record ("[0/1]", "[0/0_1]", "[!0/1/0]" under compiled autograd).
COMPILE_ID = re.compile(r"^\[(?:!(?P<ca>\d+)/)?(?P<frame>\d+)/(?P<n>\d+)(?:_(?P<attempt>\d+))?\]")
GRAPH_BREAK_AT = re.compile(r"Graph break in user code at (?P<source>\S+:\d+)")
NAMED_SKIPS = 5  # how many skipped lines a warning names
LINE_CAP = 1 << 20  # the longest line read whole (bytes, or characters of text); a longer one is read in pieces
LONG_LINE = f"line longer than {LINE_CAP:,} bytes"


@dataclass
class CompileLog:
    """What one reader found in one or more files."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> lines
    examples: list[str] = field(default_factory=list)  # "path:line: reason" of the first few
    files: list[str] = field(default_factory=list)

    def skip(self, path: Path, line: int, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        if len(self.examples) < NAMED_SKIPS:
            self.examples.append(f"{path}:{line}: {reason}")

    def extend(self, other: CompileLog) -> None:
        self.rows += other.rows
        for k, v in other.skipped.items():
            self.skipped[k] = self.skipped.get(k, 0) + v
        self.examples += other.examples[:max(0, NAMED_SKIPS - len(self.examples))]
        self.files += other.files

    def warnings(self) -> list[str]:
        if not self.skipped:
            return []
        counts = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items()))
        return [f"compile logs: skipped {sum(self.skipped.values())} line(s) ({counts}); first: "
                + "; ".join(self.examples)]

    def table(self) -> pa.Table:
        return rows_table(self.rows)


def rows_table(rows: list[dict[str, Any]]) -> pa.Table:
    """The rows as a ``compiles`` table (columns a row lacks are null)."""
    names = schema.COMPILES.column_names
    cols = {n: [r.get(n) for r in rows] for n in names}
    plain = pa.table({n: pa.array(v, type=_plain(schema.COMPILES.schema.field(n).type)) for n, v in cols.items()})
    return conform(plain, schema.COMPILES)


def _plain(t: pa.DataType) -> pa.DataType:
    return pa.string() if pa.types.is_dictionary(t) else t


def open_text(path: Path) -> io.TextIOBase:
    """A log as text, line by line (gzip when it starts with gzip's magic); undecodable bytes replaced."""
    if not path.is_file():
        raise InputNotFoundError(f"{path}: no such compile log")
    with path.open("rb") as f:
        magic = f.read(2)
    raw: Any = gzip.open(path, "rb") if magic == b"\x1f\x8b" else path.open("rb")  # noqa: SIM115 (returned)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")


def numbered_bytes(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """The lines of a log as bytes (gzip when it starts with gzip's magic), numbered from 1, ends kept, and
    whether the line was cut: a line longer than :data:`LINE_CAP` bytes is never read whole; its first
    ``LINE_CAP`` bytes come with ``True``, the rest is read through in pieces of that size and dropped."""
    if not path.is_file():
        raise InputNotFoundError(f"{path}: no such compile log")
    with path.open("rb") as f:
        magic = f.read(2)
    raw: Any = gzip.open(path, "rb") if magic == b"\x1f\x8b" else path.open("rb", buffering=1 << 20)  # noqa: SIM115
    with raw:
        yield from _bounded(raw, b"\n")


def numbered(path: Path, log: CompileLog) -> Iterator[tuple[int, str]]:
    """The lines of a log as text (any line ending), numbered from 1, ends stripped; a line longer than
    :data:`LINE_CAP` characters is read through in pieces, passed over and counted in ``log``'s skips."""
    with open_text(path) as f:
        for i, line, cut in _bounded(f, ("\n", "\r")):
            if cut:
                log.skip(path, i, LONG_LINE)
                continue
            yield i, line.rstrip("\r\n")


def _bounded(f: Any, ends: Any) -> Iterator[tuple[int, Any, bool]]:
    """``f``'s lines (bytes or text, ending in one of ``ends``), each at most LINE_CAP long, and whether cut."""
    lineno = 0
    while line := f.readline(LINE_CAP):
        lineno += 1
        cut = len(line) == LINE_CAP and not line.endswith(ends)
        if cut:  # read through the rest of the line, a piece at a time
            while (more := f.readline(LINE_CAP)) and len(more) == LINE_CAP and not more.endswith(ends):
                pass
        yield lineno, line, cut


def graph_break(text: str) -> tuple[str | None, str | None]:
    """``(reason, file:line)`` of Dynamo's graph-break text ("Graph break in user code at f.py:27",
    "Graph Break Reason: ..."): the reason is the line after a generic "Graph Break Reason: ...:" header
    (torch 2.6+ puts the specific one below it), else the header's own text."""
    m = GRAPH_BREAK_AT.search(text)
    source = m.group("source") if m else None
    lines = [ln.strip() for ln in text.splitlines()]
    for i, ln in enumerate(lines):
        if ln.startswith("Graph Break Reason:"):
            head = ln.removeprefix("Graph Break Reason:").strip()
            if head.endswith(":"):
                rest = [x for x in lines[i + 1:] if x]
                nxt = rest[0] if rest else head
                why = next((x.removeprefix("Explanation:").strip() for x in rest[1:3] if x.startswith("Explanation:")),
                           None)
                return (f"{nxt}: {why}" if why else nxt), source
            return head, source
    return None, source


def compile_id(frame: int | None, n: int | None, attempt: int | None, ca: int | None = None) -> str | None:
    """``F/N`` (``F/N_A`` after a restart, ``!C/F/N`` under compiled autograd) as tlparse names them."""
    if frame is None or n is None:
        return None
    cid = f"{frame}/{n}" + (f"_{attempt}" if attempt else "")
    return f"!{ca}/{cid}" if ca is not None else cid


RANK_IN_NAME = re.compile(r"rank_?(\d+)")


def rank_from_name(path: Path) -> int | None:
    m = RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None
