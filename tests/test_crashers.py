"""The crasher classes of issue #29 item 1, each re-created as a small hostile input.

Every case runs as a user runs it (``neurontrace info`` / ``diagnose`` in-process) and must end in
exit 0 or a named error's exit code, never a traceback; where the rule is a repair, the repair and
its count are asserted. The Neuron inputs are the synthetic Explorer directory
(sample_traces/synthetic_neuron, SYNTHETIC.md) with one column retyped: no real Explorer file
holds these faults, and neuron.md §3.3/§3.7 states the types the boundary enforces.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import neurontrace
from neurontrace import errors
from neurontrace.cli import main
from tests import fuzz_inputs as fz
from tests.conftest import ROOT

NEURON = ROOT / "sample_traces" / "synthetic_neuron" / "synthetic_mlp_parquet"
LEGACY = ROOT / "sample_traces" / "synthetic_neuron"
NAMED = {errors.MalformedTraceError.exit_code, errors.UnknownFormatError.exit_code}


def run_cli(*argv: str) -> tuple[int, str]:
    """Exit code and stderr of one CLI run in this process; any exception other than a named
    error's exit propagates (the test fails on a traceback)."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, err.getvalue()


def retyped(tmp_path: Path, table: str, column: str, make: Callable[[pa.Table], pa.Array]) -> Path:
    d = tmp_path / "neuron"
    shutil.copytree(NEURON, d)
    t = pq.read_table(d / f"{table}.parquet")
    t = t.set_column(t.column_names.index(column), column, make(t))
    pq.write_table(t, d / f"{table}.parquet")
    return d


