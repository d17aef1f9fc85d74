"""The whole rank's facts a time slice cannot see alone, found slice by slice (``diagnose`` out of core).

Two passes over the slices of one rank, each holding one slice at a time and keeping only reductions:

A. the attributed devices, the processes driving each (launch flows, else correlation ids), the step
   rows (few), each device's first/last activity and executions, the median launch call, and the events
   ending last (sanitize's ``longer_than_trace`` rule looks only at those);
B. with each device's steps known, the device work launched in them (launch flows, else correlation ids;
   the host ids and correlation ids of the launches in the steps are carried forward, a launch coming
   before its work), reduced to its first start and last end: ``choose_window``'s rules, exactly; and the
   start-up calls (analysis/startup.py, first uses carried forward).

The result, a :class:`~neurontrace.analysis.slices.RankPlan`, goes to every slice through ``Options.plan``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis import names
from neurontrace.analysis import value_counts as vc
from neurontrace.analysis.attribution import CPU_DEVICE, cpu_work, device_rows
from neurontrace.analysis.default_window import Window, step_cluster
from neurontrace.analysis.device_activity import Unrecorded, unrecorded
from neurontrace.analysis.driving import LINK_SAMPLE
from neurontrace.analysis.executions import device_executions
from neurontrace.analysis.id_bits import IdBits
from neurontrace.analysis.labels import spans
from neurontrace.analysis.malformed import last_clipped, sanitize
from neurontrace.analysis.phases import first_step_end
from neurontrace.analysis.slice_reach import StreamedReach
from neurontrace.analysis.slices import DevicePlan, RankPlan, owned_rows
from neurontrace.analysis.startup import FirstUses, sliced_startup_calls
from neurontrace.analysis.work import DEVICE_WORK, HOST_WORK, device_categories
from neurontrace.columns import isin, keep, matches, of_rank, select
from neurontrace.trace import Trace

Reader = Callable[[tuple[int, int]], Trace]  # the events of one rank overlapping [start, end)
LATEST = 16  # the latest-ending events kept per slice for sanitize's longer_than_trace rule
Device = tuple[str, int | None]


@dataclass
class _Extent:
    lo: int | None = None
    hi: int | None = None

    def add(self, s: np.ndarray, e: np.ndarray) -> None:
        if len(s):
            self.lo = int(s.min()) if self.lo is None else min(self.lo, int(s.min()))
            self.hi = int(e.max()) if self.hi is None else max(self.hi, int(e.max()))


@dataclass
class _PassA:
    devices: set[Device] = field(default_factory=set)
    host_ranks: set[int | None] = field(default_factory=set)
    pids: dict[Device, set[str]] = field(default_factory=dict)  # by launch flows
    corr_pids: dict[Device, set[str]] = field(default_factory=dict)  # by correlation ids
    steps: list[tuple[int, str, int, int, str]] = field(default_factory=list)  # (id, pid, ts, end, name)
    dev_extent: dict[Device, _Extent] = field(default_factory=dict)
    execs: dict[Device, tuple[int, _Extent]] = field(default_factory=dict)
    work_extent: dict[str, _Extent] = field(default_factory=dict)  # host work per pid
    launch_ns: dict[str, vc.Counts] = field(default_factory=dict)  # launch call durations per pid, as value
    # counts: their median is exact and they grow with the distinct durations, not with the launches
    latest: list[tuple[int, int, int]] = field(default_factory=list)  # (end, begin, id) ending last
    python: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # pid -> (rows, first end, its start)
    first_begin: int | None = None
    missing: Unrecorded | None = None  # device_activity.unrecorded, its counts summed over the slices
    device_work: bool = False

    def add(self, t: Trace, owned: tuple[int, int]) -> None:
        host, dev = t.system_events, t.device_events
        oh, od = owned_rows(host, owned), owned_rows(dev, owned)
        hs, he = spans(host)
        ds, de = spans(dev)
        alive_s, alive_e, alive_id = (np.r_[hs[oh], ds[od]], np.r_[he[oh], de[od]],
                                      np.r_[host["event_id"].to_numpy()[oh], dev["event_id"].to_numpy()[od]])
        if len(alive_s):
            self.first_begin = int(alive_s.min()) if self.first_begin is None else min(self.first_begin,
                                                                                       int(alive_s.min()))
            top = np.argsort(-alive_e, kind="stable")[:LATEST]
            self.latest = sorted(self.latest + list(zip(alive_e[top].tolist(), alive_s[top].tolist(),
                                                        alive_id[top].tolist(), strict=True)), reverse=True)[:LATEST]
        self.device_work |= bool(dev.num_rows and isin(dev["category"], list(DEVICE_WORK)).any())
        self._unrecorded(t, oh)
        self.host_ranks |= set(pc.unique(host["rank"]).to_pylist()) if host.num_rows else set()
        mine = host.filter(pa.array(oh))
        st = select(mine, "category", "step")
        self.steps += list(zip(st["event_id"].to_pylist(), st["pid"].cast(pa.string()).to_pylist(),
                               st["ts_ns"].to_pylist(), pc.add(st["ts_ns"], st["dur_ns"]).to_pylist(),
                               st["name"].cast(pa.string()).to_pylist(), strict=True))
        work = keep(mine, isin(mine["category"], HOST_WORK)) if mine.num_rows else mine
        pid_col = np.asarray(work["pid"].cast(pa.string()).to_numpy(zero_copy_only=False), dtype=object)
        ws, we = spans(work)
        for p in set(pid_col.tolist()):
            self.work_extent.setdefault(str(p), _Extent()).add(ws[pid_col == p], we[pid_col == p])
        py = select(mine, "category", "python")
        ppid = np.asarray(py["pid"].cast(pa.string()).to_numpy(zero_copy_only=False), dtype=object)
        ps, pe = spans(py)
        for p in set(ppid.tolist()):
            at = np.flatnonzero(ppid == p)
            i = at[int(np.argmin(pe[at]))]
            n, end, start = self.python.get(str(p), (0, np.iinfo(np.int64).max, 0))
            self.python[str(p)] = (n + len(at), *min((end, start), (int(pe[i]), int(ps[i]))))
        calls = isin(mine["category"], ["runtime", "driver"])
        calls &= matches(mine["name"], names.DEVICE_LAUNCH) if calls.any() else calls
        ms, me = spans(mine)
        mpid = np.asarray(mine["pid"].cast(pa.string()).to_numpy(zero_copy_only=False), dtype=object)
        for p in set(mpid[calls].tolist()):
            self.launch_ns[str(p)] = vc.merge([self.launch_ns.get(str(p), vc.Counts()),
                                               vc.of((me - ms)[calls & (mpid == p)])])
        if not dev.num_rows:
            return
        pairs = dev.filter(pa.array(od)).select(["device", "rank"]).group_by(["device", "rank"]).aggregate([])
        for pair in pairs.to_pylist():
            key = (str(pair["device"]), pair["rank"])
            self.devices.add(key)
            rows = device_rows(t, *key)
            own = owned_rows(rows, owned)
            rs, re_ = spans(rows)
            self.dev_extent.setdefault(key, _Extent()).add(rs[own], re_[own])
            ex = device_executions(rows.filter(pa.array(own)))
            n, ext = self.execs.get(key, (0, _Extent()))
            xs, xe = spans(ex)
            ext.add(xs, xe)
            self.execs[key] = (n + ex.num_rows, ext)
            self._driving(t, key, rows)

    def _unrecorded(self, t: Trace, oh: np.ndarray) -> None:
        """device_activity.unrecorded of the rank: its launches and dangling launch flows counted where they start."""
        if self.device_work:
            return
        got = unrecorded(t)
        if got is None:
            return
        host = t.system_events
        calls = oh & isin(host["category"], ["runtime", "driver"])
        calls &= matches(host["name"], names.DEVICE_LAUNCH) if calls.any() else calls
        flows = select(t.flows, "kind", "launch") if t.flows.num_rows else t.flows
        dangling = ~flows["dst_event_id"].is_valid().to_numpy(zero_copy_only=False)
        mine = np.isin(flows["src_event_id"].fill_null(-1).to_numpy(), host["event_id"].to_numpy()[oh])
        launches, starts = int(calls.sum()), int((dangling & mine).sum())
        if self.missing is not None:
            launches, starts = launches + self.missing.launches, starts + self.missing.flow_starts
        self.missing = replace(got, launches=launches, flow_starts=starts)

    def _driving(self, t: Trace, key: Device, rows: pa.Table) -> None:
        host = of_rank(t.system_events.select(["event_id", "pid", "rank", "correlation"]), key[1])
        flows = select(t.flows, "kind", "launch") if t.flows.num_rows else t.flows
        if flows.num_rows:
            hit = np.isin(flows["dst_event_id"].fill_null(-1).to_numpy(), rows["event_id"].to_numpy())
            src = flows["src_event_id"].fill_null(-1).to_numpy()[hit]
            linked = host.filter(pa.array(np.isin(host["event_id"].to_numpy(), src)))
            self.pids.setdefault(key, set()).update(p for p in linked["pid"].cast(pa.string()).to_pylist() if p)
        corr = rows["correlation"].drop_null()
        if len(corr) > LINK_SAMPLE:
            corr = corr.take(pa.array(np.linspace(0, len(corr) - 1, LINK_SAMPLE).astype(np.int64)))
        if len(corr):
            linked = host.filter(pc.fill_null(pc.is_in(host["correlation"], pc.unique(corr)), False))
            self.corr_pids.setdefault(key, set()).update(p for p in linked["pid"].cast(pa.string()).to_pylist()
                                                         if p)

    def clipped_ends(self) -> dict[int, int]:
        """sanitize's longer_than_trace rule on the events ending last (it never looks further)."""
        if self.first_begin is None or not self.latest:
            return {}
        ends = np.array([e for e, _, _ in self.latest], np.int64)
        begins = np.r_[np.array([b for _, b, _ in self.latest], np.int64), self.first_begin]
        ends = np.r_[ends, self.first_begin]  # the first start (as an instant), standing for every other event
        alive = np.r_[np.ones(len(self.latest), bool), True]
        clipped = last_clipped(begins, ends, alive)
        return {self.latest[i][2]: int(ends[i]) for i in np.flatnonzero(clipped[:-1]).tolist()}


