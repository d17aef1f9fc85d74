"""The Kineto reader in chunks (parsers/_kineto_chunks.py): any chunk size gives the table of one chunk.

Proven on real inputs: corpus traces, a torch.profiler run made here (one per session, in a subprocess),
and the structure-aware fuzz cases of tests/fuzz_structured.py (mutations of real traces). Chunk
boundaries are recorded as the reader delivers them and classified by where they fall in the JSON
(inside a string, right after a backslash, inside a number, inside a nested args value), so the
property is shown to hold at each kind of boundary, not assumed.
"""

from __future__ import annotations

import gzip
import os
import random
import warnings
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from neurontrace import _io
from neurontrace.errors import InputChangedError, InputTooLargeError
from neurontrace.parsers import _kineto_chunks, _kineto_json, _kineto_native, kineto
from neurontrace.parsers.kineto import EventChunk, TraceEnd, iter_chunks
from tests import fuzz_structured as fs
from tests.conftest import ROOT, corpus_files

SAMPLE = ROOT / "sample_traces" / "cpu_train_loop.pt.trace.json.gz"  # a real torch.profiler CPU run
native = pytest.mark.skipif(_kineto_native.available() is not None, reason="the compiled scanner is not built")

@pytest.fixture
def torch_trace(tmp_path: Path) -> Path:
    """The real torch.profiler CPU run of sample_traces (stacks, shapes, memory), as plain JSON."""
    out = tmp_path / "run.pt.trace.json"
    out.write_bytes(gzip.decompress(SAMPLE.read_bytes()))
    return out


@pytest.fixture
def cuts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The content offsets at which the reader ends its reads (the chunk boundaries), as they happen."""
    seen: list[int] = []
    read = _io.ContentReader.readinto

    def recording(self: _io.ContentReader, view: memoryview) -> int:
        n = read(self, view)
        seen.append(self.delivered)
        return n

    monkeypatch.setattr(_io.ContentReader, "readinto", recording)
    return seen


def whole(path: Path) -> tuple[pa.Table, dict[str, object]]:
    """The reference: the whole document decoded at once (no chunks), rows in file order."""
    content = _io.read_content(path)
    decoded = _kineto_json.decode(content.data, complete=content.complete,
                                  device_categories=list(kineto.DEVICE_CATEGORIES))
    return rows(decoded.events or []), decoded.top


def rows(tables: list[pa.Table]) -> pa.Table:
    """The tables' rows in file order, dictionary columns as their text (each chunk encodes its own)."""
    t = pa.concat_tables(tables).sort_by("index")
    return pa.table({n: c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c
                     for n, c in zip(t.column_names, t.columns, strict=True)})


def streamed(path: Path, chunk_bytes: int) -> tuple[pa.Table, TraceEnd, list[EventChunk]]:
    items = list(iter_chunks(path, chunk_bytes=chunk_bytes))
    end = items.pop()
    assert isinstance(end, TraceEnd) and all(isinstance(i, EventChunk) for i in items)
    chunks = [i for i in items if isinstance(i, EventChunk)]
    return rows([c.events for c in chunks]), end, chunks


def boundary_kinds(doc: bytes, cuts: list[int]) -> Counter[str]:
    """Where the cuts fall: inside a string, after a backslash, inside a number, inside nested args."""
    kind = bytearray(len(doc) + 1)  # 0 elsewhere, 1 string, 2 escape, 3 number
    depth = [0] * (len(doc) + 1)
    i, d = 0, 0
    while i < len(doc):
        c = doc[i:i + 1]
        depth[i] = d
        if c == b'"':
            i += 1
            while i < len(doc) and doc[i:i + 1] != b'"':
                depth[i] = d
                kind[i] = 1
                if doc[i:i + 1] == b"\\":
                    kind[i + 1], depth[i + 1] = 2, d
                    i += 1
                i += 1
        elif c in b"{[":
            d += 1
        elif c in b"}]":
            d -= 1
        elif c in b"-0123456789" and i and doc[i - 1:i] in b"-0123456789.eE+":
            kind[i] = 3
        i += 1
    names = {1: "string", 2: "escape", 3: "number"}
    out: Counter[str] = Counter()
    for cut in cuts:
        if 0 < cut < len(doc):
            out[names.get(kind[cut], "other")] += 1
            if depth[cut] >= 4:  # {document [list {event {args {nested
                out["nested args"] += 1
    return out


