"""``TORCH_LOGS=recompiles,graph_breaks`` text (a job's stderr) into ``compiles`` rows.

torch._logging prints every line of a multi-line message with the same glog prefix, then the compile id and,
for the artifact loggers, the logger's tag::

    V1201 19:50:00.759000 16073 torch/_dynamo/guards.py:5396] [0/1] [__recompiles] Recompiling function mlp in f.py:9
    ...] [0/1] [__recompiles]     triggered by the following guard failure(s):
    ...] [0/1] [__recompiles]     - 0/0: tensor 'x' size mismatch at index 0. expected 8, actual 16
    ...] [1/0] [__graph_breaks] Graph break in user code at f.py:27
    ...] [1/0] [__graph_breaks] Graph Break Reason: ...
    W... torch/_dynamo/convert_frame.py:1994] [0/2] torch._dynamo hit config.recompile_limit (2)
    ...] [0/2]    function: 'k' (f.py:3)
    ...] [0/2]    last reason: 0/1: tensor 'x' size mismatch at index 0. expected 2, actual 3

(the last is a warning torch prints without TORCH_LOGS; before torch 2.6 it names ``config.cache_size_limit``).
Consecutive lines with one prefix, compile id and tag are one message. Lines of other loggers, and the job's own
output between them, are not compile evidence and are passed over without a count.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from neurontrace.parsers._compile_rows import COMPILE_ID, GLOG, CompileLog, compile_id, graph_break, numbered

FORMAT = "torch_logs"
_TAG = re.compile(r"^\[(__\w+)\]\s?")
_RECOMPILING = re.compile(r"Recompiling function (?P<fn>\S+) in (?P<source>\S+:\d+)")
_LIMIT = re.compile(r"torch\._dynamo hit config\.(?P<which>recompile_limit|cache_size_limit|"
                    r"accumulated_recompile_limit|accumulated_cache_size_limit) \((?P<n>\d+)\)")
_FUNCTION = re.compile(r"function: '(?P<fn>[^']*)' \((?P<source>[^)]*)\)")
_LAST_REASON = re.compile(r"last reason: (?P<reason>.*)")
_GUARD = re.compile(r"^\s*- (?P<reason>\d+/\d+: .*)$")
_KEEP = {"__recompiles", "__recompiles_verbose", "__graph_breaks"}


def sniff(first_lines: list[str]) -> bool:
    return any(("[__recompiles" in ln or "[__graph_breaks]" in ln or "torch._dynamo hit config." in ln)
               and GLOG.match(ln) for ln in first_lines)


def read(path: Path) -> CompileLog:
    out = CompileLog(files=[str(path)])
    message: list[str] = []
    head: tuple[Any, ...] | None = None
    start = 0
    for lineno, line in numbered(path, out):
        m = GLOG.match(line)
        if m is None:
            continue
        rest = m.group("rest")
        cid = COMPILE_ID.match(rest)
        if cid is None:
            continue
        body = rest[cid.end():].lstrip(" ")
        tag_m = _TAG.match(body)
        tag = tag_m.group(1) if tag_m else None
        text = body[tag_m.end():] if tag_m else body
        key = (m.group("md"), m.group("time"), m.group("tid"), cid.group(0), tag)
        if key != head:
            if head is not None:
                _message(out, path, start, head, message)
            head, message, start = key, [], lineno
        message.append(text)
    if head is not None:
        _message(out, path, start, head, message)
    return out


def _message(out: CompileLog, path: Path, lineno: int, head: tuple[Any, ...], lines: list[str]) -> None:
    _md, _time, tid, cid_text, tag = head
    cid = COMPILE_ID.match(cid_text)
    assert cid is not None
    frame, n = int(cid.group("frame")), int(cid.group("n"))
    attempt = int(cid.group("attempt") or 0)
    ca = int(cid.group("ca")) if cid.group("ca") else None
    base = {"evidence": "torch_logs", "path": str(path), "line": lineno, "pid": tid, "frame_id": frame,
            "frame_compile_id": n, "attempt": attempt, "compile_id": compile_id(frame, n, attempt, ca)}
    text = "\n".join(lines)
    if tag in ("__recompiles", "__recompiles_verbose"):
        m = _RECOMPILING.search(text)
        if m is None:
            return
        guards = [g.group("reason") for ln in lines if (g := _GUARD.match(ln))]
        # The guards are listed newest cache entry first: the first is the one this input failed last.
        out.rows.append({**base, "event": "compile", "function": m.group("fn"), "source": m.group("source"),
                         "recompile_reason": "; ".join(guards) or None})
    elif tag == "__graph_breaks":
        reason, source = graph_break(text)
        if reason is not None or source is not None:
            out.rows.append({**base, "event": "graph_break", "reason": reason, "source": source})
    elif tag is None and (lim := _LIMIT.search(text)):
        fn = _FUNCTION.search(text)
        last = _LAST_REASON.search(text)
        out.rows.append({**base, "event": "recompile_limit", "function": fn.group("fn") if fn else None,
                         "source": fn.group("source") if fn else None,
                         "reason": f"{lim.group('which')} ({lim.group('n')})"
                                   + (f"; last reason: {last.group('reason')}" if last else "")})
