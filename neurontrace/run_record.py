"""``run.json``: the evidence a capture keeps beside its traces (schema ``neurontrace.run/1``).

A capture directory holds the traces of one run on one rank plus this record of how they were
made: command line, start time, host, rank, versions, the environment variables that change
behaviour, the schedule and what each recorded window was, the ops that fell back to the CPU,
and every failure. ``docs/capture.md`` documents every key. This module is the format's reading
side, which parsers use to attach the record to the trace's metadata (key ``run``); the capture
writes it (``neurontrace._capture_record``).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from neurontrace.errors import TraceWarning

SCHEMA = "neurontrace.run/1"
SCHEMA_PREFIX = "neurontrace.run/"
FILE_NAME = "run.json"
# How far above a trace file its run.json may be: the Neuron exporter nests the framework trace in
# <capture>/neuron/<instance>_pid_<pid>/<timestamp>/trace.json.
MAX_LEVELS_UP = 3


def read_run_record(trace_path: str | Path) -> dict[str, Any] | None:
    """The ``run.json`` of the capture that holds ``trace_path``, or None when there is none.

    Looks in ``trace_path`` itself when it is a directory, then beside the file and up to
    :data:`MAX_LEVELS_UP` directories above it. A ``run.json`` that is not a neurontrace run record
    is passed over; one that is ours but unreadable gives a :class:`TraceWarning` and None.
    """
    p = Path(trace_path)
    start = p if p.is_dir() else p.parent
    for directory in [start, *list(start.resolve().parents)[:MAX_LEVELS_UP]]:
        candidate = directory / FILE_NAME
        if not candidate.is_file():
            continue
        try:
            record = json.loads(candidate.read_text())
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            if _mentions_schema(candidate):
                warnings.warn(f"{candidate}: unreadable run record ({exc}); the run's facts are not attached",
                              TraceWarning, stacklevel=2)
                return None
            continue
        if isinstance(record, dict) and isinstance(record.get("schema"), str) \
                and record["schema"].startswith(SCHEMA_PREFIX):
            return validated(record, candidate)
    return None


# The keys readers use, and the kinds they must hold (docs/capture.md); null is always allowed.
LIST_KEYS = ("command", "argv", "devices", "tags", "windows", "warnings", "failures", "fallback_ops")
DICT_KEYS = ("versions", "environment", "environment_changes", "profiler", "neuron", "exit")
TEXT_KEYS = ("status", "neurontrace_version", "cwd", "start_time", "end_time", "host", "rank_source", "python",
             "platform", "backend", "notes", "out_dir")
INT_KEYS = ("rank", "world_size", "pid", "steps_marked")
INT_LIMIT = 1 << 31


def validated(record: dict[str, Any], path: Path) -> dict[str, Any]:
    """The record with every documented key of the documented kind: a key of another kind (a
    fallback list that is a number, a world size given as text, a rank beyond 2^31) is dropped
    and named in one TraceWarning, so no reader meets a shape the format does not have."""
    out, dropped = dict(record), []
    for key in (*LIST_KEYS, *DICT_KEYS, *TEXT_KEYS, *INT_KEYS):
        value = out.get(key)
        if value is None:
            continue
        ok = (isinstance(value, list) if key in LIST_KEYS else isinstance(value, dict) if key in DICT_KEYS
              else isinstance(value, str) if key in TEXT_KEYS
              else isinstance(value, int) and not isinstance(value, bool) and 0 <= value < INT_LIMIT)
        if ok and key == "fallback_ops":
            ok = all(isinstance(op, str) for op in value)
        if not ok:
            out[key] = None
            dropped.append(f"{key} ({type(value).__name__})")
    if dropped:
        warnings.warn(f"{path}: run record field(s) not of the documented kind, left out: {', '.join(dropped)}",
                      TraceWarning, stacklevel=3)
    return out


def _mentions_schema(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return SCHEMA_PREFIX.encode() in f.read(4096)
    except OSError:
        return False
