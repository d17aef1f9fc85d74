"""Preparation apart from execution: every compile attempt, recompile, graph break, cache outcome and failure.

The evidence is a ``compiles`` table (schema.COMPILES): rows read from compile logs by the parsers
(TORCH_TRACE, TORCH_LOGS text, Neuron compiler lines; the caller passes them in ``Options.compiles``) and rows
this module reads from the trace's own compile ranges (:func:`kineto_rows`: each ``dynamo`` range with the
compile id its ``dynamo_data: compile_id=F/N`` annotation names). Logs say more than a trace (cache outcomes,
guard failures, graph-break reasons), so where a rank has TORCH_TRACE rows they are its compiles; TORCH_LOGS
rows fill in what a rank's TORCH_TRACE lacks; the trace's ranges stand in when there is no log.

The value (:class:`CompileReport`) is the ``compile`` object of ``diagnose --json`` and of
``neurontrace compile --json`` (docs/compile.md).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from neurontrace import units
from neurontrace.analysis import compile_runtime, compile_slices, phases
from neurontrace.analysis.compile_spans import compile_mask
from neurontrace.analysis.contract import Context, Section
from neurontrace.columns import isin
from neurontrace.errors import MixedRunsError
from neurontrace.trace import Trace

_ANNOTATION_ID = re.compile(r"^dynamo_data: compile_id=(?:!(\d+)/)?(\d+)/(\d+)(?:_(\d+))?")
# The range that encloses one compile attempt: the chromium-event name first (torch 2.5+), else the
# dynamo_timed one older torch records.
_OUTER = ("dynamo", "_compile.compile_inner (dynamo_timed)")
MATCH_SLACK_NS = 1_000_000_000  # a log's compiles may start this much after the trace ends (clock skew)


@dataclass
class Frame:
    """One Dynamo frame of one rank: its compiles (attempts in order) and its graph breaks."""

    frame_id: int | None
    rank: int | None
    function: str | None = None
    source: str | None = None
    compiles: list[dict[str, Any]] = field(default_factory=list)
    graph_breaks: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"frame_id": self.frame_id, "rank": self.rank, "function": self.function, "source": self.source,
                "compiles": self.compiles, "graph_breaks": self.graph_breaks}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Frame:
        return cls(d.get("frame_id"), d.get("rank"), d.get("function"), d.get("source"),
                   [dict(c) for c in d.get("compiles") or []], [dict(g) for g in d.get("graph_breaks") or []])


@dataclass
class CompileReport:
    compile_ns: int = 0
    recompiles: int = 0
    graph_breaks: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    failed: int = 0
    frames: list[Frame] = field(default_factory=list)
    recompile_limits: list[dict[str, Any]] = field(default_factory=list)  # {rank, function, source, reason}
    neuron: dict[str, Any] | None = None  # {compiled, cache_hits, cached_failures, failed, parallel}
    per_rank: dict[str, int] = field(default_factory=dict)  # str(rank) -> graphs compiled (rank divergence)
    # the compiled code running in the trace: "Torch-Compiled Region: F/N" -> {"calls", "run_ns", "function",
    # "source", "guard_calls", "guard_ns", "forward_ns"} (analysis/compile_runtime.py)
    regions: dict[str, dict[str, Any]] = field(default_factory=dict)
    # guard checks, graphs run, backward, compiled against eager calls, graph breaks per step (compile_runtime)
    runtime: dict[str, Any] = field(default_factory=compile_runtime.empty)
    evidence: list[str] = field(default_factory=list)  # which sources the report read
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"compile_ns": self.compile_ns, "recompiles": self.recompiles, "graph_breaks": self.graph_breaks,
                "cache_hits": self.cache_hits, "cache_misses": self.cache_misses, "failed": self.failed,
                "frames": [f.as_dict() for f in self.frames], "recompile_limits": self.recompile_limits,
                "neuron": self.neuron, "per_rank": self.per_rank, "regions": self.regions,
                "runtime": self.runtime, "evidence": self.evidence, "warnings": self.warnings}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CompileReport:
        return cls(int(d.get("compile_ns") or 0), int(d.get("recompiles") or 0), int(d.get("graph_breaks") or 0),
                   int(d.get("cache_hits") or 0), int(d.get("cache_misses") or 0), int(d.get("failed") or 0),
                   [Frame.from_dict(f) for f in d.get("frames") or []],
                   [dict(x) for x in d.get("recompile_limits") or []], d.get("neuron"),
                   {str(k): int(v) for k, v in (d.get("per_rank") or {}).items()},
                   {str(k): dict(v) for k, v in (d.get("regions") or {}).items()},
                   {**compile_runtime.empty(), **dict(d.get("runtime") or {})}, list(d.get("evidence") or []),
                   list(d.get("warnings") or []))


def kineto_rows(trace: Trace) -> list[dict[str, Any]]:
    """One compile row per outermost compile range of the trace (trace clock, with its ``event_id``), with the
    compile id the ``dynamo_data`` annotation inside it names (torch 2.5+; none before)."""
    return host_rows(trace.system_events)


def host_rows(host: pa.Table) -> list[dict[str, Any]]:
    """:func:`kineto_rows` of the host events ``host`` (in recorded order)."""
    if host.num_rows == 0:
        return []
    mask = compile_mask(host) & isin(host["name"], _OUTER)
    if not mask.any():
        return []
    outer = host.filter(pa.array(mask))
    notes = host.filter(pa.array(isin(host["category"], ["annotation"])))
    ids = [(int(ts), m) for ts, n in zip(notes["ts_ns"].to_pylist(), notes["name"].to_pylist(), strict=True)
           if n and (m := _ANNOTATION_ID.match(n))]
    ids.sort(key=lambda x: x[0])
    id_ts = np.asarray([t for t, _ in ids], dtype=np.int64)
    rows: list[dict[str, Any]] = []
    last_end = -1
    for ts, dur, rank, pid, eid in zip(*(outer[c].to_pylist() for c in ("ts_ns", "dur_ns", "rank", "pid",
                                                                        "event_id")), strict=True):
        if ts < last_end:  # nested in the previous range ("_compile.compile_inner" inside "dynamo")
            continue
        last_end = ts + dur
        row: dict[str, Any] = {"event": "compile", "evidence": "kineto", "rank": rank, "pid": pid, "start_ns": ts,
                               "dur_ns": dur, "status": "ok", "function": None, "event_id": eid}
        i = int(np.searchsorted(id_ts, ts))
        if i < len(ids) and ids[i][0] < ts + dur:
            m = ids[i][1]
            ca, frame, n, attempt = (int(g) if g else None for g in m.groups())
            row.update(frame_id=frame, frame_compile_id=n, attempt=attempt or 0,
                       compile_id=m.group(0).split("=", 1)[1])
            if ca is not None:
                row["compile_id"] = f"!{ca}/{frame}/{n}"
        rows.append(row)
    rows.sort(key=lambda r: r["start_ns"])
    return rows


def compiled_regions(trace: Trace) -> dict[str, dict[str, Any]]:
    """How often each compiled region ran and for how long (``Torch-Compiled Region: F/N``; the bare name of
    torch before 2.5 counts under ``?``), with its function and guard checks: the runtime of each compile,
    which compile logs cannot give (analysis/compile_runtime.py)."""
    return compile_runtime.runtime(trace.system_events)[0]


def check_same_run(trace: Trace, logs: pa.Table) -> None:
    """Refuse compile logs of another run: ranks the trace does not have, or a process and times that match
    neither the trace's processes nor its span (MixedRunsError)."""
    if logs.num_rows == 0 or trace.system_events.num_rows == 0:
        return
    host = trace.system_events
    trace_ranks = {r for r in host["rank"].to_pylist() if r is not None}
    log_ranks = {r for r in logs["rank"].to_pylist() if r is not None}
    if trace_ranks and log_ranks and not log_ranks <= trace_ranks:
        raise MixedRunsError(f"the compile logs are of rank(s) {sorted(log_ranks - trace_ranks)}, which the trace "
                             f"does not have (its ranks: {sorted(trace_ranks)}): logs of another run?")
    torch_rows = logs.filter(pa.array(isin(logs["evidence"], ["torch_trace", "torch_logs"])))
    trace_pids = {str(p) for p in host["pid"].to_pylist() if p is not None}
    end = int(np.max(host["ts_ns"].to_numpy() + host["dur_ns"].to_numpy()))
    begin = int(np.min(host["ts_ns"].to_numpy()))
    by_file: dict[str, tuple[set[str], list[int]]] = {}
    for path, pid, start in zip(*(torch_rows[c].to_pylist() for c in ("path", "pid", "start_ns")), strict=True):
        pids, starts = by_file.setdefault(str(path), (set(), []))
        if pid is not None:
            pids.add(str(pid))
        if start is not None:
            starts.append(int(start))
    for path, (pids, starts) in by_file.items():
        # a log of this run shares a process with the trace, or compiled within a day before it up to its end
        if pids and trace_pids and not pids & trace_pids and starts and \
                not any(begin - 86_400 * 10**9 <= s <= end + MATCH_SLACK_NS for s in starts):
            raise MixedRunsError(f"{path}: compile log of process(es) {sorted(pids)[:4]} at other times than the "
                                 f"trace (processes {sorted(trace_pids)[:4]}): logs of another run?")


