"""Per-op efficiency and the roofline: FLOPs, bytes and achieved throughput per op name and kernel class.

How device time meets FLOPs:

    host thread   [aten::linear ...................................]   <- outermost op with a formula
                     [aten::addmm .........]                             (owns the FLOPs: opcost.py)
                        [cudaLaunchKernel]  [cudaLaunchKernel]           <- External id -> launching op
    device stream          [gemm kernel ......]  [bias kernel]           <- correlation id -> launch call
                           |<---- 80% ------->|  |<- 20% ->|             FLOPs split by kernel time

A kernel's launch call is found by its correlation id, the launching op by the call's External id.
The op whose formula counts is the outermost op with a formula around the launching op on its thread
(``aten::linear`` rather than the ``aten::addmm`` inside it: one count, no double counting). That op's
FLOPs and bytes are split over all the kernels it launched, in proportion to their durations.

A trace without device kernels (a CPU run) has no kernels to inherit: the ops themselves are the
work, each measured by its own host duration.

Roofline (docs/ops.md): with the device's peak FLOP/s ``P`` for the op's dtype and its memory
bandwidth ``W``, an op of intensity ``I = FLOPs / bytes`` can reach at most ``min(P, I·W)``; it is
*compute* bound when ``I >= P / W`` (the ridge point), else *memory* bound, and its efficiency
(``pct_of_peak``) is achieved FLOP/s over that bound (achieved bandwidth over ``W`` when it has no FLOPs).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis import names
from neurontrace.analysis.attribution import DeviceAttribution
from neurontrace.analysis.contract import Context, DeviceSection, Finding, FindingFamily
from neurontrace.analysis.driving import correlation_calls, device_groups, launching_pids
from neurontrace.analysis.opcost import FORMULAS, op_cost
from neurontrace.analysis.peaks import DevicePeak, device_peak
from neurontrace.columns import codes, flat, isin, keep, of_rank, row_codes, select, take
from neurontrace.trace import Trace

CPU_DEVICE = "cpu"
UNLINKED = "(no launching op)"
LOW_EFFICIENCY = 0.30  # an op class below 30% of its roofline bound ...
LOW_EFFICIENCY_SHARE = 0.10  # ... holding at least 10% of the device's kernel time is a finding


@dataclass
class OpRow:
    """One (rank, device, op name, kernel class) group."""

    device: str
    op: str
    op_class: str  # the formula's class (gemm, attention ...) or "unknown"
    kernel_class: str
    kernels: int
    ops: int
    device_ns: int
    flops: int | None  # None: no formula for these ops (unknown, not zero)
    bytes: int | None
    dtype: str | None
    peak: DevicePeak | None = None
    rank: int | None = None  # every rank of a job has its own cuda:0

    @property
    def tflops_per_s(self) -> float | None:
        return self.flops / self.device_ns / 1e3 if self.flops is not None and self.device_ns else None

    @property
    def tb_per_s(self) -> float | None:
        return self.bytes / self.device_ns / 1e3 if self.bytes is not None and self.device_ns else None

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes if self.flops is not None and self.bytes else None

    def _roof(self) -> tuple[float | None, str | None]:
        """(efficiency, bound) against the device's roofline; (None, None) when a peak is unknown."""
        pk = self.peak.peak if self.peak else None
        if pk is None or self.flops is None or self.bytes is None or not self.device_ns:
            return None, None
        bw = pk.bytes_per_s
        if self.flops == 0:
            return (self.bytes / (self.device_ns * 1e-9)) / bw, "memory"
        top = pk.flops_per_s(self.dtype)
        if top is None:
            return None, None
        intensity = self.flops / self.bytes if self.bytes else float("inf")
        bound = "compute" if intensity >= top / bw else "memory"
        attainable = min(top, intensity * bw)
        return (self.flops / (self.device_ns * 1e-9)) / attainable, bound

    @property
    def pct_of_peak(self) -> float | None:
        eff = self._roof()[0]
        return 100 * eff if eff is not None else None

    @property
    def bound(self) -> str | None:
        return self._roof()[1]

    def as_dict(self) -> dict[str, Any]:
        def r(v: float | None, n: int = 4) -> float | None:
            return round(v, n) if v is not None else None
        return {"device": self.device, "rank": self.rank, "op": self.op, "op_class": self.op_class, "kernel_class": self.kernel_class,
                "kernels": self.kernels, "ops": self.ops, "device_ns": self.device_ns, "flops": self.flops,
                "bytes": self.bytes, "dtype": self.dtype, "tflops_per_s": r(self.tflops_per_s),
                "tb_per_s": r(self.tb_per_s), "intensity": r(self.intensity, 3), "pct_of_peak": r(self.pct_of_peak, 2),
                "bound": self.bound}


