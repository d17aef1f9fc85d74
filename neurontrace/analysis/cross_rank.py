"""Collectives across ranks: who arrived last, who waited, and how fast the data moved.

Two steps, so a job of thousands of ranks never needs every rank's events in one place:

1. :func:`rank_collectives` (the *map*, one rank at a time): one row per collective as that rank saw
   it, with what the rank was doing since its previous collective. A rank's collectives are its
   device collective kernels (NCCL/RCCL ... with Kineto's ``Collective name`` / ``In msg nelems`` /
   ``Process Group Name`` args) or, on a rank with no device collectives, its host collectives
   (gloo ``gloo:all_reduce`` ranges with ``Input Dims``).
2. :func:`cross_rank` (the *reduce*): rows of all ranks matched into collectives, each with
   per-rank arrival and wait, the transfer time after the last arrival, and bandwidth.

Matching: the process group plus its sequence number when the trace records one (``Seq``), else the
order of that rank's collectives with the same group, op and size. Arrival is where a rank's
collective starts; every rank then waits until the last one arrives, so::

    rank 0   [== wait ==========|== transfer ==]
    rank 1        [== wait =====|== transfer ==]
    rank 7 (last)               [== transfer ==]
             ^ first arrival    ^ last arrival  (arrival skew = last - first)

``wait[r] = last_arrival - arrival[r]``; ``transfer = end - last_arrival`` of the last rank's own op
(it did not wait). Bandwidth follows NCCL's definitions (nccl-tests, doc/PERFORMANCE.md):
``algbw = bytes / transfer`` and ``busbw = algbw * factor`` with the factor per op in
:data:`BUS_FACTOR`. A collective seen by one rank only (a single-rank trace) has no arrival skew; its
transfer is its kernel duration, which includes any wait for peers the trace cannot see.
Timestamps of different hosts are compared as recorded: clock offsets between hosts show up as skew.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace import trace_facts
from neurontrace._numbers import int_of as _int
from neurontrace.analysis import names
from neurontrace.analysis.comm_sizes import args_of as _args
from neurontrace.analysis.comm_sizes import message_bytes as _message_bytes
from neurontrace.analysis.comm_sizes import sizes_from_launching_ranges
from neurontrace.analysis.contract import Context, Finding, FindingFamily, Section
from neurontrace.analysis.cross_rank_slices import (
    KINDS,
    SOURCES,
    TOP_WORK,
    KindPart,
    SliceCarry,
    Tail,
    merge_rows,
    name_totals,
)
from neurontrace.analysis.cross_rank_slices import busy as _busy
from neurontrace.analysis.cross_rank_slices import covered as _covered
from neurontrace.analysis.cross_rank_slices import first_ts as _first_ts
from neurontrace.analysis.cross_rank_slices import outermost as _outermost
from neurontrace.analysis.cross_rank_slices import top_names as _top_names
from neurontrace.analysis.intervals import union
from neurontrace.analysis.slices import owned_rows
from neurontrace.analysis.work import device_categories
from neurontrace.columns import isin, keep, matches, of_rank, select
from neurontrace.trace import Trace
from neurontrace.units import duration, rate
from neurontrace.units import size as size_text

# busbw = algbw * factor(n): the share of the data each link carries in the optimal algorithm.
BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}
# A collective's per-rank lists are kept up to this many ranks (8 nodes of 8 GPUs); above it they are null, so
# that the job's document grows with collectives + ranks, not their product (1,024 ranks x 1,000 collectives
# would be ~5M list entries); rank_count, first_arrival_ns, host_count and the per_rank sums stay.
PER_RANK_LISTS_MAX = 64
PER_RANK_LISTS = ("ranks", "devices", "arrival_ns", "dur_ns", "wait_ns", "hosts")
HOST_WORK = ("framework_op", "runtime", "driver", "compile", "load", "python", "transfer")

RECORDS = pa.schema([
    pa.field("rank", pa.int32()),  # null when the trace names no rank
    pa.field("device", pa.string()),  # where the collective ran (cuda:0; cpu for host collectives)
    pa.field("device_name", pa.string()),  # deviceProperties name, for the link class
    pa.field("host", pa.string()),
    pa.field("group", pa.string()),  # process group name ("" when the trace does not say)
    pa.field("op", pa.string()),  # names.collective_op: all_reduce, all_gather ...
    pa.field("name", pa.string()),  # the kernel or range name as recorded
    pa.field("seq", pa.int64()),  # the group's sequence number, when recorded
    pa.field("ordinal", pa.int64()),  # index among this rank's collectives of the same group, op and bytes
    pa.field("bytes", pa.int64()),  # message size (the larger of input and output), null when unknown
    pa.field("group_size", pa.int32()),
    pa.field("start_ns", pa.int64()),
    pa.field("end_ns", pa.int64()),
    pa.field("before_start_ns", pa.int64()),  # end of the rank's previous collective (or its first event)
    pa.field("before_device_ns", pa.int64()),  # device compute busy in [before_start, start)
    pa.field("before_host_ns", pa.int64()),  # host work busy in [before_start, start)
    pa.field("before_top", pa.string()),  # JSON [[name, ns], ...]: the work that took most of that time
])


# -- map: one rank's collectives ------------------------------------------------------------------

def rank_collectives(trace: Trace) -> pa.Table:
    """One row per collective per rank (schema :data:`RECORDS`), for every rank in ``trace``."""
    ranks = _ranks(trace)
    parts = [_one_rank(trace, rank, only=len(ranks) == 1) for rank in ranks]
    parts = [p for p in parts if p.num_rows]
    return pa.concat_tables(parts) if parts else RECORDS.empty_table()


def _ranks(trace: Trace) -> list[int | None]:
    seen: set[int | None] = set()
    for t in (trace.system_events, trace.device_events):
        seen |= set(pc.unique(t["rank"]).to_pylist())
    return sorted(seen, key=lambda r: (r is None, r or 0))


def _one_rank(trace: Trace, rank: int | None, only: bool = False) -> pa.Table:
    dev = trace.device_events if only else of_rank(trace.device_events, rank)
    host = trace.system_events if only else of_rank(trace.system_events, rank)
    # The category each event counts as (names.device_category), as in attribution: symmetric-memory and
    # custom all-reduce kernels are collectives though the parser filed them as compute.
    effective = device_categories(dev)
    found = _found(trace, rank, dev, host, effective, None)
    if found is None:
        return RECORDS.empty_table()
    rows, _, device_col, starts, ends = found
    first_ts = _first_ts(host, dev)
    # What the rank did since its previous collective ended (collectives may overlap: never < 0).
    prev_end = np.r_[first_ts, np.maximum.accumulate(ends)[:-1]] if len(ends) else ends
    before = np.minimum(prev_end, starts)
    host_work = keep(host, isin(host["category"], HOST_WORK))
    # A CPU job's compute is its framework ops (as in attribution): "device" busy is op time there.
    cpu_job = not device_col or all(d == "cpu" for d in device_col)
    dev_busy = _busy(keep(host_work, isin(host_work["category"], ["framework_op"])) if cpu_job
                     else keep(dev, effective == "compute"))
    host_busy = _busy(host_work)
    rows["start_ns"], rows["end_ns"], rows["before_start_ns"] = list(starts), list(ends), list(before)
    rows["before_device_ns"] = list(_covered(dev_busy, before, starts))
    rows["before_host_ns"] = list(_covered(host_busy, before, starts))
    # Named work: kernels, else outermost host ops (not Python frames: an outer frame spans everything).
    top_from = keep(dev, effective == "compute") if len(dev_busy[0]) and not cpu_job else \
        _outermost(keep(host_work, ~isin(host_work["category"], ["python"])))
    rows["before_top"] = [json.dumps(t) for t in _top_names(top_from, before, starts)]
    return pa.table({f.name: pa.array(rows[f.name], f.type) for f in RECORDS}, schema=RECORDS)


Found = tuple[dict[str, list[Any]], pa.Table, list[str], np.ndarray, np.ndarray]


def _found(trace: Trace, rank: int | None, dev: pa.Table, host: pa.Table, effective: np.ndarray,
           kind: str | None) -> Found | None:
    """A rank's collectives in start order, described (the rows without their look-back), or None without any:
    ``kind`` "device" or "host" takes that kind (a slice: the merge chooses), None the rank's own choice."""
    coll = keep(dev, effective == "collective") if kind != "host" else dev.slice(0, 0)
    if coll.num_rows or kind == "device":
        device_col = [str(d) for d in coll["device"].to_pylist()]
    else:  # a CPU job: the host collectives are the collectives
        coll = keep(host, isin(host["category"], ["collective"]) | matches(host["name"], names.HOST_COLLECTIVE))
        device_col = ["cpu"] * coll.num_rows
    if not coll.num_rows:
        return None
    info = _distributed_info(trace, rank)
    order = np.argsort(coll["ts_ns"].to_numpy(), kind="stable")
    coll = coll.take(pa.array(order))
    device_col = [device_col[i] for i in order]
    starts = coll["ts_ns"].to_numpy().astype(np.int64)
    ends = starts + coll["dur_ns"].to_numpy().astype(np.int64)
    rows: dict[str, list[Any]] = defaultdict(list)
    counts: dict[tuple[str, str, int | None], int] = defaultdict(int)
    for name, args_text, dev_name, host_name in zip(
            coll["name"].cast(pa.string()).to_pylist(), coll["args"].to_pylist(), device_col,
            coll["host"].cast(pa.string()).to_pylist(), strict=True):
        args = _args(args_text)
        op = names.collective_op(name, args.get("Collective name"))
        group = str(args.get("Process Group Name", info.default_group))
        size = _int(args.get("Group size")) or info.group_sizes.get(group)
        nbytes = _message_bytes(op, args, size)
        ordinal_key = (group, op, nbytes)
        rows["rank"].append(rank)
        rows["device"].append(dev_name)
        rows["device_name"].append(info.device_names.get(dev_name))
        rows["host"].append(host_name)
        rows["group"].append(group)
        rows["op"].append(op)
        rows["name"].append(name)
        rows["seq"].append(_int(args.get("Seq")))
        rows["ordinal"].append(counts[ordinal_key])
        counts[ordinal_key] += 1
        rows["bytes"].append(nbytes)
        rows["group_size"].append(size)
    if device_col and device_col[0] != "cpu" and any(b is None for b in rows["bytes"]):
        # Older traces carry no size on the kernels: take it from the host range that launched each one.
        missing = np.flatnonzero([b is None for b in rows["bytes"]])
        found = sizes_from_launching_ranges(host, trace.flows, coll, missing, rows["op"], rows["group_size"])
        for i, nbytes in found.items():
            rows["bytes"][i] = nbytes
        if found:  # the ordinals count (group, op, bytes): recount with the sizes found
            counts = defaultdict(int)
            for i in range(len(rows["op"])):
                key = (rows["group"][i], rows["op"][i], rows["bytes"][i])
                rows["ordinal"][i] = counts[key]
                counts[key] += 1
    return rows, coll, device_col, starts, ends


