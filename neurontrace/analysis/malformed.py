"""Malformed events: found before any analysis, one rule each, counted (``--json``: ``event_checks``, and a line
in ``warnings`` per kind found).

Timing artefacts distort every share they touch (elsewhere 7 of 55,423 events made up 62% of reported GPU
time), so ``diagnose`` analyses a copy of the trace with these rules applied; the loaded Trace is not changed:

=========================  =====================================================================  ========
kind                        what                                                                   rule
=========================  =====================================================================  ========
``negative_duration``       ``dur_ns < 0``                                                          drop
``days_long``               longer than a day (``MAX_EVENT_NS``; CUPTI writes such ends)            drop
``longer_than_trace``       ends past all other events and lasts over 10x their whole extent (a     clip to
                            ProfilerStep of another process lasting 13 s in a 0.36 s trace)         its end
``overflows_next``          device work ending after the next work on its stream/engine starts      clip to
                            (work on one track runs in order; the overlap is clock rounding)        the next
``zero_duration_device``    device work of duration 0 (it owns no time; it would move a window)     drop
``correlation_collisions``  a correlation id on runtime calls of several processes of one rank     count
                            (files merged without ranks): links then use launch flows (exact event
                            ids) first, and correlation ids only within a rank
=========================  =====================================================================  ========
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis.contract import Context, Section
from neurontrace.columns import isin
from neurontrace.trace import Trace

MAX_EVENT_NS = 86_400 * 10**9  # one day
LONGER_THAN_TRACE = 10  # an event this many times longer than all other activity together is an artefact
TRACK_WORK = ("compute", "collective", "memcpy", "memset")  # in-order work on one stream / engine
DEVICE_WORK = ("compute", "collective", "memcpy", "memset", "dma")
RULES = {"negative_duration": "dropped", "days_long": "dropped", "longer_than_trace": "clipped to the trace end",
         "overflows_next": "clipped to the next start on the track", "zero_duration_device": "dropped",
         "correlation_collisions": "counted; links keyed by flow, then rank"}


@dataclass
class EventChecks:
    counts: dict[str, int] = field(default_factory=dict)  # kind -> events
    ns_removed: int = 0  # nanoseconds of event time the clips and drops removed

    @property
    def total(self) -> int:
        return sum(v for k, v in self.counts.items() if k != "correlation_collisions")

    def as_dict(self) -> dict[str, Any]:
        return {"counts": self.counts, "rules": {k: RULES[k] for k in self.counts}, "ns_removed": self.ns_removed}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EventChecks:
        return cls({str(k): int(v) for k, v in (d.get("counts") or {}).items()}, int(d.get("ns_removed") or 0))

    def warnings(self) -> list[str]:
        return [f"{n} event(s) {k.replace('_', ' ')}: {RULES[k]} (docs/diagnose.md, 'Malformed events')"
                for k, n in self.counts.items() if n]


def sanitize(trace: Trace) -> tuple[Trace, EventChecks]:
    """The trace with the rules applied (the same object when nothing is malformed) and what was found."""
    checks = EventChecks()
    host, dev = trace.system_events, trace.device_events
    hs, hd = host["ts_ns"].to_numpy(), host["dur_ns"].to_numpy()
    ds, dd = dev["ts_ns"].to_numpy(), dev["dur_ns"].to_numpy()
    h_drop = (hd < 0) | (hd > MAX_EVENT_NS)
    d_drop = (dd < 0) | (dd > MAX_EVENT_NS)
    _count(checks, "negative_duration", int((hd < 0).sum() + (dd < 0).sum()))
    _count(checks, "days_long", int((hd > MAX_EVENT_NS).sum() + (dd > MAX_EVENT_NS).sum()))
    zero = (dd == 0) & isin(dev["category"], DEVICE_WORK) & ~d_drop if dev.num_rows else np.zeros(0, bool)
    _count(checks, "zero_duration_device", int(zero.sum()))
    d_drop |= zero
    checks.ns_removed += int(np.clip(hd[h_drop], 0, None).sum() + np.clip(dd[d_drop], 0, None).sum())
    h_end, d_end = hs + np.where(h_drop, 0, hd), ds + np.where(d_drop, 0, dd)
    # longer than the trace: the event ending last, when it ends past every other event and lasts over
    # LONGER_THAN_TRACE x the whole extent of the others (repeated while the next one qualifies too).
    ends = np.concatenate([np.where(h_drop, np.iinfo(np.int64).min, h_end), np.where(d_drop, np.iinfo(np.int64).min,
                                                                                      d_end)])
    begins = np.concatenate([hs, ds])
    alive = ~np.concatenate([h_drop, d_drop])
    clipped = np.zeros(len(ends), dtype=bool)
    if alive.sum() > 1:
        lo = int(begins[alive].min())  # the others' start (the clipped event's own start only matters if first)
        for i in np.argsort(-ends, kind="stable")[:-1].tolist():
            rest_end = int(np.max(ends[alive & ~clipped & (np.arange(len(ends)) != i)]))
            if ends[i] <= rest_end or ends[i] - begins[i] <= LONGER_THAN_TRACE * max(rest_end - lo, 1):
                break
            checks.ns_removed += int(ends[i] - rest_end)
            ends[i], clipped[i] = rest_end, True
    if clipped.any():
        _count(checks, "longer_than_trace", int(clipped.sum()))
        n = len(h_end)
        h_end, d_end = np.where(clipped[:n], ends[:n], h_end), np.where(clipped[n:], ends[n:], d_end)
    d_end = _clip_overflows(dev, ds, d_end, d_drop, checks)
    _count(checks, "correlation_collisions", _collisions(host))
    if not checks.total:
        return trace, checks
    out = copy.copy(trace)
    out.system_events = _apply(host, h_drop, hs, h_end, hd)
    out.device_events = _apply(dev, d_drop, ds, d_end, dd)
    return out, checks


def _count(checks: EventChecks, kind: str, n: int) -> None:
    if n:
        checks.counts[kind] = checks.counts.get(kind, 0) + n


def _clip_overflows(dev: pa.Table, ds: np.ndarray, d_end: np.ndarray, drop: np.ndarray,
                    checks: EventChecks) -> np.ndarray:
    work = np.flatnonzero(isin(dev["category"], TRACK_WORK) & ~drop) if dev.num_rows else np.zeros(0, np.int64)
    if len(work) < 2:
        return d_end
    key = [pc.fill_null(dev[c].take(pa.array(work)).cast(pa.string()), "").to_numpy(zero_copy_only=False)
           for c in ("device", "track")]
    rank = pc.fill_null(dev["rank"].take(pa.array(work)), -1).to_numpy()
    order = np.lexsort((ds[work], key[1], rank, key[0]))
    rows = work[order]
    same = np.r_[(key[0][order][1:] == key[0][order][:-1]) & (rank[order][1:] == rank[order][:-1])
                 & (key[1][order][1:] == key[1][order][:-1]), False]
    nxt = np.r_[ds[rows][1:], 0]
    over = same & (d_end[rows] > nxt) & (nxt > ds[rows])  # ends inside the next one (not nested starts)
    if over.any():
        _count(checks, "overflows_next", int(over.sum()))
        checks.ns_removed += int((d_end[rows][over] - nxt[over]).sum())
        d_end = d_end.copy()
        d_end[rows[over]] = nxt[over]
    return d_end


def _collisions(host: pa.Table) -> int:
    """Correlation ids that runtime calls of more than one process of the same rank use."""
    linked = host.filter(pc.is_valid(host["correlation"])).select(["rank", "pid", "correlation"])
    if linked.num_rows == 0:
        return 0
    per = linked.group_by(["rank", "correlation"]).aggregate([("pid", "count_distinct")])
    return int(pc.sum(pc.greater(per["pid_count_distinct"], 1)).as_py() or 0)


def _apply(table: pa.Table, drop: np.ndarray, start: np.ndarray, end: np.ndarray, dur: np.ndarray) -> pa.Table:
    new_dur = end - start
    if not drop.any() and np.array_equal(new_dur, dur):
        return table
    i = table.schema.get_field_index("dur_ns")
    table = table.set_column(i, table.schema.field(i), pa.array(np.where(drop, 0, new_dur), pa.int64()))
    return table.filter(pa.array(~drop)) if drop.any() else table


def _compute(ctx: Context) -> EventChecks | None:
    """``diagnose_rank`` runs :func:`sanitize` before attribution and hands its result over here."""
    checks: EventChecks | None = ctx.sections.get("event_checks")
    return checks


def _combine(values: list[EventChecks]) -> EventChecks:
    out = EventChecks()
    for v in values:
        for k, n in v.counts.items():
            _count(out, k, n)
        out.ns_removed += v.ns_removed
    return out


SECTION = Section("event_checks", "malformed events", _compute, to_json=EventChecks.as_dict,
                  from_json=EventChecks.from_dict, combine=_combine)  # its lines print with the warnings
