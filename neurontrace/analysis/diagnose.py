"""`diagnose`: the core attribution plus every registered analysis, for one trace, as one versioned result.

The core is the per-device attribution and the host-fallback ops it charges; sections and finding
families plug in through the contract in :mod:`neurontrace.analysis.contract`, listed in
:mod:`neurontrace.analysis.registry`. The JSON form (``Diagnosis.as_dict``) is the documented
``neurontrace.diagnose/1`` schema (docs/diagnose.md). Times are integers in nanoseconds on the
trace's own clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis import cross_rank, malformed, phases, registry
from neurontrace.analysis.attribution import DeviceAttribution, attribute, default_origin
from neurontrace.analysis.compile import check_same_run
from neurontrace.analysis.contract import SEVERITIES, Context, Finding, Options
from neurontrace.analysis.fallback import FallbackOp, find_fallback, recorded_ops
from neurontrace.analysis.findings import worst
from neurontrace.analysis.headline import headline
from neurontrace.analysis.malformed import sanitize
from neurontrace.analysis.phases import Phases
from neurontrace.analysis.runs_check import check_one_run
from neurontrace.analysis.stalls import TOP_STALLS, Stall, frame_sources
from neurontrace.analysis.timings import Timings, stage
from neurontrace.trace import Trace

SCHEMA = "neurontrace.diagnose/1"


@dataclass
class Diagnosis:
    inputs: list[dict[str, Any]]
    devices: list[DeviceAttribution]
    fallback_ops: list[FallbackOp]
    findings: list[Finding]
    sections: dict[str, Any] = field(default_factory=dict)  # registered sections (analysis/registry.py), by key
    synthetic: bool = False
    origin_ns: int | None = None  # time 0 of the report: attribution.default_origin (trace clock)

    @property
    def phases(self) -> Phases:
        value: Phases = self.sections[phases.SECTION.key]
        return value

    @property
    def cross_rank(self) -> dict[str, Any]:
        value = self.sections.get(cross_rank.SECTION.key)
        return {} if value is None else dict(value.as_dict())

    @property
    def headline(self) -> str:
        """The verdict in one line (analysis/headline.py): first in the report, ``headline`` in the JSON."""
        return headline(self.devices, self.findings)

    @property
    def worst_severity(self) -> str | None:
        return worst(self.findings)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": SCHEMA,
            "headline": self.headline,
            "synthetic": self.synthetic,
            "origin_ns": self.origin_ns,
            "inputs": self.inputs,
            "devices": [_device_dict(d) for d in self.devices],
            "fallback_ops": [op.as_dict() for op in self.fallback_ops],
        }
        for s in registry.SECTIONS:
            if s.key in self.sections:
                out[s.key] = s.to_json(self.sections[s.key])
        out["findings"] = [f.as_dict() for f in self.findings]
        return out

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Diagnosis:
        """The inverse of ``as_dict`` (a stored run shown again). Sections absent from ``doc`` stay absent."""
        devices = []
        for d in doc["devices"]:
            dev = DeviceAttribution(
                d["device"], d.get("rank"), (int(d["window"]["start_ns"]), int(d["window"]["end_ns"])),
                d["window_source"], dict(d["causes_ns"]), dict(d["detail_ns"]),
                [Stall(s["cause"], s["detail"], s["start_ns"], s["dur_ns"], list(s["evidence"]), s.get("source"))
                 for s in d.get("top_stalls") or []],
                window_rule=str(d.get("window_rule") or ""), window_steps=int(d.get("window_steps") or 0),
                device_lag_ns=(int(lag["start"]), int(lag["end"])) if (lag := d.get("device_lag_ns")) else None)
            dev.sections = {s.key: s.from_json(d[s.key]) for s in registry.DEVICE_SECTIONS if d.get(s.key) is not None}
            devices.append(dev)
        fallback = [FallbackOp.from_dict(op) for op in doc.get("fallback_ops") or []]
        sections = {s.key: s.from_json(doc[s.key]) for s in registry.SECTIONS if doc.get(s.key) is not None}
        return cls(inputs=list(doc.get("inputs") or []), devices=devices, fallback_ops=fallback,
                   findings=[Finding.from_dict(f) for f in doc.get("findings") or []], sections=sections,
                   synthetic=bool(doc.get("synthetic")),
                   origin_ns=None if doc.get("origin_ns") is None else int(doc["origin_ns"]))


def _device_dict(d: DeviceAttribution) -> dict[str, Any]:
    out = {"device": d.device, "rank": d.rank, "window": {"start_ns": d.window[0], "end_ns": d.window[1]},
           "window_source": d.window_source, "window_rule": d.window_rule, "window_steps": d.window_steps,
           "device_lag_ns": None if d.device_lag_ns is None else
           {"start": d.device_lag_ns[0], "end": d.device_lag_ns[1]},
           "causes_ns": d.causes_ns, "detail_ns": d.detail_ns,
           "top_stalls": [s.as_dict() for s in d.top_stalls]}
    for s in registry.DEVICE_SECTIONS:
        if d.sections.get(s.key) is not None:
            out[s.key] = s.to_json(d.sections[s.key])
    return out


def diagnose(
    trace: Trace,
    *,
    inputs: list[dict[str, Any]] | None = None,
    window: tuple[int, int] | None = None,
    fallback_ops: Iterable[str] = (),
    top: int = TOP_STALLS,
    origin_ns: int | None = None,
    compiles: pa.Table | None = None,
    compile_warnings: Sequence[str] = (),
    timings: Timings | None = None,
) -> Diagnosis:
    """Everything ``neurontrace diagnose`` reports, computed from the Trace tables alone (and the compile-log
    rows in ``compiles``, schema.COMPILES, when given: refused when they are of another run).

    A trace holding several ranks is analysed rank by rank (:func:`diagnose_rank`) and the ranks are
    combined once (:func:`combine`), exactly as ``neurontrace.distributed`` does on a cluster, so both
    give the same document. ``timings``, when given, is filled with the seconds each stage and each
    registered section took (analysis/timings.py).
    """
    check_one_run(trace)  # unrelated runs are refused, never stitched (analysis/runs_check.py)
    if compiles is not None:
        check_same_run(trace, compiles)
    if window is not None and origin_ns is None:
        origin_ns = default_origin(trace)
    options = Options(window, tuple(sorted(set(fallback_ops))), top, origin_ns,
                      compile_warnings=tuple(compile_warnings))
    ranks = trace.split_ranks()
    parts = [diagnose_rank(t, replace(options, compiles=compiles_of_rank(compiles, t, len(ranks))), timings=timings)
             for t in ranks]
    return combine(parts, options, inputs=inputs, timings=timings)


def compiles_of_rank(compiles: pa.Table | None, trace: Trace, n_ranks: int) -> pa.Table | None:
    """The compile rows of one rank's trace (all of them for a single rank; rank-less rows go with rank 0)."""
    if compiles is None or n_ranks == 1:
        return compiles
    ranks = {r for r in trace.system_events["rank"].to_pylist() if r is not None}
    rank = min(ranks, default=None)
    col = compiles["rank"].to_pylist()
    keep_rows = [(r == rank) or (r is None and rank in (0, None)) for r in col]
    return compiles.filter(pa.array(keep_rows, pa.bool_()))


