"""``TORCH_TRACE`` structured compile logs (the format tlparse reads) into ``compiles`` rows.

torch._logging writes one record per line: a glog prefix, then a JSON envelope whose first key names the record
(``dynamo_start``, ``compilation_metrics``, ``artifact``, ``chromium_event`` ...) beside the compile it belongs to
(``frame_id``, ``frame_compile_id``, ``attempt``, ``compiled_autograd_id``, ``rank``); a record with
``has_payload`` is followed by its payload, one tab-indented line after another. The file is read line by line:
only the envelopes of the records used here are decoded, and only the short payloads they need are kept
(recompile reasons, graph-break reasons, the ``dynamo`` chromium range), each to ``PAYLOAD_CAP`` characters, so
memory stays bounded whatever the log's size; a line longer than ``LINE_CAP`` (1 MiB) is never read whole: a
payload line keeps its first piece, any other is skipped and counted. One row per compile attempt; a compile id
seen again after its compile finished (``torch._dynamo.reset()`` restarts the numbering) opens a new row.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from neurontrace.parsers._compile_rows import (
    GLOG,
    LONG_LINE,
    CompileLog,
    compile_id,
    graph_break,
    numbered_bytes,
    rank_from_name,
)

FORMAT = "torch_trace"
PAYLOAD_CAP = 1 << 16
_KEY = re.compile(r'^\{"(\w+)"')
_IDS = re.compile(r'"frame_id": (\d+), "frame_compile_id": (\d+)(?:, "attempt": (\d+))?')
_CA = re.compile(r'"compiled_autograd_id": (\d+)')
_RANK = re.compile(r'"rank": (\d+)')
_USED = {"dynamo_start", "compilation_metrics", "artifact", "chromium_event"}
_PAYLOADS = {"recompile_reasons", "dynamo_graph_break_reason", "dynamo_error", "chromium_event"}
_CACHE = {"fx_graph_cache_hit": ("cache", "hit"), "fx_graph_cache_miss": ("cache", "miss"),
          "fx_graph_cache_bypass": ("cache", "bypass"), "aotautograd_cache_hit": ("aot_cache", "hit"),
          "aotautograd_cache_miss": ("aot_cache", "miss"), "aotautograd_cache_bypass": ("aot_cache", "bypass")}
_META = ("frame_id", "frame_compile_id", "attempt", "compiled_autograd_id", "rank", "has_payload")


def sniff(first_lines: list[str]) -> bool:
    """A TORCH_TRACE log: its records are glog lines carrying a JSON envelope."""
    for line in first_lines:
        m = GLOG.match(line)
        if m and m.group("rest").startswith("{"):
            return True
    return False


def read(path: Path) -> CompileLog:
    out = CompileLog(files=[str(path)])
    reader = _Reader(path, out)
    for lineno, raw, cut in numbered_bytes(path):
        if raw[:1] == b"\t":  # a payload line: decoded only when its record's payload is kept (to PAYLOAD_CAP)
            if reader.pending is not None and reader.size < PAYLOAD_CAP:
                reader.payload.append(raw[1:PAYLOAD_CAP].rstrip(b"\r\n").decode("utf-8", "replace"))
                reader.size += len(raw)
            continue
        if cut:  # an envelope is a few KB: a longer line (never read whole) is no record
            reader.end_payload()
            out.skip(path, lineno, LONG_LINE)
            continue
        reader.line(lineno, raw.rstrip(b"\r\n").decode("utf-8", "replace"))
    reader.finish()
    return out


class _Reader:
    def __init__(self, path: Path, out: CompileLog) -> None:
        self.path, self.out = path, out
        self.file_rank = rank_from_name(path)
        self.rows: dict[tuple[Any, ...], dict[str, Any]] = {}  # the latest row of each compile key
        self.pending: tuple[str, dict[str, Any] | None, int] | None = None  # payload being read: kind, row, line
        self.payload: list[str] = []
        self.size = 0

    def line(self, lineno: int, line: str) -> None:
        if line.startswith("\t"):
            if self.pending is not None and self.size < PAYLOAD_CAP:
                self.payload.append(line[1:])
                self.size += len(line)
            return
        self.end_payload()
        if not line.strip():
            return
        m = GLOG.match(line)
        if m is None:
            self.out.skip(self.path, lineno, "not a glog record")
            return
        rest = m.group("rest")
        k = _KEY.match(rest)
        if k is None:
            self.out.skip(self.path, lineno, "no JSON envelope")
            return
        if k.group(1) not in _USED:  # not decoded: only the compile it belongs to is read, from its ids
            ids = _IDS.search(rest)
            if ids is not None:
                self._row({"frame_id": int(ids.group(1)), "frame_compile_id": int(ids.group(2)),
                           "attempt": int(ids.group(3) or 0),
                           "compiled_autograd_id": int(c.group(1)) if (c := _CA.search(rest)) else None,
                           "rank": int(r.group(1)) if (r := _RANK.search(rest)) else None},
                          lineno, m.group("tid"), open_new=False)
            return
        try:
            env = json.loads(rest)
        except ValueError:
            self.out.skip(self.path, lineno, "corrupt JSON envelope")
            return
        if not isinstance(env, dict):
            self.out.skip(self.path, lineno, "corrupt JSON envelope")
            return
        self._record(k.group(1), env, lineno, m.group("tid"))

    def _record(self, kind: str, env: dict[str, Any], lineno: int, tid: str) -> None:
        body = env.get(kind)
        row = self._row(env, lineno, tid, open_new=kind == "dynamo_start")
        if kind == "artifact":
            name = body.get("name") if isinstance(body, dict) else None
            if row is not None and name in _CACHE:
                col, value = _CACHE[name]
                row[col] = value
            if name in _PAYLOADS and "has_payload" in env:
                self._start_payload(str(name), row, lineno)
        elif kind == "chromium_event" and row is not None and row.get("start_ns") is None:
            self._start_payload("chromium_event", row, lineno)
        elif kind == "compilation_metrics" and row is not None and isinstance(body, dict):
            _metrics(row, body)

    def _row(self, env: dict[str, Any], lineno: int, tid: str, *, open_new: bool) -> dict[str, Any] | None:
        frame, n = env.get("frame_id"), env.get("frame_compile_id")
        if not isinstance(frame, int) or not isinstance(n, int):
            return None
        attempt = env.get("attempt") if isinstance(env.get("attempt"), int) else 0
        ca = env.get("compiled_autograd_id") if isinstance(env.get("compiled_autograd_id"), int) else None
        rank = env.get("rank") if isinstance(env.get("rank"), int) else self.file_rank
        key = (rank, ca, frame, n, attempt)
        row = self.rows.get(key)
        if row is None or (open_new and row.get("status") is not None):
            row = {"event": "compile", "evidence": "torch_trace", "path": str(self.path), "line": lineno,
                   "rank": rank, "pid": tid, "frame_id": frame, "frame_compile_id": n, "attempt": attempt,
                   "compile_id": compile_id(frame, n, attempt, ca)}
            self.rows[key] = row
            self.out.rows.append(row)
        return row

    def _start_payload(self, kind: str, row: dict[str, Any] | None, lineno: int) -> None:
        self.pending, self.payload, self.size = (kind, row, lineno), [], 0

    def end_payload(self) -> None:
        if self.pending is None:
            return
        kind, row, lineno = self.pending
        self.pending = None
        text = "\n".join(self.payload)
        if kind == "chromium_event":
            try:
                ev = json.loads(text)
            except ValueError:
                self.out.skip(self.path, lineno, "corrupt chromium_event payload")
                return
            if row is not None and isinstance(ev, dict) and ev.get("name") == "dynamo" and ev.get("ph") == "B" \
                    and isinstance(ev.get("ts"), int | float):
                row["start_ns"] = round(ev["ts"] * 1000)
        elif kind == "recompile_reasons" and row is not None:
            row["recompile_reason"] = _reasons(text)
        elif kind == "dynamo_graph_break_reason":
            reason, source = graph_break(text)
            self.out.rows.append({"event": "graph_break", "evidence": "torch_trace", "path": str(self.path),
                                  "line": lineno, "rank": None if row is None else row["rank"],
                                  "pid": None if row is None else row["pid"],
                                  "frame_id": None if row is None else row["frame_id"],
                                  "frame_compile_id": None if row is None else row["frame_compile_id"],
                                  "attempt": None if row is None else row["attempt"],
                                  "compile_id": None if row is None else row["compile_id"],
                                  "reason": reason, "source": source})
        elif kind == "dynamo_error" and row is not None and not row.get("fail_reason"):
            row["fail_reason"] = text.strip()[:2000] or None

    def finish(self) -> None:
        self.end_payload()
        compiles = [r for r in self.out.rows if r["event"] == "compile"]
        later = {(r["rank"], r["frame_id"], r["frame_compile_id"]): r for r in compiles if r["attempt"]}
        for r in compiles:
            if r.get("status") is not None:
                continue
            nxt = later.get((r["rank"], r["frame_id"], r["frame_compile_id"]))
            if nxt is not None and nxt["attempt"] > r["attempt"]:
                r["status"] = "restarted"  # Dynamo restarted the analysis: the next attempt says why
                r["fail_reason"] = r.get("fail_reason") or nxt.get("restart_reason")
            else:
                r["status"] = "running"  # no compilation_metrics: the log ends inside the compile
        for r in compiles:
            r.pop("restart_reason", None)


def _metrics(row: dict[str, Any], m: dict[str, Any]) -> None:
    """A ``compilation_metrics`` record into its row (both torch's older ``*_time_s`` and newer ``*_us``)."""
    def ns(us_key: str, s_key: str) -> int | None:
        if isinstance(m.get(us_key), int | float):
            return int(m[us_key] * 1000)
        if isinstance(m.get(s_key), int | float):
            return int(round(float(m[s_key]) * 1e9))  # noqa: RUF046 (float -> int)
        return None

    start = ns("start_time_us", "start_time")
    row["start_ns"] = start if start is not None else row.get("start_ns")
    row["dur_ns"] = ns("duration_us", "entire_frame_compile_time_s")
    row["backend_ns"] = ns("aot_autograd_cumulative_compile_time_us", "backend_compile_time_s")
    row["inductor_ns"] = ns("inductor_cumulative_compile_time_us", "inductor_compile_time_s")
    row["codegen_ns"] = ns("inductor_code_gen_cumulative_compile_time_us", "code_gen_time_s")
    if m.get("co_name"):
        row["function"] = str(m["co_name"])
    if m.get("co_filename"):
        row["source"] = f"{m['co_filename']}:{m.get('co_firstlineno') or 0}"
    row["fail_type"] = m.get("fail_type")
    if m.get("fail_reason"):
        row["fail_reason"] = str(m["fail_reason"])
    if m.get("recompile_reason"):
        row["recompile_reason"] = str(m["recompile_reason"])
    if isinstance(m.get("num_graph_breaks"), int):
        row["graph_breaks"] = m["num_graph_breaks"]
    reasons = m.get("restart_reasons")
    if isinstance(reasons, list) and reasons:
        row["restart_reason"] = "; ".join(str(x) for x in reasons)
    row["status"] = "failed" if m.get("fail_type") else "ok"


def _reasons(text: str) -> str | None:
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    if isinstance(value, list):
        return "; ".join(str(v) for v in value) or None
    return str(value).strip() or None
