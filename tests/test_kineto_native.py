"""The compiled Kineto scanner against the reference (pure-Python) decoder.

Every trace here is parsed twice, once per decoder (``NEURONTRACE_KINETO_DECODER=python`` forces
the reference), and the two ``Trace`` objects must be equal table by table. The odd inputs check
both halves of the contract: what the scanner handles gives the reference's rows exactly, and what
it leaves to the reference (an unexpected type, a number out of range) is handed over, not guessed.
"""

from __future__ import annotations

import gzip
import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

from neurontrace import Trace
from neurontrace.parsers import _kineto_native, kineto
from tests.conftest import ROOT, corpus_files
from tests.micro import write, x

TABLES = ("system_events", "device_events", "flows", "counters", "frames")


def parse_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Trace, Trace]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        monkeypatch.setenv(_kineto_native.ENV, "python")
        reference = kineto.parse(path)
        monkeypatch.delenv(_kineto_native.ENV)
        native = kineto.parse(path)
    return reference, native


def assert_same(reference: Trace, native: Trace) -> None:
    for name in TABLES:
        assert reference.tables[name].equals(native.tables[name]), f"{name} differs between the decoders"
    facts = [t.metadata.filter(pc.not_equal(t.metadata["key"], "decoder")) for t in (reference, native)]
    assert facts[0].equals(facts[1]), "metadata differs between the decoders"


def decoder(trace: Trace) -> str:
    return str(trace.meta("decoder"))


