"""Bad and changing inputs: each rule of the reading layer (neurontrace/_io.py, the Kineto decoders,
the Neuron and neurontrace Parquet readers) on the input that once broke it (issue #12).

Kineto cases run through both decoders (tests/fuzz_inputs.check_kineto): the same rows or the same
named error, and tables that validate.
"""

from __future__ import annotations

import gzip
import json
import mmap
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import neurontrace
from neurontrace import _io
from neurontrace.errors import (
    InputTooLargeError,
    MalformedTraceError,
    NeuronProfileWarning,
    OutputExistsError,
    UnknownFormatError,
)
from tests import fuzz_inputs as fz
from tests.conftest import ROOT
from tests.micro import x

SAMPLE = ROOT / "sample_traces" / "cpu_train_loop.pt.trace.json.gz"
NEURON = ROOT / "sample_traces" / "synthetic_neuron" / "synthetic_mlp_parquet"


def op(i: int, **args: Any) -> dict[str, Any]:
    return x("cpu_op", f"aten::op{i}", 10 * i, 5, **({"External id": i} | args))


def doc_bytes(events: list[dict[str, Any]], **top: Any) -> bytes:
    return json.dumps({"schemaVersion": 1, **top, "traceEvents": events}, indent=1).encode()


def both(tmp_path: Path, data: bytes, name: str = "t.json") -> fz.Outcome:
    path = tmp_path / name
    path.write_bytes(data)
    return fz.check_kineto(path)


def quiet_load(path: Path) -> neurontrace.Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return neurontrace.load(path)


def error_of(result: fz.Outcome) -> tuple[str, str]:
    assert result.kind == "error", f"expected a named error, got {result.kind}"
    name, message = result.what
    return str(name), str(message)


# -- gzip -----------------------------------------------------------------------------------------


def gzip_of_spaces(n_mib: int) -> bytes:
    c = zlib_compressobj()
    parts = [c.compress(b'{"traceEvents": [')]
    block = b" " * (1 << 20)
    parts += [c.compress(block) for _ in range(n_mib)]
    parts += [c.compress(b"]}"), c.flush()]
    return b"".join(parts)


def zlib_compressobj() -> Any:
    import zlib

    return zlib.compressobj(9, wbits=31)


def test_a_gzip_bomb_is_refused_by_name_beyond_the_ratio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip_of_spaces(8))  # 8 MiB of spaces in about 8 KiB: a ratio of ~1000
    monkeypatch.setattr(_io, "GZIP_FLOOR_BYTES", 1 << 20)
    with pytest.raises(InputTooLargeError, match="NEURONTRACE_GZIP_MAX_RATIO") as exc:
        neurontrace.load(bomb)
    assert exc.value.exit_code == 5
    monkeypatch.setenv(_io.GZIP_RATIO_ENV, "5000")  # the documented way to allow it
    assert quiet_load(bomb).num_events == 0


def test_the_ratio_setting_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_io.GZIP_RATIO_ENV, "lots")
    with pytest.raises(InputTooLargeError, match="expected a positive number"):
        neurontrace.load(SAMPLE)


def test_inflation_holds_about_one_copy(tmp_path: Path) -> None:
    """Streamed into one buffer: the content comes back as a bytearray whose size is the output."""
    content = _io.read_content(SAMPLE)
    assert isinstance(content.data, bytearray) and content.complete and not content.notes
    assert bytes(content.data) == gzip.decompress(SAMPLE.read_bytes())


def test_a_small_corrupt_gzip_is_reported_corrupt_not_unknown(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(doc_bytes([op(i) for i in range(50)])))
    data[12] ^= 0xFF  # in the first deflate block header: nothing inflates
    path = tmp_path / "t.json.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(MalformedTraceError, match="corrupt gzip") as exc:
        neurontrace.load(path)
    assert not isinstance(exc.value, UnknownFormatError)