@dataclass
class OpsReport:
    rows: list[OpRow]
    devices: dict[str, DevicePeak] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)  # ops with a formula whose shapes did not fit, ...

    def classes(self, device: str) -> list[dict[str, Any]]:
        """Per op class on one device: kernel time, its share, and the efficiency of the class."""
        rows = [r for r in self.rows if r.device == device]
        total = sum(r.device_ns for r in rows) or 1
        by: dict[str, list[OpRow]] = defaultdict(list)
        for r in rows:
            by[r.op_class].append(r)
        out = []
        for cls, rs in by.items():
            ns = sum(r.device_ns for r in rs)
            known = [r for r in rs if r.pct_of_peak is not None]
            known_ns = sum(r.device_ns for r in known)
            # Time-weighted efficiency over the rows whose roofline is known.
            eff = sum(r.pct_of_peak * r.device_ns for r in known if r.pct_of_peak is not None) / known_ns \
                if known_ns else None
            out.append({"op_class": cls, "device_ns": ns, "share": ns / total,
                        "pct_of_peak": round(eff, 2) if eff is not None else None})
        return sorted(out, key=lambda c: -c["device_ns"])

    def as_dict(self) -> dict[str, Any]:
        return {"schema": "neurontrace.ops/1", "devices": {d: p.as_dict() for d, p in self.devices.items()},
                "rows": [r.as_dict() for r in self.rows], "skipped": self.skipped,
                "classes": {d: self.classes(d) for d in self.devices}}


def op_table(trace: Trace, *, window: tuple[int, int] | None = None, device: str | None = None,
             rank: int | None = None) -> OpsReport:
    """The per-op efficiency table of ``trace`` (kernels starting in ``window``, on ``device``, of ``rank``)."""
    return OpsIndex(trace, device=device, rank=rank, many_windows=False).view(window).report


@dataclass
class OpsView:
    """One window's table, and which of its rows each member (a kernel, or a host op of a CPU trace) fell in."""

    report: OpsReport
    event_ids: np.ndarray  # per member: its event id
    row: np.ndarray  # per member: its row in ``report.rows``

    def event_ids_of(self, row: int) -> np.ndarray:
        return np.asarray(self.event_ids[self.row == row])


