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
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            if _mentions_schema(candidate):
                warnings.warn(f"{candidate}: unreadable run record ({exc}); the run's facts are not attached",
                              TraceWarning, stacklevel=2)
                return None
            continue
        if isinstance(record, dict) and str(record.get("schema", "")).startswith(SCHEMA_PREFIX):
            return record
    return None


def _mentions_schema(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return SCHEMA_PREFIX.encode() in f.read(4096)
    except OSError:
        return False
