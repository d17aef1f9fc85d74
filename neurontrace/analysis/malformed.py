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
``overflows_parent``        a host slice (``X``) starting inside another on its thread (rank, pid,    clip to
                            tid) and ending after it: a thread's slices nest (its call stack);      the parent
                            Python frames nest among themselves, runtime/driver records are not
                            checked (``ASYNC_ON_THREAD``)
``zero_duration_device``    device work of duration 0 (it owns no time; it would move a window)     drop
``correlation_collisions``  a correlation id on runtime calls of several processes of one rank     count
                            (files merged without ranks): links then use launch flows (exact event
                            ids) first, then correlation ids keyed (rank, pid, id) where flows tie
                            the device to one process, else (rank, id) (driving.correlation_calls)
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
from neurontrace.analysis.slices import RankPlan, owned_rows
from neurontrace.columns import codes, isin, row_codes, take
from neurontrace.trace import Trace

MAX_EVENT_NS = 86_400 * 10**9  # one day
LONGER_THAN_TRACE = 10  # an event this many times longer than all other activity together is an artefact
TRACK_WORK = ("compute", "collective", "memcpy", "memset")  # in-order work on one stream / engine
# Runtime and driver records come from the accelerator runtime's activity records, not the thread's call stack:
# in the MTIA inference trace of the corpus, gif_remote calls on one thread overlap each other by up to 6 ms.
ASYNC_ON_THREAD = ("runtime", "driver")
DEVICE_WORK = ("compute", "collective", "memcpy", "memset", "dma")
RULES = {"negative_duration": "dropped", "days_long": "dropped", "longer_than_trace": "clipped to the trace end",
         "overflows_next": "clipped to the next start on the track",
         "overflows_parent": "clipped to its parent's end on the thread", "zero_duration_device": "dropped",
         "correlation_collisions": "counted; links keyed by flow, then (rank, pid) where flows name the process"}


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


def sanitize(trace: Trace, owned: tuple[int, int] | None = None,
             plan: RankPlan | None = None) -> tuple[Trace, EventChecks]:
    """The trace with the rules applied (the same object when nothing is malformed) and what was found.

    With ``owned`` (one time slice of a rank, analysis/slices.py) the rules apply to every event the slice
    holds, but an event is counted only in the slice where it starts (an overflow: where the event it runs
    into starts, a parent overflow: where the child starts, since both are held there); the one rule that
    needs the whole rank, ``longer_than_trace``, comes from ``plan`` (analysis/slice_plan.py; not applied
    without one)."""
    checks = EventChecks()
    host, dev = trace.system_events, trace.device_events
    hs, hd = host["ts_ns"].to_numpy(), host["dur_ns"].to_numpy()
    ds, dd = dev["ts_ns"].to_numpy(), dev["dur_ns"].to_numpy()
    own_h, own_d = owned_rows(host, owned), owned_rows(dev, owned)
    h_drop = (hd < 0) | (hd > MAX_EVENT_NS)
    d_drop = (dd < 0) | (dd > MAX_EVENT_NS)
    _count(checks, "negative_duration", int((own_h & (hd < 0)).sum() + (own_d & (dd < 0)).sum()))
    _count(checks, "days_long", int((own_h & (hd > MAX_EVENT_NS)).sum() + (own_d & (dd > MAX_EVENT_NS)).sum()))
    zero = (dd == 0) & isin(dev["category"], DEVICE_WORK) & ~d_drop if dev.num_rows else np.zeros(0, bool)
    _count(checks, "zero_duration_device", int((zero & own_d).sum()))
    d_drop |= zero
    checks.ns_removed += int(np.clip(hd[h_drop & own_h], 0, None).sum() + np.clip(dd[d_drop & own_d], 0, None).sum())
    h_end, d_end = hs + np.where(h_drop, 0, hd), ds + np.where(d_drop, 0, dd)
    if owned is None:
        h_end, d_end = _longer_than_trace(hs, h_end, h_drop, ds, d_end, d_drop, checks)
    elif plan is not None and plan.clipped_ends:
        h_end, d_end = _planned_ends(host, h_end, own_h, dev, d_end, own_d, plan.clipped_ends, checks)
    d_end = _clip_overflows(dev, ds, d_end, d_drop, checks, own_d)
    h_end = _clip_host_overflows(host, hs, h_end, h_drop, checks, own_h)
    _count(checks, "correlation_collisions", _collisions(host if owned is None else host.filter(pa.array(own_h))))
    if not checks.total and np.array_equal(h_end, hs + hd) and np.array_equal(d_end, ds + dd) \
            and not h_drop.any() and not d_drop.any():
        return trace, checks
    out = copy.copy(trace)
    out.system_events = _apply(host, h_drop, hs, h_end, hd)
    out.device_events = _apply(dev, d_drop, ds, d_end, dd)
    return out, checks


