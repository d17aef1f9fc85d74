"""The compiled code running in a trace, apart from compiling it: torch.compile's runtime ranges.

Kineto records, on every call of a compiled frame (names in analysis/names.py):

- ``TorchDynamo Cache Lookup``: Dynamo evaluating the frame's guards to pick its compiled code. Host overhead of
  the compiled code on every call (``host_overhead.guards``), not compile time;
- ``Torch-Compiled Region: F/N``: the compiled code of compile ``F/N`` running (execution). The first user
  Python frame inside it (with ``with_stack=True``) is the function Dynamo compiled, or the resume function
  (``torch_dynamo_resume_in_<fn>_at_<line>``) that runs the code after a graph break;
- ``## Call CompiledFxGraph <hash> ##``: Inductor running one compiled graph (which graph ran when);
- ``CompiledFunction`` / ``CompiledFunctionBackward``: AOTAutograd's forward and backward of a compiled graph.

From them, per region: calls, run time, the guard checks before its calls, its function and source; the
graphs each region ran; the backward's time; compiled calls set against eager calls of the same function in the
same trace (``versus_eager``); and the graph breaks each profiler step crosses (``breaks_per_step``).

A compiled call's cost is its Dynamo entry frame (``eval_frame.py: compile_wrapper``/``_fn``, with stacks) or,
without stacks, its guard check through the end of its region. An eager call is a Python frame of the same
``file(line): function`` outside every Dynamo entry, compiled region and compile range. Calls that compiled are
not compared (their time is compile). Both need ``with_stack=True``; without Python frames there is no eager
evidence and no comparison.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa

from neurontrace.analysis import names
from neurontrace.analysis.compile_spans import compile_spans, inside
from neurontrace.analysis.intervals import union
from neurontrace.analysis.labels import per_distinct
from neurontrace.columns import codes as column_codes
from neurontrace.columns import row_codes

_NONE, _REGION, _GUARD, _GRAPH, _FORWARD, _BACKWARD, _ENTRY, _USER = range(8)


def _kind(category: str | None, name: str | None) -> int:
    n = name or ""
    if names.COMPILED_REGION.match(n):
        return _REGION
    if names.GUARD_CHECK.match(n):
        return _GUARD
    if names.COMPILED_GRAPH_CALL.match(n):
        return _GRAPH
    m = names.COMPILED_AUTOGRAD.match(n)
    if m:
        return _BACKWARD if m.group("backward") else _FORWARD
    if category == "python":
        if names.DYNAMO_ENTRY.search(n):
            return _ENTRY
        if names.PYTHON_FRAME.match(n) and not names.NOT_USER_FRAME.search(n):
            return _USER
    return _NONE


def source_of(frame: str | None) -> str | None:
    """``file:line`` of a Python tracer frame name ``file(line): function``."""
    m = names.PYTHON_FRAME.match(frame or "")
    return f"{m.group('file')}:{m.group('line')}" if m else None


def _region_key(name: str) -> str:
    m = names.COMPILED_REGION.match(name)
    return (m.group("id") if m and m.group("id") else "?") if m else "?"


def compile_key(compile_id: str | None) -> str:
    """A compile id as a region names it: ``F/N`` (no compiled-autograd prefix, no restart attempt)."""
    cid = str(compile_id or "")
    cid = cid.split("/", 1)[1] if cid.startswith("!") and "/" in cid else cid
    return cid.split("_")[0]


def empty() -> dict[str, Any]:
    return {"guard_checks": {"calls": 0, "ns": 0, "without_region": 0}, "graphs": [],
            "backward": {"calls": 0, "run_ns": 0}, "versus_eager": [], "breaks_per_step": []}


def runtime_mask(host: pa.Table, owned: tuple[int, int] | None = None) -> np.ndarray:
    """Per host event: is it one of the ranges :func:`runtime` reads (a region, guard check, graph call,
    compiled forward/backward, Dynamo entry frame or user Python frame).

    ``owned`` (a time slice holding every event overlapping it): of the user Python frames, only those
    :func:`runtime` can tell from the others: the first user frame of each thread, the first at or after each
    region's start, and every frame outside the Dynamo entries, regions, guard checks and compile ranges (an
    eager call). The rest (Python frames inside compiled code or compiling: the bulk of a with-stack trace
    that compiles) change nothing in its figures."""
    if host.num_rows == 0:
        return np.zeros(0, dtype=bool)
    codes, keys = per_distinct([host["category"], host["name"]], _kind)
    kinds = np.asarray(keys, dtype=np.int8)[codes] if len(keys) else np.full(host.num_rows, _NONE, np.int8)
    keep = kinds != _NONE
    if owned is None:
        return np.asarray(keep, dtype=bool)
    user = np.flatnonzero(kinds == _USER)
    if not len(user):
        return np.asarray(keep, dtype=bool)
    ts = host["ts_ns"].to_numpy()
    end = ts + host["dur_ns"].to_numpy()
    thread = row_codes(column_codes(host["pid"])[0], column_codes(host["tid"])[0])
    inside_slice = (ts >= owned[0]) & (ts < owned[1])
    keep[user] = False
    spans_of = np.flatnonzero(np.isin(kinds, [_REGION, _ENTRY, _GUARD]))
    compiling = compile_spans(host)
    regions = np.flatnonzero(kinds == _REGION)
    for th in np.unique(thread[user]).tolist():
        mine = user[thread[user] == th]
        mine = mine[np.lexsort((mine, ts[mine]))]  # by start, as runtime() orders them
        owned_mine = mine[inside_slice[mine]]
        if len(owned_mine):
            keep[owned_mine[0]] = True  # the thread's first user frame in the slice
        regs = regions[(thread[regions] == th) & inside_slice[regions]]
        j = np.searchsorted(ts[mine], ts[regs], side="left")
        keep[mine[j[j < len(mine)]]] = True  # the first user frame at or after each region's start
        sp = spans_of[thread[spans_of] == th]
        blocked = union(np.concatenate([ts[sp], compiling[0]]), np.concatenate([end[sp], compiling[1]]))
        keep[mine[~inside(ts[mine], blocked)]] = True  # an eager call
    return np.asarray(keep, dtype=bool)


def runtime(host: pa.Table, steps: list[dict[str, Any]] | None = None,
            breaks: dict[str, list[dict[str, Any]]] | None = None) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """``(regions, runtime)`` of one rank's host events. ``steps``: the phases' step windows; ``breaks``: the
    graph breaks of the compile logs by :func:`compile_key` (each ``{source, reason}``)."""
    out = empty()
    regions: dict[str, dict[str, Any]] = {}
    if host.num_rows == 0:
        return regions, out
    codes, keys = per_distinct([host["category"], host["name"]], _kind)
    kinds = np.asarray(keys, dtype=np.int8)[codes] if len(keys) else np.zeros(host.num_rows, np.int8)
    if not (kinds == _REGION).any():
        return regions, out
    rows = np.flatnonzero(kinds != _NONE)
    t = host.take(pa.array(rows))
    kind = kinds[rows]
    ts = t["ts_ns"].to_numpy()
    end = ts + t["dur_ns"].to_numpy()
    name = t["name"].to_pylist()
    thread = [f"{p}/{d}" for p, d in zip(t["pid"].to_pylist(), t["tid"].to_pylist(), strict=True)]
    compiling = compile_spans(host)
    by_thread: dict[str, list[int]] = defaultdict(list)
    for i in np.argsort(ts, kind="stable").tolist():
        by_thread[thread[i]].append(i)
    occurrences: list[tuple[int, str]] = []  # (start, region key) of every region run, for the steps
    compiled: dict[str, list[tuple[int, int, int]]] = defaultdict(list)  # function -> (call, guard, region) ns
    eager_rows: list[int] = []
    for idx in by_thread.values():
        _thread(idx, kind, ts, end, name, regions, out, occurrences, compiled, compiling)
        eager_rows += [i for i in idx if kind[i] == _USER]
    if compiled:
        out["versus_eager"] = _versus_eager(compiled, eager_rows, ts, end, name, thread, by_thread, kind, compiling)
    if steps:
        out["breaks_per_step"] = _breaks_per_step(steps, occurrences, regions, breaks or {})
    return regions, out


def _thread(idx: list[int], kind: np.ndarray, ts: np.ndarray, end: np.ndarray, name: list[str],
            regions: dict[str, dict[str, Any]], out: dict[str, Any], occurrences: list[tuple[int, str]],
            compiled: dict[str, list[tuple[int, int, int]]], compiling: tuple[np.ndarray, np.ndarray]) -> None:
    """One thread's runtime ranges, in time order."""
    users = [i for i in idx if kind[i] == _USER]
    user_ts = ts[users] if users else np.zeros(0, np.int64)
    open_regions: list[tuple[int, str]] = []  # (end, key) of the regions enclosing the current time
    entries: list[int] = []  # the outermost Dynamo entry frame enclosing the current time
    guard: int | None = None  # the last guard check not yet followed by a region
    graphs: dict[str, dict[str, Any]] = {g["hash"]: g for g in out["graphs"]}
    for i in idx:
        k = int(kind[i])
        start = int(ts[i])
        open_regions = [(e, key) for e, key in open_regions if e > start]
        if entries and int(end[entries[0]]) <= start:
            entries = []
        if k == _ENTRY and not entries:
            entries = [i]
        elif k == _GUARD:
            if guard is not None:
                out["guard_checks"]["without_region"] += 1
            out["guard_checks"]["calls"] += 1
            out["guard_checks"]["ns"] += int(end[i] - ts[i])
            guard = i
        elif k == _REGION:
            key = _region_key(name[i])
            reg = regions.setdefault(key, {"calls": 0, "run_ns": 0, "function": None, "source": None,
                                           "guard_calls": 0, "guard_ns": 0, "forward_ns": 0})
            reg["calls"] += 1
            reg["run_ns"] += int(end[i] - ts[i])
            j = int(np.searchsorted(user_ts, start))
            if reg["function"] is None and j < len(users) and user_ts[j] < end[i]:
                reg["function"] = name[users[j]]
                reg["source"] = source_of(name[users[j]])
            g_ns = 0
            if guard is not None:
                g_ns = int(end[guard] - ts[guard])
                reg["guard_calls"] += 1
                reg["guard_ns"] += g_ns
            occurrences.append((start, key))
            if not open_regions and reg["function"] is not None:  # a call of the compiled function itself
                call_start = int(ts[entries[0]]) if entries else (int(ts[guard]) if guard is not None else start)
                call_end = int(end[entries[0]]) if entries else int(end[i])
                if not inside(np.asarray([call_start]), compiling)[0] and \
                        not _overlaps(call_start, call_end, compiling):
                    compiled[str(reg["function"])].append((call_end - call_start, g_ns, int(end[i] - ts[i])))
            guard = None
            open_regions.append((int(end[i]), key))
        elif k == _GRAPH:
            m = names.COMPILED_GRAPH_CALL.match(name[i])
            h = m.group("hash") if m else "?"
            g = graphs.get(h)
            if g is None:
                g = graphs[h] = {"hash": h, "region": open_regions[-1][1] if open_regions else None, "calls": 0,
                                 "run_ns": 0, "first_ns": start, "last_ns": start}
                out["graphs"].append(g)
            g["calls"] += 1
            g["run_ns"] += int(end[i] - ts[i])
            g["first_ns"] = min(g["first_ns"], start)
            g["last_ns"] = max(g["last_ns"], start)
        elif k == _FORWARD and open_regions:
            regions[open_regions[-1][1]]["forward_ns"] += int(end[i] - ts[i])
        elif k == _BACKWARD:
            out["backward"]["calls"] += 1
            out["backward"]["run_ns"] += int(end[i] - ts[i])
    if guard is not None:
        out["guard_checks"]["without_region"] += 1