def plan_rank(read: Reader, slices: list[tuple[int, int]], window: tuple[int, int] | None = None) -> RankPlan:
    """The plan of one rank cut into ``slices`` (in time order); ``window``: the user's --window."""
    a = _PassA()
    reach = StreamedReach()
    for owned in slices:
        held = sanitize(read(owned), owned)[0]
        a.add(held, owned)
        reach.add(held, owned)
        del held  # the next slice is read without this one held (both at once were the plan's peak)
    missing = None if a.device_work else a.missing
    plan = RankPlan([], cpu=not a.devices, clipped_ends=a.clipped_ends(), missing=missing, halo_ns=reach.halo_ns)
    clip = plan.clipped_ends
    steps = [(i, p, ts, clip.get(i, end), n) for i, p, ts, end, n in a.steps]
    plan.first_step_end = first_step_end([(n, ts, end - ts) for _, _, ts, end, n in steps])
    if missing is not None and missing.no_verdict:
        return plan
    if plan.cpu:
        pairs: list[Device] = [(CPU_DEVICE, r) for r in sorted(a.host_ranks, key=lambda r: (r is not None, r or 0))]
        pairs = pairs or [(CPU_DEVICE, None)]
    else:
        pairs = sorted(a.devices, key=lambda p: (p[1] is not None, p[1] or 0, p[0]))
    pending: list[tuple[DevicePlan, tuple[int, int, int]]] = []
    medians: dict[int, float | None] = {}  # per device plan: the median launch of its driving processes
    for key in pairs:
        pids = None if plan.cpu else (a.pids.get(key) or a.corr_pids.get(key) or None)
        mine = [s for s in steps if pids is None or s[1] in pids]
        launches = vc.merge(c for p, c in a.launch_ns.items() if pids is None or p in pids)
        dp = DevicePlan(key[0], key[1], Window((0, 0), "empty", "empty trace"),
                        None if pids is None else tuple(sorted(pids)))
        plan.devices.append(dp)
        mine = [s for s in mine if s[3] > s[2]]  # a step of no extent delimits nothing
        if window is not None:
            dp.window = Window(window, "option", "--window")
        elif mine:
            lo, hi, n = step_cluster(np.array([s[2] for s in mine], np.int64), np.array([s[3] for s in mine],
                                                                                          np.int64))
            dp.window = Window((lo, hi), "steps", f"{n} profiled steps" + (
                "" if n == len(mine) else f" of {len(mine)}, the largest contiguous run"), steps=n)
            if not plan.cpu:
                pending.append((dp, (lo, hi, n)))
        elif key in a.execs and a.execs[key][0]:
            n, ext = a.execs[key]
            dp.window = Window((int(ext.lo or 0), int(ext.hi or 0)), "executions", f"{n} device executions")
        else:
            dp.window = _activity(a, key, pids)
        py = [v for p, v in a.python.items() if pids is None or p in pids]
        if sum(n for n, _, _ in py) > 1:
            dp.python_cutoff_ns = min((end, start) for _, end, start in py)[1]
        medians[id(dp)] = vc.median(launches)
    _pass_b(read, slices, plan, pending, medians)
    return plan


