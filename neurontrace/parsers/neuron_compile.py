"""Neuron compile evidence: the compiler-cache wrapper's log lines, neuron_parallel_compile totals, a NEFF cache.

No real Neuron log is available to the project, so every pattern here is the line as the Neuron SDK
documentation prints it (docs/compile.md cites each page; the tests' fixtures are made from those pages):

- the framework's compiler-cache wrapper (torch-neuronx / libneuronxla), tagged ``||NCC_WRAPPER||`` in older
  releases and ``||NEURON_CC_WRAPPER||`` / ``||NEURON_CACHE||`` in newer ones ("Neuron Persistent Cache" page;
  the NKI getting-started tutorial's output)::

      2023-08-25 21:51:36.000433: INFO ||NCC_WRAPPER||: Compile cache path: /var/tmp/neuron-compile-cache
      2023-12-29 15:18:00.000559:  14283  INFO ||NEURON_CC_WRAPPER||: Call compiler with cmd: [... model.MODULE_<hash>+<flags>.hlo.pb ...]
      Compiler status PASS
      ... INFO ||NCC_WRAPPER||: Using a cached neff at .../MODULE_<hash>+<flags>/model.neff. Exiting with a successfully compiled graph.
      ... INFO ||NCC_WRAPPER||: Got a cached failed neff at .../MODULE_<hash>+<flags>/model.neff. Will skip compilation, ...

- neuron_parallel_compile's summary (Neuron's NxD Training tutorials)::

      2024-08-11 23:04:08.000738: INFO ||PARALLEL_COMPILE||: Total graphs: 22
      ... ||PARALLEL_COMPILE||: Total successful compilations: 22
      ... ||PARALLEL_COMPILE||: Total failed compilations: 0

- a NEFF cache directory (``neuronxcc-<version>/MODULE_<hash>+<flags>/`` holding ``model.neff`` for a compiled
  graph, ``model.log`` starting "Failed compilation with" for a failed one; the layout the persistent-cache page
  names and the public caches show).

Timestamps are printed without a time zone; they are read as UTC. Some documented lines have none (the
cached-failure line); ``Compiler status PASS`` is printed bare, after the progress dots: it closes the compile
the wrapper last started, or counts as a compile of its own when the log does not show the start.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from neurontrace.parsers import neuron_cc_log
from neurontrace.parsers._compile_rows import CompileLog, numbered

FORMAT = "neuron_compile"
LINE = re.compile(r"^\s*(?:(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?):?\s+)?(?:(?P<pid>\d+)\s+)?"
                  r"(?P<level>[A-Z]+)\s+\|\|(?P<tag>NCC_WRAPPER|NEURON_CC_WRAPPER|NEURON_CACHE|PARALLEL_COMPILE)"
                  r"\|\|:?\s*(?P<msg>.*)$")
MODULE = re.compile(r"MODULE_[0-9A-Za-z]+(?:\+[0-9A-Za-z]+)?")
STATUS = re.compile(r"^\s*Compiler status (?P<status>[A-Z]+)\b")
_TOTALS = {"Total graphs": None, "Total successful compilations": "ok", "Total failed compilations": "failed"}
_TOTAL = re.compile(r"^(?P<what>Total graphs|Total successful compilations|Total failed compilations):\s*(?P<n>\d+)")


def sniff(first_lines: list[str]) -> bool:
    return any(LINE.match(ln) or STATUS.match(ln) for ln in first_lines)


def _ns(ts: str) -> int:
    when = datetime.fromisoformat(ts.replace(" ", "T")).replace(tzinfo=timezone.utc)
    return int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000


def read(path: Path) -> CompileLog:
    """The wrapper's lines of one log (a job's stdout/stderr): one row per graph compiled, loaded from the cache
    or found failed in it; one parallel_summary row per total."""
    out = CompileLog(files=[str(path)])
    pending: dict[str | None, dict[str, Any]] = {}  # pid -> the compile the wrapper started and has not closed
    for lineno, line in numbered(path, out):
        s = STATUS.match(line)
        if s is not None:
            key = next(reversed(pending), None) if pending else None
            row = pending.pop(key, None) if pending else None
            if row is None:  # the status of a compile whose start the log does not show (older wrappers)
                row = _row(path, lineno, None, None, None)
                row["cache"] = "miss"
                out.rows.append(row)
            ok = s.group("status") == "PASS"
            row["status"] = "ok" if ok else "failed"
            if not ok:
                row["fail_type"] = f"Compiler status {s.group('status')}"
            continue
        m = LINE.match(line)
        if m is None:
            continue
        msg, pid = m.group("msg"), m.group("pid")
        start = _ns(m.group("ts")) if m.group("ts") else None
        if (t := _TOTAL.match(msg)) is not None:
            out.rows.append({"event": "parallel_summary", "evidence": "neuron_log", "path": str(path), "line": lineno,
                             "pid": pid, "start_ns": start, "status": _TOTALS[t.group("what")],
                             "count": int(t.group("n"))})
        elif msg.startswith("Call compiler with cmd"):
            row = _row(path, lineno, pid, start, _module(msg))
            row.update(cache="miss", status="running")
            pending[pid] = row
            out.rows.append(row)
        elif msg.startswith("Using a cached neff at"):
            row = _row(path, lineno, pid, start, _module(msg))
            row.update(cache="hit", status="ok", dur_ns=0)
            out.rows.append(row)
        elif msg.startswith("Got a cached failed neff at"):
            row = _row(path, lineno, pid, start, _module(msg))
            row.update(cache="failed_hit", status="failed", fail_type="cached failed NEFF",
                       fail_reason=msg.strip())
            out.rows.append(row)
        elif msg.startswith("Exiting with a successfully compiled graph") and pid in pending:
            row = pending.pop(pid)
            row["status"] = "ok"
    return out


def read_cache_dir(path: Path) -> CompileLog:
    """A NEFF cache directory: one row per ``MODULE_*`` entry (compiled: ``model.neff``; failed: ``model.log``
    saying "Failed compilation"), with the compiler version its ``neuronxcc-<version>/`` level names; an entry
    that kept the compiler's own ``log-neuron-cc.txt`` adds that log's time, passes and failure."""
    out = CompileLog(files=[str(path)])
    for entry in sorted(p for p in path.rglob("MODULE_*") if p.is_dir()):
        cc_log = entry / neuron_cc_log.LOG_NAME
        if cc_log.is_file():
            out.extend(neuron_cc_log.read(cc_log))
            continue
        log = entry / "model.log"
        failed = log.is_file() and log.read_text(errors="replace").lstrip().startswith("Failed compilation")
        if not failed and not (entry / "model.neff").is_file():
            continue
        version = neuron_cc_log.CACHE_VERSION.match(entry.parent.name)
        row = {"event": "compile", "evidence": "neuron_cache", "path": str(entry), "compile_id": entry.name,
               "function": entry.parent.name, "status": "failed" if failed else "ok",
               "compiler_version": version.group("v") if version else None}
        if failed:
            text = log.read_text(errors="replace")
            code = re.search(r"\[(?:NCC_)?[A-Z]{3,5}\d{3}\]", text)
            row["fail_type"] = code.group(0).strip("[]") if code else "Failed compilation"
            row["fail_reason"] = text.strip()[-2000:]
        out.rows.append(row)
    return out


def is_cache_dir(path: Path) -> bool:
    return path.is_dir() and (path.name.startswith("neuronxcc-") or any(path.glob("neuronxcc-*/MODULE_*")))


def _row(path: Path, lineno: int, pid: str | None, start: int | None, module: str | None) -> dict[str, Any]:
    return {"event": "compile", "evidence": "neuron_log", "path": str(path), "line": lineno, "pid": pid,
            "start_ns": start, "compile_id": module}


def _module(msg: str) -> str | None:
    m = MODULE.search(msg)
    return m.group(0) if m else None