def test_a_gzip_corrupt_in_the_middle_is_salvaged_up_to_the_damage(tmp_path: Path) -> None:
    events = [op(i) for i in range(300)]
    data = bytearray(gzip.compress(doc_bytes(events)))
    data[len(data) // 2] ^= 0x55
    result = both(tmp_path, bytes(data), "t.json.gz")
    assert result.kind == "ok"
    trace = quiet_load(tmp_path / "t.json.gz")
    kept = trace.system_events.num_rows
    assert 0 < kept < 300
    assert trace.system_events["name"].to_pylist() == [f"aten::op{i}" for i in range(kept)]
    (warning,) = trace.accounting[0].warnings
    assert "gzip data is corrupt" in warning and "cut off" in warning


@pytest.mark.parametrize("tail", [b"\0" * 512, b"garbage after the stream\n"])
def test_bytes_after_a_complete_gzip_are_noted_not_called_a_cut(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(doc_bytes([op(i) for i in range(20)])) + tail)
    with pytest.warns(neurontrace.errors.TraceWarning) as caught:
        trace = neurontrace.load(path)
    assert trace.system_events.num_rows == 20
    (warning,) = trace.accounting[0].warnings
    assert f"ignored {len(tail)} bytes after the end of the gzip data" in warning
    assert not any(isinstance(w.message, neurontrace.errors.TruncatedTraceWarning) for w in caught)


def test_concatenated_gzip_members_are_one_content(tmp_path: Path) -> None:
    text = doc_bytes([op(i) for i in range(20)])
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text[:100]) + gzip.compress(text[100:]))
    trace = neurontrace.load(path)
    assert trace.system_events.num_rows == 20 and trace.accounting[0].warnings == []


@pytest.mark.parametrize("gz", [False, True])
def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path, gz: bool) -> None:
    data = b"\xef\xbb\xbf" + doc_bytes([op(i) for i in range(5)])
    result = both(tmp_path, gzip.compress(data) if gz else data, "t.json.gz" if gz else "t.json")
    assert result.kind == "ok"
    assert quiet_load(tmp_path / ("t.json.gz" if gz else "t.json")).system_events.num_rows == 5


# -- files that change while they are read ------------------------------------------------------------


SNAPSHOT_CHILD = textwrap.dedent("""
    import mmap, os, sys
    from pathlib import Path
    from neurontrace import _io
    path = Path(sys.argv[1])
    if sys.argv[2] == "file-map":  # the old way: a map of the file itself
        f = path.open("rb")
        data = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    else:
        data = _io.read_content(path, snapshot=True).data
    os.truncate(path, 0)  # another process cuts the file while it is being read
    print(sum(data[i] for i in range(0, len(data), 4096)))  # touch every page
""")


@pytest.mark.skipif(os.name != "posix", reason="memory maps and SIGBUS are POSIX")
def test_a_file_truncated_while_read_cannot_kill_the_reader(tmp_path: Path) -> None:
    """The snapshot is private memory: truncating the file does not fault it. The control shows the
    child would die of SIGBUS were the file mapped, so the test can fail."""
    results = {}
    for mode in ("file-map", "snapshot"):
        path = tmp_path / f"{mode}.json"
        path.write_bytes(doc_bytes([op(i) for i in range(4000)]))
        child = subprocess.run([sys.executable, "-c", SNAPSHOT_CHILD, str(path), mode], capture_output=True,
                               text=True, timeout=120, check=False)
        results[mode] = child.returncode
    assert results["file-map"] == -signal.SIGBUS
    assert results["snapshot"] == 0


