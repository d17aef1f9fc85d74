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

from neurontrace.analysis import names
from neurontrace.analysis.contract import Context, Section
from neurontrace.analysis.executions import device_executions
from neurontrace.analysis.intervals import union
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
    steps: list[dict[str, int]] = field(default_factory=list)  # {"step", "start_ns", "dur_ns"}

    @property
    def execution_ns(self) -> int:
        return max(0, self.trace_end_ns - self.trace_start_ns - self.compile_ns - self.load_ns)

    @property
    def first_step_ns(self) -> int | None:
        return self.steps[0]["dur_ns"] if self.steps else None

    @property
    def steady_median_ns(self) -> int | None:
        rest = [s["dur_ns"] for s in self.steps[1:]]
        return int(np.median(rest)) if rest else None

    @property
    def steady_p90_ns(self) -> int | None:
        rest = [s["dur_ns"] for s in self.steps[1:]]
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
        }

    @classmethod
    def from_dict(cls, p: dict[str, Any]) -> Phases:
        return cls(int(p["trace_start_ns"]), int(p["trace_end_ns"]), int(p["compile_ns"]), int(p["load_ns"]),
                   [dict(s) for s in p.get("steps") or []])


def phases(trace: Trace) -> Phases:
    host, dev = trace.system_events, trace.device_events
    spans = [t for t in (host, dev) if t.num_rows]
    start = min((int(pc.min(t["ts_ns"]).as_py()) for t in spans), default=0)
    end = max((int(pc.max(pc.add(t["ts_ns"], t["dur_ns"])).as_py()) for t in spans), default=0)
    return Phases(start, end, _time_of(host, "compile", names.COMPILE), _time_of(host, "load", names.LOAD),
                  _steps(host, dev))


def _time_of(host: pa.Table, category: str, pattern: re.Pattern[str]) -> int:
    t = host.filter(pa.array(isin(host["category"], [category]) | matches(host["name"], pattern)))
    s = t["ts_ns"].to_numpy()
    us, ue = union(s, s + t["dur_ns"].to_numpy())
    return int((ue - us).sum())


def _steps(host: pa.Table, dev: pa.Table) -> list[dict[str, int]]:
    steps = select(host, "category", "step")
    if steps.num_rows == 0:
        ex = device_executions(dev)  # each execution once, numbered in time order
        steps = ex.append_column("name", pa.nulls(ex.num_rows, pa.string()))
    rows = []
    for i, (name, ts, dur) in enumerate(zip(steps["name"].cast(pa.string()).to_pylist(), steps["ts_ns"].to_pylist(),
                                             steps["dur_ns"].to_pylist(), strict=True)):
        m = _STEP_NUMBER.search(name or "")
        rows.append({"step": int(m.group(1)) if m else i, "start_ns": int(ts), "dur_ns": int(dur)})
    return _merge_steps(rows)


def _merge_steps(rows: list[dict[str, int]]) -> list[dict[str, int]]:
    # One row per step (several ranks or processes may mark the same step): earliest start, longest.
    merged: dict[int, dict[str, int]] = {}
    for r in sorted(rows, key=lambda r: (r["start_ns"], r["step"])):
        cur = merged.setdefault(r["step"], dict(r))
        cur["dur_ns"] = max(cur["start_ns"] + cur["dur_ns"], r["start_ns"] + r["dur_ns"]) - cur["start_ns"]
    return sorted(merged.values(), key=lambda r: r["start_ns"])


def _text(p: Phases) -> list[str]:
    if p.trace_end_ns <= p.trace_start_ns:  # no events (a Neuron summary): no phases to speak of
        return []
    return [(f"compile {duration(p.compile_ns)}, load {duration(p.load_ns)}, execution {duration(p.execution_ns)}; first step "
            f"{duration(p.first_step_ns)}, steady median {duration(p.steady_median_ns)} (p90 {duration(p.steady_p90_ns)}), "
            f"time to first step {duration(p.time_to_first_step_ns)}")]


def _compute(ctx: Context) -> Phases:
    return phases(ctx.trace)


def combine(parts: list[Phases]) -> Phases:
    """The job's phases from its ranks': the whole span; compile and load of the slowest rank (ranks
    compile side by side, the job waits for the last); each step from its earliest start to its
    latest end on any rank."""
    if len(parts) == 1:
        return parts[0]
    return Phases(min(p.trace_start_ns for p in parts), max(p.trace_end_ns for p in parts),
                  max(p.compile_ns for p in parts), max(p.load_ns for p in parts),
                  _merge_steps([dict(s) for p in parts for s in p.steps]))


SECTION = Section("phases", "phases", _compute, to_json=lambda v: v.as_dict(), from_json=Phases.from_dict, text=_text,
                  combine=combine)
