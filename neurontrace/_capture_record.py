"""Writing ``run.json`` (``neurontrace.run_record`` is the format): the facts a capture collects about the
process it runs in.

This module imports neither torch nor any backend: it only writes JSON and looks at the process.
"""

from __future__ import annotations

import json
import os
import platform
import re
import socket
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from neurontrace.run_record import FILE_NAME, SCHEMA

DEFAULT_OUT_DIR = "neurontrace-captures"  # where capture() and `neurontrace record` put capture directories
# Environment variables that change what a run does or how it is profiled (DESIGN.md: keep the
# evidence next to the results). Prefixes, then exact names.
ENV_PREFIXES = ("TORCH_NEURONX_", "NEURON_", "CUDA_", "NCCL_", "PYTORCH_", "TORCH_", "KINETO_", "XLA_")
ENV_NAMES = frozenset({"OMP_NUM_THREADS", "MKL_NUM_THREADS", "RANK", "LOCAL_RANK", "WORLD_SIZE",
                       "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"})
# Values of variables whose names look like credentials are never written.
_SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|(^|_)KEY($|_)", re.IGNORECASE)
REDACTED = "<redacted>"


def utc_now() -> str:
    """The current time as UTC ISO 8601 with milliseconds, e.g. ``2026-01-31T12:00:00.000Z``."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def behaviour_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables that change behaviour, sorted, credentials redacted."""
    env = os.environ if environ is None else environ
    out = {}
    for name in sorted(env):
        if name.startswith(ENV_PREFIXES) or name in ENV_NAMES:
            out[name] = REDACTED if _SECRET.search(name) else env[name]
    return out


def host_name() -> str:
    return socket.gethostname() or "unknown-host"


def rank_from_env(environ: Mapping[str, str] | None = None) -> tuple[int, int, str]:
    """``(rank, world_size, source)`` from the launcher's variables, else a single process."""
    env = os.environ if environ is None else environ
    try:
        return int(env["RANK"]), int(env.get("WORLD_SIZE", "1")), "env"
    except (KeyError, ValueError):
        return 0, 1, "default"


def new_record(*, notes: str | None, tags: tuple[str, ...], out_dir: Path) -> dict[str, Any]:
    """The facts known before anything runs; the capture fills in the rest as it goes."""
    from neurontrace._version import __version__

    rank, world, source = rank_from_env()
    return {
        "schema": SCHEMA,
        "status": "running",
        "neurontrace_version": __version__,
        "command": list(getattr(sys, "orig_argv", sys.argv)),
        "argv": list(sys.argv),
        "cwd": str(Path.cwd()),
        "start_time": utc_now(),
        "end_time": None,
        "host": host_name(),
        "pid": os.getpid(),
        "rank": rank,
        "world_size": world,
        "rank_source": source,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "backend": None,
        "versions": {},
        "devices": [],
        "environment": behaviour_env(),
        "environment_changes": {},
        "notes": notes,
        "tags": list(tags),
        "profiler": {},
        "steps_marked": 0,
        "windows": [],
        "fallback_ops": None,
        "neuron": None,
        "warnings": [],
        "failures": [],
        "exit": None,
        "out_dir": str(out_dir),
    }


def write_run_record(directory: Path, record: Mapping[str, Any]) -> Path:
    """Write ``run.json`` atomically (a reader never sees half a file)."""
    path = directory / FILE_NAME
    tmp = directory / f".{FILE_NAME}.tmp"
    tmp.write_text(json.dumps(record, indent=2, sort_keys=False, default=str) + "\n")
    tmp.replace(path)
    return path
