"""Phases: compile and load time versus execution, and time to first step versus steady state.

Compile and load events are recognized by category (``compile``, ``load``) or by the name tables
in :mod:`neurontrace.analysis.names` (torch.compile/Dynamo/Inductor, Neuron compiler, NEFF and
module loading). Steps are ``ProfilerStep#N`` markers, else Neuron device executions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis import names, phase_split
from neurontrace.analysis.compile_spans import compile_spans
from neurontrace.analysis.contract import Context, Section
from neurontrace.analysis.executions import device_executions
from neurontrace.analysis.intervals import clip, union
from neurontrace.analysis.step_stats import FIRST_STEP, STEADY_MEDIAN
from neurontrace.columns import isin, matches, select
from neurontrace.trace import Trace
from neurontrace.units import duration

_STEP_NUMBER = re.compile(r"#(\d+)")


@dataclass
class Phases:
    trace_start_ns: int
    trace_end_ns: int
    compile_ns: int
    load_ns: int
    steps: list[dict[str, int]] = field(default_factory=list)  # {"step", "start_ns", "dur_ns", "compile_ns"}
    # time to first step split: {"compile_ns", "cache_load_ns", "execution_ns"} (empty without steps)
    first_step_split: dict[str, int] = field(default_factory=dict)
    split: phase_split.Split | None = None  # forward / backward / optimizer / other per step (phase_split.py)
    pieces: SlicePieces | None = field(default=None, repr=False, compare=False)  # a time slice's (merge)

    @property
    def execution_ns(self) -> int:
        return max(0, self.trace_end_ns - self.trace_start_ns - self.compile_ns - self.load_ns)

    @property
    def first_step_ns(self) -> int | None:
        return self.steps[0]["dur_ns"] if self.steps else None

    @property
    def steady_steps(self) -> list[dict[str, int]]:
        """The steps after the first that compile nothing: the steady state."""
        return [s for s in self.steps[1:] if not s.get("compile_ns")]

    @property
    def compile_steps(self) -> list[dict[str, int]]:
        return [s for s in self.steps if s.get("compile_ns")]

    @property
    def steady_median_ns(self) -> int | None:
        rest = [s["dur_ns"] for s in self.steady_steps]
        return int(np.median(rest)) if rest else None

    @property
    def steady_p90_ns(self) -> int | None:
        rest = [s["dur_ns"] for s in self.steady_steps]
        return int(np.percentile(rest, 90)) if rest else None

    @property
    def time_to_first_step_ns(self) -> int | None:
        if not self.steps:
            return None
        first = self.steps[0]
        return first["start_ns"] + first["dur_ns"] - self.trace_start_ns

    def as_dict(self) -> dict[str, Any]:
        return {
            "trace_start_ns": self.trace_start_ns, "trace_end_ns": self.trace_end_ns,
            "compile_ns": self.compile_ns, "load_ns": self.load_ns, "execution_ns": self.execution_ns,
            "steps": self.steps, "first_step_ns": self.first_step_ns, "steady_median_ns": self.steady_median_ns,
            "steady_p90_ns": self.steady_p90_ns, "time_to_first_step_ns": self.time_to_first_step_ns,
            "compile_steps": len(self.compile_steps), "first_step_split": self.first_step_split,
            "split": None if self.split is None else self.split.as_dict(),
        }

    @classmethod
    def from_dict(cls, p: dict[str, Any]) -> Phases:
        return cls(int(p["trace_start_ns"]), int(p["trace_end_ns"]), int(p["compile_ns"]), int(p["load_ns"]),
                   [dict(s) for s in p.get("steps") or []], dict(p.get("first_step_split") or {}),
                   phase_split.Split.from_dict(p["split"]) if p.get("split") else None)


def phases(trace: Trace) -> Phases:
    host, dev = trace.system_events, trace.device_events
    spans = [t for t in (host, dev) if t.num_rows]
    start = min((int(pc.min(t["ts_ns"]).as_py()) for t in spans), default=0)
    end = max((int(pc.max(pc.add(t["ts_ns"], t["dur_ns"])).as_py()) for t in spans), default=0)
    us, ue = compile_spans(host)
    steps = _steps(host, dev)
    for st in steps:
        st["compile_ns"] = overlap((us, ue), st["start_ns"], st["start_ns"] + st["dur_ns"])
    out = Phases(start, end, int((ue - us).sum()), _time_of(host, "load", names.LOAD), steps)
    if steps:
        first_end = steps[0]["start_ns"] + steps[0]["dur_ns"]
        loads = _spans(host, "load", names.CACHE_LOAD)
        compile_part = overlap((us, ue), start, first_end)
        load_part = overlap(loads, start, first_end)
        # cache loads inside compile ranges (Inductor loading a cached graph) count as cache load, not compile
        nested = overlap_between((us, ue), loads, start, first_end)
        out.first_step_split = {"compile_ns": compile_part - nested, "cache_load_ns": load_part,
                                "execution_ns": max(0, first_end - start - compile_part - load_part + nested)}
    return out


def _spans(host: pa.Table, category: str, pattern: re.Pattern[str]) -> tuple[np.ndarray, np.ndarray]:
    t = host.filter(pa.array(isin(host["category"], [category]) | matches(host["name"], pattern)))
    s = t["ts_ns"].to_numpy()
    return union(s, s + t["dur_ns"].to_numpy())


def _time_of(host: pa.Table, category: str, pattern: re.Pattern[str]) -> int:
    us, ue = _spans(host, category, pattern)
    return int((ue - us).sum())


def overlap(spans: tuple[np.ndarray, np.ndarray], start: int, end: int) -> int:
    """How much of [start, end) the disjoint ``spans`` cover."""
    us, ue = spans
    return int(np.clip(np.minimum(ue, end) - np.maximum(us, start), 0, None).sum()) if len(us) else 0


def overlap_between(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], start: int, end: int) -> int:
    """How much of [start, end) both sets of disjoint spans cover."""
    return sum(overlap(a, max(start, int(s)), min(end, int(e))) for s, e in zip(*b, strict=True) if e > start
               and s < end)


def _step_rows(host: pa.Table, dev: pa.Table) -> list[tuple[str | None, int, int]]:
    steps = select(host, "category", "step")
    if steps.num_rows == 0:
        ex = device_executions(dev)  # each execution once, numbered in time order
        steps = ex.append_column("name", pa.nulls(ex.num_rows, pa.string()))
    return list(zip(steps["name"].cast(pa.string()).to_pylist(), steps["ts_ns"].to_pylist(),
                    steps["dur_ns"].to_pylist(), strict=True))


def _steps(host: pa.Table, dev: pa.Table) -> list[dict[str, int]]:
    return _numbered(_step_rows(host, dev))


def _numbered(steps: list[tuple[str | None, int, int]]) -> list[dict[str, int]]:
    rows = []
    for i, (name, ts, dur) in enumerate(steps):
        m = _STEP_NUMBER.search(name or "")
        rows.append({"step": int(m.group(1)) if m else i, "start_ns": int(ts), "dur_ns": int(dur)})
    return _merge_steps(rows)


def first_step_end(steps: list[tuple[str | None, int, int]]) -> int | None:
    """The end of the first step of (name, start, duration) step rows, as :func:`phases` numbers them."""
    rows = _numbered(steps)
    return rows[0]["start_ns"] + rows[0]["dur_ns"] if rows else None


def _merge_steps(rows: list[dict[str, int]]) -> list[dict[str, int]]:
    # One row per step (several ranks or processes may mark the same step): earliest start, longest.
    merged: dict[int, dict[str, int]] = {}
    for r in sorted(rows, key=lambda r: (r["start_ns"], r["step"])):
        cur = merged.setdefault(r["step"], dict(r))
        cur["dur_ns"] = max(cur["start_ns"] + cur["dur_ns"], r["start_ns"] + r["dur_ns"]) - cur["start_ns"]
        cur["compile_ns"] = max(cur.get("compile_ns", 0), r.get("compile_ns", 0))
    return sorted(merged.values(), key=lambda r: r["start_ns"])


def _text(p: Phases) -> list[str]:
    if p.trace_end_ns <= p.trace_start_ns:  # no events (a Neuron summary): no phases to speak of
        return []
    lines = [(f"compile {duration(p.compile_ns)}, load {duration(p.load_ns)}, execution {duration(p.execution_ns)}; "
              f"{FIRST_STEP.label} {duration(p.first_step_ns)}, {STEADY_MEDIAN.label} {duration(p.steady_median_ns)} "
              f"(p90 {duration(p.steady_p90_ns)}), time to first step {duration(p.time_to_first_step_ns)}")]
    if p.first_step_split:
        sp = p.first_step_split
        lines.append(f"time to first step: compile {duration(sp['compile_ns'])}, cache load "
                     f"{duration(sp['cache_load_ns'])}, execution {duration(sp['execution_ns'])}")
    if p.compile_steps:
        lines.append(f"{len(p.compile_steps)} of {len(p.steps)} steps compile (kept out of the {STEADY_MEDIAN.label}): "
                     + ", ".join(f"step {s['step']}" for s in p.compile_steps[:8])
                     + (" ..." if len(p.compile_steps) > 8 else ""))
    if p.split is not None and p.split.text():
        lines.append(p.split.text())
    return lines


def _compute(ctx: Context) -> Phases:
    owned = ctx.options.owned
    out = phases(ctx.trace)
    plan = ctx.options.plan
    has_steps = plan is not None and plan.first_step_end is not None
    out.split = phase_split.split(ctx.trace, owned, has_steps)
    if owned is not None:
        out.pieces = _pieces(ctx.trace, owned)
    return out


@dataclass
class SlicePieces:
    """A time slice's share of its rank's phases: the spans clipped to the slice, the step rows starting in it."""

    events: bool  # the slice holds events (its trace_start/end mean something)
    compile: tuple[np.ndarray, np.ndarray]
    load: tuple[np.ndarray, np.ndarray]
    cache_load: tuple[np.ndarray, np.ndarray]
    steps: list[tuple[str | None, int, int]]  # (name, start, duration) of the step rows starting in it
    executions: list[tuple[str | None, int, int]]  # the same of its executions, for a rank without steps


def _pieces(trace: Trace, owned: tuple[int, int]) -> SlicePieces:
    host, dev = trace.system_events, trace.device_events

    def cut(spans: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        return clip(*spans, owned[0], owned[1])

    def mine(rows: list[tuple[str | None, int, int]]) -> list[tuple[str | None, int, int]]:
        return [r for r in rows if owned[0] <= r[1] < owned[1]]

    steps = mine(_step_rows(host, dev.slice(0, 0)))
    execs = [] if steps or select(host, "category", "step").num_rows else mine(_step_rows(host, dev))
    return SlicePieces(bool(host.num_rows or dev.num_rows), cut(compile_spans(host)),
                       cut(_spans(host, "load", names.LOAD)), cut(_spans(host, "load", names.CACHE_LOAD)), steps,
                       execs)


def merge(parts: list[Phases]) -> Phases:
    """One rank's phases from its time slices' (in time order), equal to :func:`phases` on the whole rank."""
    pieces = [p.pieces for p in parts if p.pieces is not None]
    held = [p for p in parts if p.pieces is not None and p.pieces.events] or parts

    def joined(get: Any) -> tuple[np.ndarray, np.ndarray]:
        got = [get(x) for x in pieces]
        return union(np.concatenate([g[0] for g in got] + [np.zeros(0, np.int64)]),
                     np.concatenate([g[1] for g in got] + [np.zeros(0, np.int64)]))

    us, ue = joined(lambda x: x.compile)
    loads, cache = joined(lambda x: x.load), joined(lambda x: x.cache_load)
    rows = [r for x in pieces for r in x.steps] or [r for x in pieces for r in x.executions]
    steps = _numbered(rows)
    for st in steps:
        st["compile_ns"] = overlap((us, ue), st["start_ns"], st["start_ns"] + st["dur_ns"])
    start, end = min(p.trace_start_ns for p in held), max(p.trace_end_ns for p in held)
    out = Phases(start, end, int((ue - us).sum()), int((loads[1] - loads[0]).sum()), steps)
    if steps:
        first_end = steps[0]["start_ns"] + steps[0]["dur_ns"]
        compile_part, load_part = overlap((us, ue), start, first_end), overlap(cache, start, first_end)
        nested = overlap_between((us, ue), cache, start, first_end)
        out.first_step_split = {"compile_ns": compile_part - nested, "cache_load_ns": load_part,
                                "execution_ns": max(0, first_end - start - compile_part - load_part + nested)}
    splits = [p.split for p in parts if p.split is not None]
    out.split = phase_split.merge(splits) if splits else None
    return out


def combine(parts: list[Phases]) -> Phases:
    """The job's phases from its ranks': the whole span; compile and load of the slowest rank (ranks
    compile side by side, the job waits for the last); each step from its earliest start to its
    latest end on any rank."""
    if len(parts) == 1:
        return parts[0]
    slowest = max(parts, key=lambda p: p.time_to_first_step_ns or 0)
    splits = [p.split for p in parts if p.split is not None]
    return Phases(min(p.trace_start_ns for p in parts), max(p.trace_end_ns for p in parts),
                  max(p.compile_ns for p in parts), max(p.load_ns for p in parts),
                  _merge_steps([dict(s) for p in parts for s in p.steps]), dict(slowest.first_step_split),
                  phase_split.combine(splits) if splits else None)


SECTION = Section("phases", "phases", _compute, to_json=lambda v: v.as_dict(), from_json=Phases.from_dict, text=_text,
                  combine=combine, merge=merge)