def report(rows: list[dict[str, Any]], kineto: list[dict[str, Any]] | None = None,
           warnings: list[str] | None = None, regions: dict[str, dict[str, Any]] | None = None,
           runtime: dict[str, Any] | None = None) -> CompileReport | None:
    """The report of one rank (or of logs alone): None when there is no compile evidence at all."""
    trace_rows = [r for r in rows if r["evidence"] == "torch_trace"]
    text_rows = [r for r in rows if r["evidence"] == "torch_logs"]
    neuron_rows = [r for r in rows if r["evidence"].startswith("neuron")]
    chosen = trace_rows or text_rows or list(kineto or [])
    if not chosen and not neuron_rows and not warnings and not regions:
        return None
    compiles = [r for r in chosen if r["event"] == "compile"]
    breaks = [r for r in chosen if r["event"] == "graph_break"]
    if trace_rows and not breaks:
        breaks = [r for r in text_rows if r["event"] == "graph_break"]
    if trace_rows:  # the text log's guard failures fill in a TORCH_TRACE that lacks them
        reasons = {(r.get("rank"), r.get("compile_id")): r.get("recompile_reason") for r in text_rows}
        for r in compiles:
            r["recompile_reason"] = r.get("recompile_reason") or reasons.get((r.get("rank"), r.get("compile_id")))
    out = CompileReport(evidence=sorted({r["evidence"] for r in chosen + neuron_rows}), warnings=list(warnings or []),
                        regions=dict(regions or {}), runtime={**compile_runtime.empty(), **(runtime or {})})
    frames: dict[tuple[Any, ...], Frame] = {}
    for r, gen in _generations(compiles + breaks):
        fr = frames.setdefault((r.get("rank"), gen, r.get("frame_id")), Frame(r.get("frame_id"), r.get("rank")))
        if r["event"] == "compile":
            fr.function = fr.function or r.get("function")
            fr.source = fr.source or (r.get("source") if r.get("attempt") == 0 or fr.source is None else None)
            fr.compiles.append({k: r.get(k) for k in ("compile_id", "attempt", "start_ns", "dur_ns", "cache",
                                                      "aot_cache", "status", "fail_type", "fail_reason",
                                                      "recompile_reason")})
        else:
            fr.graph_breaks.append({"reason": r.get("reason"), "source": r.get("source"),
                                    "compile_id": r.get("compile_id")})
    out.frames = list(frames.values())  # in the order of the logs: per rank, per Dynamo session, per frame
    if chosen is kineto:
        out.compile_ns = _union_ns(compiles)
    else:
        out.compile_ns = sum(int(r.get("dur_ns") or 0) for r in compiles)
    out.recompiles = len({(r.get("rank"), r.get("frame_id"), r.get("frame_compile_id")) for r in compiles
                          if (r.get("frame_compile_id") or 0) > 0})
    out.graph_breaks = len(breaks)
    out.cache_hits = sum(r.get("cache") == "hit" for r in compiles)
    out.cache_misses = sum(r.get("cache") == "miss" for r in compiles)
    out.failed = sum(r.get("status") == "failed" for r in compiles)
    out.recompile_limits = [{"rank": r.get("rank"), "function": r.get("function"), "source": r.get("source"),
                             "compile_id": r.get("compile_id"), "reason": r.get("reason")}
                            for r in text_rows if r["event"] == "recompile_limit"]
    named = {(lim["rank"], str(lim["compile_id"]).split("/")[0]) for lim in out.recompile_limits}
    for f in out.frames:  # TORCH_TRACE alone: Dynamo records the attempt past the limit as a failed compile
        for c in f.compiles:
            if is_recompile_limit(c) and (f.rank, str(f.frame_id)) not in named:
                named.add((f.rank, str(f.frame_id)))
                out.recompile_limits.append({"rank": f.rank, "function": f.function, "source": f.source,
                                             "compile_id": c.get("compile_id"),
                                             "reason": str(c.get("fail_reason") or "").splitlines()[0]})
    graphs: dict[str, int] = defaultdict(int)
    for r in compiles:
        if r.get("status") in ("ok", "failed"):
            graphs[str(r.get("rank"))] += 1
    out.per_rank = dict(graphs)
    if neuron_rows:
        out.neuron = _neuron(neuron_rows)
    return out


