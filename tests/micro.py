"""Build tiny Kineto traces inline: a few events in, the expected rows out (Perfetto diff-test habit)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import neurontrace
from neurontrace import Trace


def doc(events: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    return {"schemaVersion": 1, **top, "traceEvents": events}


def write(tmp_path: Path, events: list[dict[str, Any]], name: str = "trace.json", *, indent: int | None = 1,
          **top: Any) -> Path:
    path = tmp_path / name
    text = json.dumps(doc(events, **top), indent=indent).encode()
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    return path


def load(tmp_path: Path, events: list[dict[str, Any]], **top: Any) -> Trace:
    return neurontrace.load(write(tmp_path, events, **top))


def rows(trace: Trace, table: str, *columns: str) -> list[tuple[Any, ...]]:
    t = trace.tables[table]
    return list(zip(*(t[c].to_pylist() for c in columns), strict=True))


def x(cat: str | None, name: str, ts: float | int, dur: float | int, pid: Any = 1, tid: Any = 1,
      **args: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if cat is not None:
        ev["cat"] = cat
    if args:
        ev["args"] = args
    return ev