def _overlaps(start: int, stop: int, spans: tuple[np.ndarray, np.ndarray]) -> bool:
    us, ue = spans
    if not len(us):
        return False
    i = int(np.searchsorted(us, stop))  # spans starting before the call ends
    return i > 0 and int(ue[i - 1]) > start


def _versus_eager(compiled: dict[str, list[tuple[int, int, int]]], eager_rows: list[int], ts: np.ndarray,
                  end: np.ndarray, name: list[str], thread: list[str], by_thread: dict[str, list[int]],
                  kind: np.ndarray, compiling: tuple[np.ndarray, np.ndarray]) -> list[dict[str, Any]]:
    """Per compiled function: its compiled calls against its eager calls (the same frame name, outside every
    Dynamo entry, compiled region and compile range)."""
    blocked: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for th, idx in by_thread.items():
        sel = [i for i in idx if kind[i] in (_REGION, _ENTRY, _GUARD)]
        s, e = np.asarray(ts[sel], np.int64), np.asarray(end[sel], np.int64)
        blocked[th] = union(np.concatenate([s, compiling[0]]), np.concatenate([e, compiling[1]]))
    eager: dict[str, list[int]] = defaultdict(list)
    for i in eager_rows:
        if name[i] in compiled and not inside(np.asarray([ts[i]], np.int64), blocked[thread[i]])[0]:
            eager[name[i]].append(int(end[i] - ts[i]))
    out = []
    for fn, calls in compiled.items():
        arr: np.ndarray = np.asarray(calls, dtype=np.int64)
        ecalls = eager.get(fn, [])
        out.append({"function": fn, "source": source_of(fn), "compiled_calls": len(calls),
                    "compiled_median_ns": int(np.median(arr[:, 0])), "guard_median_ns": int(np.median(arr[:, 1])),
                    "region_median_ns": int(np.median(arr[:, 2])), "eager_calls": len(ecalls),
                    "eager_median_ns": int(np.median(ecalls)) if ecalls else None})
    return out


