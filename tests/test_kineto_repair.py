"""A trace torch.profiler wrote invalid: a Python frame's name with bare quotes (neurontrace/parsers/_kineto_repair.py).

torch 2.13 wrote this line in a run of tests/sliced_workload.py (with_stack=True), which made the whole trace
invalid JSON:  "name": "torch/profiler/_cupti_monitor.py(0): "off"",
The shipped CPU sample gets that line in place of one of its Python frames' names."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pyarrow.compute as pc
import pytest

import neurontrace
from neurontrace.errors import MalformedTraceError
from neurontrace.parsers._kineto_repair import unescaped_names

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "cpu_train_loop.pt.trace.json.gz"
AS_WRITTEN = b'torch/profiler/_cupti_monitor.py(0): "off"'


def _with_bare_quotes(tmp_path: Path, count: int) -> Path:
    text = gzip.decompress(SAMPLE.read_bytes())
    frames = list(re.finditer(rb'"cat": "python_function",\n    "name": "([^"\n]*)",\n', text))
    picked = frames[:: max(1, len(frames) // count)][:count]
    for m in reversed(picked):  # from the end: the earlier offsets stay right
        text = text[:m.start(1)] + AS_WRITTEN + text[m.end(1):]
    out = tmp_path / "quotes.pt.trace.json"
    out.write_bytes(text)
    return out


def _names(trace: neurontrace.Trace) -> list[str]:
    return [str(n) for n in pc.cast(trace.system_events["name"], "string").to_pylist()]


@pytest.mark.parametrize("count", [1, 3])
def test_names_torch_left_unescaped_are_repaired_and_counted(tmp_path: Path, count: int) -> None:
    whole = neurontrace.load(SAMPLE)
    with pytest.warns(UserWarning, match=f"{count} event names? held quotes torch.profiler wrote unescaped"):
        repaired = neurontrace.load(_with_bare_quotes(tmp_path, count))
    assert repaired.system_events.num_rows == whole.system_events.num_rows  # every event kept
    assert _names(repaired).count(AS_WRITTEN.decode()) == count  # each name read as torch wrote it
    assert any("held quotes" in w for a in repaired.accounting for w in a.warnings)  # reaches every report


def test_a_file_broken_elsewhere_is_still_refused(tmp_path: Path) -> None:
    path = _with_bare_quotes(tmp_path, 1)
    path.write_bytes(path.read_bytes().replace(b'"ph": "X",', b'"ph": "X" "', 1))
    with pytest.raises(MalformedTraceError, match="even with the unescaped quotes"):
        neurontrace.load(path)


def test_valid_names_and_lines_that_may_hold_other_keys_are_left_alone() -> None:
    lines = (b'    "name": "a \\"quoted\\" op",\n'  # valid: escaped
             b'    "name": "x", "cat": "y",\n'  # may be two keys: not a name with quotes
             b'    "name": "ends with \\\\"b"",\n')  # an escaped backslash, then a bare quote
    fixed, rewritten = unescaped_names(lines)
    assert rewritten == 1
    assert fixed.splitlines()[:2] == lines.splitlines()[:2]
    assert fixed.splitlines()[2] == b'    "name": "ends with \\\\\\"b\\"",'
