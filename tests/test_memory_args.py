"""A [memory] instant's args are not copied whole into ``counters`` (docs/limits.md, "Memory events at scale"):
``counters.args`` keeps exactly the keys no column holds, and every other key's value is in a column, so
nothing is lost. Real inputs: the CUDA traces of the corpus written with profile_memory=True (torch 2.x adds
``Ev Idx`` and ``finished``), and the real CPU training-loop sample."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.compute as pc
import pytest

import neurontrace
from tests.conftest import SAMPLES, corpus_root

HELD = {"Bytes", "Total Allocated", "Total Reserved", "Addr", "Device Type", "Device Id"}


def _inputs() -> list[Path]:
    root = corpus_root()
    found = [SAMPLES / "cpu_train_loop.pt.trace.json.gz"]
    if root is not None:
        found += [root / "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                  root / "TraceLens/tests/traces/perf_model/normalization/normalization_layer_test.json.gz"]
    return [p for p in found if p.is_file()]


@pytest.mark.parametrize("path", _inputs(), ids=lambda p: p.name)
def test_memory_args_keep_what_no_column_holds_and_lose_nothing(path: Path) -> None:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    raw = [e for e in doc["traceEvents"] if e.get("name") == "[memory]" and e.get("ph") in ("i", "I")]
    trace = neurontrace.load(path)
    mem = trace.memory_events
    rows = trace.counters.filter(pc.and_(pc.equal(trace.counters["name"].cast("string"), "[memory]"),
                                         pc.equal(trace.counters["field"].cast("string"), "Bytes")))
    assert len(raw) == mem.num_rows == rows.num_rows > 0  # file order, one Bytes row per instant
    args, addr, nbytes = rows["args"].to_pylist(), mem["addr"].to_pylist(), mem["bytes"].to_pylist()
    allocated = mem["total_allocated_bytes"].to_pylist()
    for i, e in enumerate(raw):
        a = e["args"]
        rest = {k: v for k, v in a.items() if k not in HELD}
        assert (json.loads(args[i]) if args[i] is not None else {}) == rest, (i, a, args[i])
        assert addr[i] == a.get("Addr") and nbytes[i] == a["Bytes"], (i, a)  # the held values, exactly
        assert allocated[i] == a.get("Total Allocated"), (i, a)
    kept = sum(len(x) for x in args if x is not None)
    assert kept < sum(len(json.dumps(e["args"])) for e in raw) / 3  # the copies are gone: a third at most is left


@pytest.mark.parametrize("path", _inputs(), ids=lambda p: p.name)
def test_one_match_finds_exactly_the_args_the_cutting_empties(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``_unexplained`` nulls the args made only of column-held pairs with one match and cuts only the others:
    the same texts as cutting every row, on each real instant's args and on variants of them (spaces, an extra
    key, a nested value, a key the columns do not hold)."""
    import pyarrow as pa

    from neurontrace.parsers import _kineto_memory as km

    doc = json.loads(gzip.decompress(path.read_bytes()))
    texts = [json.dumps(e["args"], separators=(",", ":") if i % 2 else (", ", ": "))
             for i, e in enumerate(doc["traceEvents"]) if e.get("name") == "[memory]" and "args" in e]
    assert texts
    variants: list[str | None] = [t.replace(",", " ,  ") for t in texts[:50]]
    variants += [t[:-1] + ', "Ev Idx": 3}' for t in texts[:50]] + [t[:-1] + ', "x": {"Bytes": 1}}' for t in texts[:50]]
    variants += [t[:-1] + ', "a{b": 3}' for t in texts[:20]] + [t[:-1] + ', "Addr": 3, "Ev Idx": 4}' for t in texts[:20]]
    variants += [t[:-1] + ', "Bytes": 12345678901234567}' for t in texts[:20]]  # beyond the column's digits
    variants += [json.dumps(e, indent=4) for e in (json.loads(t) for t in texts[:50])]  # Kineto's layout
    variants += [t[:-1] + ', "Ev Idx": 3, "y": 4}' for t in texts[:20]] + [t[:-1] + ', "Ev Idx": 3.5}'
                                                                            for t in texts[:20]]
    variants += ['{"Bytes": 1}', '{ "Addr": 7 ,"Device Id": 0 }', '{"Bytes": 1.5}', "{}", None]
    col = pa.chunked_array([pa.array([*texts, *variants], pa.string())])
    fast = km._unexplained(col).to_pylist()
    assert fast == km._cut(col.combine_chunks()).to_pylist()
    assert fast[-5:] == [None, None, '{"Bytes": 1.5}', None, None]  # both ways through: matched, and cut
    # Rows of such pairs, then members of plain keys and whole numbers or literals ("finished": false,
    # "Ev Idx"), are taken by one match, not cut.
    one_more = [t[:-1] + ', "Ev Idx": 3}' for t in texts[:50]] + [t[:-1] + ', "Ev Idx": -3 }' for t in texts[:20]]
    one_more += [t[:-1] + ', "finished": true ,"x":null}' for t in texts[:20]]
    one_more += [json.dumps({**json.loads(t), "Ev Idx": 9}, indent=4) for t in texts[:50]]  # Kineto's layout
    col = pa.chunked_array([pa.array([*texts, *one_more, None], pa.string())])
    want = km._cut(col.combine_chunks()).to_pylist()
    with monkeypatch.context() as m:
        m.setattr(km, "_cut", None)  # the fast path alone: a call would fail
        assert km._unexplained(col).to_pylist() == want
    # A held key after the others (all rows of the shape the one match takes) still goes through the cutting.
    late = pa.chunked_array([pa.array([*texts, *(t[:-1] + ', "Ev Idx": 4, "Addr": 3}' for t in texts[:20])])])
    assert km._unexplained(late).to_pylist() == km._cut(late.combine_chunks()).to_pylist()
    assert any(w and w.endswith('"Ev Idx": 9}') for w in want) and any(w and w.endswith(' ,"x":null}') for w in want)