def _activity(a: _PassA, key: Device, pids: set[str] | None) -> Window:
    ext = _Extent()
    dev = a.dev_extent.get(key)
    if dev is not None and dev.lo is not None:
        ext.add(np.array([dev.lo]), np.array([dev.hi]))
    for p, w in a.work_extent.items():
        if (pids is None or p in pids) and w.lo is not None:
            ext.add(np.array([w.lo]), np.array([w.hi]))
    if ext.lo is None:
        return Window((0, 0), "empty", "empty trace")
    return Window((ext.lo, int(ext.hi or 0)), "activity", "first to last activity")


@dataclass
class _Launched:
    """choose_window's launched rows of one device, reduced over the slices in time order."""

    lo: int
    hi: int
    # Ids joined slice by slice (a bit each over their span, analysis/id_bits.py): the device ids the launches in
    # the steps flow to, the correlation ids of those launches, and of every driving host event.
    step_dst: IdBits = field(default_factory=IdBits)
    step_corr: IdBits = field(default_factory=IdBits)
    all_corr: IdBits = field(default_factory=IdBits)
    any_work: bool = False
    extent: _Extent = field(default_factory=_Extent)

    def add(self, t: Trace, dp: DevicePlan, owned: tuple[int, int]) -> None:
        host = of_rank(t.system_events.select(["event_id", "pid", "rank", "ts_ns", "correlation"]), dp.rank)
        host = keep(host, isin(host["pid"], list(dp.pids))) if dp.pids else host
        oh = owned_rows(host, owned)
        hs = host["ts_ns"].to_numpy()
        in_steps = oh & (hs >= self.lo) & (hs < self.hi)
        flows = select(t.flows, "kind", "launch") if t.flows.num_rows else t.flows
        src = flows["src_event_id"].fill_null(-1).to_numpy()
        dst = flows["dst_event_id"].fill_null(-1).to_numpy()
        self.step_dst.add(dst[np.isin(src, host["event_id"].to_numpy()[in_steps])])
        hcorr = pc.fill_null(host["correlation"], -1).to_numpy()
        self.step_corr.add(hcorr[in_steps & (hcorr >= 0)])
        self.all_corr.add(hcorr[oh & (hcorr >= 0)])
        dev = device_rows(t, dp.device, dp.rank)
        dev = dev.filter(pa.array(owned_rows(dev, owned)))
        dev_ids = dev["event_id"].to_numpy()
        work = np.isin(device_categories(dev), list(DEVICE_WORK))
        dcorr = pc.fill_null(dev["correlation"], -1).to_numpy()
        by_flow = np.isin(dev_ids, dst)
        by_corr = (dcorr >= 0) & self.all_corr.has(dcorr)
        launched = self.step_dst.has(dev_ids)
        launched |= ~by_flow & (dcorr >= 0) & self.step_corr.has(dcorr)
        ds, de = spans(dev)
        unlinked = ~by_flow & ~by_corr & (ds < self.hi) & (de > self.lo)
        self.any_work |= bool((launched & work).any())
        pick = (launched | unlinked) & work
        self.extent.add(ds[pick], de[pick])