_LIMIT = re.compile(r"recompile.limit exceeded|cache_size_limit|recompile_limit", re.IGNORECASE)


def is_recompile_limit(c: dict[str, Any]) -> bool:
    """A failed attempt that is Dynamo giving up on a frame past its recompile limit (not a backend error)."""
    return c.get("status") == "failed" and bool(_LIMIT.search(str(c.get("fail_reason") or "")))


def _generations(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
    """Each row with its Dynamo session: torch._dynamo.reset() numbers frames from 0 again, so a first compile
    (F/0, attempt 0) of a frame the session already compiled starts a new session. Rows in log order."""
    order = sorted(rows, key=lambda r: (r.get("rank") is None, r.get("rank") or 0, str(r.get("path")),
                                        r.get("line") or 0, r.get("start_ns") or 0))
    out: list[tuple[dict[str, Any], int]] = []
    gen: dict[Any, int] = defaultdict(int)
    seen: dict[Any, set[Any]] = defaultdict(set)
    for r in order:
        rank, frame = r.get("rank"), r.get("frame_id")
        if r["event"] == "compile" and not r.get("frame_compile_id") and not r.get("attempt") \
                and frame in seen[rank]:
            gen[rank] += 1
            seen[rank] = set()
        seen[rank].add(frame)
        out.append((r, gen[rank]))
    return out


def _union_ns(rows: list[dict[str, Any]]) -> int:
    spans = sorted((int(r["start_ns"]), int(r["start_ns"]) + int(r["dur_ns"] or 0)) for r in rows)
    total, reach = 0, None
    for s, e in spans:
        if reach is None or s > reach:
            total += e - s
            reach = e
        elif e > reach:
            total += e - reach
            reach = e
    return total


def _neuron(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The Neuron counts. A graph the wrapper's lines or the cache already name (same module) and whose own
    compiler log is also given counts once: the log adds its time, version, options and passes."""
    primary = [r for r in rows if r["event"] == "compile" and r["evidence"] != "neuron_cc_log"]
    logs = [r for r in rows if r["event"] == "compile" and r["evidence"] == "neuron_cc_log"]
    named = {r.get("compile_id") for r in primary if r.get("compile_id")}
    graphs = primary + [r for r in logs if r.get("compile_id") is None or r.get("compile_id") not in named]
    parallel = [r for r in rows if r["event"] == "parallel_summary"]
    out: dict[str, Any] = {
        "compiled": sum(r.get("cache") == "miss" or (r["evidence"] == "neuron_cache" and r.get("status") == "ok")
                        for r in graphs),
        "cache_hits": sum(r.get("cache") == "hit" for r in graphs),
        "cached_failures": sum(r.get("cache") == "failed_hit" for r in graphs),
        "failed": sum(r.get("status") == "failed" and r.get("cache") != "failed_hit" for r in graphs),
        "parallel": None,
        "failures": [{"module": r.get("compile_id"), "fail_type": r.get("fail_type"), "path": r.get("path"),
                      "line": r.get("line")} for r in graphs if r.get("status") == "failed"][:20],
        "compile_ns": sum(int(r.get("dur_ns") or 0) for r in logs),
        "compiler": _compiler_logs(logs, [r for r in rows if r["event"] == "compiler_pass"]),
    }
    if parallel:
        last = {r.get("status"): int(r["count"]) for r in parallel}  # the last summary printed wins
        out["parallel"] = {"graphs": last.get(None), "ok": last.get("ok"), "failed": last.get("failed")}
    return out


def _compiler_logs(logs: list[dict[str, Any]], passes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What each neuronx-cc log says: module, time, status and failure, version, options, slowest passes."""
    by_log: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in passes:
        by_log[str(p.get("path"))].append(p)
    out = []
    for r in logs[:COMPILER_LOGS_KEPT]:
        slow = sorted(by_log.get(str(r.get("path")), []), key=lambda p: -int(p.get("dur_ns") or 0))
        out.append({k: r.get(k) for k in ("path", "compile_id", "start_ns", "dur_ns", "status", "fail_type",
                                          "fail_reason", "compiler_version", "flags")}
                   | {"passes": [{"name": p.get("function"), "dur_ns": p.get("dur_ns"), "count": p.get("count")}
                                 for p in slow[:SLOWEST_PASSES]]})
    return out


COMPILER_LOGS_KEPT = 20
SLOWEST_PASSES = 5


def combine(parts: list[CompileReport]) -> CompileReport:
    """The job's report: every rank's frames, counts summed; compile time of the slowest rank (ranks compile
    side by side); graphs compiled per rank kept for the rank-divergence finding."""
    if len(parts) == 1:
        return parts[0]
    out = CompileReport(compile_ns=max(p.compile_ns for p in parts))
    for p in parts:
        out.recompiles += p.recompiles
        out.graph_breaks += p.graph_breaks
        out.cache_hits += p.cache_hits
        out.cache_misses += p.cache_misses
        out.failed += p.failed
        out.frames += p.frames
        out.recompile_limits += p.recompile_limits
        out.per_rank.update(p.per_rank)
        for k, v in p.regions.items():
            cur = out.regions.setdefault(k, {**v, **{n: 0 for n, x in v.items() if isinstance(x, int)}})
            for n, x in v.items():
                if isinstance(x, int):
                    cur[n] = int(cur.get(n) or 0) + x
        _combine_runtime(out.runtime, p.runtime, p.per_rank)
        out.evidence = sorted(set(out.evidence) | set(p.evidence))
        out.warnings += [w for w in p.warnings if w not in out.warnings]
    neuron = [p.neuron for p in parts if p.neuron]
    if neuron:
        out.neuron = {k: sum(n[k] for n in neuron) for k in ("compiled", "cache_hits", "cached_failures", "failed")}
        out.neuron["parallel"] = next((n["parallel"] for n in neuron if n.get("parallel")), None)
        out.neuron["failures"] = [f for n in neuron for f in n.get("failures") or []][:20]
        out.neuron["compile_ns"] = max(int(n.get("compile_ns") or 0) for n in neuron)  # ranks compile side by side
        out.neuron["compiler"] = [c for n in neuron for c in n.get("compiler") or []][:COMPILER_LOGS_KEPT]
    return out


def _combine_runtime(out: dict[str, Any], part: dict[str, Any], per_rank: dict[str, int]) -> None:
    """Add one rank's runtime figures to the job's (lists keep their rank when the part names one)."""
    rank = next((int(k) for k in per_rank if k != "None"), None)
    for key in ("guard_checks", "backward"):
        for n, x in (part.get(key) or {}).items():
            out[key][n] = int(out[key].get(n) or 0) + int(x)
    for key in ("graphs", "versus_eager", "breaks_per_step"):
        out[key] += [{**x, "rank": x.get("rank", rank)} for x in part.get(key) or []]


def text(r: CompileReport) -> list[str]:
    if not (r.frames or r.neuron or r.warnings or r.recompile_limits or r.regions):
        return []  # nothing compiled: the phases line already says compile 0 ns
    lines = [(f"compile {units.duration(r.compile_ns)}: {sum(len(f.compiles) for f in r.frames)} compile attempt(s) "
              f"of {len(r.frames)} frame(s), {r.recompiles} recompile(s), {r.graph_breaks} graph break(s), "
              f"cache {r.cache_hits} hit(s) / {r.cache_misses} miss(es), {r.failed} failed "
              f"(from {', '.join(r.evidence) or 'nothing'})")]
    for f in r.frames:
        who = f"{f.function or 'frame'} ({f.source or '?'})" + (f" rank {f.rank}" if f.rank is not None else "")
        if f.compiles:
            ids = ", ".join((f"{c['compile_id'] or '?'} {c['status'] or ''} {units.duration(c['dur_ns'])}"
                             + (f" cache {c['cache']}" if c.get("cache") else "")) for c in f.compiles[:6])
            lines.append(f"  frame {f.frame_id}: {who}: {ids}" + (" ..." if len(f.compiles) > 6 else ""))
        for c in f.compiles:
            if c.get("recompile_reason"):
                lines.append(f"    {c['compile_id']} recompiled because {c['recompile_reason']}")
            if c.get("status") == "failed":
                lines.append(f"    {c['compile_id']} failed: {c.get('fail_type') or ''} {c.get('fail_reason') or ''}"
                             .rstrip()[:300])
        for g in f.graph_breaks:
            lines.append(f"  graph break at {g['source'] or '?'}: {g['reason'] or '?'}")
    lines += runtime_text(r)
    for lim in r.recompile_limits:
        lines.append(f"  {lim['function']} ({lim['source']}) hit {lim['reason']}: it runs eagerly from then on")
    if r.neuron:
        n = r.neuron
        lines.append(f"Neuron: {n['compiled']} graph(s) compiled, {n['cache_hits']} loaded from the NEFF cache, "
                     f"{n['cached_failures']} cached failure(s), {n['failed']} failed"
                     + (f"; {units.duration(n['compile_ns'])} in the compiler logs" if n.get("compile_ns") else ""))
        if n.get("parallel"):
            p = n["parallel"]
            lines.append(f"  neuron_parallel_compile: {p['graphs']} graph(s), {p['ok']} compiled, {p['failed']} failed")
        for c in n.get("compiler") or []:
            lines.append(_compiler_line(c))
    lines += r.warnings
    return lines


def _compiler_line(c: dict[str, Any]) -> str:
    """One neuronx-cc log: ``  neuronx-cc MODULE_x: 2m 14s ok (2.6.0.19), flags ...; slowest passes ...``."""
    head = (f"  neuronx-cc {c.get('compile_id') or '?'}: {units.duration(c.get('dur_ns'))} {c.get('status') or ''}"
            + (f" (neuronx-cc {c['compiler_version']})" if c.get("compiler_version") else ""))
    if c.get("status") == "failed":
        head += f": {c.get('fail_type') or ''} {c.get('fail_reason') or ''}".rstrip()[:300]
    if c.get("flags"):
        head += f"; options {str(c['flags'])[:200]}"
    if c.get("passes"):
        head += "; slowest passes " + ", ".join(f"{p['name']} {units.duration(p['dur_ns'])}" for p in c["passes"])
    return head + f" [{c.get('path')}]"


def runtime_text(r: CompileReport) -> list[str]:
    """The compiled code running: regions with their guard checks, graphs, compiled against eager calls, graph
    breaks per step."""
    lines = []
    if r.regions:
        lines.append("compiled code run: " + ", ".join(
            f"{k} x{v['calls']} {units.duration(v['run_ns'])}"
            + (f" ({v['source']})" if v.get("source") else "") for k, v in sorted(r.regions.items())[:8]))
    g = r.runtime.get("guard_checks") or {}
    if g.get("calls"):
        lines.append(f"guard checks (TorchDynamo Cache Lookup, host overhead of the compiled code, not compile): "
                     f"{g['calls']} call(s), {units.duration(g['ns'])}, {units.duration(g['ns'] // g['calls'])} "
                     "per call")
    for gr in (r.runtime.get("graphs") or [])[:6]:
        lines.append(f"  graph {str(gr['hash'])[:12]} (region {gr['region'] or '?'}) ran x{gr['calls']} "
                     f"{units.duration(gr['run_ns'])}")
    for v in r.runtime.get("versus_eager") or []:
        if v.get("eager_median_ns") is None:
            continue
        lines.append(f"  {v['function']}: a compiled call {units.duration(v['compiled_median_ns'])} (median of "
                     f"{v['compiled_calls']}; guards {units.duration(v['guard_median_ns'])}, compiled code "
                     f"{units.duration(v['region_median_ns'])}) against eager {units.duration(v['eager_median_ns'])}"
                     f" (median of {v['eager_calls']})")
    per_step = r.runtime.get("breaks_per_step") or []
    if per_step:
        counts = sorted({int(s["breaks"]) for s in per_step})
        lines.append(f"graph breaks per step: {'/'.join(map(str, counts))} in {len(per_step)} step(s): " + "; ".join(
            f"{a['source'] or '?'}: {a['reason'] or '?'}" for a in per_step[0]["at"][:4]))
    return lines


def _compute(ctx: Context) -> CompileReport | compile_slices.CompileSlice:
    """Always a value (a trace that compiles nothing reports zeros), so ``--json`` always has ``compile``. With
    ``Options.owned``: the time slice's part, for ``merge`` (analysis/compile_slices.py)."""
    if ctx.options.owned is not None:
        return compile_slices.slice_value(ctx)
    ph = ctx.sections.get(phases.SECTION.key)
    return rank_report(ctx.trace.system_events, ctx.options.compiles, ctx.options.compile_warnings,
                       ph.steps if ph else None)


def rank_report(host: pa.Table, logs: pa.Table | None, warnings: tuple[str, ...],
                steps: list[dict[str, Any]] | None) -> CompileReport:
    """One rank's report from its host events, its compile-log rows and warnings, and its steps."""
    rows = [] if logs is None else [dict(r) for r in logs.to_pylist()]
    rep = report(rows, host_rows(host), list(warnings)) or CompileReport()
    breaks: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in rep.frames:
        for b in f.graph_breaks:
            breaks[compile_runtime.compile_key(b.get("compile_id"))].append(b)
    rep.regions, rep.runtime = compile_runtime.runtime(host, steps, breaks)
    return rep


def merge(parts: list[compile_slices.CompileSlice | None]) -> CompileReport:
    """One rank's report from its time slices' parts, in time order (analysis/compile_slices.py)."""
    return compile_slices.merge_slices(parts, rank_report, CompileReport)


SECTION = Section("compile", "compile", _compute, to_json=lambda v: v.as_dict(), from_json=CompileReport.from_dict,
                  text=text, combine=combine, merge=merge)

__all__ = ["SECTION", "CompileReport", "Frame", "check_same_run", "combine", "kineto_rows", "report"]