def test_a_snapshot_whose_file_shrank_refuses_to_restore(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(doc_bytes([op(i) for i in range(4000)]))
    snap = _io.read_content(path, snapshot=True).data
    assert isinstance(snap, _io.Snapshot)
    snap.release(0, len(snap))
    path.write_bytes(b"{}")
    with pytest.raises(MalformedTraceError, match="while it was read"):
        snap.restore()


def test_released_pages_are_restored_for_the_reference_decoder(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    data = doc_bytes([op(i) for i in range(4000)])
    path.write_bytes(data)
    snap = _io.read_content(path, snapshot=True).data
    assert isinstance(snap, _io.Snapshot)
    snap.release(100, len(snap))
    page = mmap.PAGESIZE
    assert not any(snap[page: len(snap) // page * page])  # freed: private memory reads as zeros
    assert bytes(snap[:page]) == data[:page]  # the page holding byte 100 is kept
    snap.restore()
    assert bytes(snap) == data
    assert bytes not in type(snap).__mro__ and isinstance(snap, mmap.mmap)


# -- malformed Kineto structures: a named error from both decoders -------------------------------------


# "@@" marks where each case's raw JSON text goes (a string where x() types a number: ignored per line).
MALFORMED = {
    "deep nesting": ([op(0, deep="@@")], "[" * 3000 + "]" * 3000, "nests deeper than"),
    "args a list": ([x("cpu_op", "a", 1, 1) | {"args": "@@"}], "[1, 2]", "'args' is a list"),
    "args a string": ([x("cpu_op", "a", 1, 1) | {"args": "@@"}], '"text"', "'args' is a string"),
    "ts beyond int64 ns": ([x("cpu_op", "a", "@@", 1)], "9223372036854775808", "beyond what int64"),  # type: ignore[arg-type]
    "float ts beyond int64 ns": ([x("cpu_op", "a", "@@", 1)], "1e17", "beyond what int64"),  # type: ignore[arg-type]
    "dur beyond int64 ns": ([x("cpu_op", "a", 1, "@@")], "1e300", "beyond what int64"),  # type: ignore[arg-type]
    "ts beyond a double": ([x("cpu_op", "a", "@@", 1)], "-1e400", "Number out of range"),  # type: ignore[arg-type]
    "read arg beyond a double": ([op(0, correlation="@@")], "-1e400", "Number out of range"),
    "invalid UTF-8 in a name": ([x("cpu_op", "@@", 1, 1)], '"a\xffb"', "UTF-8"),
    "invalid UTF-8 in a read arg of another type": ([op(0, correlation="@@")], '"a\xffb"', "UTF-8"),
    "lone surrogate escape in an unread arg": ([op(0, note="@@")], '"a\\ud800b"', "hex escape"),
    "lone low surrogate in a name": ([x("cpu_op", "@@", 1, 1)], '"\\udc00"', "surrogate"),
}


def splice(events: list[dict[str, Any]], raw: str, **top: Any) -> bytes:
    return doc_bytes(events, **top).replace(b'"@@"', raw.encode("latin-1"))


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_structures_are_named_errors_in_both_decoders(case: str, tmp_path: Path) -> None:
    events, raw, message = MALFORMED[case]
    name, text = error_of(both(tmp_path, splice(events, raw)))
    assert name == "MalformedTraceError" and message in text


def test_an_overflowing_clock_origin_is_a_named_error(tmp_path: Path) -> None:
    _, text = error_of(both(tmp_path, doc_bytes([op(5)], baseTimeNanoseconds=2**63 - 10)))
    assert "baseTimeNanoseconds" in text and "overflows" in text


@pytest.mark.parametrize("base", ["92233720368547750000000", "1e400", '"1700000000"', "-5", "true"])
def test_an_unusable_clock_origin_is_ignored_with_a_warning(base: str, tmp_path: Path) -> None:
    data = doc_bytes([op(5)]).replace(b'"schemaVersion"', f'"baseTimeNanoseconds": {base}, "schemaVersion"'.encode())
    assert both(tmp_path, data).kind == "ok"
    trace = quiet_load(tmp_path / "t.json")
    assert trace.system_events["ts_ns"].to_pylist() == [50_000]
    assert trace.meta("clock") == "trace_relative_ns"
    assert any("baseTimeNanoseconds" in w for w in trace.accounting[0].warnings)


@pytest.mark.parametrize("rank", ["2147483648", "-2147483649", "1e400", '"3"'])
def test_a_rank_outside_int32_is_ignored_with_a_warning(rank: str, tmp_path: Path) -> None:
    info = f'"distributedInfo": {{"rank": {rank}}}, "schemaVersion"'.encode()
    data = doc_bytes([op(1)]).replace(b'"schemaVersion"', info)
    assert both(tmp_path, data).kind == "ok"
    trace = quiet_load(tmp_path / "t.json")
    assert trace.system_events["rank"].to_pylist() == [None]
    assert any("not a 32-bit integer" in w or "not an object" in w for w in trace.accounting[0].warnings)


def test_duplicate_keys_take_the_last_value_in_both_decoders(tmp_path: Path) -> None:
    """As JSON.parse (and so Chrome's and Perfetto's trace viewers) do."""
    data = splice([op(0, correlation="@@")], '1, "correlation": 2')
    assert both(tmp_path, data).kind == "ok"
    assert quiet_load(tmp_path / "t.json").system_events["correlation"].to_pylist() == [2]


@pytest.mark.parametrize("raw", ["1e400", "-1e400", "123456789012345678901234567890"])
def test_numbers_out_of_range_in_unread_args_are_kept_as_text(raw: str, tmp_path: Path) -> None:
    # also with a read key of an odd type beside it, which sends the reference down its loose path
    data = splice([op(0, note="@@", correlation="odd")], raw)
    assert both(tmp_path, data).kind == "ok"
    args = json.loads(quiet_load(tmp_path / "t.json").system_events["args"][0].as_py().replace(raw, "0"))
    assert args["note"] == 0


@pytest.mark.parametrize("zero", ["-0", "-0.0", "0"])
def test_negative_zero_in_a_counter_decodes_alike(zero: str, tmp_path: Path) -> None:
    event = {"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": 1, "args": {"v": "@@"}}
    assert both(tmp_path, splice([event], zero)).kind == "ok"


# -- wrong tables: invalid UTF-8 in args, nameless Python frames ----------------------------------------


def test_invalid_utf8_in_args_is_replaced_and_counted(tmp_path: Path) -> None:
    data = splice([op(0, note="@@"), op(1), op(2, other="@@")], '"caf\xe9"')
    assert both(tmp_path, data).kind == "ok"
    trace = quiet_load(tmp_path / "t.json")
    args = trace.system_events["args"].to_pylist()
    assert json.loads(args[0])["note"] == "caf\ufffd" and json.loads(args[2])["other"] == "caf\ufffd"
    assert any(w.startswith("2 events have bytes that are not UTF-8") for w in trace.accounting[0].warnings)
    trace.to_pandas()  # failed once: Arrow held the raw bytes
    out = trace.to_parquet(tmp_path / "out")
    assert neurontrace.load(out).system_events["args"].to_pylist() == args


def test_a_python_frame_without_a_name_steals_nothing(tmp_path: Path) -> None:
    def py(name: str | None, ts: int, dur: int, pid_: int, parent: int) -> dict[str, Any]:
        ev = x("python_function", name or "", ts, dur, **{"Python id": pid_, "Python parent id": parent})
        if name is None:
            del ev["name"]
        return ev

    events = [py("train.py(10): main", 0, 100, 1, 0), py(None, 10, 80, 2, 1), py("model.py(5): fwd", 20, 60, 3, 2),
              x("cpu_op", "aten::mm", 30, 5)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's "invalid value in cast" once leaked here
        assert both(tmp_path, doc_bytes(events)).kind == "ok"
        trace = quiet_load(tmp_path / "t.json")
    frames = trace.frames.to_pylist()
    by_id = {f["frame_id"]: f for f in frames}
    unnamed = next(f for f in frames if f["function"] == "<unnamed python_function>")
    assert unnamed["file"] is None and unnamed["line"] is None
    assert by_id[unnamed["parent_id"]]["function"] == "main"  # keeps its caller
    fwd = next(f for f in frames if f["function"] == "fwd")
    assert fwd["parent_id"] == unnamed["frame_id"]
    mm = trace.system_events.filter(pa.compute.equal(trace.system_events["name"], "aten::mm"))
    assert by_id[mm["frame_id"][0].as_py()]["line"] == 5  # its own innermost user frame, model.py:5
    assert any("1 python_function events have no name" in w for w in trace.accounting[0].warnings)


# -- Neuron Explorer directories -------------------------------------------------------------------


def copy_neuron(tmp_path: Path) -> Path:
    return Path(shutil.copytree(NEURON, tmp_path / "p"))


def test_part_files_of_different_schemas_are_named(tmp_path: Path) -> None:
    d = copy_neuron(tmp_path)
    t = pq.read_table(d / "Instruction.parquet")
    (d / "Instruction.parquet").unlink()
    pq.write_table(t.slice(0, 10), d / "Instruction_0.parquet")
    rest = t.slice(10)
    rest = rest.set_column(0, "start_ts", pa.array([str(v) for v in rest["start_ts"].to_pylist()]))
    pq.write_table(rest, d / "Instruction_1.parquet")
    with pytest.raises(MalformedTraceError, match="incompatible schemas"):
        neurontrace.load(d)


def test_a_frame_table_without_its_key_is_left_out_with_a_warning(tmp_path: Path) -> None:
    d = copy_neuron(tmp_path)
    pq.write_table(pq.read_table(d / "StackFrame.parquet").drop_columns(["id"]), d / "StackFrame.parquet")
    trace = quiet_load(d)
    assert any("table StackFrame has no 'id' column" in w for w in trace.accounting[0].warnings)
    assert trace.device_events.num_rows == quiet_load(NEURON).device_events.num_rows


def test_numbers_stored_as_text_are_read_as_numbers(tmp_path: Path) -> None:
    d = copy_neuron(tmp_path)
    t = pq.read_table(d / "Instruction.parquet")
    for col in ("start_ts", "duration_ns"):
        t = t.set_column(t.column_names.index(col), col, pa.array([str(v) for v in t[col].to_pylist()]))
    pq.write_table(t, d / "Instruction.parquet")
    assert quiet_load(d).device_events.equals(quiet_load(NEURON).device_events)


def test_text_that_is_not_a_number_in_a_time_column_is_named(tmp_path: Path) -> None:
    d = copy_neuron(tmp_path)
    t = pq.read_table(d / "Instruction.parquet")
    t = t.set_column(t.column_names.index("start_ts"), "start_ts", pa.array(["soon"] * t.num_rows))
    pq.write_table(t, d / "Instruction.parquet")
    with pytest.raises(MalformedTraceError, match="'start_ts' should hold numbers"):
        quiet_load(d)


def test_an_undocumented_list_column_is_left_out_with_a_warning(tmp_path: Path) -> None:
    d = copy_neuron(tmp_path)
    t = pq.read_table(d / "CpuUsage.parquet")
    t = t.set_column(t.column_names.index("util_percent"), "util_percent",
                     pa.array([[v] for v in t["util_percent"].to_pylist()]))
    pq.write_table(t, d / "CpuUsage.parquet")
    trace = quiet_load(d)
    assert any("util_percent hold lists" in w for w in trace.accounting[0].warnings)


def test_a_flipped_byte_in_a_page_is_named_or_harmless(tmp_path: Path) -> None:
    d = copy_neuron(tmp_path)
    raw = (d / "Instruction.parquet").read_bytes()
    for at in range(4, len(raw) - 8, max(len(raw) // 20, 1)):
        b = bytearray(raw)
        b[at] ^= 0x10
        (d / "Instruction.parquet").write_bytes(bytes(b))
        fz.outcome(d)  # raises on anything but a trace with valid tables or a named error


def test_legacy_neuron_json_with_a_number_where_a_list_belongs(tmp_path: Path) -> None:
    src = ROOT / "sample_traces" / "synthetic_neuron" / "synthetic_mlp_device.json"
    doc = json.loads(src.read_text())
    for key in ("summary", "instruction", "dma"):
        bad = dict(doc, **{key: 5})
        (tmp_path / "d.json").write_text(json.dumps(bad))
        assert fz.outcome(tmp_path / "d.json").kind == "ok"  # the entry is counted skipped
    bad = json.loads(src.read_text())
    bad["instruction"][0]["timestamp"] = "later"
    (tmp_path / "d.json").write_text(json.dumps(bad))
    with pytest.raises(MalformedTraceError, match="'timestamp' must hold numbers"):
        quiet_load(tmp_path / "d.json")


# -- convert outputs ------------------------------------------------------------------------------------


@pytest.fixture
def converted(tmp_path: Path) -> Path:
    return quiet_load(SAMPLE).to_parquet(tmp_path / "out")


@pytest.mark.parametrize("marker", ["[1, 2]", "not json", '{"layout_version": "1"}', "{}"])
def test_a_damaged_marker_is_named(converted: Path, marker: str) -> None:
    (converted / "neurontrace.json").write_text(marker)
    with pytest.raises(MalformedTraceError):
        neurontrace.load(converted)


@pytest.mark.parametrize("change", ["extra", "missing", "list"])
def test_a_table_with_other_columns_is_named(converted: Path, change: str) -> None:
    path = converted / "system_events.parquet"
    t = pq.read_table(path)
    if change == "extra":
        t = t.append_column("surprise", pa.nulls(t.num_rows, pa.int64()))
    elif change == "missing":
        t = t.drop_columns(["ts_ns"])
    else:
        t = t.set_column(t.column_names.index("ts_ns"), "ts_ns", pa.array([[1]] * t.num_rows))
    pq.write_table(t, path)
    with pytest.raises(MalformedTraceError, match=r"system_events\.parquet"):
        neurontrace.load(converted)


CONVERT_CHILD = "import sys, neurontrace; neurontrace.load(sys.argv[1]).to_parquet(sys.argv[2], force=True)"


def test_concurrent_converts_into_one_output_each_land_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writers = [subprocess.Popen([sys.executable, "-W", "ignore", "-c", CONVERT_CHILD, str(SAMPLE), str(out)],
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errors = [w.communicate(timeout=300)[1] for w in writers]
    assert [w.returncode for w in writers] == [0] * 2, errors
    assert quiet_load(out).equals(quiet_load(SAMPLE))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary directory left behind


def test_without_force_a_writer_that_lost_the_race_is_refused(tmp_path: Path) -> None:
    trace = quiet_load(SAMPLE)
    out = tmp_path / "out"
    out.mkdir()  # empty: allowed; someone else fills it before this writer renames into place
    real_rename = Path.rename

    def racing(self: Path, target: Any) -> Any:
        if Path(target) == out and not any(out.iterdir()):
            (out / "theirs").write_text("x")
        return real_rename(self, target)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Path, "rename", racing)
        with pytest.raises(OutputExistsError, match="meanwhile"):
            trace.to_parquet(out)
    assert (out / "theirs").exists()


# -- the reference decoder's memory: minified lists are chunked too --------------------------------------


def test_a_minified_list_is_cut_between_events_not_inside_strings(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from neurontrace.parsers import _kineto_json

    events = [op(i, note='}, {"ph": "X"}, {' * (i % 3)) for i in range(200)]
    data = json.dumps({"traceEvents": events}, separators=(",", ":")).encode()  # no line structure
    whole = both(tmp_path, data)
    monkeypatch.setattr(_kineto_json, "CHUNK_BYTES", 256)
    chunks = list(_kineto_json._minified_chunks(memoryview(data)[len(b'{"traceEvents":['):-2]))
    assert len(chunks) > 20
    for chunk, _ in chunks:  # every chunk is a run of whole events
        assert len(json.loads(bytes(_kineto_json._bracketed(chunk)))) > 0
    assert fz.same(whole, both(tmp_path, data))


def test_convert_never_replaces_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    trace = quiet_load(SAMPLE)
    for target in (".", tmp_path, tmp_path.parent):
        with pytest.raises(OutputExistsError, match="current directory"):
            trace.to_parquet(target, force=True)
    assert (tmp_path / "keep.txt").read_text() == "mine"


def _invalid_utf8(n: int) -> pa.Array:
    raw = pa.array([b"ok\xff"] * n, pa.binary())
    return pa.StringArray.from_buffers(n, raw.buffers()[1], raw.buffers()[2])


def test_invalid_utf8_in_a_parquet_page_is_named(converted: Path, tmp_path: Path) -> None:
    """Parquet readers do not check UTF-8 (a flipped byte in a string page found by the campaign)."""
    path = converted / "system_events.parquet"
    t = pq.read_table(path)
    t = t.set_column(t.column_names.index("host"), "host", _invalid_utf8(t.num_rows))
    pq.write_table(t, path)
    with pytest.raises(MalformedTraceError, match="UTF8"):
        neurontrace.load(converted)
    d = copy_neuron(tmp_path)
    t = pq.read_table(d / "Instruction.parquet")
    t = t.set_column(t.column_names.index("opcode"), "opcode", _invalid_utf8(t.num_rows))
    pq.write_table(t, d / "Instruction.parquet")
    # A Neuron table's string page is repaired at the read boundary: U+FFFD, counted in the warnings.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = neurontrace.load(d)
    told = [str(w.message) for w in caught if issubclass(w.category, NeuronProfileWarning)]
    assert any("table Instruction" in m and "opcode: invalid UTF-8 read with U+FFFD (140 " in m for m in told), told
    opcodes = set(trace.device_events["name"].cast(pa.string()).to_pylist())
    assert "ok\ufffd" in opcodes