class OpsIndex:
    """``op_table`` for one (trace, device, rank), built to be asked for many windows (the viewer's zooms).

    The host side is computed once: thread codes, the outermost formula ops, and each op's cost
    (evaluated when a window first needs it). Kernels are linked to their ops once, too. A window's
    linking differs from the whole trace's only through the launching process of kernels without a
    launch flow of their own: ``driving.launching_pids`` takes it from the device's other kernels
    when they all come from one process, so it is known exactly when the window holds one of those. So
    each device (rank, device) with one launching process keeps two links per kernel (that process known,
    and not) and a window picks one per device; a device launched from several processes is linked
    window by window, as ``op_table`` always did. ``many_windows=False`` (``op_table``, one window) skips the
    linking of every kernel and links each window's kernels alone."""

    def __init__(self, trace: Trace, *, device: str | None = None, rank: int | None = None,
                 many_windows: bool = True) -> None:
        dev = select(trace.device_events, "category", "compute")
        if device is not None:
            dev = select(dev, "device", device)
        host = trace.system_events
        if rank is not None:
            dev, host = of_rank(dev, rank), of_rank(host, rank)
        self.trace, self.host, self.dev = trace, host, dev
        self.thread = _thread_codes(host)
        self.top_of = _outermost(host, self.thread)
        self.cpu = trace.device_events.num_rows == 0 or device == CPU_DEVICE
        self.costs = _Costs.empty(host.num_rows + 1)  # one spare row: index 0 stays valid without host rows
        self._done = np.zeros(host.num_rows + 1, dtype=bool)
        self._linked: tuple[np.ndarray, ...] | None = None  # owner, launcher: known process / not; flowed; group
        if many_windows and not self.cpu and dev.num_rows:
            self._linked = self._link_once()

    def _link_once(self) -> tuple[np.ndarray, ...] | None:
        host, dev, flows = self.host, self.dev, self.trace.flows
        flowed = _own_flows(host, flows, dev)
        group = device_groups(dev)
        pid = launching_pids(host, flows, dev)[1]
        if len(np.unique(row_codes(group[flowed], pid[flowed]))) > len(np.unique(group[flowed])):
            return None  # a device launched from several processes: link window by window
        owner, launcher = _kernel_owner(host, flows, dev, self.top_of, self.thread)
        bare_owner, bare_launcher = owner.copy(), launcher.copy()
        if not flowed.all():
            alone = np.flatnonzero(~flowed)
            bare_owner[alone], bare_launcher[alone] = _kernel_owner(host, flows, take(dev, alone),
                                                                    self.top_of, self.thread)
        return owner, launcher, bare_owner, bare_launcher, flowed, group

    def view(self, window: tuple[int, int] | None = None) -> OpsView:
        host = self.host
        if self.cpu:
            tops = np.flatnonzero(self.top_of == np.arange(host.num_rows))
            if window is not None:
                ts = host["ts_ns"].to_numpy()[tops]
                tops = tops[(ts >= window[0]) & (ts < window[1])]
            report, row = _cpu_table(host, tops, self.costs, self._cost(tops))
            return OpsView(report, host["event_id"].to_numpy()[tops], row)
        dev = self.dev
        inside = np.ones(dev.num_rows, dtype=bool)
        if window is not None:
            ts = dev["ts_ns"].to_numpy()
            inside = (ts >= window[0]) & (ts < window[1])
            dev = keep(dev, inside)
        if self._linked is not None:
            owner, launcher, bare_owner, bare_launcher, flowed, group = (a[inside] for a in self._linked)
            # Where the window holds no kernel with a flow on a device, its other kernels' process is unknown.
            known = np.isin(group, group[flowed])
            owner, launcher = np.where(known, owner, bare_owner), np.where(known, launcher, bare_launcher)
        else:
            owner, launcher = _kernel_owner(host, self.trace.flows, dev, self.top_of, self.thread)
        skipped = self._cost(np.unique(owner[owner >= 0]))
        report, row = _kernel_table(self.trace, host, dev, owner, launcher, self.costs, skipped)
        return OpsView(report, dev["event_id"].to_numpy(), row)

    def _cost(self, rows: np.ndarray) -> dict[str, int]:
        """Evaluate the ops at ``rows`` not evaluated yet; the skipped counts of ``rows``."""
        new = rows[~self._done[rows]]
        if len(new):
            _evaluate(self.host, new, self.costs)
            self._done[new] = True
        skipped = {"no shapes": int(self.costs.no_shapes[rows].sum()),
                   "shapes do not fit the formula": int(self.costs.misfit[rows].sum())}
        return {k: v for k, v in skipped.items() if v}


def _own_flows(host: pa.Table, flows: pa.Table, dev: pa.Table) -> np.ndarray:
    """Per kernel: it is the end of a launch flow that starts at a host event (its launching process is known)."""
    if not flows.num_rows:
        return np.zeros(dev.num_rows, dtype=bool)
    launch = select(flows, "kind", "launch")
    src = launch["src_event_id"].fill_null(-1).to_numpy()
    dst = launch["dst_event_id"].fill_null(-1).to_numpy()
    return np.isin(dev["event_id"].to_numpy(), dst[np.isin(src, host["event_id"].to_numpy())])


# -- which op owns each kernel ------------------------------------------------------------------


def _outermost(host: pa.Table, thread: np.ndarray) -> np.ndarray:
    """Per host row: the row of the outermost op with a formula around it on its thread when the row is
    itself an op with a formula (itself when nothing encloses it), else -1. aten::mm in aten::linear -> linear."""
    out = np.full(host.num_rows, -1, dtype=np.int64)
    rows = np.flatnonzero(isin(host["category"], ["framework_op"]) & isin(host["name"], FORMULAS))
    if not len(rows):
        return out
    ts = host["ts_ns"].to_numpy()
    end = ts + host["dur_ns"].to_numpy()
    for th in np.unique(thread[rows]).tolist():  # a few threads; within one, a sweep in start order
        mine = rows[thread[rows] == th]
        mine = mine[np.lexsort((-end[mine], ts[mine]))]
        reach = np.maximum.accumulate(end[mine])
        # Not inside an earlier op: it ends past everything before it started.
        top = np.r_[True, end[mine][1:] > reach[:-1]]
        out[mine] = mine[top][np.cumsum(top) - 1]
    return out