@dataclass
class _Info:
    default_group: str = ""
    group_sizes: dict[str, int] = field(default_factory=dict)
    device_names: dict[str, str] = field(default_factory=dict)


def _distributed_info(trace: Trace, rank: int | None) -> _Info:
    """Process groups (the normalized ``distributed`` facts) and device names (``devices``) of a rank."""
    out = _Info()
    for info in trace_facts.distributed(trace, rank):
        for group in info.groups:
            if group.size:
                out.group_sizes[group.name] = group.size
        # Host collectives carry no group: with one group (or none declared), it is the default one.
        if len(out.group_sizes) <= 1:
            out.default_group = next(iter(out.group_sizes), "0")
            if not out.group_sizes and info.world_size:
                out.group_sizes["0"] = info.world_size
    # Keyed as the device column is (rocm:0 on ROCm, where this once said cuda:0 and found no name).
    out.device_names = {d: dev.name for d, dev in trace_facts.devices(trace, rank).items() if dev.name}
    return out


# -- reduce: collectives matched across ranks ------------------------------------------------------

@dataclass
class CrossRank:
    collectives: list[dict[str, Any]]
    ranks: list[int]
    per_rank: list[dict[str, Any]]
    straggler_rank: int | None
    most_waiting_rank: int | None
    wait_share: float | None  # waiting / all collective time, over matched collectives
    matched: int  # collectives seen by two or more ranks
    straggler_work: dict[str, Any] | None = None  # what the straggler did before the collectives it was last at
    step_skew: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "straggler_rank": self.straggler_rank,
                "most_waiting_rank": self.most_waiting_rank, "wait_share": self.wait_share,
                "matched_collectives": self.matched, "per_rank": self.per_rank,
                "straggler_work": self.straggler_work, "step_skew": self.step_skew,
                "collectives": self.collectives}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CrossRank:
        return cls(list(d.get("collectives") or []), list(d.get("ranks") or []), list(d.get("per_rank") or []),
                   d.get("straggler_rank"), d.get("most_waiting_rank"), d.get("wait_share"),
                   int(d.get("matched_collectives") or 0), d.get("straggler_work"), list(d.get("step_skew") or []))