def load_warnings(path: Path) -> tuple[neurontrace.Trace, str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = neurontrace.load(path)
    return trace, "\n".join(str(w.message) for w in caught)


# -- Neuron tables of unexpected types or values: one boundary (_neuron_conform) ------------------


REPAIRED = [
    # (table, column, new column, text the warning must hold or None when the coercion is silent)
    ("StackFrameFileName", "name", lambda t: pa.array(range(t.num_rows), pa.int64()), None),
    ("StackFrameFileName", "id", lambda t: pa.array(range(t.num_rows), pa.int64()), None),
    ("KernelStackFrames", "file_path", lambda t: pa.array([1.5] * t.num_rows), None),
    ("DeviceProfileList", "instance_id", lambda t: pa.array(range(t.num_rows), pa.int64()), None),
    ("Flow", "in_table", lambda t: pa.array(range(t.num_rows), pa.int64()), None),
    ("Flow", "dependency_type", lambda t: pa.nulls(t.num_rows), None),
    ("Instruction", "opcode", lambda t: pa.nulls(t.num_rows), None),
    ("Instruction", "start_ts", lambda t: t["start_ts"].cast(pa.timestamp("ns")), "timestamps (ns) read as int64 ns"),
    ("Instruction", "start_ts", lambda t: pa.array([float("nan")] * t.num_rows), "NaN, infinite or out-of-range"),
    ("ExecutionInfo", "execution_start_ts", lambda t: pa.array([float("nan")] * t.num_rows), "NaN"),
    ("CcInstruction", "start_ts", lambda t: pa.array([float("nan")] * t.num_rows), "NaN"),
    ("KernelStackFrames", "line_number", lambda t: pa.array([2**63 - 1] * t.num_rows), "outside [0, 2,147,483,647]"),
    ("DmaPacket", "transfer_bytes", lambda t: pa.array([2**63 - 1] * t.num_rows), "values outside"),
    ("Instruction", "duration_ns", lambda t: pa.array([2**63 - 1] * t.num_rows), "values outside"),
    ("Instruction", "opcode", lambda t: pa.array([b"MATMUL", b"ok\xff"] * (t.num_rows // 2), pa.binary()),
     "invalid UTF-8 read with U+FFFD (70 value(s)"),
    ("Instruction", "stack_frame_ids", lambda t: pa.array([["a"]] * t.num_rows, pa.list_(pa.string())), None),
    ("Instruction", "layer", lambda t: pa.array([["a"]] * t.num_rows, pa.list_(pa.string())), "left out"),
]


@pytest.mark.parametrize(("table", "column", "make", "said"), REPAIRED,
                         ids=[f"{t}.{c}-{i}" for i, (t, c, _, _) in enumerate(REPAIRED)])
def test_a_retyped_neuron_column_is_repaired_at_the_boundary(tmp_path: Path, table: str, column: str,
                                                              make: Callable[[pa.Table], pa.Array],
                                                              said: str | None) -> None:
    d = retyped(tmp_path, table, column, make)
    trace, told = load_warnings(d)
    for t in trace.tables.values():
        t.validate(full=True)
    if said is not None:
        assert said in told, told
    assert run_cli("diagnose", str(d))[0] == 0


def test_a_timestamp_column_reads_as_the_same_ns(tmp_path: Path) -> None:
    plain = load_warnings(NEURON)[0]
    d = retyped(tmp_path, "Instruction", "start_ts", lambda t: t["start_ts"].cast(pa.timestamp("ns")))
    assert load_warnings(d)[0].device_events["ts_ns"].equals(plain.device_events["ts_ns"])


REFUSED = [
    ("Instruction", "start_ts", lambda t: pa.array(["abc"] * t.num_rows), "'start_ts' should hold numbers"),
    ("DmaPacket", "read_bytes", lambda t: pa.array([True] * t.num_rows), ("holds bool, where neuron-explorer writes "
                                                                          "numbers")),
]


@pytest.mark.parametrize(("table", "column", "make", "said"), REFUSED, ids=[f"{t}.{c}" for t, c, _, _ in REFUSED])
def test_a_neuron_column_that_cannot_be_its_kind_is_a_named_error(tmp_path: Path, table: str, column: str,
                                                                  make: Callable[[pa.Table], pa.Array],
                                                                  said: str) -> None:
    d = retyped(tmp_path, table, column, make)
    with pytest.raises(errors.MalformedTraceError, match=said):
        load_warnings(d)
    rc, err = run_cli("diagnose", str(d))
    assert rc == errors.MalformedTraceError.exit_code and table in err, err


def test_a_duplicate_neuron_column_is_named(tmp_path: Path) -> None:
    d = tmp_path / "neuron"
    shutil.copytree(NEURON, d)
    t = pq.read_table(d / "CcInstruction.parquet")
    pq.write_table(pa.Table.from_arrays([*t.columns, t["start_ts"]], names=[*t.column_names, "start_ts"]),
                   d / "CcInstruction.parquet")
    with pytest.raises(errors.MalformedTraceError, match="'start_ts' more than once"):
        neurontrace.load(d)


def test_flipped_bytes_in_a_flow_page_load_or_fail_by_name(tmp_path: Path) -> None:
    data = (NEURON / "Flow.parquet").read_bytes()
    outcomes = set()
    for at in range(4, len(data) - 8, max(1, len(data) // 20)):
        d = tmp_path / f"flip{at}"
        shutil.copytree(NEURON, d)
        b = bytearray(data)
        b[at] ^= 0x5A
        (d / "Flow.parquet").write_bytes(bytes(b))
        outcomes.add(fz.outcome(d).kind)
        shutil.rmtree(d)
    assert outcomes == {"ok", "error"}, outcomes


# -- capture and legacy JSON of unexpected shapes ------------------------------------------------


SAMPLE = ROOT / "sample_traces" / "cpu_train_loop.pt.trace.json.gz"


@pytest.mark.parametrize(("record", "dropped"), [
    ('{"schema": "neurontrace.run/1", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", None),
    ('{"schema": "neurontrace.run/1", "fallback_ops": 7}', "fallback_ops (int)"),
    ('{"schema": "neurontrace.run/1", "world_size": "' + "9" * 5000 + '"}', "world_size (str)"),
    ('{"schema": "neurontrace.run/1", "rank": ' + "9" * 400 + "}", "rank (int)"),
    ('{"schema": "neurontrace.run/1", "windows": {"a": 1}, "versions": [1]}', "windows (dict), versions (list)"),
])
def test_a_run_record_of_another_shape_is_dropped_by_field(tmp_path: Path, record: str, dropped: str | None) -> None:
    shutil.copy(SAMPLE, tmp_path / SAMPLE.name)
    (tmp_path / "run.json").write_text(record)
    trace, told = load_warnings(tmp_path / SAMPLE.name)
    if dropped is None:
        assert "unreadable run record" in told and trace.meta("run") is None
    else:
        assert f"left out: {dropped}" in told, told
        assert dropped.split()[0] in trace.meta("run")
    assert run_cli("diagnose", str(tmp_path / SAMPLE.name))[0] == 0


def _legacy(tmp_path: Path, name: str, edit: Callable[[dict], None]) -> Path:  # type: ignore[type-arg]
    doc = json.loads((LEGACY / name).read_text())
    edit(doc)
    out = tmp_path / name
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize("edit", [
    lambda d: d.update(dma=5), lambda d: d.update(instruction=7), lambda d: d["dma"][0].update(source=3),
    lambda d: d.update(summary=[None]), lambda d: d["instruction"][0].update(duration=int("9" * 400)),
    lambda d: d.update(profile_info=None), lambda d: d["cc_ops"][0].update(input_size="x" * 10),
])
def test_a_legacy_device_profile_of_another_shape_loads_or_fails_by_name(tmp_path: Path,
                                                                         edit: Callable[[dict], None]) -> None:  # type: ignore[type-arg]
    path = _legacy(tmp_path, "synthetic_mlp_device.json", edit)
    fz.outcome(path)  # a non-named exception fails the test
    assert run_cli("diagnose", str(path))[0] in {0, *NAMED}


@pytest.mark.parametrize("name", ["synthetic_mlp_device.json", "synthetic_mlp_system.json",
                                  "synthetic_mlp_summary.json"])
def test_neuron_json_nested_past_the_recursion_limit_is_a_named_error(tmp_path: Path, name: str) -> None:
    text = json.dumps(json.loads((LEGACY / name).read_text()))  # an object: the deep value goes last, the
    text = text[:-1] + ', "x": ' + "[" * 200_000 + "]" * 200_000 + "}"  # format is still recognised by its head
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(errors.MalformedTraceError, match=r"nested|not valid JSON"):
        neurontrace.load(path)
    assert run_cli("diagnose", str(path))[0] == errors.MalformedTraceError.exit_code


@pytest.mark.parametrize("value", ["9" * 400, "1" + "0" * 400 + ".5", "-" + "9" * 300, "1e400", "nan"])
def test_summary_numbers_beyond_a_double_load_or_fail_by_name(tmp_path: Path, value: str) -> None:
    text = (LEGACY / "synthetic_mlp_summary.txt").read_text()
    for key in ("hardware_flops", "mfu_estimated_percent"):
        text = re.sub(rf"^(\s+{key}\s+)\S+$", lambda m: m.group(1) + value, text, flags=re.M)
    assert value in text
    path = tmp_path / "synthetic_mlp_summary.txt"
    path.write_text(text)
    fz.outcome(path)
    assert run_cli("diagnose", str(path))[0] in {0, *NAMED}


# -- Kineto: null optional objects, numbers beyond a double, duplicate keys -----------------------


EVENTS = [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": {"External id": 1}},
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 12, "dur": 2,
     "args": {"External id": 1, "device": 0, "stream": 7, "correlation": 3}},
    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 11, "s": "t",
     "args": {"Bytes": 1024, "Total Allocated": 2048, "Device Type": 0, "Device Id": -1}},
]
BASE = json.dumps({"schemaVersion": 1, "traceEvents": EVENTS})
KINETO = {
    "distributedInfo null": BASE[:-1] + ', "distributedInfo": null}',
    "deviceProperties null": BASE[:-1] + ', "deviceProperties": null}',
    "deviceProperties of nulls": BASE[:-1] + ', "deviceProperties": [null, 3, "x"]}',
    "rank as a huge string": BASE[:-1] + ', "distributedInfo": {"rank": "' + "1" * 400 + '", "world_size": null}}',
    # found by bench/fuzz_campaign.py (seed 2026, kineto #1195), minimized: a rank of 1e400 left distributedInfo
    # as text in the metadata, and the cross-rank reading of a host collective called .get on it
    "rank beyond a double with a collective": json.dumps({"distributedInfo": {"rank": "@"}, "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_gather", "pid": 19683, "tid": 20164,
         "ts": 5257925603585.475, "dur": 23924.388, "args": {"External id": 1025, "Ev Idx": 1200}}]}
    ).replace('"@"', "1e400"),
    # found by bench/fuzz_campaign.py (seed 2026, structured #3379, drop_keys), minimized: a Python frame whose
    # parent is on another thread (its tid dropped) indexed the other thread's frame positions (IndexError)
    "python parent on another thread": json.dumps({"traceEvents": [
        {"cat": "python_function", "pid": 8639, "tid": 8639, "ts": 5131080469123.243},
        {"cat": "python_function", "pid": 8639, "tid": 8639, "ts": 5131080469126.357, "args": {"Python id": 430}},
        {"cat": "python_function", "pid": 8639, "ts": 5131080469127.34, "args": {"Python parent id": 430}},
        {"pid": 8639, "ts": 5131080469147.946}]}),
    "rank beyond a double": BASE[:-1] + ', "distributedInfo": {"rank": 1e400}}',
    "distributedInfo a string": BASE[:-1] + ', "distributedInfo": "text"}',
    "distributedInfo a list": BASE[:-1] + ', "distributedInfo": [1, null]}',
    "memory Bytes beyond a double": BASE.replace('"Bytes": 1024', '"Bytes": ' + "9" * 400),
    "memory total beyond a double": BASE.replace('"Total Allocated": 2048', '"Total Allocated": -' + "9" * 400),
    "cat int then text": BASE.replace('"cat": "cpu_op"', '"cat": 2, "cat": "cpu_op"'),
    "name list then text": BASE.replace('"name": "aten::mm"', '"name": [1], "name": "aten::mm"'),
    "ts text then number": BASE.replace('"ts": 10', '"ts": "x", "ts": 10'),
    "dur object then number": BASE.replace('"dur": 5', '"dur": {"a": 1}, "dur": 5'),
    "ph int then text": BASE.replace('"ph": "X", "cat": "cpu_op"', '"ph": 1, "ph": "X", "cat": "cpu_op"'),
    "cat text then int": BASE.replace('"cat": "cpu_op"', '"cat": "cpu_op", "cat": 2'),
    "args number then object": BASE.replace('"args": {"External id": 1}', '"args": 5, "args": {"External id": 1}'),
    "args key twice": BASE.replace('"External id": 1}', '"External id": "x", "External id": 1}'),
}


@pytest.mark.parametrize("case", list(KINETO))
def test_hostile_kineto_shapes_give_the_same_tables_from_both_decoders(tmp_path: Path, case: str) -> None:
    path = tmp_path / "hostile" / "t.json"
    path.parent.mkdir()
    path.write_text(KINETO[case])
    result = fz.check_kineto(path)  # compares the two decoders' tables, then loads as a user does
    for cmd in ("info", "diagnose"):
        assert run_cli(cmd, str(path))[0] in {0, *NAMED}
    if case.endswith(("then text", "then number")) or case == "args number then object":
        # the last value counts (JSON.parse): the event is read as if the first value were absent
        assert result.kind == "ok", result.what
        clean = tmp_path / "clean" / "t.json"  # the same name: the source path is in the metadata
        clean.parent.mkdir()
        clean.write_text(BASE)
        expected = fz.outcome(clean).what[0]
        for name in ("system_events", "device_events"):
            cols = ["ts_ns", "dur_ns", "name", "category"]
            assert result.what[0][name].select(cols).equals(expected[name].select(cols)), name
    if case == "cat text then int":
        assert result.kind == "error"


# -- a dataset marker naming a partition outside the dataset --------------------------------------


@pytest.mark.parametrize("entry", [{"rank": 0, "partition": "../outside", "part": 0},
                                   {"rank": 0, "partition": "rank=0", "part": "0"},
                                   {"rank": 2**40, "partition": "rank=0", "part": 0}, 7])
def test_a_dataset_marker_rank_entry_of_another_shape_is_named(tmp_path: Path, entry: object) -> None:
    ds = tmp_path / "ds"
    (ds / "system_events" / "rank=0").mkdir(parents=True)
    (ds / "neurontrace-dataset.json").write_text(json.dumps({"layout": "neurontrace-dataset/1", "tables": [],
                                                             "ranks": [entry]}))
    with pytest.raises(errors.MalformedTraceError, match="'ranks' is not a list of entries"):
        neurontrace.load(ds)


def test_a_trace_with_dropped_keys_gets_a_critical_path_or_a_named_error() -> None:
    """Found by bench/fuzz_campaign.py --seed 2027 (structured case #496: drop_keys of cpu_train_loop, not
    minimized): its ProfilerSteps lost their durations, the steps rule made an inverted window and the critical
    path's conservation check reached the user. A step of no extent now delimits no window."""
    assert fz.as_user(ROOT / "tests" / "data" / "fuzz_critical_path_negative_idle.json") == [0, 0]  # info, diagnose