@dataclass
class _Costs:
    """FLOPs, bytes, dtype and class per host row (NaN / -1 where unknown), and why an op with a formula
    got no cost (no shapes recorded, or shapes that do not fit it)."""

    flops: np.ndarray
    bytes: np.ndarray
    dtype: np.ndarray  # index into DTYPE_NAMES
    cls: np.ndarray  # index into CLASS_NAMES
    no_shapes: np.ndarray
    misfit: np.ndarray

    @classmethod
    def empty(cls, n: int) -> _Costs:
        return cls(np.full(n, np.nan), np.full(n, np.nan), np.full(n, -1, dtype=np.int64),
                   np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool))


DTYPE_NAMES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
CLASS_NAMES = ("gemm", "conv", "attention", "elementwise", "reduce", "norm")
COST_CHUNK = 1 << 16  # host rows whose cost keys are built at once
# Ids that differ between repeats of one op; the rest of its args (shapes, types, values) decide its cost.
_ID_FIELDS = r'("(?:External id|Ev Idx|Record function id|Sequence number|Fwd thread id)":\s*)-?\d+'


def _evaluate(host: pa.Table, rows: np.ndarray, out: _Costs) -> None:
    """Write the cost of the ops at ``rows`` into ``out``; each distinct (name, args without ids) is evaluated once."""
    if not len(rows):
        return
    seen: dict[str, tuple[float, float, float, float]] = {}
    for lo in range(0, len(rows), COST_CHUNK):  # by chunks: the keys are copies of args, most of a rank's bytes
        part = rows[lo:lo + COST_CHUNK]
        sub = take(host.select(["name", "args"]), part)
        key = pc.binary_join_element_wise(
            sub["name"].cast(pa.string()),
            pc.replace_substring_regex(pc.fill_null(sub["args"], ""), _ID_FIELDS, r"\1 0"), "\x00")
        enc = flat(key).dictionary_encode()
        per_key = np.array([seen[k] if k in seen else seen.setdefault(k, _key_cost(k))
                            for k in enc.dictionary.to_pylist()], dtype=np.float64).reshape(-1, 4)
        got = per_key[enc.indices.to_numpy(zero_copy_only=False)]
        out.flops[part], out.bytes[part] = got[:, 0], got[:, 1]
        out.dtype[part] = np.nan_to_num(got[:, 2], nan=-1).astype(np.int64)
        out.cls[part] = np.nan_to_num(got[:, 3], nan=-1).astype(np.int64)
        failed = np.isnan(got[:, 0])
        if failed.any():
            has_dims = pc.fill_null(pc.match_substring(sub["args"], "Input Dims"), False).to_numpy(zero_copy_only=False)
            out.no_shapes[part] = failed & ~has_dims
            out.misfit[part] = failed & has_dims


def _key_cost(key: str) -> tuple[float, float, float, float]:
    """(FLOPs, bytes, dtype index, class index) of one "name\\x00args without ids" key; NaNs when unknown."""
    name, _, text = key.partition("\x00")
    try:
        args = json.loads(text) if text else {}
    except ValueError:
        args = {}
    c = op_cost(name, args) if isinstance(args, dict) else None
    if c is None:
        return (np.nan, np.nan, np.nan, np.nan)
    return (c.flops, c.bytes, DTYPE_NAMES.index(c.dtype) if c.dtype in DTYPE_NAMES else -1,
            CLASS_NAMES.index(c.op_class))


def _thread_codes(host: pa.Table) -> np.ndarray:
    """One integer per (rank, pid, tid) of each host row, from the dictionary codes (no strings built)."""
    rank = pc.fill_null(host["rank"], -1).to_numpy(zero_copy_only=False).astype(np.int64) + 1
    pid, pids = _codes(host["pid"])
    tid, tids = _codes(host["tid"])
    return np.asarray((rank * (len(pids) + 1) + pid + 1) * (len(tids) + 1) + tid + 1)


