"""neuronx-cc's own log (``log-neuron-cc.txt``) and the compiler work directory TorchNeuron keeps → ``compiles``.

No real file of either is available to the project. Every pattern below is a line as public sources print it
(the tests' fixtures are made from those sources and say which):

- the file: ``--logfile <filename>``, "Filename where compiler writes log messages. (Default:
  log-neuron-cc.txt)" (neuronx-cc CLI reference, aws-neuron/aws-neuron-sdk
  ``compiler/neuronx-cc/api-reference-guide/neuron-compiler-cli-reference-guide.rst``): one log per compiler
  call; public ``torch_neuronx.trace`` samples pass ``--logfile=<compiler_workdir>/log-neuron-cc.txt``;
- TorchNeuron's debug directory (``TORCH_NEURONX_DEBUG_DIR``, default ``/tmp/neuron_backend``; SDK
  "TorchNeuron environment variables", torch/reference/env-vars): TorchNeuron "calls neuronx-cc in a working
  directory of its own" there, and the artifacts it names are ``compiler_args.txt`` and ``log-neuron-cc.txt``
  beside the NEFF (SDK "What are Neuron Compiler artifacts?", compiler/about-compiler-artifacts);
- a log record: ``[time] LEVEL [pid] [component]: message``, the time either ISO UTC
  (``2023-07-14T18:16:48Z ERROR 26345 [neuronx-cc]: ...``, aws-neuron-sdk#708 and #690) or
  ``05/03/2023 07:32:05 PM INFO 29116 [sg00/Tensorizer/LoopFusion]: ...`` (aws-neuron-sdk#662, #434, #632),
  or none (``ERROR 103915 [neuronx-cc]: ...``, the SDK release notes' known issues); older logs have no pid
  (aws-neuron-sdk#269);
- pass timings: ``[sg00/Tensorizer/<Pass>]: Enter time region`` then ``Exit time region: delta=2.437s`` (same
  issues), and the backend's ``2023-12-12T17:28:24Z Running <pass>`` / ``<pass> finished after 0.000 seconds``
  (aws-neuron-sdk#803); ``[<Pass>]: Finished (changed=...)`` lines are read as records, not timed;
- the version: ``NeuronX Compiler version 2.6.0.19+3d819e565`` in the "Version information:" block
  (aws-neuron-sdk#690);
- failures: ERROR/CRITICAL records ("An Internal Compiler Error has occurred", ``Error message:``,
  ``Error class:``; the release notes), error codes in brackets (``[F134] neuronx-cc terminated abnormally``,
  aws-neuron-sdk#1000; ``[LUR015]`` in a public cache's ``model.log``), and the status line ``Compiler status
  PASS`` (aws-neuron-sdk#872; any other word after it is read as a failure).

Times without a zone are read as UTC (as in :mod:`neuron_compile`). A log's compile time is its last record's
time minus its first (1 s resolution in these formats). Lines none of these patterns match are counted and
named in the warning, never guessed at.
"""

from __future__ import annotations

import re
import shlex
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from neurontrace.parsers._compile_rows import CompileLog, numbered, open_text

FORMAT = "neuron_cc_log"
LOG_NAME = "log-neuron-cc.txt"  # the `--logfile` default (CLI reference)
ARGS_NAME = "compiler_args.txt"  # TorchNeuron's record of the compiler options (about-compiler-artifacts)
EVIDENCE = "neuron_cc_log"
RECORD = re.compile(
    r"^(?:(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?)|(?P<us>\d\d/\d\d/\d{4} \d\d:\d\d:\d\d [AP]M))?\s*"
    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(?:(?P<pid>\d+)\s+)?\[(?P<comp>[^\]]+)\]:\s?(?P<msg>.*)$")
STAGE = re.compile(r"^(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?)\s+(?:Running (?P<run>\S+)|"
                   r"(?P<done>\S+) finished after (?P<secs>\d+(?:\.\d+)?) seconds)\s*$")
EXIT_REGION = re.compile(r"^Exit time region: delta=(?P<secs>\d+(?:\.\d+)?)s")
VERSION = re.compile(r"NeuronX Compiler version (?P<v>\S+)")
ERROR_CODE = re.compile(r"\[(?P<code>(?:NCC_)?[A-Z]{1,5}\d{3})\]")
STATUS = re.compile(r"^\s*Compiler status (?P<status>[A-Z]+)\b")
ERROR_FIELD = re.compile(r"^\s*Error (?P<what>message|class):\s*(?P<text>.*\S)")
MODULE = re.compile(r"MODULE_[0-9A-Za-z]+(?:\+[0-9A-Za-z]+)?")
CACHE_VERSION = re.compile(r"^neuronxcc-(?P<v>\d[\w.+-]*)$")  # a NEFF cache's `neuronxcc-<version>/` level
SUBGRAPH = re.compile(r"^sg\d+/")
PASSES_KEPT = 200
CODES_KEPT = 20  # distinct error codes kept per log  # distinct pass names kept per log (a debug log names a few hundred)


def is_log_name(path: Path) -> bool:
    """The documented default name, also with a prefix (``<kernel>_log-neuron-cc.txt`` in public layouts)."""
    return path.name == LOG_NAME or path.name.endswith("_" + LOG_NAME)


def sniff(first_lines: list[str]) -> bool:
    """Records in neuronx-cc's own form (``LEVEL [pid] [component]: ...``) or its pass-timing lines."""
    return any(RECORD.match(ln) or STAGE.match(ln) for ln in first_lines)


@lru_cache(maxsize=1024)  # a log's times change once a second at most: parse each once
def _ns(iso: str | None, us: str | None) -> int | None:
    if iso:
        when = datetime.fromisoformat(iso.rstrip("Z")).replace(tzinfo=timezone.utc)
    elif us:
        when = datetime.strptime(us, "%m/%d/%Y %I:%M:%S %p").replace(tzinfo=timezone.utc)
    else:
        return None
    return int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000