def cross_rank(records: pa.Table | Sequence[pa.Table],
               steps: Iterable[tuple[int, str, int, int]] = ()) -> CrossRank:
    """Match the rows of :func:`rank_collectives` (of one or many ranks) into collectives.

    ``steps`` are ``(rank, step name, start_ns, dur_ns)`` of ProfilerStep markers, for the step
    start skew across ranks.
    """
    table = records if isinstance(records, pa.Table) else (
        pa.concat_tables(list(records)) if len(records) else RECORDS.empty_table())
    groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    cols = {n: table[n].to_pylist() for n in RECORDS.names if n != "before_top"}
    for i in range(table.num_rows):
        seq = cols["seq"][i]
        key = (cols["group"][i], "seq", seq) if seq is not None else \
            (cols["group"][i], cols["op"][i], cols["bytes"][i], cols["ordinal"][i])
        groups[key].append(i)
    before_top = table["before_top"].to_pylist()
    out = []
    ranks: set[int] = set()
    last_count: dict[int, int] = defaultdict(int)
    late_ns: dict[int, int] = defaultdict(int)
    wait_ns: dict[int, int] = defaultdict(int)
    coll_ns: dict[int, int] = defaultdict(int)
    before: dict[int, list[tuple[int, dict[str, Any]]]] = defaultdict(list)  # last rank -> (rank, work)
    matched = 0
    # Per rank, the stretches it was late, waited and was in a collective: overlapping collectives of one rank
    # (DDP's bucket all-reduces in flight together) wait for the same late peer, so they are merged before summing.
    late_iv: dict[int, list[tuple[int, int]]] = defaultdict(list)
    wait_iv: dict[int, list[tuple[int, int]]] = defaultdict(list)
    coll_iv: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for rows in groups.values():
        rows.sort(key=lambda i: (cols["rank"][i] if cols["rank"][i] is not None else -1, cols["start_ns"][i]))
        rec = _collective(cols, rows)
        out.append(rec)
        rks = [cols["rank"][i] for i in rows]
        ranks |= {r for r in rks if r is not None}
        if len(rows) < 2 or any(r is None for r in rks):
            continue
        matched += 1
        last = rec["last_rank"]
        last_count[last] += 1
        last_arrival = rec["first_arrival_ns"] + rec["arrival_skew_ns"]
        late_iv[last].append((rec["first_arrival_ns"], last_arrival))
        for i in rows:
            r = cols["rank"][i]
            wait_iv[r].append((cols["start_ns"][i], last_arrival))
            coll_iv[r].append((cols["start_ns"][i], cols["end_ns"][i]))
            before[last].append((r, {"device_ns": cols["before_device_ns"][i], "host_ns": cols["before_host_ns"][i],
                                     "span_ns": cols["start_ns"][i] - cols["before_start_ns"][i],
                                     "top": before_top[i]}))
    for totals, iv in ((late_ns, late_iv), (wait_ns, wait_iv), (coll_ns, coll_iv)):
        for r, spans in iv.items():
            totals[r] = _merged_ns(spans)
    out.sort(key=lambda c: (c["first_arrival_ns"], c["group"], c["op"], c.get("seq") or c["ordinal"]))
    straggler = max(last_count, key=lambda r: (last_count[r], late_ns[r], -r), default=None)
    waiting = max(wait_ns, key=lambda r: (wait_ns[r], -r), default=None)
    per_rank = [{"rank": r, "last_count": last_count.get(r, 0), "late_ns": late_ns.get(r, 0),
                 "wait_ns": wait_ns.get(r, 0), "collective_ns": coll_ns.get(r, 0)} for r in sorted(ranks)]
    total = sum(coll_ns.values())
    work = _straggler_work(straggler, before[straggler]) if straggler is not None else None
    return CrossRank(out, sorted(ranks), per_rank, straggler, waiting,
                     round(sum(wait_ns.values()) / total, 4) if total else None, matched, work, _step_skew(steps))