def _pass_b_slice(t: Trace, owned: tuple[int, int], plan: RankPlan, launched: dict[int, _Launched],
                  uses: dict[int, FirstUses], found: dict[int, list[np.ndarray]]) -> None:
    for dp in plan.devices:
        if id(dp) in launched:
            launched[id(dp)].add(t, dp, owned)
        if plan.cpu:
            host = of_rank(t.system_events, dp.rank)
            found[id(dp)].append(sliced_startup_calls(host, Trace().flows, cpu_work(host).slice(0, 0), owned,
                                                      uses[id(dp)]))  # as attribution's CPU labels
            continue
        host = of_rank(t.system_events.drop_columns(["args"]), dp.rank)
        host = keep(host, isin(host["pid"], list(dp.pids))) if dp.pids else host
        found[id(dp)].append(sliced_startup_calls(host, t.flows, device_rows(t, dp.device, dp.rank), owned,
                                                  uses[id(dp)]))


def _pass_b(read: Reader, slices: list[tuple[int, int]], plan: RankPlan,
            pending: list[tuple[DevicePlan, tuple[int, int, int]]], medians: dict[int, float | None]) -> None:
    launched = {id(dp): _Launched(lo, hi) for dp, (lo, hi, _) in pending}
    uses = {id(dp): FirstUses(medians.get(id(dp))) for dp in plan.devices}
    found: dict[int, list[np.ndarray]] = {id(dp): [] for dp in plan.devices}
    for owned in slices:  # one slice held at a time: each is dropped in _pass_b_slice before the next is read
        _pass_b_slice(sanitize(read(owned), owned, plan)[0], owned, plan, launched, uses, found)
    for dp in plan.devices:
        dp.startup_ids = np.unique(np.concatenate(found[id(dp)] or [np.zeros(0, np.int64)]))
    for dp, (lo, hi, n) in pending:
        got = launched[id(dp)]
        if not got.any_work or got.extent.lo is None:
            continue
        dlo, dhi = got.extent.lo, int(got.extent.hi or 0)
        more = dp.window.source.removeprefix(f"{n} profiled steps")
        dp.window = Window((dlo, dhi), "launched_in_steps", f"device work launched in {n} profiled steps{more}",
                           (dlo - lo, dhi - hi), n) if dhi > hi else \
            Window((lo, hi), "steps", dp.window.source, (dlo - lo, dhi - hi), n)
