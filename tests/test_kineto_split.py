"""One buffer scanned on several threads (parsers/_kineto_split.py) gives the rows of one scan in order.

Every buffer is forced to split (4 ways, pieces of a few hundred bytes) on a real torch.profiler run, the
ROCm traces of the corpus and the structure-aware fuzz cases (mutations of real traces); and on a trace
whose names and args hold ``}, {`` so that the guessed cuts fall inside strings and nested args, where each
guess must be found out and the rest of its buffer scanned in order.
"""

from __future__ import annotations

import json
import random
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from neurontrace.parsers import _kineto_native, _kineto_split
from tests import fuzz_structured as fs
from tests.conftest import corpus_files
from tests.test_kineto_chunks import streamed, torch_trace, whole  # noqa: F401 - torch_trace: a fixture

pytestmark = pytest.mark.skipif(_kineto_native.available() is not None, reason="the compiled scanner is not built")


@pytest.fixture
def split(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every buffer cut 4 ways; counts the buffers split, their cuts, and the cuts found to be no boundary."""
    monkeypatch.setattr(_kineto_split, "WAYS", 4)
    monkeypatch.setattr(_kineto_split, "MIN_PIECE", 256)
    seen: Counter[str] = Counter()
    cuts, piece = _kineto_split._cuts, _kineto_split._piece

    def counted_cuts(*args: Any) -> list[int]:
        got = cuts(*args)
        seen["buffers split"] += bool(got)
        seen["cuts"] += len(got)
        seen["pieces expected"] += len(got) + 1
        return got

    def counted_piece(*args: Any) -> Any:
        seen["pieces scanned"] += 1
        return piece(*args)

    monkeypatch.setattr(_kineto_split, "_cuts", counted_cuts)
    monkeypatch.setattr(_kineto_split, "_piece", counted_piece)
    return seen


def rescans(seen: Counter[str]) -> int:
    """Buffers whose rest was scanned again in order (a cut found to be no boundary, or an error)."""
    return seen["pieces scanned"] - seen["pieces expected"]


def test_split_buffers_give_the_rows_of_one_scan_on_real_traces(torch_trace: Path, split: Counter[str]) -> None:  # noqa: F811
    rocm = [p for p in corpus_files() if p.name.startswith("mi250_minitoy")]
    for path in (torch_trace, *rocm):
        reference, top = whole(path)
        for size in (4093, 65521, path.stat().st_size):
            table, end, chunks = streamed(path, size)
            assert end.decoder == "native", (path.name, size, end.decoder)
            assert table.equals(reference), (path.name, size)
            assert end.top == top
            assert [c.first_index for c in chunks] == [sum(c.rows for c in chunks[:k]) for k in range(len(chunks))]
    assert split["buffers split"] > 20 and split["cuts"] > 2 * split["buffers split"], split


def _tricky_trace(path: Path, events: int) -> None:
    """Events whose name and args hold ``}, {`` (a string, then a list of objects), before their real end."""
    rows = [{"ph": "X", "cat": "cpu_op", "name": f"op}}, {{{i}", "pid": 1, "tid": 2, "ts": 1000 + 3 * i, "dur": 2,
             "args": {"External id": i, "nested": [{"a": i}, {"b": "}, {"}]}} for i in range(events)]
    path.write_text(json.dumps({"traceEvents": rows, "traceName": "tricky"}, indent=1))


def test_a_cut_inside_a_string_or_nested_args_is_found_out(tmp_path: Path, split: Counter[str]) -> None:
    path = tmp_path / "tricky.json"
    _tricky_trace(path, 3000)
    reference, top = whole(path)
    for size in (2039, 30011, path.stat().st_size):
        table, end, _ = streamed(path, size)
        assert end.decoder == "native" and table.equals(reference), size
        assert end.top == top
    assert split["cuts"] > 50 and rescans(split) > 10, split


def test_an_error_past_the_first_piece_is_the_one_a_scan_in_order_meets(torch_trace: Path,  # noqa: F811
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    doc = torch_trace.read_bytes()
    scanner = _kineto_native.scanner()
    declined = []
    for share in (0.3, 0.55, 0.8):  # the broken event in a later piece, wherever the cuts fall
        at = doc.index(b'"ts":', int(len(doc) * share))
        data = bytearray(doc[:at] + b'"ts": true, "ts_was":' + doc[at + 5:])  # a type the scanner leaves
        start = scanner.find_events(data) + 1
        messages = []
        for ways, piece in ((1, 1 << 20), (4, 256)):
            monkeypatch.setattr(_kineto_split, "WAYS", ways)
            monkeypatch.setattr(_kineto_split, "MIN_PIECE", piece)
            with pytest.raises(scanner.UnsupportedError) as exc:
                _kineto_split.scan_buffer(scanner, data, start, len(data), 0, (b"kernel",), 4 << 20)
            messages.append(str(exc.value))
        assert messages[0] == messages[1] and f"(event at byte {data.rindex(b'{', 0, at)})" in messages[0], messages
        declined.append(messages[0])
    assert len(set(declined)) == 3


def test_fuzzed_traces_give_the_same_table_split_or_not(tmp_path: Path, split: Counter[str]) -> None:
    rng = random.Random(2829)
    checked = 0
    for i, (source, kind, data) in enumerate(fs.cases(29, 40, max_bytes=40_000)):
        path = tmp_path / f"case{i % 4}.json"
        path.write_bytes(data)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                reference, top = whole(path)
        except Exception as exc:  # split or not, the reader fails the same way
            with pytest.raises(type(exc)):
                streamed(path, rng.randrange(4096, 16384))
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table, end, _ = streamed(path, rng.randrange(4096, 16384))
        assert table.equals(reference), f"case {i} ({kind} of {source})"
        assert end.top == top
        checked += 1
    assert checked > 20 and split["buffers split"] > 20, (checked, split)
