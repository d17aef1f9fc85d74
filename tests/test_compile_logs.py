"""Compile logs read alone: the seven real TORCH_TRACE logs of ../shared/corpus/compile against tlparse's own
reading, damaged logs, a directory of per-rank logs, and Neuron's compiler lines as the SDK documentation
prints them (no real Neuron log exists here: those fixtures are made from the documentation, each line citing
its page in neurontrace/parsers/neuron_compile.py and docs/compile.md)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neurontrace.analysis.compile import combine, report
from neurontrace.analysis.compile_findings import findings
from neurontrace.errors import UnknownFormatError
from neurontrace.parsers import compile_logs, neuron_compile, torch_trace
from tests.conftest import ROOT

LOGS = ROOT.parent / "shared" / "corpus" / "compile" / "tlparse"


def corpus_logs() -> list[Path]:
    return sorted(LOGS.glob("*.log")) if LOGS.is_dir() else []


def _need_corpus() -> None:
    if not corpus_logs():
        pytest.skip("the compile-log corpus (../shared/corpus/compile) is not beside this checkout")


def _ids(path: Path) -> list[str]:
    return sorted({r["compile_id"] for r in torch_trace.read(path).rows if r["event"] == "compile"})


@pytest.mark.parametrize("name", ["artifacts", "cache_hit_miss", "chromium_events", "comp_failure", "comp_metrics",
                                  "export_guard_added", "simple"])
def test_compile_ids_equal_tlparse(name: str, tmp_path: Path) -> None:
    _need_corpus()
    tl = shutil.which("tlparse")
    if tl is None:
        pytest.skip("tlparse (pip install tlparse, in the dev extra) is not installed")
    subprocess.run([tl, str(LOGS / f"{name}.log"), "-o", str(tmp_path / "tl"), "--no-browser", "--overwrite"],
                   check=True, capture_output=True, timeout=120)
    directory = json.loads((tmp_path / "tl" / "compile_directory.json").read_text())
    theirs = sorted(k.strip("[]") for k in directory if k != "[-/-]")  # [-/-]: records of no compile
    assert _ids(LOGS / f"{name}.log") == theirs


def test_compile_ids_are_those_the_metrics_name() -> None:
    """Without tlparse: every compile id a log's compilation_metrics records is one of ours (plain regex)."""
    _need_corpus()
    for path in corpus_logs():
        named = set(re.findall(r'"compilation_metrics": \{"compile_id": "([^"]+)"', path.read_text()))
        assert named <= set(_ids(path)), path.name


def test_corpus_facts() -> None:
    _need_corpus()
    failure = report(torch_trace.read(LOGS / "comp_failure.log").rows)
    assert failure is not None and failure.failed == 1
    c = failure.frames[0].compiles[0]
    assert c["fail_type"] == "BackendCompilerFailed" and "broken backend" in c["fail_reason"]
    cache = report(torch_trace.read(LOGS / "cache_hit_miss.log").rows)
    assert cache is not None
    text = (LOGS / "cache_hit_miss.log").read_text()
    envelopes = re.findall(r'\] \{"artifact": \{"name": "fx_graph_cache_(hit|miss)"', text)  # not payload text
    assert (cache.cache_hits, cache.cache_misses) == (envelopes.count("hit"), envelopes.count("miss"))
    restarts = report(torch_trace.read(LOGS / "comp_metrics.log").rows)
    assert restarts is not None
    statuses = {c["compile_id"]: c["status"] for f in restarts.frames for c in f.compiles}
    assert statuses["0/0"] == "restarted" and statuses["0/0_1"] == "ok"