def _longer_than_trace(hs: np.ndarray, h_end: np.ndarray, h_drop: np.ndarray, ds: np.ndarray, d_end: np.ndarray,
                       d_drop: np.ndarray, checks: EventChecks) -> tuple[np.ndarray, np.ndarray]:
    """The event ending last, when it ends past every other event and lasts over LONGER_THAN_TRACE x the whole
    extent of the others, clipped to the others' end (repeated while the next one qualifies too)."""
    ends = np.concatenate([np.where(h_drop, np.iinfo(np.int64).min, h_end), np.where(d_drop, np.iinfo(np.int64).min,
                                                                                      d_end)])
    begins = np.concatenate([hs, ds])
    alive = ~np.concatenate([h_drop, d_drop])
    clipped = last_clipped(begins, ends, alive)
    if clipped.any():
        checks.ns_removed += int((np.concatenate([h_end, d_end]) - ends)[clipped].sum())
        _count(checks, "longer_than_trace", int(clipped.sum()))
        n = len(h_end)
        h_end, d_end = np.where(clipped[:n], ends[:n], h_end), np.where(clipped[n:], ends[n:], d_end)
    return h_end, d_end


def last_clipped(begins: np.ndarray, ends: np.ndarray, alive: np.ndarray) -> np.ndarray:
    """The ``longer_than_trace`` rule on (begins, ends) of alive events: a mask of the clipped ones, whose ends
    it sets (in place) to the others' end. Also run on the few latest-ending events of a whole rank, gathered
    slice by slice (analysis/slice_plan.py): it only ever looks at the events ending last."""
    clipped = np.zeros(len(ends), dtype=bool)
    if alive.sum() > 1:
        lo = int(begins[alive].min())  # the others' start (the clipped event's own start only matters if first)
        for i in np.argsort(-ends, kind="stable")[:-1].tolist():
            rest_end = int(np.max(ends[alive & ~clipped & (np.arange(len(ends)) != i)]))
            if ends[i] <= rest_end or ends[i] - begins[i] <= LONGER_THAN_TRACE * max(rest_end - lo, 1):
                break
            ends[i], clipped[i] = rest_end, True
    return clipped


def _planned_ends(host: pa.Table, h_end: np.ndarray, own_h: np.ndarray, dev: pa.Table, d_end: np.ndarray,
                  own_d: np.ndarray, ends: dict[int, int], checks: EventChecks) -> tuple[np.ndarray, np.ndarray]:
    """The whole rank's ``longer_than_trace`` clips (event id -> end) applied to the events of one slice."""
    out = []
    for table, was, own in ((host, h_end, own_h), (dev, d_end, own_d)):
        ids = table["event_id"].to_numpy()
        hit = np.flatnonzero(np.isin(ids, np.fromiter(ends, np.int64, len(ends))))
        end = was.copy()
        for r in hit.tolist():
            if own[r]:
                checks.ns_removed += int(end[r] - ends[int(ids[r])])
                _count(checks, "longer_than_trace", 1)
            end[r] = ends[int(ids[r])]
        out.append(end)
    return out[0], out[1]


def _count(checks: EventChecks, kind: str, n: int) -> None:
    if n:
        checks.counts[kind] = checks.counts.get(kind, 0) + n


def _clip_overflows(dev: pa.Table, ds: np.ndarray, d_end: np.ndarray, drop: np.ndarray,
                    checks: EventChecks, own: np.ndarray) -> np.ndarray:
    work = np.flatnonzero(isin(dev["category"], TRACK_WORK) & ~drop) if dev.num_rows else np.zeros(0, np.int64)
    if len(work) < 2:
        return d_end
    key = [pc.fill_null(take(dev[c], work).cast(pa.string()), "").to_numpy(zero_copy_only=False)
           for c in ("device", "track")]
    rank = pc.fill_null(take(dev["rank"], work), -1).to_numpy()
    order = np.lexsort((ds[work], key[1], rank, key[0]))
    rows = work[order]
    same = np.r_[(key[0][order][1:] == key[0][order][:-1]) & (rank[order][1:] == rank[order][:-1])
                 & (key[1][order][1:] == key[1][order][:-1]), False]
    nxt = np.r_[ds[rows][1:], 0]
    over = same & (d_end[rows] > nxt) & (nxt > ds[rows])  # ends inside the next one (not nested starts)
    if over.any():
        counted = over & np.r_[own[rows][1:], False]  # counted where the next one starts (both are held there)
        _count(checks, "overflows_next", int(counted.sum()))
        checks.ns_removed += int((d_end[rows][counted] - nxt[counted]).sum())
        d_end = d_end.copy()
        d_end[rows[over]] = nxt[over]
    return d_end