@dataclass
class RankResult:
    """One rank's compact result (what a distributed map task returns): no events, only results."""

    rank: int | None
    inputs: list[dict[str, Any]]
    devices: list[DeviceAttribution]
    fallback_ops: list[FallbackOp]
    sections: dict[str, Any]  # section key -> this rank's value (combined by Section.combine)
    synthetic: bool = False
    origin_ns: int | None = None  # the rank's default_origin


def diagnose_rank(trace: Trace, options: Options | None = None, *, timings: Timings | None = None) -> RankResult:
    """The map step: attribution, fallback and every section's per-rank value for one rank's trace."""
    options = options or Options()
    with stage(timings, "sanitize"):
        # malformed events: one rule each, counted (analysis/malformed.py); on a slice, counted where they start
        trace, checks = sanitize(trace, options.owned, options.plan)
    with stage(timings, "frames"):
        frames = frame_sources(trace)  # once per rank: the fallback ops' and the stalls' sources
    with stage(timings, "fallback"):
        recorded = recorded_ops(trace)  # run.json's fallback and executed ops, once per rank
        named = set(options.fallback_ops) | set(recorded[0])
        fallback = find_fallback(trace, options.fallback_ops, frames, recorded,  # adds run.json's fallback ops
                                 owned=options.owned)
        fallback_ids = [i for op in fallback if op.charged for i in op.event_ids]
    with stage(timings, "attribution"):
        devices = attribute(trace, window=options.window,
                            fallback_event_ids=np.asarray(fallback_ids, dtype=np.int64), top=options.top,
                            frames=frames, plan=options.plan, owned=options.owned)
    ctx = Context(trace, devices, fallback, frames, replace(options, fallback_ops=tuple(sorted(named))),
                  {malformed.SECTION.key: checks})
    sliced = options.owned is not None  # a time slice: the sections that cannot merge are left out
    for d in devices:
        for ds in registry.DEVICE_SECTIONS:
            if sliced and ds.merge is None:
                continue
            with stage(timings, f"device:{ds.key}"):
                value = ds.compute(ctx, d)
            if value is not None:
                d.sections[ds.key] = value
    for s in registry.SECTIONS:
        if sliced and s.merge is None:
            continue
        with stage(timings, f"section:{s.key}"):
            value = s.compute(ctx)
        if value is not None:
            ctx.sections[s.key] = value
    ranks = {r for t in (trace.system_events, trace.device_events) for r in pc.unique(t["rank"]).to_pylist()}
    # Time 0: the default windows' start (with --window, the caller's origin, else this rank's own).
    origin = min((d.window[0] for d in devices), default=None) if options.window is None else \
        options.origin_ns if options.origin_ns is not None else default_origin(trace)
    return RankResult(min((r for r in ranks if r is not None), default=None),
                      [{"path": a.source, "format": a.format} for a in trace.accounting], devices, fallback,
                      ctx.sections, bool(trace.meta("synthetic", False)), origin)