def assert_same_outcome(path: Path, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """Both decoders give the same tables or fail with the same error; the native run's decoder
    fact when it loaded (None when both failed)."""
    outcomes: list[tuple[str, Any, Any]] = []
    for mode in ("python", "native"):
        monkeypatch.setenv(_kineto_native.ENV, mode)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trace = kineto.parse(path)
            outcomes.append(("ok", {n: trace.tables[n].to_pylist() for n in TABLES}, decoder(trace)))
        except Exception as exc:  # the two paths must fail the same way
            outcomes.append(("error", type(exc).__name__, str(exc)))
    (kind_ref, what_ref, _), (kind_nat, what_nat, why_nat) = outcomes
    assert (kind_ref, what_ref) == (kind_nat, what_nat)
    return why_nat if kind_nat == "ok" else None


needs_native = pytest.mark.skipif(_kineto_native.available() is not None,
                                  reason=f"native scanner unavailable: {_kineto_native.available()}")


def test_the_scanner_is_built_where_a_compiler_is() -> None:
    """setup.py marks the extension optional; where a C compiler exists a silent miss is a bug."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler on PATH: the package runs on the reference decoder")
    assert _kineto_native._kineto_scan is not None, "the C extension was not built; reinstall with pip install -e ."


REAL = [*corpus_files(), *sorted((ROOT / "sample_traces").rglob("*.pt.trace.json.gz"))]


@needs_native
@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_real_traces_decode_identically(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reference, native = parse_both(path, monkeypatch)
    assert decoder(native) == "native"
    assert decoder(reference).startswith("python")
    assert_same(reference, native)


ODD_EVENTS: dict[str, list[dict[str, Any]]] = {
    "escapes": [x("cpu_op", 'aten::"quoted"\\ caf\u00e9 \U0001f600 \t', 1, 2, **{"External id": 1}),
                x("cpu_op\u00e9", "cat with escape", 2, 1)],
    "string and int ids": [x("cpu_op", "a", 1, 2, pid="host 1", tid=-0), x("cpu_op", "b", 3, 1, pid=7, tid="7")],
    "loose args": [
        x("cuda_runtime", "hipMemcpyWithStream", 1, 2, bytes="256", kind="2", correlation=5),
        x("cpu_op", "big", 3, 1, **{"External id": 2**70, "Sequence number": 1}),
        x("cpu_op", "float id", 4, 1, **{"External id": 7.9, "external id": -7.9}),
        x("cpu_op", "odd types", 5, 1, device=True, stream=[1], kind=None, correlation="x"),
        x("kernel", "k", 6, 1, pid=0, tid=7, device=0, stream=7, bytes=12.5),
    ],
    "timestamps": [
        x("cpu_op", "exp", 1.5e3, 2.5e-1),
        x("cpu_op", "many digits", 10.12345, 0.0005),
        x("cpu_op", "odd half", 10.0015, 0.0025),
        x("cpu_op", "epoch float", 1_700_000_000_000_000.123, 1.001),
        x("cpu_op", "epoch int", 1_700_000_000_000_000, 1),
        x("cpu_op", "negative", -5.5, -1),
        {"ph": "X", "name": "no ts", "cat": "cpu_op", "pid": 1, "tid": 1},
    ],
    "args shapes": [
        {"ph": "X", "name": "null args", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": None},
        {"ph": "X", "name": "empty args", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {}},
        x("cpu_op", "nested", 2, 1, **{"Input Dims": [[1, 2], []], "Concrete Inputs": ["{", "]\\\"", ""],
                                     "Ev Idx": {"a": [{"b": "}"}]}}),
        {"name": "no ph", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 3, "dur": 1, "extra": {"k": [1]}},
        {},
    ],
    # Phases the scanner routes to "the rest" (long, escaped), between ordinary events: the
    # normalizer must still give every table in file order.
    "odd phases": [
        x("cpu_op", "first", 1, 1),
        {**x("cpu_op", "long phase", 2, 1), "ph": "kernel"},
        x("kernel", "gemm", 3, 1, pid=0, tid=7, device=0, stream=7),
        {**x("kernel", "escaped phase", 4, 1, pid=0, tid=7), "ph": "\u00e9"},
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 5, "args": {"Bytes": 8}},
        {"ph": "i", "name": "[memory]\u00e9", "cat": "cpu_instant_event", "pid": 1, "tid": 1, "ts": 5.5},
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 6, "args": {"Bytes": 16}},
        x("cpu_op", "last", 7, 1),
        x("kernel", "gemm2", 8, 1, pid=0, tid=7, device=0, stream=7),
    ],
    "every kind": [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": 5}},
        {"ph": "M", "name": "process_labels", "pid": 1, "args": {"labels": "CPU"}},
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 5,
         "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512, "Total Allocated": 1e3, "Total Reserved": "x"}},
        {"ph": "i", "name": "Iteration Start", "pid": 1, "tid": 1, "ts": 6},
        {"ph": "C", "name": "util", "pid": 1, "tid": 1, "ts": 7, "args": {"gpu": 12.5, "sm": 3}},
        {"ph": "s", "id": 9, "pid": 1, "tid": 1, "ts": 1, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 9, "pid": 0, "tid": 7, "ts": 6, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        x("cuda_runtime", "cudaLaunchKernel", 1, 2, correlation=9),
        x("kernel", "gemm", 6, 3, pid=0, tid=7, device=0, stream=7, correlation=9),
        x("gpu_memcpy", "Memcpy DtoH", 9, 1, pid=0, tid=7, device=0, bytes=64),
        x("python_function", "train.py(3): step", 0, 20, **{"Python id": 1, "Python parent id": None}),
        {"ph": "Q", "name": "unknown phase", "cat": "mystery", "pid": 1, "tid": 1, "ts": 2},
    ],
}


@needs_native
@pytest.mark.parametrize("indent", [None, 2], ids=["minified", "pretty"])
@pytest.mark.parametrize("case", list(ODD_EVENTS))
def test_odd_events_decode_identically(case: str, indent: int | None, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, ODD_EVENTS[case], indent=indent)
    reference, native = parse_both(path, monkeypatch)
    assert decoder(native) == "native"
    assert_same(reference, native)


@pytest.mark.parametrize("mode", ["native", "python"])
def test_exact_nanoseconds_from_the_printed_digits(mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Number literals as a writer prints them (Python floats could not hold some of them)."""
    monkeypatch.setenv(_kineto_native.ENV, mode)
    literals = {"exp": "1.5e3", "many digits": "10.12345", "odd half": "10.0015",
                "epoch float": "1700000000000000.123", "epoch int": "1700000000000000"}
    events = ",".join(f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 1, "tid": 1, "ts": {ts}, "dur": 1}}'
                      for name, ts in literals.items())
    path = tmp_path / "t.json"
    path.write_text(f'{{"traceEvents": [{events}]}}')
    trace = kineto.parse(path)
    got = dict(zip(trace.system_events["name"].to_pylist(), trace.system_events["ts_ns"].to_pylist(), strict=True))
    assert got == {
        "exp": 1_500_000,
        "many digits": 10_123,  # 10.12345 us: the 0.45 ns rounds down
        "odd half": 10_002,  # exactly half a ns: to even
        "epoch float": 1_700_000_000_000_000_123,
        "epoch int": 1_700_000_000_000_000_000,
    }