def _clip_host_overflows(host: pa.Table, hs: np.ndarray, h_end: np.ndarray, drop: np.ndarray,
                         checks: EventChecks, own: np.ndarray) -> np.ndarray:
    """Host slices that do not nest on their thread: each one's end clipped to its parent's end.

    Found without a loop: as brackets (opens and closes sorted per thread) slices nest exactly when each
    slice's close comes at the depth its open reached. Only the top-level runs holding a slice that fails
    this are walked with a stack, in Python (none on a well-formed trace)."""
    if not host.num_rows:
        return h_end
    rows = np.flatnonzero(pc.fill_null(pc.equal(host["phase"], "X"), False).to_numpy(zero_copy_only=False)
                          & ~isin(host["category"], ASYNC_ON_THREAD) & ~drop & (h_end > hs))
    if len(rows) < 2:
        return h_end
    sub = take(host.select(["category", "rank", "pid", "tid"]), rows)  # not args: most of a rank
    # Python frames come from another tracer than ops, runtime calls and ranges, and cross them by design (a
    # record_function range opens inside the frame of the call that enters it): each nests only among its own.
    thread = row_codes(isin(sub["category"], ("python",)).astype(np.int64),  # one code per (tracer, rank, pid, tid)
                       pc.fill_null(sub["rank"], -1).to_numpy(zero_copy_only=False).astype(np.int64),
                       codes(sub["pid"])[0], codes(sub["tid"])[0]).astype(np.int32)
    start, end = hs[rows], h_end[rows]
    order = np.lexsort((-end, start, thread))  # per thread: by start, the longer (outer) slice first
    n = len(order)
    rank_in_order = np.empty(n, np.int64)
    rank_in_order[order] = np.arange(n)
    # brackets: (thread, time, tie) with tie = closes before opens at one time, closes inner first (-n - 1 -
    # rank: below every open), opens in order (rank). One key each, as small as it goes: a rank's rows are many.
    tie = np.r_[rank_in_order, -n - 1 - rank_in_order]
    del rank_in_order
    b_order = np.lexsort((tie, np.r_[start, end], np.r_[thread, thread]))
    del tie
    depth = np.cumsum(np.where(b_order < n, 1, -1))  # positions below n are the opens
    at = np.empty(2 * n, np.int64)
    at[b_order] = depth
    del b_order, depth
    bad = at[:n] != at[n:] + 1  # the depth after its open vs. the depth before its close
    if not bad.any():
        return h_end
    # top-level runs: a slice opened at depth 0 starts one; walk only the runs holding a bad slice
    run = np.cumsum(at[:n][order] == 1)  # the run of each slice in sorted order (runs are contiguous there)
    bad_runs = np.unique(run[bad[order]])
    lo, hi = np.searchsorted(run, bad_runs, "left"), np.searchsorted(run, bad_runs, "right")
    h_end = h_end.copy()
    clipped, removed = 0, 0
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        stack: list[int] = []
        for i in order[a:b].tolist():
            while stack and stack[-1] <= start[i]:
                stack.pop()
            e = int(end[i])
            if stack and e > stack[-1]:
                if own[rows[i]]:  # counted where the child starts (its parent is held there too)
                    clipped, removed = clipped + 1, removed + e - stack[-1]
                e = stack[-1]
                h_end[rows[i]] = e
            stack.append(e)
    _count(checks, "overflows_parent", clipped)
    checks.ns_removed += removed
    return h_end


def _collisions(host: pa.Table) -> int:
    """Correlation ids that runtime calls of more than one process of the same rank use."""
    linked = host.select(["rank", "pid", "correlation"])
    linked = linked.filter(pc.is_valid(linked["correlation"]))
    if linked.num_rows == 0 or len(pc.unique(linked["pid"]).drop_null()) <= 1:
        return 0  # at most one process (nulls are not one): no id two share, without grouping every call
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
    checks: EventChecks | None = ctx.sections.get(SECTION.key)
    return checks


def _combine(values: list[EventChecks]) -> EventChecks:
    out = EventChecks()
    for v in values:
        for k, n in v.counts.items():
            _count(out, k, n)
        out.ns_removed += v.ns_removed
    return out


SECTION = Section("event_checks", "malformed events", _compute, to_json=lambda v: v.as_dict(),
                  from_json=EventChecks.from_dict, combine=_combine, merge=_combine)  # its lines print with the warnings