@native
def test_any_chunk_size_gives_the_table_of_one_chunk_on_real_traces(torch_trace: Path, cuts: list[int]) -> None:
    rng = random.Random(28)
    small = [p for p in corpus_files() if p.name.startswith("mi250_minitoy")]  # ROCm: kernels, flows, memcpys
    for path in (torch_trace, *small):
        reference, top = whole(path)
        doc = bytes(_io.read_content(path).data)
        tiny = [1, 2, 3, 7, 61] if path in small else []  # a read per byte costs a chunk of columns per event
        sizes = [*tiny, 509, 4093, len(doc)] + [rng.randrange(500, 20_000) for _ in range(3)]
        kinds: Counter[str] = Counter()
        for size in sizes:
            cuts.clear()
            table, end, chunks = streamed(path, size)
            assert end.decoder == "native", (size, end.decoder)
            assert table.equals(reference), f"chunks of {size} bytes: a different table"
            assert end.top == top
            assert "traceName" in end.top or path not in (torch_trace, SAMPLE)  # torch writes it after the list
            assert [c.first_index for c in chunks] == [sum(c.rows for c in chunks[:k]) for k in range(len(chunks))]
            kinds += boundary_kinds(doc, cuts)
        # (no real trace of the corpus escapes a character: the fuzzed cases below cut inside escapes)
        assert min(kinds[k] for k in ("string", "number", "nested args")) > 0, kinds


@native
def test_corpus_traces_in_small_chunks_give_the_table_of_one_chunk() -> None:
    files = [p for p in corpus_files() if 50_000 < p.stat().st_size < 400_000][:4]
    if not files:
        pytest.skip("no corpus traces of 50-400 kB here")
    for path in files:
        reference, top = whole(path)
        for size in (8191, 65521):
            table, end, _ = streamed(path, size)  # gz: inflated in pieces as well
            assert table.equals(reference), (path.name, size)
            assert end.top == top


def test_fuzzed_traces_give_the_same_table_or_the_same_error_in_any_chunks(tmp_path: Path, cuts: list[int]) -> None:
    """Structure-aware mutations of real traces (dropped keys, odd types, duplicate keys, extreme numbers,
    unicode): the chunked reader gives the whole document's rows, or fails like the whole decode."""
    rng = random.Random(2828)
    agreed = Counter[str]()
    kinds: Counter[str] = Counter()
    for i, (source, kind, data) in enumerate(fs.cases(28, 60, max_bytes=40_000)):
        path = tmp_path / f"case{i % 4}.json"
        path.write_bytes(data)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                reference, top = whole(path)
        except Exception as exc:  # the chunked reader must fail the same way
            with pytest.raises(type(exc)):
                streamed(path, rng.randrange(1, 4096))
            agreed["error"] += 1
            continue
        for size in (rng.randrange(1, 64), rng.randrange(64, 8192)):
            cuts.clear()
            table, end, _ = streamed(path, size)
            kinds += boundary_kinds(data, cuts)
            assert table.equals(reference), f"case {i} ({kind} of {source}) in chunks of {size}"
            assert end.top == top, f"case {i} ({kind} of {source})"
        agreed["ok"] += 1
    assert agreed["ok"] > 20 and agreed["error"] > 3, agreed
    assert min(kinds[k] for k in ("string", "escape", "number", "nested args")) > 0, kinds