def _merged_ns(spans: list[tuple[int, int]]) -> int:
    """Nanoseconds covered by the union of ``spans`` (each counted once where they overlap)."""
    s = np.array([a for a, _ in spans], dtype=np.int64)
    e = np.array([b for _, b in spans], dtype=np.int64)
    us, ue = union(s, np.maximum(s, e))
    return int((ue - us).sum())


def _straggler_work(late: int, rows: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    """Mean time busy before the collectives ``late`` arrived last at: it, against the other ranks."""
    mine = [w for r, w in rows if r == late]
    others = [w for r, w in rows if r != late]

    def mean(ws: list[dict[str, Any]], key: str) -> int:
        return int(np.mean([w[key] for w in ws])) if ws else 0

    top: dict[str, int] = defaultdict(int)
    for w in mine:
        for name, ns in json.loads(w["top"] or "[]"):
            top[name] += int(ns)
    return {"collectives": len(mine),
            "span_ns": mean(mine, "span_ns"), "device_ns": mean(mine, "device_ns"), "host_ns": mean(mine, "host_ns"),
            "others_span_ns": mean(others, "span_ns"), "others_device_ns": mean(others, "device_ns"),
            "others_host_ns": mean(others, "host_ns"),
            "top": [[n, ns] for n, ns in sorted(top.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_WORK]]}


def _collective(cols: dict[str, list[Any]], rows: list[int]) -> dict[str, Any]:
    first = rows[0]
    arrivals = [cols["start_ns"][i] for i in rows]
    op, nbytes = cols["op"][first], cols["bytes"][first]
    n = cols["group_size"][first] or len(rows)
    hosts = sorted({h for h in (cols["host"][i] for i in rows) if h})
    rec: dict[str, Any] = {
        "group": cols["group"][first], "op": op, "name": cols["name"][first], "seq": cols["seq"][first],
        "ordinal": cols["ordinal"][first], "bytes": nbytes, "group_size": n,
        "rank_count": len(rows), "host_count": len(hosts), "first_arrival_ns": min(arrivals),
        "ranks": [cols["rank"][i] for i in rows], "devices": [cols["device"][i] for i in rows],
        "arrival_ns": arrivals, "dur_ns": [cols["end_ns"][i] - cols["start_ns"][i] for i in rows],
    }
    if len(rows) >= 2:
        last_i = max(rows, key=lambda i: (cols["start_ns"][i], cols["rank"][i] or 0))
        last_arrival = cols["start_ns"][last_i]
        rec.update(arrival_skew_ns=last_arrival - min(arrivals), last_rank=cols["rank"][last_i],
                   wait_ns=[last_arrival - a for a in arrivals],
                   transfer_ns=max(0, cols["end_ns"][last_i] - last_arrival), transfer_from="last_arrival")
    else:
        rec.update(arrival_skew_ns=None, last_rank=None, wait_ns=None,
                   transfer_ns=cols["end_ns"][first] - cols["start_ns"][first], transfer_from="kernel")
    rec["complete"] = len(rows) >= n
    algbw = nbytes / rec["transfer_ns"] if nbytes is not None and rec["transfer_ns"] > 0 else None
    factor = BUS_FACTOR.get(op)
    rec["algbw_gbps"] = algbw  # bytes/ns = GB/s
    rec["busbw_gbps"] = algbw * factor(n) if algbw is not None and factor is not None else None
    rec["device_name"] = cols["device_name"][first]
    rec["hosts"] = hosts
    if len(rows) > PER_RANK_LISTS_MAX:  # the document stays O(collectives + ranks); per_rank has each rank's sums
        rec.update(dict.fromkeys(PER_RANK_LISTS))
    return rec


def _step_skew(steps: Iterable[tuple[int, str, int, int]]) -> list[dict[str, Any]]:
    by_step: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)
    for rank, name, ts, dur in steps:
        by_step[name][rank] = (ts, dur)
    out = []
    for name, per_rank in sorted(by_step.items(), key=lambda kv: _step_number(kv[0])):
        if len(per_rank) < 2:
            continue
        starts = {r: v[0] for r, v in per_rank.items()}
        durs = [v[1] for v in per_rank.values()]
        out.append({"step": name, "start_skew_ns": max(starts.values()) - min(starts.values()),
                    "last_to_start_rank": max(starts, key=lambda r: (starts[r], -r)),
                    "max_dur_ns": max(durs), "min_dur_ns": min(durs)})
    return out


