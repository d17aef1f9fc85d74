"""The CLI as users run it: a subprocess, one-line errors, documented exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from neurontrace import Trace, errors
from tests.conftest import ROOT, SAMPLES
from tests.micro import write, x

SAMPLE = SAMPLES / "cpu_train_loop.pt.trace.json.gz"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(64)


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "neurontrace", *map(str, args)],
                          capture_output=True, text=True, timeout=120, check=False)


def test_convert_writes_parquet_that_reads_back_equal(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = run("convert", SAMPLE, "-o", out)
    assert res.returncode == 0, res.stderr
    assert f"wrote {out}/" in res.stdout
    assert "skipped none" in res.stdout
    import neurontrace

    assert Trace.from_parquet(out).equals(neurontrace.load(SAMPLE))


def test_info_reports_tables_and_accounting() -> None:
    res = run("info", SAMPLE)
    assert res.returncode == 0, res.stderr
    assert ": kineto" in res.stdout and "system_events" in res.stdout and "read 1" in res.stdout


@pytest.mark.parametrize(
    ("make", "code", "message"),
    [
        (lambda d: d / "missing.json", errors.EXIT_NOT_FOUND, "no such file or directory"),
        (lambda d: _write(d / "empty.json", b""), errors.EXIT_UNKNOWN_FORMAT, "empty (0 bytes)"),
        (lambda d: _write(d / "picture.json", PNG), errors.EXIT_UNKNOWN_FORMAT, "found a PNG image"),
        (lambda d: _write(d / "notes.json", b"hello"), errors.EXIT_UNKNOWN_FORMAT, "content starting 'hello'"),
        (lambda d: _write(d / "bad.json", b'{"traceEvents": [{"ph": "X"}, 2}'), errors.EXIT_MALFORMED,
         "not valid JSON"),
    ],
    ids=["missing", "empty", "png", "text", "corrupt"],
)
def test_bad_inputs_give_one_line_and_a_documented_code(tmp_path: Path, make: object, code: int,
                                                        message: str) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    res = run("convert", path, "-o", tmp_path / "out")
    assert res.returncode == code
    assert message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_existing_output_needs_force(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    res = run("convert", SAMPLE, "-o", out)
    assert res.returncode == errors.EXIT_OUTPUT_EXISTS and "--force" in res.stderr
    assert (out / "keep.txt").read_text() == "precious"
    assert run("convert", SAMPLE, "-o", out, "--force").returncode == 0
    assert not (out / "keep.txt").exists()


def test_usage_errors_use_argparse_code() -> None:
    res = run("convert", SAMPLE)
    assert res.returncode == errors.EXIT_USAGE and "-o/--output" in res.stderr


def test_help_documents_exit_codes() -> None:
    res = run("--help")
    assert res.returncode == 0
    assert errors.exit_codes_help() in res.stdout  # rendered from errors.EXIT_CODES, so every code is there
    for code, _ in errors.EXIT_CODES:
        assert f"\n  {code:<2} " in res.stdout
    assert "\n  10 diagnose --fail-on" in res.stdout and "\n  11 diff / runs compare --fail-on-regression" in res.stdout
    assert errors.exit_codes_help() in run("diff", "--help").stdout


def test_readme_and_docs_agree_with_the_declared_exit_codes() -> None:
    assert errors.exit_codes_markdown() in (ROOT / "README.md").read_text()
    meanings = dict(errors.EXIT_CODES)
    mentions = 0
    for page in sorted((ROOT / "docs").glob("*.md")):
        text = page.read_text()
        for m in re.finditer(r"[Ee]xit(?:s with)? code \**(\d+)\**", text):
            code = int(m.group(1))
            assert code in meanings, f"{page.name}: exit code {code} is not declared in errors.EXIT_CODES"
            flag = re.search(r"--[a-z-]+", meanings[code])
            near = text[max(0, m.start() - 300):m.end() + 300]
            assert flag is None or flag.group(0) in near, f"{page.name}: code {code} is {meanings[code]!r}"
            mentions += 1
    assert mentions >= 2  # docs/diagnose.md (10) and docs/diff.md (11)


def test_a_closed_stdout_ends_quietly() -> None:
    with subprocess.Popen([sys.executable, "-m", "neurontrace", "diagnose", "--json", str(SAMPLE)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the reader is gone before anything is written (`| head` that exited)
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=120)
    assert code == errors.EXIT_BROKEN_PIPE and err == ""


def test_convert_refuses_outputs_it_cannot_write_before_loading(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = run("convert", SAMPLE, "-o", blocker / "sub")
    assert res.returncode == errors.EXIT_OUTPUT_EXISTS and "is a file" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and blocker.read_text() == "x"
    res = subprocess.run([sys.executable, "-m", "neurontrace", "convert", str(SAMPLE), "-o", ".", "--force"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == errors.EXIT_OUTPUT_EXISTS and "current directory" in res.stderr
    assert blocker.read_text() == "x"  # --force deleted nothing


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_diagnose_human_report() -> None:
    res = run("diagnose", SAMPLE)
    assert res.returncode == 0, res.stderr
    for part in ("cpu", "compute", "host_overhead", "top stalls", "phases", "make_samples.py"):
        assert part in res.stdout


def test_diagnose_json_and_fail_on(tmp_path: Path) -> None:
    res = run("diagnose", SAMPLE, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "neurontrace.diagnose/1"
    (dev,) = doc["devices"]
    assert sum(dev["causes_ns"].values()) == dev["window"]["end_ns"] - dev["window"]["start_ns"]
    # A trace whose device idles 5% of its window in a named fallback op: a warning, not an error.
    trace = write(tmp_path, [x("user_annotation", "ProfilerStep#1", 0, 100), x("kernel", "k", 0, 10, pid=0, tid=7),
                             x("cpu_op", "aten::nonzero", 20, 5)])
    flags = ["--fallback-ops", "aten::nonzero", "--fail-on"]
    assert run("diagnose", trace, *flags, "info").returncode == errors.EXIT_FINDINGS
    assert run("diagnose", trace, *flags, "warning").returncode == errors.EXIT_FINDINGS
    assert run("diagnose", trace, *flags, "error").returncode == 0


def test_diagnose_options_are_validated(tmp_path: Path) -> None:
    res = run("diagnose", SAMPLE, "--window", "5ms:1ms")
    assert res.returncode == errors.EXIT_USAGE and "must end after it starts" in res.stderr
    res = run("diagnose", SAMPLE, "--fallback-log", tmp_path / "nope.log")
    assert res.returncode == errors.EXIT_NOT_FOUND and "no such fallback log" in res.stderr


def test_window_needs_units_and_says_the_accepted_forms() -> None:
    """``--window 5:10`` used to mean nanoseconds silently (a 5 ns window, idle 100%, exit 0)."""
    for bad in ("5:10", "1parsec:2ms", "5ms:10"):
        res = run("diagnose", SAMPLE, "--window", bad)
        assert res.returncode == errors.EXIT_USAGE, bad
        assert "a unit (ns, us, ms, s)" in res.stderr and "abs:START_NS:END_NS" in res.stderr


def test_window_offsets_count_from_the_printed_origin_or_are_absolute() -> None:
    whole = json.loads(run("diagnose", SAMPLE, "--json").stdout)
    origin = whole["origin_ns"]
    (default,) = whole["devices"]
    assert origin == default["window"]["start_ns"]  # time 0 is the analysis window start
    assert f"abs:{origin}" in run("diagnose", SAMPLE).stdout  # ... and the text report says so
    res = run("diagnose", SAMPLE, "--json", "--window", "1ms:2.5ms")
    (dev,) = json.loads(res.stdout)["devices"]
    assert (dev["window"], dev["window_rule"]) == ({"start_ns": origin + 1_000_000, "end_ns": origin + 2_500_000},
                                                   "option")
    res = run("diagnose", SAMPLE, "--json", "--window", f"abs:{origin + 1_000_000}:{origin + 2_500_000}")
    assert json.loads(res.stdout)["devices"][0]["window"] == dev["window"]
    # A window outside the trace is an error that says where the trace is, not a 1 µs idle window.
    res = run("diagnose", SAMPLE, "--window", "1000s:1001s")
    assert res.returncode == errors.EXIT_USAGE and "lies outside the trace" in res.stderr
    res = run("diagnose", SAMPLE, "--window", "abs:5:10")
    assert res.returncode == errors.EXIT_USAGE and "lies outside the trace" in res.stderr
    # One that overhangs it is cut, and says so.
    res = run("diagnose", SAMPLE, "--json", "--window", "20ms:900ms")
    assert res.returncode == 0 and "overhangs the trace" in res.stderr and "cut to +20.0 ms" in res.stderr


def test_a_printed_stall_time_pasted_into_window_selects_that_stall() -> None:
    """The one-origin rule: the report's "at +X" and ``--window`` count from the same time 0."""
    text = run("diagnose", SAMPLE).stdout
    m = re.search(r"at \+([\d.]+) (ms|µs)", text)
    assert m, text
    at = float(m[1]) * (1_000_000 if m[2] == "ms" else 1_000)
    doc = json.loads(run("diagnose", SAMPLE, "--json").stdout)
    stalls = doc["devices"][0]["top_stalls"]
    stall = min(stalls, key=lambda s: abs(s["start_ns"] - doc["origin_ns"] - at))
    unit = m[2].replace("µ", "u")
    res = run("diagnose", SAMPLE, "--json", "--window", f"{m[1]}{unit}:{float(m[1]) * 1.0001 + 0.5}{unit}")
    (dev,) = json.loads(res.stdout)["devices"]
    # The pasted time is the printed one (3 significant figures) and lands inside that stall.
    assert abs(dev["window"]["start_ns"] - stall["start_ns"]) <= max(stall["dur_ns"], 0.005 * at)


def test_diagnose_explicit_fallback_ops(tmp_path: Path) -> None:
    res = run("diagnose", SAMPLE, "--json", "--fallback-ops", "aten::addmm")
    doc = json.loads(res.stdout)
    (op,) = doc["fallback_ops"]
    assert (op["name"], op["found_by"], op["source"]) == ("aten::addmm", "explicit",
                                                           "make_samples.py:39 forward")
    assert op["calls"] > 0 and op["host_ns"] > 0


def test_parser_options_reach_only_formats_that_take_them(tmp_path: Path) -> None:
    res = run("info", SAMPLE, "--neff", tmp_path / "x.neff")
    assert res.returncode == errors.EXIT_USAGE
    assert "kineto, whose parser takes no option neff" in res.stderr