@native
def test_gzip_is_inflated_in_bounded_pieces_members_and_all(tmp_path: Path, torch_trace: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    doc = torch_trace.read_bytes()
    reference, _ = whole(torch_trace)
    two = tmp_path / "two_members.json.gz"  # the document split across two gzip members
    two.write_bytes(gzip.compress(doc[:len(doc) // 3]) + gzip.compress(doc[len(doc) // 3:]))
    pieces: list[int] = []
    inflate = _io._Inflater.read

    def recording(self: _io._Inflater, want: int) -> bytes:
        out = inflate(self, want)
        pieces.append(len(out))
        return out

    monkeypatch.setattr(_io._Inflater, "read", recording)
    table, end, _ = streamed(two, 5000)
    assert table.equals(reference) and end.decoder == "native"
    assert sum(pieces) == len(doc) and max(pieces) <= 1 << 16  # never more than max(want, 64 KiB) at once
    monkeypatch.setenv(_io.GZIP_CAP_ENV, str(len(doc) // 2))  # the bomb cap holds in the stream too
    with pytest.raises(InputTooLargeError):
        streamed(two, 5000)


@native
def test_a_file_truncated_or_grown_between_two_chunk_reads_is_a_named_error(
        tmp_path: Path, torch_trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = torch_trace.read_bytes()
    for change in ("truncate", "append"):
        path = tmp_path / f"{change}.json"
        path.write_bytes(doc)
        stream = iter_chunks(path, chunk_bytes=len(doc) // 8)
        first = next(stream)
        assert isinstance(first, EventChunk) and first.rows
        if change == "truncate":
            os.truncate(path, len(doc) // 2)
        else:
            with path.open("ab") as f:
                f.write(b" " * 100)
        with pytest.raises(InputChangedError):
            list(stream)
    # The in-memory parse reads through the same loop: a change after the first chunk fails it by name.
    path = tmp_path / "parse.json"
    path.write_bytes(doc)
    monkeypatch.setattr(_kineto_chunks, "CHUNK_BYTES", len(doc) // 8)

    def truncate_after_first_read(stage: str, done: int, total: int | None) -> None:
        if stage == "read" and done < len(doc) and path.stat().st_size == len(doc):
            os.truncate(path, done)

    with pytest.raises(InputChangedError):
        kineto.parse(path, progress=truncate_after_first_read)


@native
def test_iter_chunks_accounting_of_a_cut_off_trace_matches_the_parse(tmp_path: Path, torch_trace: Path) -> None:
    doc = torch_trace.read_bytes()
    cut_at = doc.index(b'"ph"', len(doc) * 2 // 3)  # inside an event, two thirds into the list
    path = tmp_path / "cut.json"
    path.write_bytes(doc[:cut_at])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parsed = kineto.parse(path)
        content = _io.read_content(path)
        reference = _kineto_json.decode(content.data, complete=True, device_categories=list(kineto.DEVICE_CATEGORIES))
    for size in (4096, 1 << 20):
        table, end, chunks = streamed(path, size)
        assert table.equals(rows(reference.events or []))
        assert (end.truncated_at, end.partial_events, end.events) == (cut_at, 1, table.num_rows)
        assert end.top == reference.top and "traceName" not in end.top  # the keys after the list were cut
        acct = end.accounting(str(path))
        assert acct.events_read == parsed.accounting[0].events_read == table.num_rows + 1
        assert acct.skipped == {"cut in half by truncation": 1}
        assert any("cut off at byte" in w for w in acct.warnings)
        assert sum(c.rows for c in chunks) == end.events


def test_the_reference_decoder_streams_the_same_rows(torch_trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reference, top = whole(torch_trace)
    monkeypatch.setenv(_kineto_native.ENV, "python")
    table, end, chunks = streamed(torch_trace, 4096)
    assert table.equals(reference) and end.top == top and end.decoder.startswith("python")
    assert len(chunks) > 1  # still handed out a chunk at a time