def _step_number(name: str) -> tuple[int, str]:
    m = re.search(r"(\d+)$", name)
    return (int(m.group(1)) if m else -1, name)


# -- the diagnose section and findings ------------------------------------------------------------

STRAGGLER_WAIT_SHARE = 0.20  # waiting above this share of all collective time across ranks ...
STRAGGLER_LATE_SHARE = 0.50  # ... and one rank owns more than this share of all arrival skew (last-arrival time)
LOW_BUSBW_SHARE = 0.25  # median bus bandwidth of a size bucket below this share of the link's peak
MIN_JUDGED_BYTES = 1 << 20  # smaller messages are latency-bound: their bandwidth is not judged
# Peak unidirectional per-GPU bandwidth of the link collectives between the GPUs of one node run
# over (GB/s), by the deviceProperties name. NVIDIA: NVLink 2/3/4/5 (V100 SXM2 6 x 25, A100 SXM 12 x 25,
# H100/H200 SXM 18 x 25, B200 18 x 50; the NVIDIA product data sheets). AMD MI300X: 7 Infinity Fabric
# links x 64 GB/s (AMD CDNA 3 white paper). PCIe boards: PCIe 4.0 x16 32 GB/s, 5.0 x16 64 GB/s.
LINK_GBPS: tuple[tuple[re.Pattern[str], str, float], ...] = (
    (re.compile(r"V100-SXM", re.I), "NVLink 2", 150.0),
    (re.compile(r"A100-(SXM|PG509)", re.I), "NVLink 3", 300.0),
    (re.compile(r"A100", re.I), "PCIe 4.0 x16", 32.0),
    (re.compile(r"H100 PCIe", re.I), "PCIe 5.0 x16", 64.0),
    (re.compile(r"H100|H200|H800", re.I), "NVLink 4", 450.0),
    (re.compile(r"B200|GB200", re.I), "NVLink 5", 900.0),
    (re.compile(r"MI300X|MI325X", re.I), "Infinity Fabric", 448.0),
)
SIZE_BUCKETS = (1 << 20, 16 << 20, 256 << 20)  # 1-16 MiB, 16-256 MiB, >= 256 MiB


