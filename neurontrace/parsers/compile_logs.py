"""Compile logs, whatever their kind, into one ``compiles`` table: files, directories of per-rank logs, and the
logs a capture or a trace keeps beside itself.

Each file is sniffed from its first lines: a TORCH_TRACE log (glog records with a JSON envelope), TORCH_LOGS
text (``[__recompiles]`` / ``[__graph_breaks]`` / the recompile-limit warning), Neuron compiler-cache lines,
neuronx-cc's own log (``log-neuron-cc.txt``; a work directory's ``compiler_args.txt`` is read with it). A
job's stderr may hold TORCH_LOGS text and Neuron lines together: every reader whose lines it holds reads it. A
directory is read file by file (``TORCH_TRACE=DIR`` writes one log per rank there), or as a NEFF cache when it
is one.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
from pathlib import Path

from neurontrace.errors import EmptyInputError, InputNotFoundError, UnknownFormatError
from neurontrace.parsers import neuron_cc_log, neuron_compile, torch_logs, torch_trace
from neurontrace.parsers._compile_rows import CompileLog, open_text
from neurontrace.run_record import read_run_record

DEBUG_DIR_ENV = "TORCH_NEURONX_DEBUG_DIR"  # TorchNeuron's debug directory (SDK "TorchNeuron environment variables")
SNIFF_LINES = 400
SNIFF_CHARS = 1 << 18
# Where logs live beside a trace: neurontrace.capture writes `compile/` (TORCH_TRACE logs in
# `compile/torch_trace/`, stderr's TORCH_LOGS text in `compile/torch_logs.txt`) and, on TorchNeuron, `neff_cache/`;
# a user may keep `torch_trace/`, or TorchNeuron's debug directory under its default name `neuron_backend/`
# (TORCH_NEURONX_DEBUG_DIR, SDK "TorchNeuron environment variables").
BESIDE = ("compile", "torch_trace", "neff_cache", "neuron_backend")  # neff_cache/: a TorchNeuron capture's NEFF cache


def kinds(path: Path) -> list[str]:
    """Which readers a file's first lines call for (empty: not a compile log)."""
    with open_text(path) as f:
        text = f.read(SNIFF_CHARS)  # bounded: a binary file (a NEFF) may hold no line break at all
    head = [ln.rstrip("\r") for ln in islice(text.split("\n"), SNIFF_LINES)]
    out = []
    if torch_trace.sniff(head):
        out.append(torch_trace.FORMAT)
    elif torch_logs.sniff(head):  # TORCH_TRACE records are glog lines too: one reading is enough
        out.append(torch_logs.FORMAT)
    if neuron_cc_log.is_log_name(path):  # one compiler call's own log (its status line is not the wrapper's)
        out.append(neuron_cc_log.FORMAT)
    elif neuron_compile.sniff(head):
        out.append(neuron_compile.FORMAT)
    elif neuron_cc_log.sniff(head):
        out.append(neuron_cc_log.FORMAT)
    return out


def read(paths: Iterable[Path], *, strict: bool = True) -> CompileLog:
    """Every compile log under ``paths``. ``strict``: a named file that is no compile log is an error
    (UnknownFormatError, exit 4); files inside a directory that are not are passed over."""
    out = CompileLog()
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise InputNotFoundError(f"{path}: no such compile log")
        if path.is_dir():
            if neuron_compile.is_cache_dir(path):
                out.extend(neuron_compile.read_cache_dir(path))
                continue
            found = [p for p in sorted(path.rglob("*")) if p.is_file() and p.stat().st_size]
            read_any = False
            for p in found:
                log = _read_file(p)
                if log is not None:
                    out.extend(log)
                    read_any = True
            if strict and not read_any:
                raise EmptyInputError(f"{path}: no compile log (TORCH_TRACE, TORCH_LOGS or Neuron compiler lines) "
                                      "in this directory")
            continue
        log = _read_file(path)
        if log is None:
            if strict:
                raise UnknownFormatError(f"{path}: not a compile log (expected TORCH_TRACE records, TORCH_LOGS "
                                         "recompiles/graph_breaks text or Neuron compiler-cache lines)")
            continue
        out.extend(log)
    return out


def _read_file(path: Path) -> CompileLog | None:
    if path.name == neuron_cc_log.ARGS_NAME:  # a work directory's options: read with its log, or alone
        if any(neuron_cc_log.is_log_name(p) for p in path.parent.iterdir()):
            return CompileLog()
        return neuron_cc_log.read_args(path)
    found = kinds(path)
    if not found:
        return None
    out = CompileLog()
    for kind in found:
        reader = {torch_trace.FORMAT: torch_trace.read, torch_logs.FORMAT: torch_logs.read,
                  neuron_compile.FORMAT: neuron_compile.read, neuron_cc_log.FORMAT: neuron_cc_log.read}[kind]
        out.extend(reader(path))
    return out


def beside(trace_paths: Iterable[Path]) -> list[Path]:
    """The compile-log folders a capture or a user keeps next to the traces (``compile/``, ``torch_trace/``,
    ``neff_cache/``, ``neuron_backend/``), and the TorchNeuron debug directory a capture's ``run.json`` recorded
    in its environment (``TORCH_NEURONX_DEBUG_DIR``, relative to the run's working directory) when it exists."""
    out: list[Path] = []
    for given in trace_paths:
        p = Path(given)
        cands = [base / name for base in ((p,) if p.is_dir() else ()) + (p.parent,) for name in BESIDE]
        run = read_run_record(p)
        debug = ((run or {}).get("environment") or {}).get(DEBUG_DIR_ENV)
        if isinstance(debug, str) and debug:
            cands.append(Path(str(run.get("cwd") or ".")) / debug if run else Path(debug))
        for cand in cands:
            if cand.is_dir() and cand not in out:
                out.append(cand)
    return out