def combine(parts: Sequence[RankResult], options: Options | None = None, *,
            inputs: list[dict[str, Any]] | None = None, timings: Timings | None = None) -> Diagnosis:
    """The reduce step: every rank's result into the job's Diagnosis; finding families run here, once."""
    options = options or Options()
    devices = sorted((d for p in parts for d in p.devices), key=lambda d: (d.rank is None, d.rank or 0, d.device))
    fallback = _merge_fallback([op for p in parts for op in p.fallback_ops])
    sections: dict[str, Any] = {}
    with stage(timings, "combine"):
        for s in registry.SECTIONS:
            values = [p.sections[s.key] for p in parts if s.key in p.sections]
            if not values:
                continue
            value = s.combine(values) if s.combine is not None else values[0] if len(values) == 1 else None
            if value is not None:
                sections[s.key] = value
    ctx = Context(Trace(), devices, fallback, {}, options, sections)
    with stage(timings, "findings"):
        found = [f for family in registry.FINDINGS for f in family.find(ctx)]
    found.sort(key=lambda f: -SEVERITIES.index(f.severity))
    return Diagnosis(inputs=inputs or [i for p in parts for i in p.inputs], devices=devices, fallback_ops=fallback,
                     findings=found, sections=sections, synthetic=any(p.synthetic for p in parts),
                     origin_ns=min((p.origin_ns for p in parts if p.origin_ns is not None), default=None))


def _merge_fallback(ops: list[FallbackOp]) -> list[FallbackOp]:
    """One entry per op name and way found across ranks: calls, times and event ids summed, first source kept."""
    merged: dict[tuple[str, str], FallbackOp] = {}
    for op in ops:
        cur = merged.get((op.name, op.found_by))
        if cur is None:
            merged[(op.name, op.found_by)] = FallbackOp(op.name, op.calls, op.host_ns, op.device_idle_ns,
                                                        op.found_by, op.source, list(op.event_ids), op.evidence,
                                                        list(op.named_by), op.also_executed_on_device)
        else:
            cur.calls += op.calls
            cur.host_ns += op.host_ns
            cur.device_idle_ns += op.device_idle_ns
            cur.source = cur.source or op.source
            cur.event_ids += op.event_ids
    return list(merged.values())