def link_class(device_name: str | None) -> tuple[str, float] | None:
    """(link name, peak GB/s) for a device name, or None when the table does not know the device."""
    for pattern, link, gbps in LINK_GBPS:
        if device_name and pattern.search(device_name):
            return link, gbps
    return None


def _bucket(nbytes: int) -> str:
    lo = max((b for b in SIZE_BUCKETS if nbytes >= b), default=0)
    i = SIZE_BUCKETS.index(lo)
    hi = SIZE_BUCKETS[i + 1] if i + 1 < len(SIZE_BUCKETS) else None
    return f"{lo >> 20}-{hi >> 20} MiB" if hi else f">= {lo >> 20} MiB"


def findings(ctx: Context) -> list[Finding]:
    cr: CrossRank | None = ctx.sections.get(SECTION.key)
    return [] if cr is None else straggler_findings(cr) + bandwidth_findings(cr)


def straggler_findings(cr: CrossRank) -> list[Finding]:
    late = cr.straggler_rank
    if late is None or not cr.matched or (cr.wait_share or 0) < STRAGGLER_WAIT_SHARE:
        return []
    me = next(p for p in cr.per_rank if p["rank"] == late)
    if me["late_ns"] <= STRAGGLER_LATE_SHARE * sum(p["late_ns"] for p in cr.per_rank):
        return []
    w = cr.straggler_work or {}
    top = ", ".join(f"{n} ({duration(ns)})" for n, ns in w.get("top", []))
    # A CPU job's "device" time is its framework ops (rank_collectives): the host's other work is what remains.
    cpu = all(d == "cpu" for c in cr.collectives for d in c["devices"] or ["cpu"])
    device, others_device = w.get("device_ns", 0), w.get("others_device_ns", 0)
    host, others_host = w.get("host_ns", 0), w.get("others_host_ns", 0)
    if cpu:
        host, others_host = max(0, host - device), max(0, others_host - others_device)
    where = ("in ops and {} in other host work (Python, sleeps, data loading)" if cpu else
             "on the device and {} on the host")
    evidence = (f"rank {late} arrived last at {me['last_count']} of {cr.matched} collectives, "
                f"{duration(me['late_ns'])} after the first rank in total (overlapping collectives counted once); "
                f"{_pct(cr.wait_share or 0)} of all collective time is ranks waiting for the last one (rank "
                f"{cr.most_waiting_rank} waited most). Before those collectives rank {late} was busy "
                f"{duration(device)} " + where.format(duration(host)) + " on average (other ranks: "
                f"{duration(others_device)} / {duration(others_host)})"
                + (f"; its largest ops: {top}" if top else ""))
    extra_device, extra_host = device - others_device, host - others_host
    if max(extra_device, extra_host) <= 0.1 * max(1, w.get("span_ns", 0)):
        advice = (f"Rank {late} is late without doing more recorded work than its peers: look outside the trace "
                  "(other processes on its node, throttling, a slow disk or network), and check that the hosts' "
                  "clocks agree.")
    elif extra_device >= extra_host:
        advice = (f"Rank {late} computes more than its peers before the collective (load imbalance): balance the "
                  "work per rank (uneven batches or sequence lengths, pipeline stages, MoE routing). Shrinking or "
                  "overlapping messages will not help while the others wait for it.")
    else:
        advice = (f"Rank {late}'s host spends longer than its peers' outside {'ops' if cpu else 'device work'} "
                  "before the collective (host-side work, not load imbalance): move that work off the critical path "
                  "(a sleep or blocking wait, data loading, logging, checkpointing, Python overhead on that rank). "
                  "Shrinking or overlapping messages will not help while the others wait for it.")
    return [Finding("straggler", "warning", f"Rank {late} arrives last at collectives; the other ranks wait for it",
                    evidence, advice, None)]


def waiting_advice(cr: CrossRank | None) -> str | None:
    """The advice for exposed collectives when most of their time is waiting for a straggler (else None):
    overlapping or shrinking messages does not help while the ranks wait for a late one."""
    if cr is None or not straggler_findings(cr):
        return None
    return (f"{_pct(cr.wait_share or 0)} of collective time is ranks waiting for the last to arrive, most often "
            f"rank {cr.straggler_rank} (see the straggler finding): make it arrive on time first; overlapping "
            "communication or shrinking messages only helps the transfer that remains.")