def test_a_damaged_log_is_read_around_the_damage(tmp_path: Path) -> None:
    _need_corpus()
    lines = (LOGS / "comp_metrics.log").read_text().splitlines(keepends=True)
    cut = next(i for i, ln in enumerate(lines) if '"compilation_metrics"' in ln)
    lines[cut] = lines[cut][: len(lines[cut]) // 2] + "\n"  # an envelope cut in half
    lines.insert(3, "garbage that is no record\n")
    bad = tmp_path / "damaged.log"
    bad.write_text("".join(lines) + lines[-1][:20])  # and the file cut inside its last line
    log = compile_logs.read([bad])
    assert sum(log.skipped.values()) == 3
    (warning,) = log.warnings()
    assert f"{bad}:4: not a glog record" in warning and f"{bad}:{cut + 2}: corrupt JSON envelope" in warning
    assert set(_ids(bad)) == set(_ids(LOGS / "comp_metrics.log"))  # the records around the damage still count


def test_not_a_compile_log_is_a_named_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing to see\n")
    with pytest.raises(UnknownFormatError):
        compile_logs.read([tmp_path / "notes.txt"])
    proc = subprocess.run([sys.executable, "-m", "neurontrace", "compile", str(tmp_path / "notes.txt")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 4 and "not a compile log" in proc.stderr and "Traceback" not in proc.stderr


def test_a_directory_of_per_rank_logs(tmp_path: Path) -> None:
    _need_corpus()
    ranks = tmp_path / "torch_trace"
    ranks.mkdir()
    # TORCH_TRACE names each rank's log dedicated_log_torch_trace_rank_<R>_<random>.log
    shutil.copy(LOGS / "cache_hit_miss.log", ranks / "dedicated_log_torch_trace_rank_0_abc.log")
    shutil.copy(LOGS / "simple.log", ranks / "dedicated_log_torch_trace_rank_1_def.log")
    proc = subprocess.run([sys.executable, "-m", "neurontrace", "compile", str(ranks), "--json"],
                          capture_output=True, text=True, timeout=120, check=True)
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "neurontrace.compile/1"
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    per_rank = {r["rank"]: sum(len(f["compiles"]) for f in r["compile"]["frames"]) for r in doc["ranks"]}
    assert per_rank == {0: len(torch_trace.read(LOGS / "cache_hit_miss.log").rows), 1: 1}
    assert "compile_rank_divergence" in {f["id"] for f in doc["findings"]}
    text = subprocess.run([sys.executable, "-m", "neurontrace", "compile", str(ranks)], capture_output=True,
                          text=True, timeout=120, check=True).stdout
    assert "rank 0:" in text and "rank 1:" in text and "job:" in text


# -- Neuron: fixtures made from the documentation (no real Neuron log is available) ---------------------------
# "Neuron Persistent Cache" page (torch-neuronx), its two generations of the wrapper's lines; the NKI tutorial's
# output (||NEURON_CACHE|| / ||NEURON_CC_WRAPPER|| with a pid); NxD Training tutorials' neuron_parallel_compile
# summary. Paths shortened where the documentation's are machine-specific.
MADE_FROM_DOCS = """\
2023-08-25 21:51:36.000433: INFO ||NCC_WRAPPER||: Compile cache path: /var/tmp/neuron-compile-cache
.
Compiler status PASS
2023-08-25 21:52:23.000451: INFO ||NCC_WRAPPER||: Compile cache path: /var/tmp/neuron-compile-cache
2023-08-25 21:52:23.000453: INFO ||NCC_WRAPPER||: Using a cached neff at /var/tmp/neuron-compile-cache/neuronxcc-2.8.0.25+a3ad0f342/MODULE_198775565831884870+d41d8cd9/model.neff. Exiting with a successfully compiled graph.
INFO ||NCC_WRAPPER||: Got a cached failed neff at /var/tmp/neuron-compile-cache/neuronxcc-2.8.0.25+a3ad0f342/MODULE_12486829708343293975+d41d8cd9/model.neff. Will skip compilation, please set --retry_failed_compilation for recompilation.
2023-12-29 15:18:00.000558:  14283  INFO ||NEURON_CACHE||: Compile cache path: /var/tmp/neuron-compile-cache
2023-12-29 15:18:00.000559:  14283  INFO ||NEURON_CC_WRAPPER||: Call compiler with cmd: ['neuronx-cc', '--target=trn1', 'compile', '--framework', 'XLA', '/tmp/neuroncc_compile_workdir/49f554a2/model.MODULE_5007921933048625946+d41d8cd9.hlo.pb', '--output', '/tmp/neuroncc_compile_workdir/49f554a2/model.MODULE_5007921933048625946+d41d8cd9.neff', '--verbose=35']
.
Compiler status PASS
2024-08-11 23:04:08.000738: INFO ||PARALLEL_COMPILE||: Total graphs: 22
2024-08-11 23:04:08.000738: INFO ||PARALLEL_COMPILE||: Total successful compilations: 22
2024-08-11 23:04:08.000738: INFO ||PARALLEL_COMPILE||: Total failed compilations: 0
"""


def test_neuron_documented_lines_counted_exactly(tmp_path: Path) -> None:
    log = tmp_path / "made_from_the_documentation.log"
    log.write_text(MADE_FROM_DOCS)
    rows = compile_logs.read([log]).rows
    rep = report(rows)
    assert rep is not None and rep.neuron is not None
    n = rep.neuron
    # two compiles (a bare "Compiler status PASS" after the first cache-path line, and the one "Call compiler"
    # starts), one NEFF loaded from the cache, one cached failure (a documented line without a timestamp)
    assert (n["compiled"], n["cache_hits"], n["cached_failures"], n["failed"]) == (2, 1, 1, 0)
    assert n["parallel"] == {"graphs": 22, "ok": 22, "failed": 0}
    modules = [r["compile_id"] for r in rows if r["event"] == "compile"]
    assert "MODULE_198775565831884870+d41d8cd9" in modules and "MODULE_5007921933048625946+d41d8cd9" in modules


def test_neuron_cached_failure_and_cache_dir(tmp_path: Path) -> None:
    log = tmp_path / "stderr.txt"
    log.write_text("2023-08-25 21:52:23.000453: INFO ||NCC_WRAPPER||: Got a cached failed neff at /var/tmp/"
                   "neuron-compile-cache/neuronxcc-2.8.0.25+a3ad0f342/MODULE_12486829708343293975+d41d8cd9/"
                   "model.neff. Will skip compilation, please set --retry_failed_compilation for recompilation.\n")
    cache = tmp_path / "neuron-compile-cache" / "neuronxcc-2.12.54.0+f631c2365"
    ok, bad = cache / "MODULE_0b0ead5e2dfe538e89a4+2c2d707e", cache / "MODULE_02e0833b58066ea94f2c+2c2d707e"
    ok.mkdir(parents=True)
    bad.mkdir()
    (ok / "model.neff").write_bytes(b"SYNTHETIC")  # a compiled entry holds its NEFF
    # a failed entry's model.log (the form public caches show): "Failed compilation with [...]: ... [CODE] ..."
    (bad / "model.log").write_text("Failed compilation with ['neuronx-cc', 'compile']: 2024-03-10T17:23:34Z "
                                   "[LUR015] Compiler generated too many instructions (13890556).")
    rows = compile_logs.read([log, tmp_path / "neuron-compile-cache"]).rows
    rep = report(rows)
    assert rep is not None and rep.neuron is not None
    assert (rep.neuron["cached_failures"], rep.neuron["compiled"], rep.neuron["failed"]) == (1, 1, 1)
    assert rep.neuron["failures"][-1]["fail_type"] == "LUR015"
    ids = {f.id for f in findings(combine([rep]))}
    assert {"neuron_cached_failure", "neuron_compile_failed"} <= ids
    assert neuron_compile.is_cache_dir(tmp_path / "neuron-compile-cache")


def test_a_huge_payload_streams_in_bounded_memory(tmp_path: Path) -> None:
    """A kept payload (a graph-break reason) of 24 MB: read to PAYLOAD_CAP characters, memory stays small."""
    import tracemalloc

    _need_corpus()
    lines = (LOGS / "comp_metrics.log").read_text().splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if '"dynamo_start"' in ln)
    record = ('{"artifact": {"name": "dynamo_graph_break_reason", "encoding": "string"}, "frame_id": 0, '
              '"frame_compile_id": 0, "attempt": 0, "has_payload": "0"}')
    envelope = lines[at].split("] {", 1)[0] + "] " + record + "\n"
    huge = tmp_path / "huge.log"
    with huge.open("w") as f:
        f.writelines(lines[:at])
        f.write(envelope + "\tGraph break in user code at model.py:12\n\tGraph Break Reason: data-dependent\n")
        f.writelines("\t" + "x" * 120 + "\n" for _ in range(200_000))
        f.writelines(lines[at:])
    tracemalloc.start()
    try:
        rows = torch_trace.read(huge).rows
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert huge.stat().st_size > 20e6 and peak < 4e6  # the payload is never held whole
    (gb,) = [r for r in rows if r["event"] == "graph_break"]
    assert gb["source"] == "model.py:12" and gb["reason"] == "data-dependent"
    assert set(_ids(huge)) == set(_ids(LOGS / "comp_metrics.log"))


def test_a_line_of_many_megabytes_is_never_read_whole(tmp_path: Path) -> None:
    """The campaign's 2 GB single line, scaled to 40 MB (40x the 1 MiB LINE_CAP): an envelope line that never
    ends, in a real TORCH_TRACE log, read as such and as TORCH_LOGS text; read through in LINE_CAP pieces (tracemalloc's peak
    stays a few pieces), skipped and counted, and every real record around it is still read."""
    import tracemalloc

    from neurontrace.parsers import _compile_rows, torch_logs

    _need_corpus()
    src = LOGS / "comp_metrics.log"
    lines = src.read_bytes().splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if b'"dynamo_start"' in ln)
    huge = tmp_path / "huge.log"
    with huge.open("wb") as f:
        f.writelines(lines[:at])
        f.write(lines[at].split(b"] {", 1)[0] + b'] {"dynamo_start": {"stack": "')
        for _ in range(40):
            f.write(b"y" * (1 << 20))
        f.write(b'"}}\n')
        f.writelines(lines[at:])
    tracemalloc.start()
    try:
        log = torch_trace.read(huge)
        text = torch_logs.read(huge)  # the same file as TORCH_LOGS text: the same bound on text lines
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert huge.stat().st_size > 40 * _compile_rows.LINE_CAP and peak < 8 * _compile_rows.LINE_CAP, peak
    assert log.skipped == {_compile_rows.LONG_LINE: 1} and f"huge.log:{at + 1}: line longer" in log.examples[0]
    assert [r["compile_id"] for r in log.rows] == [r["compile_id"] for r in torch_trace.read(src).rows]
    assert text.skipped == {_compile_rows.LONG_LINE: 1}