def _kernel_owner(host: pa.Table, flows: pa.Table, dev: pa.Table, top_of: np.ndarray, thread: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(owner host row or -1, launching op host row or -1) per kernel."""
    n = dev.num_rows
    owner = np.full(n, -1, dtype=np.int64)
    launcher = np.full(n, -1, dtype=np.int64)
    if n == 0 or host.num_rows == 0:
        return owner, launcher
    cat = host["category"]
    calls = np.flatnonzero(isin(cat, ["runtime", "driver"]))
    opsr = np.flatnonzero(isin(cat, ["framework_op"]))
    rank_h = pc.fill_null(host["rank"], -1).to_numpy(zero_copy_only=False).astype(np.int64)
    ext_h = pc.fill_null(host["external_id"], -1).to_numpy(zero_copy_only=False)
    rank_d = pc.fill_null(dev["rank"], -1).to_numpy(zero_copy_only=False).astype(np.int64)
    call = correlation_calls(host, flows, dev, calls)
    has = call >= 0
    # The call's External id names the op it ran in; the kernel's own External id when the call is absent.
    ext = np.where(has, ext_h[np.maximum(call, 0)], pc.fill_null(dev["external_id"], -1).to_numpy(
        zero_copy_only=False))
    rank_k = np.where(has, rank_h[np.maximum(call, 0)], rank_d)
    launch = _lookup(rank_h[opsr], ext_h[opsr], opsr, rank_k, ext)
    launcher[:] = launch
    # The owner: the outermost formula op around the launching op on its thread.
    tops = np.flatnonzero(top_of == np.arange(len(top_of)))
    if not len(tops):
        return owner, launcher
    ts = host["ts_ns"].to_numpy()
    end = ts + host["dur_ns"].to_numpy()
    ok = np.flatnonzero(launch >= 0)
    lr = launch[ok]
    for th in np.unique(thread[lr]).tolist():  # a few threads: tops are disjoint within each
        mine = tops[thread[tops] == th]
        if not len(mine):
            continue
        mine = mine[np.argsort(ts[mine], kind="stable")]
        q = thread[lr] == th
        ops_q = lr[q]
        pos = np.searchsorted(ts[mine], ts[ops_q], side="right") - 1
        cand = mine[np.maximum(pos, 0)]
        inside = (pos >= 0) & (end[cand] >= end[ops_q])
        owner[ok[q]] = np.where(inside, cand, -1)
    return owner, launcher


def _lookup(rank_src: np.ndarray, key_src: np.ndarray, rows: np.ndarray, rank_q: np.ndarray,
            key_q: np.ndarray) -> np.ndarray:
    """For each query (rank, key), the row with that (rank, key) among the sources, or -1."""
    out = np.full(len(key_q), -1, dtype=np.int64)
    valid = key_src >= 0
    if not valid.any():
        return out
    src = rank_src[valid] * (1 << 40) + key_src[valid]
    r = rows[valid]
    order = np.argsort(src, kind="stable")
    src, r = src[order], r[order]
    q = rank_q * (1 << 40) + key_q
    pos = np.minimum(np.searchsorted(src, q), len(src) - 1)
    hit = (src[pos] == q) & (key_q >= 0)
    out[hit] = r[pos[hit]]
    return out


# -- tables -------------------------------------------------------------------------------------


def _codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[str]]:
    idx, values = codes(col)
    return idx, [str(v) for v in values]


def _mode(group: np.ndarray, value: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group, its most frequent non-negative value (-1 when it has none); ties: the smallest value."""
    out = np.full(n_groups, -1, dtype=np.int64)
    ok = value >= 0
    if not ok.any():
        return out
    width = int(value[ok].max()) + 1
    pairs, counts = np.unique(group[ok] * width + value[ok], return_counts=True)
    g, v = np.divmod(pairs, width)
    order = np.lexsort((v, -counts, g))  # per group: most frequent first
    first = order[np.r_[True, g[order][1:] != g[order][:-1]]]
    out[g[first]] = v[first]
    return out


def _kernel_table(trace: Trace, host: pa.Table, dev: pa.Table, owner: np.ndarray, launcher: np.ndarray,
                  costs: _Costs, skipped: dict[str, int]) -> tuple[OpsReport, np.ndarray]:
    """The table, and each kernel's row in it."""
    if dev.num_rows == 0:
        return OpsReport([], {}, skipped), np.zeros(0, dtype=np.int64)
    dur = dev["dur_ns"].to_numpy().astype(np.float64)
    # Each owner's FLOPs and bytes are split over its kernels by duration (equally when all last 0 ns).
    o = np.maximum(owner, 0)
    total = np.bincount(o, weights=dur, minlength=host.num_rows + 1)
    count = np.bincount(o, minlength=host.num_rows + 1)
    share = np.where(total[o] > 0, dur / np.maximum(total[o], 1), 1.0 / np.maximum(count[o], 1))
    known = (owner >= 0) & ~np.isnan(costs.flops[o])
    flops = np.where(known, costs.flops[o] * share, 0.0)
    nbytes = np.where(known, costs.bytes[o] * share, 0.0)
    dtype_code = np.where(known, costs.dtype[o], -1)
    cls_code = np.where(known, costs.cls[o], -1)
    label = np.where(owner >= 0, owner, launcher)
    host_name, host_names = _codes(host["name"])
    op_code = np.full(len(label), len(host_names), dtype=np.int64)  # UNLINKED
    op_code[label >= 0] = host_name[label[label >= 0]]
    op_names = [*host_names, UNLINKED]
    dev_code, dev_names = _codes(dev["device"])
    kclass, classes = _kernel_classes(dev)
    # NeuronCore instructions count their own FLOPs: they are their own op (their HLO op's name).
    nc = _neuron_counters(dev)
    if nc is not None:
        own, nc_flops, nc_bytes, nc_bf16, hlo, hlo_names = nc
        own &= ~known
        flops[own], nbytes[own] = nc_flops[own], nc_bytes[own]
        dtype_code[own] = np.where(nc_bf16[own], DTYPE_NAMES.index("bf16"), -1)
        known |= own
        named = (owner < 0) & (hlo >= 0)
        op_code[named] = len(op_names) + hlo[named]
        op_names += [str(h) for h in hlo_names]
        cls_code[own] = len(CLASS_NAMES) + kclass[own]  # the engine is the class
    rank_values, rank_code = np.unique(pc.fill_null(dev["rank"], -1).to_numpy(zero_copy_only=False),
                                       return_inverse=True)
    n_dev, n_ops, n_cls = len(dev_names) + 1, len(op_names), len(classes)
    combined, g = np.unique(((rank_code.reshape(-1) * n_dev + dev_code) * n_ops + op_code) * n_cls + kclass,
                            return_inverse=True)
    g = g.reshape(-1)
    ng = len(combined)
    rest, group_class = np.divmod(combined, n_cls)
    rest, group_op = np.divmod(rest, n_ops)
    group_rank, group_dev = np.divmod(rest, n_dev)
    groups = np.stack([group_dev, group_op, group_class])  # device, op, kernel class per group
    ops = np.zeros(ng, dtype=np.int64)
    linked = label >= 0
    if linked.any():
        pairs = np.unique(g[linked] * (host.num_rows + 1) + label[linked])
        ops = np.bincount(pairs // (host.num_rows + 1), minlength=ng)
    sums = {name: np.bincount(g, weights=w, minlength=ng) for name, w in
            (("ns", dur), ("flops", flops), ("bytes", nbytes), ("known", known.astype(np.float64)))}
    kernels = np.bincount(g, minlength=ng)
    dtype = _mode(g, dtype_code, ng)
    cls = _mode(g, cls_code, ng)
    class_names = [*CLASS_NAMES, *classes]
    peaks = {d: device_peak(trace, d) for d in sorted({dev_names[i] for i in groups[0].tolist()})}
    rows = []
    for i in range(ng):  # one row per group (a few hundred), not per kernel
        has = sums["known"][i] > 0
        device = dev_names[int(groups[0][i])]
        rows.append(OpRow(device, op_names[int(groups[1][i])],
                          class_names[cls[i]] if cls[i] >= 0 else "unknown", classes[int(groups[2][i])],
                          int(kernels[i]), int(ops[i]), int(sums["ns"][i]),
                          round(sums["flops"][i]) if has else None, round(sums["bytes"][i]) if has else None,
                          DTYPE_NAMES[dtype[i]] if dtype[i] >= 0 else None, peaks[device],
                          None if rank_values[group_rank[i]] < 0 else int(rank_values[group_rank[i]])))
    return _sorted(rows, g, lambda r: (r.device, r.rank is not None, r.rank or 0, -r.device_ns, r.op,
                                       r.kernel_class), peaks, skipped)


def _sorted(rows: list[OpRow], group: np.ndarray, key: Any, peaks: dict[str, DevicePeak],
            skipped: dict[str, int]) -> tuple[OpsReport, np.ndarray]:
    """The report with its rows in ``key`` order, and each member's row (its group's place in that order)."""
    order = sorted(range(len(rows)), key=lambda i: key(rows[i]))
    place = np.empty(len(rows), dtype=np.int64)
    place[order] = np.arange(len(rows))
    return OpsReport([rows[i] for i in order], peaks, skipped), place[group]


def _kernel_classes(dev: pa.Table) -> tuple[np.ndarray, list[str]]:
    """Per kernel its class: the NeuronCore engine for engine tracks (as attribution names them), else
    the class its name matches (names.KERNEL_CLASSES). Decided once per distinct (name, track)."""
    kname, knames = _codes(dev["name"])
    track, tracks = _codes(dev["track"])
    combo, inverse = np.unique(kname * (len(tracks) + 1) + track + 1, return_inverse=True)
    labels = []
    for c in combo.tolist():
        k, t = divmod(c, len(tracks) + 1)
        tr = tracks[t - 1] if t > 0 else ""
        labels.append(tr.split()[0].lower() if tr.lower().startswith(names.NEURON_ENGINES)
                      else names.kernel_class(knames[k]))
    classes = sorted(set(labels))
    per_combo = np.array([classes.index(lb) for lb in labels], dtype=np.int64)
    return per_combo[inverse.reshape(-1)], classes


def _arg_number(args: pa.ChunkedArray | pa.Array, key: str) -> np.ndarray:
    """A numeric field of the args JSON per row (NaN where absent), without decoding the JSON."""
    found = pc.extract_regex(pc.fill_null(args, ""), rf'"{key}":\s*(?P<v>-?\d+(?:\.\d+)?)')
    return np.asarray(pc.cast(pc.struct_field(found, "v"), pa.float64()).to_numpy(zero_copy_only=False),
                      dtype=np.float64)


def _neuron_counters(dev: pa.Table) -> tuple[np.ndarray, ...] | None:
    """For NeuronCore instructions: (has a FLOP counter, FLOPs, HBM bytes, FLOPs are BF16-equivalent, HLO op
    code, HLO op names). Neuron Explorer records per instruction ``raw_flops`` (a MAC is 2) and
    ``adjusted_flops`` (BF16-equivalent: to compare with the BF16 peak), and ``hbm_read_bytes`` /
    ``hbm_write_bytes`` (formats/neuron.md, the instruction table). None without Neuron devices."""
    dev_code, dev_names = _codes(dev["device"])
    neuron = np.array([d.startswith("neuron") for d in dev_names], dtype=bool)
    rows = np.flatnonzero(neuron[np.maximum(dev_code, 0)] & (dev_code >= 0)) if len(dev_names) else np.zeros(0, int)
    if not len(rows):
        return None
    n = dev.num_rows
    args = take(dev["args"], rows)
    adjusted, raw = _arg_number(args, "adjusted_flops"), _arg_number(args, "raw_flops")
    read, write = _arg_number(args, "hbm_read_bytes"), _arg_number(args, "hbm_write_bytes")
    full = [np.full(n, np.nan) for _ in range(3)]
    full[0][rows] = np.where(np.isnan(adjusted), raw, adjusted)
    full[1][rows] = np.nan_to_num(read) + np.nan_to_num(write)
    bf16 = np.zeros(n, dtype=bool)
    bf16[rows] = ~np.isnan(adjusted)
    hlo = pc.extract_regex(pc.fill_null(args, ""), r'"hlo_name":\s*"(?P<v>[^"]*)"')
    hlo_code, hlo_names = _codes(pc.struct_field(hlo, "v"))
    codes = np.full(n, -1, dtype=np.int64)
    codes[rows] = hlo_code
    has = ~np.isnan(full[0])
    return has, full[0], full[1], bf16, codes, np.asarray(hlo_names, dtype=object)


def _cpu_table(host: pa.Table, tops: np.ndarray, costs: _Costs, skipped: dict[str, int]
               ) -> tuple[OpsReport, np.ndarray]:
    """No device kernels: each outermost formula op is measured by its own duration on the host."""
    if not len(tops):
        return OpsReport([], {}, skipped), np.zeros(0, dtype=np.int64)
    dur = host["dur_ns"].to_numpy()[tops].astype(np.float64)
    name_code, host_names = _codes(host["name"])
    rank_values, rank_code = np.unique(pc.fill_null(host["rank"], -1).to_numpy(zero_copy_only=False)[tops],
                                       return_inverse=True)
    keys, g = np.unique(rank_code.reshape(-1) * (len(host_names) + 1) + name_code[tops], return_inverse=True)
    g_rank, g_names = np.divmod(keys, len(host_names) + 1)
    g = g.reshape(-1)
    ng = len(keys)
    known = ~np.isnan(costs.flops[tops])
    sums = {name: np.bincount(g, weights=w, minlength=ng) for name, w in
            (("ns", dur), ("flops", np.where(known, costs.flops[tops], 0.0)),
             ("bytes", np.where(known, costs.bytes[tops], 0.0)), ("known", known.astype(np.float64)))}
    count = np.bincount(g, minlength=ng)
    dtype = _mode(g, np.where(known, costs.dtype[tops], -1), ng)
    cls = _mode(g, np.where(known, costs.cls[tops], -1), ng)
    peak = DevicePeak(CPU_DEVICE, None, None)
    rows = [OpRow(CPU_DEVICE, host_names[int(g_names[i])], CLASS_NAMES[cls[i]] if cls[i] >= 0 else "unknown",
                  "cpu_op", int(count[i]), int(count[i]), int(sums["ns"][i]),
                  round(sums["flops"][i]) if sums["known"][i] else None,
                  round(sums["bytes"][i]) if sums["known"][i] else None,
                  DTYPE_NAMES[dtype[i]] if dtype[i] >= 0 else None, peak,
                  None if rank_values[g_rank[i]] < 0 else int(rank_values[g_rank[i]])) for i in range(ng)]
    return _sorted(rows, g, lambda r: (r.rank is not None, r.rank or 0, -r.device_ns, r.op), {CPU_DEVICE: peak},
                   skipped)


# -- diagnose: the op-efficiency device section and the low_efficiency finding -----------------


@dataclass
class OpEfficiency:
    """The device section's value: the device's peak, its op classes, the top rows of its op table."""

    device_name: str | None  # as the trace names the device (None: it does not)
    peak: dict[str, Any] | None  # the peak figures used (DevicePeak.peak.as_dict()); None: unknown device
    classes: list[dict[str, Any]]  # OpsReport.classes(device)
    top: list[dict[str, Any]]  # the first TOP_ROWS rows of the op table (OpRow.as_dict())
    skipped: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"device_name": self.device_name, "peak": self.peak, "classes": self.classes, "top": self.top,
                "skipped": self.skipped}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OpEfficiency:
        return cls(d.get("device_name"), d.get("peak"), list(d.get("classes") or []), list(d.get("top") or []),
                   dict(d.get("skipped") or {}))


def _section(ctx: Context, d: DeviceAttribution) -> OpEfficiency | None:
    rep = op_table(ctx.trace, window=d.window, device=d.device, rank=d.rank)
    if not rep.rows:
        return None
    peak = rep.devices.get(d.device)
    return OpEfficiency(peak.name if peak else None, peak.peak.as_dict() if peak and peak.peak else None,
                        rep.classes(d.device), [r.as_dict() for r in rep.rows[:TOP_ROWS]], rep.skipped)


def _text(v: OpEfficiency) -> list[str]:
    pk = v.peak
    head = (f"peak: {pk['device']} ({pk['source']})" if pk else
            f"peak: unknown device {v.device_name!r}: no % of peak" if v.device_name else
            "peak: the trace does not name the device: no % of peak")
    parts = [f"{c['op_class']} {100 * c['share']:.1f}% of kernel time"
             + (f" at {c['pct_of_peak']:.1f}% of peak" if c["pct_of_peak"] is not None else "")
             for c in v.classes[:6]]
    out = [head, "; ".join(parts)]
    if v.skipped.get("no shapes"):
        out.append(f"{v.skipped['no shapes']} ops have a FLOP formula but no recorded shapes: profile with "
                   "record_shapes=True to count their FLOPs")
    return out


def low_efficiency(ctx: Context) -> list[Finding]:
    out = []
    for d in ctx.devices:
        v = d.sections.get(SECTION.key)
        if not isinstance(v, OpEfficiency) or v.peak is None:
            continue
        slow = [c for c in v.classes if c["share"] >= LOW_EFFICIENCY_SHARE and c["pct_of_peak"] is not None
                and c["pct_of_peak"] < 100 * LOW_EFFICIENCY]
        if slow:
            named = ", ".join(f"{c['op_class']} ({100 * c['share']:.1f}% of kernel time at {c['pct_of_peak']:.1f}% "
                              f"of its roofline bound)" for c in slow)
            out.append(Finding(
                "low_efficiency", "info", "Some op classes run far below the device's peak",
                f"on {d.device} ({v.peak['device']}): {named}",
                "Run `neurontrace ops TRACE` for the ops behind each class; small or oddly shaped GEMMs, "
                "unfused elementwise chains and non-flash attention are the usual causes (larger tiles, "
                "torch.compile fusion, scaled_dot_product_attention).", d.device))
    return out


TOP_ROWS = 10  # rows of the op table kept in the diagnose JSON (``neurontrace ops`` prints all)
SECTION = DeviceSection("ops", "op efficiency", _section, to_json=lambda v: v.as_dict(),
                        from_json=OpEfficiency.from_dict, text=_text)
FINDINGS = FindingFamily("low efficiency", low_efficiency)