def bandwidth_findings(cr: CrossRank) -> list[Finding]:
    """Per op and size bucket, the median bus bandwidth against the device's link class."""
    buckets: dict[tuple[str, str, str, float], list[float]] = defaultdict(list)
    for c in cr.collectives:
        known = link_class(c["device_name"])
        if known is None or c["busbw_gbps"] is None or (c["bytes"] or 0) < MIN_JUDGED_BYTES or c["host_count"] > 1:
            continue
        buckets[(c["op"], _bucket(c["bytes"]), known[0], known[1])].append(c["busbw_gbps"])
    out = []
    for (op, bucket, link, peak), values in sorted(buckets.items()):
        med = float(np.median(values))
        if med < LOW_BUSBW_SHARE * peak:
            out.append(Finding(
                "low_bus_bandwidth", "info", f"{op} of {bucket} reach {med:.1f} GB/s bus bandwidth ({link})",
                f"median bus bandwidth {med:.1f} GB/s over {len(values)} {op} of {bucket}, "
                f"{_pct(med / peak)} of the {link} peak {peak:.0f} GB/s",
                "Check the NCCL/RCCL transport (NCCL_DEBUG=INFO: is it using NVLink/P2P or falling back to "
                "sockets/SHM?), the topology and GPU placement, and whether these messages could be bucketed into "
                "larger ones. A single-rank trace counts waiting for peers as transfer, so check cross-rank skew "
                "first.", None))
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _text(cr: CrossRank) -> list[str]:
    if not cr.collectives and not cr.step_skew:  # nothing across ranks to speak of (e.g. a Neuron summary)
        return []
    if len(cr.ranks) < 2:  # one rank: there is nothing to match across ranks (not "0 matched across 0 ranks")
        lines = [f"{len(cr.collectives)} collectives on one rank: nothing to match across ranks"]
    else:
        lines = [f"{len(cr.collectives)} collectives; {cr.matched} matched across {len(cr.ranks)} ranks"]
    slowest = max((c for c in cr.collectives if c.get("dur_ns")), key=lambda c: max(c["dur_ns"]), default=None)
    if slowest is not None and len(cr.ranks) >= 2:
        at = int(np.argmax(slowest["dur_ns"]))
        size = f" of {size_text(slowest['bytes'])}" if slowest.get("bytes") is not None else ""
        lines.append(f"slowest collective: {slowest['name']}{size} took {duration(max(slowest['dur_ns']))} on rank "
                     f"{slowest['ranks'][at]} (#{slowest['ordinal']}; last to arrive: rank {slowest['last_rank']})")
    if cr.straggler_rank is not None:
        me = next(p for p in cr.per_rank if p["rank"] == cr.straggler_rank)
        lines.append(f"straggler rank {cr.straggler_rank} (last at {me['last_count']} of {cr.matched}, "
                     f"{duration(me['late_ns'])} late in total); most waiting rank {cr.most_waiting_rank}; "
                     f"waiting is {_pct(cr.wait_share or 0)} of collective time")
    if cr.step_skew:
        worst = max(cr.step_skew, key=lambda s: s["start_skew_ns"])
        lines.append(f"worst step start skew {duration(worst['start_skew_ns'])} ({worst['step']}, "
                     f"last to start: rank {worst['last_to_start_rank']})")
    by_size: dict[tuple[str, int], list[float]] = defaultdict(list)  # a bandwidth means nothing without its size
    for c in cr.collectives:
        if c["busbw_gbps"] is not None and c.get("bytes") is not None:
            by_size[(str(c["op"]), int(c["bytes"]))].append(float(c["busbw_gbps"]))
    for (op, nbytes), bw in sorted(by_size.items(), key=lambda kv: -len(kv[1]))[:3]:
        lines.append(f"bus bandwidth median {rate(float(np.median(bw)) * 1e9)} for {op} of {size_text(nbytes)} "
                     f"({len(bw)} collective{'s' if len(bw) > 1 else ''})")
    return lines


@dataclass
class RankPart:
    """What one rank contributes to the section (the map's output): its collectives and its steps; a time
    slice's (``Options.owned``) also keeps, per rank, what the merge needs (analysis/cross_rank_slices.py)."""

    records: pa.Table
    steps: list[tuple[int, str, int, int]]
    carries: list[tuple[int | None, SliceCarry]] | None = None


