"""neuronx-cc's own log (``log-neuron-cc.txt``) and TorchNeuron's compiler work directory (``compiler_args.txt``,
the NEFF beside them). No real file of either exists here: each fixture is made from the log lines pasted in
the public issue it names (the same sources neurontrace/parsers/neuron_cc_log.py cites per pattern); the NEFFs
are SYNTHETIC placeholders (only their presence and name are read)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from neurontrace import units
from neurontrace.analysis.compile import combine, report, text
from neurontrace.analysis.compile_findings import findings
from neurontrace.parsers import compile_logs, neuron_cc_log

MODULE = "MODULE_16518787498567201059+d41d8cd9"

# Made from the log pasted in https://github.com/aws-neuron/aws-neuron-sdk/issues/690 (ISO-time ERROR records
# of a failed compile, its "Version information:" block) with the error-code line of
# https://github.com/aws-neuron/aws-neuron-sdk/issues/1000 ("[F134] neuronx-cc terminated abnormally").
FAILED_LOG = """\
2023-06-15T12:09:40Z INFO 85724 [neuronx-cc]: Compilation started
2023-06-15T12:11:12Z ERROR 85724 [neuronx-cc]: ***************************************************************
2023-06-15T12:11:12Z ERROR 85724 [neuronx-cc]:  An Internal Compiler Error has occurred
2023-06-15T12:11:12Z ERROR 85724 [neuronx-cc]: ***************************************************************
2023-06-15T12:11:12Z ERROR 85724 [neuronx-cc]:
2023-06-15T12:11:12Z ERROR 85724 [neuronx-cc]: Error message:  [F134] neuronx-cc terminated abnormally
2023-06-15T12:11:12Z ERROR 85724 [neuronx-cc]:
2023-06-15T12:11:12Z ERROR 85724 [neuronx-cc]: Error class:    RuntimeError
2023-06-15T12:11:12Z ERROR 85724 [neuronx-cc]:   File "neuronxcc/driver/Job.py", line 300, in neuronxcc.driver.Job.SingleInputJob.run
2023-06-15T12:11:12Z ERROR 85724 [neuronx-cc]: Version information:
2023-06-15T12:11:12Z ERROR 85724 [neuronx-cc]:   NeuronX Compiler version 2.6.0.19+3d819e565
2023-06-15T12:11:12Z ERROR 85724 [neuronx-cc]:   Python version 3.8.10
"""

# Made from the logs pasted in https://github.com/aws-neuron/aws-neuron-sdk/issues/662 (US-format times, Tensorizer
# time regions, "Finished (changed=...)" records) and https://github.com/aws-neuron/aws-neuron-sdk/issues/803 (the
# backend's "Running <pass>" / "<pass> finished after N seconds"), closed by the status line of
# https://github.com/aws-neuron/aws-neuron-sdk/issues/872.
PASSING_LOG = """\
05/03/2023 07:30:05 PM INFO 29116 [sg00/Tensorizer]: Enter time region
05/03/2023 07:30:05 PM INFO 29116 [sg00/Tensorizer/LoopFusion]: Enter time region
05/03/2023 07:32:05 PM INFO 29116 [sg00/Tensorizer/LoopFusion]: Exit time region: delta=2.437s
05/03/2023 07:32:05 PM INFO 29116 [sg00/Tensorizer/Simplifier]: Enter time region
05/03/2023 07:32:05 PM INFO 29116 [Simplifier]: Finished (changed=True #instances=6944612450304)
05/03/2023 07:32:05 PM INFO 29116 [sg00/Tensorizer/Simplifier]: Exit time region: delta=0.515s
05/03/2023 07:32:07 PM INFO 29116 [sg00/Tensorizer/Simplifier]: Enter time region
05/03/2023 07:32:07 PM INFO 29116 [sg00/Tensorizer/Simplifier]: Exit time region: delta=1.250s
05/03/2023 07:32:08 PM INFO 29116 [sg00/Tensorizer]: Exit time region: delta=123.000s
2023-05-03T19:32:09Z Running birverifier
2023-05-03T19:32:09Z birverifier finished after 0.250 seconds
2023-05-03T19:33:05Z Running coloring_allocator_psum
2023-05-03T19:33:05Z coloring_allocator_psum finished after 56.000 seconds
.
Compiler status PASS
"""


def _workdir(root: Path, log: str | None, args: str | None, neff: bool = True) -> Path:
    d = root / "neuroncc_compile_workdir" / "50f29840-cfac-49a2-8d40-8b0369b8618f"
    d.mkdir(parents=True)
    if log is not None:
        (d / neuron_cc_log.LOG_NAME).write_text(log)
    if args is not None:
        (d / neuron_cc_log.ARGS_NAME).write_text(args)
    if neff:
        (d / f"model.{MODULE}.neff").write_bytes(b"SYNTHETIC NEFF placeholder")
    return d


def test_a_passing_log_gives_time_version_options_and_passes(tmp_path: Path) -> None:
    d = _workdir(tmp_path, PASSING_LOG, "--target=trn1 --model-type=transformer\n--auto-cast=none\n")
    log = compile_logs.read([tmp_path])
    (row,) = [r for r in log.rows if r["event"] == "compile"]
    assert row["evidence"] == "neuron_cc_log" and row["compile_id"] == MODULE and row["status"] == "ok"
    assert row["flags"] == "--target=trn1 --model-type=transformer --auto-cast=none"
    # first record 07:30:05 PM, last 19:33:05 UTC: 3 minutes, to the second the log resolves
    assert row["dur_ns"] == 180 * 10**9 and row["start_ns"] is not None
    passes = {r["function"]: (r["dur_ns"], r["count"]) for r in log.rows if r["event"] == "compiler_pass"}
    # the region around the others (Tensorizer) is not a pass of its own; Simplifier ran twice
    assert passes == {"Tensorizer/LoopFusion": (2_437_000_000, 1), "Tensorizer/Simplifier": (1_765_000_000, 2),
                      "birverifier": (250_000_000, 1), "coloring_allocator_psum": (56 * 10**9, 1)}
    assert not log.skipped
    rep = report([dict(r) for r in log.table().to_pylist()])
    assert rep is not None and rep.neuron is not None
    n = rep.neuron
    assert (n["compiled"], n["failed"], n["compile_ns"]) == (1, 0, 180 * 10**9)
    (c,) = n["compiler"]
    assert [p["name"] for p in c["passes"]][:2] == ["coloring_allocator_psum", "Tensorizer/LoopFusion"]
    lines = "\n".join(text(rep))
    assert (f"neuronx-cc {MODULE}: {units.duration(180 * 10**9)} ok; options --target=trn1 --model-type=transformer "
            f"--auto-cast=none; slowest passes coloring_allocator_psum {units.duration(56 * 10**9)}, "
            f"Tensorizer/LoopFusion {units.duration(2_437_000_000)}") in lines
    assert str(d / neuron_cc_log.LOG_NAME) in lines


def test_a_failed_log_names_the_error_code_and_the_version(tmp_path: Path) -> None:
    _workdir(tmp_path, FAILED_LOG, None, neff=False)
    log = compile_logs.read([tmp_path])
    (row,) = [r for r in log.rows if r["event"] == "compile"]
    assert (row["status"], row["fail_type"]) == ("failed", "F134")
    assert row["fail_reason"] == "[F134] neuronx-cc terminated abnormally"
    assert row["compiler_version"] == "2.6.0.19+3d819e565" and row["pid"] == "85724"
    assert row["dur_ns"] == 92 * 10**9
    rep = report(log.rows)
    assert rep is not None and rep.neuron is not None
    assert rep.neuron["failed"] == 1 and rep.neuron["failures"][0]["fail_type"] == "F134"
    ids = {f.id for f in findings(combine([rep]))}
    assert "neuron_compile_failed" in ids


def test_unknown_lines_are_counted_not_guessed(tmp_path: Path) -> None:
    path = tmp_path / neuron_cc_log.LOG_NAME
    path.write_text(PASSING_LOG + "something the documented forms do not cover\n\n"
                    + "another line of unknown form\n")
    log = compile_logs.read([path])
    assert log.skipped == {"unrecognised neuronx-cc log line": 2}
    (w,) = log.warnings()
    n = PASSING_LOG.count("\n")
    assert f"{path}:{n + 1}:" in w and f"{path}:{n + 3}:" in w
    (row,) = [r for r in log.rows if r["event"] == "compile"]
    assert row["status"] == "ok"  # the status line is read; the unknown lines change nothing


def test_options_alone_and_the_wrapper_naming_the_same_graph(tmp_path: Path) -> None:
    """A work directory that kept only compiler_args.txt and the NEFF is a compiled graph; the wrapper's line
    for the same module (the form of aws-neuron-sdk#872) and that module's own log count it once."""
    _workdir(tmp_path / "a", None, "--target=trn1 -O1")
    alone = compile_logs.read([tmp_path / "a"])
    (row,) = alone.rows
    assert (row["status"], row["flags"], row["compile_id"]) == ("ok", "--target=trn1 -O1", MODULE)
    _workdir(tmp_path / "b", PASSING_LOG, None)
    wrapper = tmp_path / "stdout.txt"
    wrapper.write_text(f"2024-04-12 07:13:06.000297:  271334  INFO ||NEURON_CC_WRAPPER||: Call compiler with cmd: "
                       f"neuronx-cc compile --target=trn1 --framework=XLA /tmp/w/model.{MODULE}.hlo_module.pb "
                       f"--output /tmp/w/model.{MODULE}.neff --verbose=35\n.\nCompiler status PASS\n")
    rep = report(compile_logs.read([wrapper, tmp_path / "b"]).rows)
    assert rep is not None and rep.neuron is not None
    assert rep.neuron["compiled"] == 1 and rep.neuron["compiler"][0]["compile_id"] == MODULE


def test_a_neff_cache_entry_with_its_compiler_log(tmp_path: Path) -> None:
    """The cache layout of the Neuron Persistent Cache page (neuronxcc-<version>/MODULE_<hash>+<flags>/), an
    entry that kept log-neuron-cc.txt: the version comes from the cache level, the time from the log."""
    cache = tmp_path / "neuron-compile-cache" / "neuronxcc-2.12.54.0+f631c2365"
    entry, plain = cache / MODULE, cache / "MODULE_0b0ead5e2dfe538e89a4+2c2d707e"
    entry.mkdir(parents=True)
    plain.mkdir()
    (entry / "model.neff").write_bytes(b"SYNTHETIC")
    (entry / neuron_cc_log.LOG_NAME).write_text(PASSING_LOG)
    (plain / "model.neff").write_bytes(b"SYNTHETIC")
    rows = compile_logs.read([tmp_path / "neuron-compile-cache"]).rows
    compiles = {r["compile_id"]: r for r in rows if r["event"] == "compile"}
    assert compiles[MODULE]["evidence"] == "neuron_cc_log" and compiles[MODULE]["dur_ns"] == 180 * 10**9
    assert {r["compiler_version"] for r in compiles.values()} == {"2.12.54.0+f631c2365"}


def test_the_debug_directory_beside_a_trace_and_the_compile_command(tmp_path: Path) -> None:
    """TorchNeuron's debug directory under its documented default name (neuron_backend/) is found beside the
    trace; `neurontrace compile DIR --json` reports it (schema neurontrace.compile/1)."""
    debug = tmp_path / "neuron_backend"
    _workdir(debug, FAILED_LOG, "--target=trn2")
    trace = tmp_path / "run.pt.trace.json"
    trace.write_text("{}")
    assert compile_logs.beside([trace]) == [debug]
    proc = subprocess.run([sys.executable, "-m", "neurontrace", "compile", str(debug), "--json"],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    n = out["compile"]["neuron"]
    assert n["failed"] == 1 and n["compiler"][0]["flags"] == "--target=trn2"
    assert n["compiler"][0]["fail_type"] == "F134"


def test_the_debug_directory_a_capture_recorded(tmp_path: Path) -> None:
    """A capture's run.json records the environment (TORCH_NEURONX_* among it): a debug directory set there,
    relative to the run's working directory, is read for the trace without --compile-log."""
    work = tmp_path / "job"
    _workdir(work / "my_artifacts", PASSING_LOG, "--target=trn2")
    capture = tmp_path / "capture"
    capture.mkdir()
    (capture / "run.json").write_text(json.dumps({"schema": "neurontrace.run/1", "cwd": str(work),
                                                  "environment": {"TORCH_NEURONX_DEBUG_DIR": "my_artifacts"}}))
    trace = capture / "rank0.pt.trace.json"
    trace.write_text("{}")
    found = compile_logs.beside([trace])
    assert found == [work / "my_artifacts"]
    rep = report(compile_logs.read(found, strict=False).rows)
    assert rep is not None and rep.neuron is not None and rep.neuron["compiled"] == 1


def test_a_long_debug_log_streams_in_bounded_memory(tmp_path: Path) -> None:
    """A --verbose=debug log of 60,000 records (the time-region form of aws-neuron-sdk#662, 20 passes timed in each
    of 1,500 subgraphs): read line by line, the passes summed, memory far below the file's size."""
    import tracemalloc

    path = tmp_path / neuron_cc_log.LOG_NAME
    with path.open("w") as f:
        for sg in range(1500):
            for k in range(20):
                f.write(f"05/03/2023 07:32:05 PM INFO 29116 [sg{sg:04d}/Tensorizer/Pass{k}]: Enter time region\n")
                f.write(f"05/03/2023 07:32:06 PM INFO 29116 [sg{sg:04d}/Tensorizer/Pass{k}]: "
                        "Exit time region: delta=0.001s\n")
    size = path.stat().st_size
    tracemalloc.start()
    try:
        log = neuron_cc_log.read(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    passes = [r for r in log.rows if r["event"] == "compiler_pass"]
    assert len(passes) == 20 and {r["count"] for r in passes} == {1500}
    assert {r["dur_ns"] for r in passes} == {1_500_000_000}
    assert peak < size / 20, (peak, size)