@needs_native
@pytest.mark.parametrize("event", [
    {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": "12", "dur": 1},  # a string timestamp
    {"ph": None, "name": "a", "pid": 1, "tid": 1, "ts": 1},  # a null phase
    {"ph": "X", "name": "a", "pid": 1.5, "tid": 1, "ts": 1},  # a float pid
    {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "args": [1, 2]},  # args not an object
    {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1e30},  # beyond int64 ns
])
def test_what_the_scanner_declines_goes_to_the_reference(event: dict[str, Any], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    why = assert_same_outcome(write(tmp_path, [x("cpu_op", "fine", 1, 1), event]), monkeypatch)
    assert why is None or why.startswith("python (native scanner declined")


def _event(extra: str = "") -> str:
    return '{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 1, "dur": 2' + extra + "}"


def _doc(*events: str, after: str = "") -> str:
    return '{"traceEvents": [' + ", ".join(events) + "]" + after + "}"


CORRUPT = {
    "control character in a string": _doc(_event(', "args": {"a": "x\x01"}')),
    "unknown escape": _doc(_event(r', "args": {"a": "x\qy"}')),
    "leading zero": _doc(_event(', "args": {"a": 01}')),
    "bare fraction point": _doc(_event(', "args": {"a": 1.}')),
    "exponent without digits": _doc(_event(', "extra": 1e')),
    "misspelt literal": _doc(_event(', "args": {"a": [tru]}')),
    "trailing comma in args": _doc(_event(', "args": {"a": 1,}')),
    "trailing comma in the list": '{"traceEvents": [' + _event() + ",]}",
    "missing comma": _doc(_event(', "args": {"a": [1 2]}')),
    "unbalanced brackets": _doc(_event(', "args": {"a": [1, 2}}')),
    "garbage after the document": _doc(_event()) + " xyz",
    "broken member after the list": _doc(_event(), after=', "displayTimeUnit": '),
    "two event lists": _doc(_event(), after=', "traceEvents": []'),
    "deep nesting": _doc(_event(', "args": {"a": ' + "[" * 600 + "1" + "]" * 600 + "}")),
    "bare list with garbage": "[" + _event() + "] 5",
}


@needs_native
@pytest.mark.parametrize("case", list(CORRUPT))
def test_invalid_json_is_left_to_the_reference(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scanner checks what it reads; anything that is not valid JSON is declined, never guessed."""
    path = tmp_path / "t.json"
    path.write_bytes(CORRUPT[case].encode())
    why = assert_same_outcome(path, monkeypatch)
    assert why is None or why.startswith("python (")


MUTATIONS = [0, -0, 7, 2**63, 2**70, 1.5, 1e3, 1e20, "", "x", "\u00e9\"\\\n", "12", "ProfilerStep#3", "[memory]",
             "python_function", "kernel", "M", "X", "s", "f", "i", None, True, [], [1, "a"], {}, {"a": [1]}]
EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args"]
ARG_KEYS = ["External id", "external id", "correlation", "device", "stream", "bytes", "kind", "Call stack",
            "Python id", "Python parent id", "Device Type", "Device Id", "Bytes", "Total Allocated", "name"]


@pytest.fixture(scope="module")
def small_real_trace() -> dict[str, Any]:
    doc = json.loads(gzip.decompress((ROOT / "sample_traces" / "cpu_train_loop.pt.trace.json.gz").read_bytes()))
    doc["traceEvents"] = doc["traceEvents"][:300]
    return dict(doc)


@needs_native
@pytest.mark.parametrize("key", [*EVENT_KEYS, *(f"args.{k}" for k in ARG_KEYS)])
def test_any_value_anywhere_decodes_identically(key: str, small_real_trace: dict[str, Any], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Differential testing: one field of one event of a real trace set to each kind of JSON value
    decodes the same both ways, or fails the same way (this found a row-order bug once)."""
    n = len(small_real_trace["traceEvents"])
    for doc_no, first in enumerate(range(0, len(MUTATIONS), 3)):  # three values per document
        doc = json.loads(json.dumps(small_real_trace))
        for i, value in enumerate(MUTATIONS[first:first + 3], start=first):
            ev = doc["traceEvents"][(i * 37 + len(key)) % n]  # a different kind of event each time
            if key.startswith("args."):
                ev["args"] = {**(ev.get("args") or {}), key[5:]: value}
            else:
                ev[key] = value
        path = tmp_path / f"m{doc_no}.json"
        path.write_text(json.dumps(doc, indent=doc_no % 2 or None, ensure_ascii=doc_no % 3 == 0))
        assert_same_outcome(path, monkeypatch)


@needs_native
def test_chunks_split_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny chunks: every event boundary is a chunk boundary somewhere."""
    events = [x("cpu_op", f"op{i}", i, 1, **{"External id": i}) for i in range(50)] + ODD_EVENTS["every kind"]
    path = write(tmp_path, events, indent=None)
    reference, _ = parse_both(path, monkeypatch)
    monkeypatch.setattr(_kineto_native, "CHUNK_BYTES", 37)
    native = kineto.parse(path)
    assert decoder(native) == "native"
    assert_same(reference, native)


def test_json_of_odd_events_is_valid() -> None:
    """Guards the fixtures above: they must be JSON a real writer could emit."""
    for events in ODD_EVENTS.values():
        json.loads(json.dumps(events))
