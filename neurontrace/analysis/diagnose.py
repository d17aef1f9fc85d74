"""`diagnose`: attribution, fallback, phases and findings for one trace, as one versioned result.

The JSON form (``Diagnosis.as_dict``) is the documented ``neurontrace.diagnose/1`` schema
(docs/diagnose.md). Times are integers in nanoseconds on the trace's own clock.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis import findings as rules
from neurontrace.analysis._columns import select
from neurontrace.analysis.attribution import TOP_STALLS, DeviceAttribution, attribute, frame_sources
from neurontrace.analysis.fallback import FallbackOp, find_fallback
from neurontrace.analysis.phases import Phases, phases
from neurontrace.trace import Trace

SCHEMA = "neurontrace.diagnose/1"


@dataclass
class Diagnosis:
    inputs: list[dict[str, Any]]
    devices: list[DeviceAttribution]
    fallback_ops: list[FallbackOp]
    phases: Phases
    findings: list[rules.Finding]
    cross_rank: dict[str, Any] = field(default_factory=dict)
    synthetic: bool = False

    @property
    def worst_severity(self) -> str | None:
        return rules.worst(self.findings)

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "synthetic": self.synthetic,
            "inputs": self.inputs,
            "devices": [
                {"device": d.device, "rank": d.rank, "window": {"start_ns": d.window[0], "end_ns": d.window[1]},
                 "window_source": d.window_source, "causes_ns": d.causes_ns, "detail_ns": d.detail_ns,
                 "top_stalls": [s.as_dict() for s in d.top_stalls],
                 **({"engine_waits": d.engine_waits} if d.engine_waits is not None else {})}
                for d in self.devices
            ],
            "fallback_ops": [op.as_dict() for op in self.fallback_ops],
            "phases": self.phases.as_dict(),
            "findings": [f.as_dict() for f in self.findings],
            "cross_rank": self.cross_rank,
        }


def diagnose(
    trace: Trace,
    *,
    inputs: list[dict[str, Any]] | None = None,
    window: tuple[int, int] | None = None,
    fallback_ops: Iterable[str] = (),
    top: int = TOP_STALLS,
) -> Diagnosis:
    """Everything ``neurontrace diagnose`` reports, computed from the Trace tables alone."""
    frames = frame_sources(trace)
    named = set(fallback_ops) | set(_recorded_fallback_ops(trace))
    fallback = find_fallback(trace, named, frames)
    fallback_ids = [i for op in fallback for i in op.event_ids]
    devices = attribute(trace, window=window, fallback_event_ids=np.asarray(fallback_ids, dtype=np.int64), top=top)
    ph = phases(trace)
    found: list[rules.Finding] = []
    for d in devices:
        found += rules.device_findings(d)
    found += rules.fallback_findings(fallback)
    found += rules.phase_findings(ph)
    found += rules.collective_outliers(_collective_groups(trace))
    for d in devices:
        if d.engine_waits is not None:
            found += rules.neuron_findings(d.engine_waits["summary"], d.device, d.engine_waits["throttled_ns"],
                                           d.window_ns)
    found.sort(key=lambda f: -rules.SEVERITIES.index(f.severity))
    return Diagnosis(
        inputs=inputs or [{"path": a.source, "format": a.format} for a in trace.accounting],
        devices=devices, fallback_ops=fallback, phases=ph, findings=found,
        cross_rank=_cross_rank(trace), synthetic=bool(trace.meta("synthetic", False)),
    )


def _recorded_fallback_ops(trace: Trace) -> list[str]:
    """Fallback ops a neurontrace capture recorded in run.json (metadata key ``run``)."""
    out = []
    for run in trace.meta_all("run"):
        if isinstance(run, dict):
            out += [str(op) for op in run.get("fallback_ops") or []]
    return out


def _collective_groups(trace: Trace) -> dict[str, list[int]]:
    dev = trace.device_events
    coll = select(dev, "category", "collective")
    groups: dict[str, list[int]] = defaultdict(list)
    for name, dur, args in zip(coll["name"].cast(pa.string()).to_pylist(), coll["dur_ns"].to_pylist(),
                               coll["args"].to_pylist(), strict=True):
        size = json.loads(args).get("In msg nelems") if args and "In msg nelems" in args else None
        groups[f"{name.split('(')[0]}" + (f" ({size} elems)" if size is not None else "")].append(int(dur))
    return dict(groups)


def _cross_rank(trace: Trace) -> dict[str, Any]:
    """Skew of steps and collective time across ranks (only when the trace holds several)."""
    host = trace.system_events
    ranks = sorted(r for r in pc.unique(host["rank"]).to_pylist() if r is not None)
    if len(ranks) < 2:
        return {}
    steps = select(host, "category", "step")
    by_step: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)
    for name, rank, ts, dur in zip(steps["name"].cast(pa.string()).to_pylist(), steps["rank"].to_pylist(),
                                   steps["ts_ns"].to_pylist(), steps["dur_ns"].to_pylist(), strict=True):
        if rank is not None:
            by_step[name][rank] = (ts, dur)
    step_skew = []
    for name, per_rank in sorted(by_step.items()):
        if len(per_rank) < 2:
            continue
        starts = {r: v[0] for r, v in per_rank.items()}
        durs = {r: v[1] for r, v in per_rank.items()}
        step_skew.append({"step": name, "start_skew_ns": max(starts.values()) - min(starts.values()),
                          "max_dur_ns": max(durs.values()), "min_dur_ns": min(durs.values()),
                          "slowest_rank": max(durs, key=durs.__getitem__)})
    dev = trace.device_events
    coll = select(dev, "category", "collective")
    per_rank = coll.group_by("rank").aggregate([("dur_ns", "sum")]).to_pylist()
    return {"ranks": ranks, "step_skew": step_skew,
            "collective_ns_by_rank": {str(r["rank"]): int(r["dur_ns_sum"]) for r in per_rank}}