def read(path: Path) -> CompileLog:
    """One compiler log: a ``compile`` row (time, status, failure, version, and the options and module of its
    work directory) and one ``compiler_pass`` row per pass it timed."""
    out = CompileLog(files=[str(path)])
    first = last = None
    pid: str | None = None
    version: str | None = None
    status: str | None = None
    codes: list[str] = []
    error_class = error_message = first_error = None
    errors = 0
    passes: dict[str, list[Any]] = {}  # name -> [seconds, count, first line]
    for lineno, line in numbered(path, out):
        if not line.strip() or set(line.strip()) <= {"."}:  # blank, or the compiler's progress dots
            continue
        if (s := STATUS.match(line)) is not None:
            status = s.group("status")
            continue
        m = RECORD.match(line)
        if m is None:
            g = STAGE.match(line)
            if g is None:
                out.skip(path, lineno, "unrecognised neuronx-cc log line")
                continue
            first, last = _span(first, last, _ns(g.group("iso"), None))
            if g.group("done"):
                _timed(passes, g.group("done"), float(g.group("secs")), lineno)
            continue
        first, last = _span(first, last, _ns(m.group("iso"), m.group("us")))
        msg = m.group("msg")
        pid = pid or m.group("pid")
        if (v := VERSION.search(msg)) is not None:
            version = version or v.group("v")
        if (e := EXIT_REGION.match(msg)) is not None:
            _timed(passes, SUBGRAPH.sub("", m.group("comp")), float(e.group("secs")), lineno)
        if "[" in msg and len(codes) < CODES_KEPT:
            codes += [c for c in ERROR_CODE.findall(msg) if c not in codes]
        if m.group("level") in ("ERROR", "CRITICAL"):
            errors += 1
            if (f := ERROR_FIELD.match(msg)) is not None:
                if f.group("what") == "class":
                    error_class = error_class or f.group("text")
                else:
                    error_message = error_message or f.group("text")
            elif first_error is None and msg.strip().strip("*").strip():
                first_error = msg.strip()
    workdir = _workdir(path.parent)
    failed = errors > 0 or (status is not None and status != "PASS")
    row: dict[str, Any] = {
        "event": "compile", "evidence": EVIDENCE, "path": str(path), "line": 1, "pid": pid, "cache": "miss",
        "start_ns": first, "dur_ns": last - first if first is not None and last is not None else None,
        "compile_id": workdir["module"], "compiler_version": version or workdir["version"],
        "flags": workdir["flags"],
        "status": "failed" if failed else ("ok" if status == "PASS" or workdir["neff"] else "running"),
    }
    if failed:
        row["fail_type"] = codes[0] if codes else (error_class or (f"Compiler status {status}" if status and
                                                                    status != "PASS" else "ERROR"))
        row["fail_reason"] = error_message or first_error
    out.rows.append(row)
    parents = {a for a in passes for b in passes if b != a and b.startswith(a + "/")}  # a region around others
    for name, (secs, n, at) in passes.items():
        if name not in parents:
            out.rows.append({"event": "compiler_pass", "evidence": EVIDENCE, "path": str(path), "line": at,
                             "pid": pid, "compile_id": row["compile_id"], "function": name,
                             "dur_ns": round(secs * 1e9), "count": n})
    return out


def read_args(path: Path) -> CompileLog:
    """A work directory that kept ``compiler_args.txt`` and no log: a compile row with its options (compiled
    when its NEFF is there, else not known to have finished)."""
    workdir = _workdir(path.parent)
    return CompileLog(files=[str(path)], rows=[{
        "event": "compile", "evidence": EVIDENCE, "path": str(path), "line": 1, "cache": "miss",
        "compile_id": workdir["module"], "compiler_version": workdir["version"], "flags": workdir["flags"],
        "status": "ok" if workdir["neff"] else "running"}])


def _span(first: int | None, last: int | None, ts: int | None) -> tuple[int | None, int | None]:
    if ts is None:
        return first, last
    return (ts if first is None else min(first, ts)), (ts if last is None else max(last, ts))


def _timed(passes: dict[str, list[Any]], name: str, secs: float, lineno: int) -> None:
    cur = passes.get(name)
    if cur is None:
        if len(passes) >= PASSES_KEPT:
            return
        passes[name] = [secs, 1, lineno]
    else:
        cur[0] += secs
        cur[1] += 1


def flags(path: Path) -> str | None:
    """The options ``compiler_args.txt`` records, as one line (its layout is not documented: tokens split the
    way a shell would, one or many per line)."""
    try:
        with open_text(path) as f:
            text = f.read(1 << 16)
    except OSError:
        return None
    try:
        tokens = shlex.split(text)
    except ValueError:  # an unbalanced quote: keep the text as written
        tokens = text.split()
    return " ".join(tokens) or None


def _workdir(d: Path) -> dict[str, Any]:
    """What a compiler work directory says beside its log: the NEFF (its module name), the options, and the
    compiler version a NEFF cache names in its ``neuronxcc-<version>/`` level."""
    neffs = sorted(d.glob("*.neff"))
    args = d / ARGS_NAME
    module = None
    for cand in [*(p.name for p in neffs), d.name]:
        if (m := MODULE.search(cand)) is not None:
            module = m.group(0)
            break
    if module is None:
        module = neffs[0].stem if neffs else d.name
    version = next((m.group("v") for p in (d, *d.parents) if (m := CACHE_VERSION.match(p.name))), None)
    return {"neff": bool(neffs), "module": module, "flags": flags(args) if args.is_file() else None,
            "version": version}