def _breaks_per_step(steps: list[dict[str, Any]], occurrences: list[tuple[int, str]],
                     regions: dict[str, dict[str, Any]], breaks: dict[str, list[dict[str, Any]]]
                     ) -> list[dict[str, Any]]:
    """Per step: the graph breaks its compiled calls crossed. A run of region F/N crosses each break the logs
    recorded for compile F/N; without logs, a run of a resume function's region crossed the break at the line
    its name gives (reason unknown)."""
    logged = any(k in breaks for k in regions)
    starts = np.asarray([s for s, _ in occurrences], dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    starts = starts[order]
    keys = [occurrences[i][1] for i in order.tolist()]
    out = []
    for st in steps:
        lo = int(np.searchsorted(starts, int(st["start_ns"])))
        hi = int(np.searchsorted(starts, int(st["start_ns"]) + int(st["dur_ns"])))
        count: dict[tuple[Any, Any], int] = {}
        for key in keys[lo:hi]:
            if logged:
                crossed = [(b.get("source"), b.get("reason")) for b in breaks.get(key, [])]
            else:
                m = names.RESUME_FRAME.search(str(regions[key]["function"] or ""))
                f = names.PYTHON_FRAME.match(str(regions[key]["function"] or ""))
                crossed = [(f"{f.group('file')}:{m.group('line')}" if f else None, None)] if m else []
            for c in crossed:
                count[c] = count.get(c, 0) + 1
        if count:
            out.append({"step": st["step"], "start_ns": int(st["start_ns"]), "breaks": sum(count.values()),
                        "at": [{"source": s, "reason": r, "count": n} for (s, r), n in count.items()]})
    return out