def _compute(ctx: Context) -> RankPart:
    host = ctx.trace.system_events
    s = keep(select(host, "category", "step"), owned_rows(select(host, "category", "step"), ctx.options.owned))
    steps = [(r, str(n), int(t), int(d)) for r, n, t, d in zip(
        s["rank"].to_pylist(), s["name"].cast(pa.string()).to_pylist(), s["ts_ns"].to_pylist(),
        s["dur_ns"].to_pylist(), strict=True) if r is not None]
    owned = ctx.options.owned
    if owned is None:
        return RankPart(rank_collectives(ctx.trace), steps)
    ranks = _ranks(ctx.trace)  # the slice's records stay its trace's (critical_path matches its events on them)
    return RankPart(rank_collectives(ctx.trace), steps,
                    [(r, _slice_carry(ctx.trace, r, len(ranks) == 1, owned)) for r in ranks])


def _slice_carry(trace: Trace, rank: int | None, only: bool, owned: tuple[int, int]) -> SliceCarry:
    """The rows of the collectives starting in the slice ``owned``, their look-back cut at its start, and the
    slice's tail, for both kinds of collective (analysis/cross_rank_slices.py)."""
    dev = trace.device_events if only else of_rank(trace.device_events, rank)
    host = trace.system_events if only else of_rank(trace.system_events, rank)
    effective = device_categories(dev)
    host_work = keep(host, isin(host["category"], HOST_WORK))
    kernels = keep(dev, effective == "compute")
    named = {"kernels": kernels, "host": _outermost(keep(host_work, ~isin(host_work["category"], ["python"])))}
    first = _first_ts(host, dev)
    host_busy = _busy(host_work)
    compute_busy = _busy(kernels)
    carry = SliceCarry(owned, first, bool(len(compute_busy[0])))
    for kind in KINDS:
        found = _found(trace, rank, dev, host, effective, kind)
        rows, _, _, starts, ends = found or (defaultdict(list), None, [], np.zeros(0, np.int64),
                                             np.zeros(0, np.int64))
        mine = (starts >= owned[0]) & (starts < owned[1])
        prev_end = np.r_[first, np.maximum.accumulate(ends)[:-1]] if len(ends) else ends
        lo = np.maximum(np.minimum(prev_end, starts), owned[0])[mine]
        hi = starts[mine]
        reach = int(ends[starts < owned[1]].max()) if bool((starts < owned[1]).any()) else owned[0]
        tail_lo = min(max(reach, owned[0]), owned[1])
        lo, hi = np.r_[lo, tail_lo], np.r_[hi, owned[1]]
        dev_busy = _busy(keep(host_work, isin(host_work["category"], ["framework_op"]))) if kind == "host" \
            else compute_busy
        dev_ns, host_ns = _covered(dev_busy, lo, hi), _covered(host_busy, lo, hi)
        totals: dict[str, list[dict[str, int]]] = {src: name_totals(t, lo, hi) if kind == "device" or src == "host" else [{} for _ in lo]
                  for src, t in named.items()}
        idx = np.flatnonzero(mine)
        table = {f.name: [rows[f.name][i] for i in idx] for f in RECORDS if f.name not in _LOOK_BACK}
        table.update(start_ns=hi[:-1].tolist(), end_ns=ends[mine].tolist(), before_start_ns=lo[:-1].tolist(),
                     before_device_ns=dev_ns[:-1].tolist(), before_host_ns=host_ns[:-1].tolist(),
                     before_top=[json.dumps({src: totals[src][i] for src in SOURCES}) for i in range(len(idx))])
        carry.kinds[kind] = KindPart(
            pa.table({f.name: pa.array(table[f.name], f.type) for f in RECORDS}, schema=RECORDS),
            Tail(tail_lo, int(dev_ns[-1]), int(host_ns[-1]), {src: totals[src][-1] for src in SOURCES}))
    return carry


_LOOK_BACK = ("start_ns", "end_ns", "before_start_ns", "before_device_ns", "before_host_ns", "before_top")


def _merge(parts: list[RankPart]) -> RankPart:
    """One rank's part from its time slices' (in time order): equal to ``compute`` on the whole rank."""
    by_rank: dict[int | None, list[SliceCarry]] = defaultdict(list)
    for p in parts:
        for rank, carry in p.carries or []:
            by_rank[rank].append(carry)
    tables = [merge_rows(by_rank[r], RECORDS) for r in sorted(by_rank, key=lambda r: (r is None, r or 0))]
    tables = [t for t in tables if t.num_rows]
    return RankPart(pa.concat_tables(tables) if tables else RECORDS.empty_table(), [s for p in parts for s in p.steps])


def _combine(parts: list[RankPart]) -> CrossRank:
    return cross_rank([p.records for p in parts], [s for p in parts for s in p.steps])


SECTION = Section("cross_rank", "cross-rank", _compute, to_json=lambda v: v.as_dict(), from_json=CrossRank.from_dict,
                  text=_text, combine=_combine, merge=_merge)
FINDINGS = FindingFamily("cross-rank collectives", findings)
