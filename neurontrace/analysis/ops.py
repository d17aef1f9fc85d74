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
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis import names
from neurontrace.analysis._columns import isin, keep, select
from neurontrace.analysis.attribution import DeviceAttribution
from neurontrace.analysis.contract import Context, DeviceSection, Finding, FindingFamily
from neurontrace.analysis.opcost import FORMULAS, OpCost, op_cost
from neurontrace.analysis.peaks import DevicePeak, device_peak
from neurontrace.trace import Trace

CPU_DEVICE = "cpu"
UNLINKED = "(no launching op)"
LOW_EFFICIENCY = 0.30  # an op class below 30% of its roofline bound ...
LOW_EFFICIENCY_SHARE = 0.10  # ... holding at least 10% of the device's kernel time is a finding


@dataclass
class OpRow:
    """One (device, op name, kernel class) group."""

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
        return {"device": self.device, "op": self.op, "op_class": self.op_class, "kernel_class": self.kernel_class,
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
    dev = select(trace.device_events, "category", "compute")
    if device is not None:
        dev = select(dev, "device", device)
    host = trace.system_events
    if rank is not None:
        dev = keep(dev, pc.fill_null(pc.equal(dev["rank"], rank), False).to_numpy(zero_copy_only=False))
        host = keep(host, pc.fill_null(pc.equal(host["rank"], rank), False).to_numpy(zero_copy_only=False))
    costs, skipped = _owner_costs(host)
    if trace.device_events.num_rows == 0 or (device == CPU_DEVICE):
        return _cpu_table(host, costs, window, skipped)
    if window is not None:
        ts = dev["ts_ns"].to_numpy()
        dev = keep(dev, (ts >= window[0]) & (ts < window[1]))
    owner, launcher = _kernel_owner(host, dev, costs)
    return _kernel_table(trace, host, dev, owner, launcher, costs, skipped)


# -- which op owns each kernel ------------------------------------------------------------------


def _owner_costs(host: pa.Table) -> tuple[dict[int, tuple[int, OpCost]], dict[str, int]]:
    """Per host row of an op with a formula that is not inside another such op on its thread:
    (row, cost). Nested ones (aten::mm in aten::linear) map to their outermost op's row."""
    ops = np.flatnonzero(isin(host["category"], ["framework_op"]) & isin(host["name"], FORMULAS))
    if not len(ops):
        return {}, {}
    sub = host.take(pa.array(ops))
    names_ = sub["name"].cast(pa.string()).to_pylist()
    args = sub["args"].to_pylist()
    skipped: Counter[str] = Counter()
    cost: dict[int, OpCost] = {}
    for row, name, text in zip(ops.tolist(), names_, args, strict=True):
        c = op_cost(name, json.loads(text)) if text else None
        if c is None:
            skipped["no shapes" if not text or "Input Dims" not in text else "shapes do not fit the formula"] += 1
        else:
            cost[row] = c
    # Outermost per thread: sort by (thread, start, -end); an op inside the reach of an earlier one nests.
    ts = host["ts_ns"].to_numpy()
    end = ts + host["dur_ns"].to_numpy()
    thread = _thread_codes(host)
    known = np.array(sorted(cost), dtype=np.int64)
    out: dict[int, tuple[int, OpCost]] = {}
    if not len(known):
        return out, dict(skipped)
    order = known[np.lexsort((-end[known], ts[known], thread[known]))]
    top = -1
    for r in order.tolist():
        if top >= 0 and thread[r] == thread[top] and end[r] <= end[top] and ts[r] >= ts[top]:
            out[r] = (top, cost[top])
        else:
            top = r
            out[r] = (r, cost[r])
    return out, dict(skipped)


def _thread_codes(host: pa.Table) -> np.ndarray:
    key = pc.binary_join_element_wise(pc.cast(pc.fill_null(pc.cast(host["rank"], pa.string()), ""), pa.string()),
                                      pc.fill_null(host["pid"].cast(pa.string()), ""),
                                      pc.fill_null(host["tid"].cast(pa.string()), ""), "/")
    return np.asarray(pc.dictionary_encode(key).combine_chunks().indices.to_numpy(zero_copy_only=False))


def _kernel_owner(host: pa.Table, dev: pa.Table, costs: dict[int, tuple[int, OpCost]]
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
    corr_h = pc.fill_null(host["correlation"], -1).to_numpy(zero_copy_only=False)
    ext_h = pc.fill_null(host["external_id"], -1).to_numpy(zero_copy_only=False)
    rank_d = pc.fill_null(dev["rank"], -1).to_numpy(zero_copy_only=False).astype(np.int64)
    corr_d = pc.fill_null(dev["correlation"], -1).to_numpy(zero_copy_only=False)
    call = _lookup(rank_h[calls], corr_h[calls], calls, rank_d, corr_d)
    has = call >= 0
    # The call's External id names the op it ran in; the kernel's own External id when the call is absent.
    ext = np.where(has, ext_h[np.maximum(call, 0)], pc.fill_null(dev["external_id"], -1).to_numpy(
        zero_copy_only=False))
    rank_k = np.where(has, rank_h[np.maximum(call, 0)], rank_d)
    launch = _lookup(rank_h[opsr], ext_h[opsr], opsr, rank_k, ext)
    launcher[:] = launch
    if not costs:
        return owner, launcher
    # The owner: the outermost formula op around the launching op on its thread.
    ts = host["ts_ns"].to_numpy()
    end = ts + host["dur_ns"].to_numpy()
    thread = _thread_codes(host)
    tops = np.array(sorted({t for t, _ in costs.values()}), dtype=np.int64)
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


def _kernel_table(trace: Trace, host: pa.Table, dev: pa.Table, owner: np.ndarray, launcher: np.ndarray,
                  costs: dict[int, tuple[int, OpCost]], skipped: dict[str, int]) -> OpsReport:
    dur = dev["dur_ns"].to_numpy()
    host_names = host["name"].cast(pa.string())
    kname = dev["name"].cast(pa.string()).to_pylist()
    devices = dev["device"].cast(pa.string()).to_pylist()
    # Each owner's FLOPs and bytes are split over its kernels by duration.
    total = np.zeros(host.num_rows + 1, dtype=np.float64)
    count = np.zeros(host.num_rows + 1, dtype=np.int64)
    np.add.at(total, owner, dur)
    np.add.at(count, owner, 1)
    share = np.where(total[owner] > 0, dur / np.maximum(total[owner], 1), 1.0 / np.maximum(count[owner], 1))
    label_rows = np.where(owner >= 0, owner, launcher)
    uniq = np.unique(label_rows[label_rows >= 0])
    label_name = dict(zip(uniq.tolist(), host_names.take(pa.array(uniq)).to_pylist(), strict=True)) \
        if len(uniq) else {}
    kclass = {k: names.kernel_class(k) for k in set(kname)}
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for i in range(dev.num_rows):
        o = int(owner[i])
        lr = int(label_rows[i])
        op = label_name.get(lr, UNLINKED) if lr >= 0 else UNLINKED
        cost = costs[o][1] if o >= 0 else None
        key = (devices[i], op, kclass[kname[i]])
        g = groups.setdefault(key, {"kernels": 0, "ops": set(), "ns": 0, "flops": 0.0, "bytes": 0.0,
                                    "known": 0, "dtypes": Counter(), "cls": Counter()})
        g["kernels"] += 1
        g["ns"] += int(dur[i])
        if lr >= 0:
            g["ops"].add(lr)
        if cost is not None:
            g["flops"] += cost.flops * share[i]
            g["bytes"] += cost.bytes * share[i]
            g["known"] += 1
            g["dtypes"][cost.dtype] += 1
            g["cls"][cost.op_class] += 1
    peaks = {d: device_peak(trace, d) for d in sorted(set(devices))}
    rows = [_row(d, op, kc, g, peaks[d]) for (d, op, kc), g in groups.items()]
    rows.sort(key=lambda r: (r.device, -r.device_ns))
    return OpsReport(rows, peaks, skipped)


def _row(device: str, op: str, kclass: str, g: dict[str, Any], peak: DevicePeak | None) -> OpRow:
    known = g["known"] > 0
    return OpRow(device, op, g["cls"].most_common(1)[0][0] if g["cls"] else "unknown", kclass, g["kernels"],
                 len(g["ops"]), g["ns"], round(g["flops"]) if known else None, round(g["bytes"]) if known else None,
                 g["dtypes"].most_common(1)[0][0] if g["dtypes"] else None, peak)


def _cpu_table(host: pa.Table, costs: dict[int, tuple[int, OpCost]], window: tuple[int, int] | None,
               skipped: dict[str, int]) -> OpsReport:
    """No device kernels: each outermost formula op is measured by its own duration on the host."""
    tops = sorted({t for t, _ in costs.values()})
    ts = host["ts_ns"].to_numpy()
    dur = host["dur_ns"].to_numpy()
    if window is not None:
        tops = [t for t in tops if window[0] <= ts[t] < window[1]]
    names_ = host["name"].cast(pa.string()).take(pa.array(tops, pa.int64())).to_pylist() if tops else []
    by_top = dict(costs.values())
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for t, name in zip(tops, names_, strict=True):
        c = by_top[t]
        g = groups.setdefault((CPU_DEVICE, name, "cpu_op"), {"kernels": 0, "ops": set(), "ns": 0, "flops": 0.0,
                                                            "bytes": 0.0, "known": 0, "dtypes": Counter(),
                                                            "cls": Counter()})
        g["kernels"] += 1
        g["ops"].add(t)
        g["ns"] += int(dur[t])
        g["flops"] += c.flops
        g["bytes"] += c.bytes
        g["known"] += 1
        g["dtypes"][c.dtype] += 1
        g["cls"][c.op_class] += 1
    peak = DevicePeak(CPU_DEVICE, None, None)
    rows = sorted((_row(d, op, kc, g, peak) for (d, op, kc), g in groups.items()), key=lambda r: -r.device_ns)
    return OpsReport(rows, {CPU_DEVICE: peak} if rows else {}, skipped)


# -- diagnose: the op-efficiency device section and the low_efficiency finding -----------------


def _section(ctx: Context, d: DeviceAttribution) -> dict[str, Any] | None:
    rep = op_table(ctx.trace, window=d.window, device=d.device, rank=d.rank)
    if not rep.rows:
        return None
    peak = rep.devices.get(d.device)
    return {"device_name": peak.name if peak else None,
            "peak": peak.peak.as_dict() if peak and peak.peak else None,
            "classes": rep.classes(d.device), "top": [r.as_dict() for r in rep.rows[:TOP_ROWS]],
            "skipped": rep.skipped}


def _text(v: dict[str, Any]) -> list[str]:
    pk = v["peak"]
    head = (f"peak: {pk['device']} ({pk['source']})" if pk else
            f"peak: unknown device {v['device_name']!r}: no % of peak" if v["device_name"] else
            "peak: the trace does not name the device: no % of peak")
    parts = [f"{c['op_class']} {100 * c['share']:.1f}% of kernel time"
             + (f" at {c['pct_of_peak']:.1f}% of peak" if c["pct_of_peak"] is not None else "")
             for c in v["classes"][:6]]
    return [head, "; ".join(parts)]


def low_efficiency(ctx: Context) -> list[Finding]:
    out = []
    for d in ctx.devices:
        v = d.sections.get("ops")
        if not isinstance(v, dict):
            continue
        slow = [c for c in v["classes"] if c["share"] >= LOW_EFFICIENCY_SHARE and c["pct_of_peak"] is not None
                and c["pct_of_peak"] < 100 * LOW_EFFICIENCY]
        if slow:
            named = ", ".join(f"{c['op_class']} ({100 * c['share']:.1f}% of kernel time at {c['pct_of_peak']:.1f}% "
                              f"of its roofline bound)" for c in slow)
            out.append(Finding(
                "low_efficiency", "info", "Some op classes run far below the device's peak",
                f"on {d.device} ({v['peak']['device']}): {named}",
                "Run `neurontrace ops TRACE` for the ops behind each class; small or oddly shaped GEMMs, "
                "unfused elementwise chains and non-flash attention are the usual causes (larger tiles, "
                "torch.compile fusion, scaled_dot_product_attention).", d.device))
    return out


TOP_ROWS = 10  # rows of the op table kept in the diagnose JSON (``neurontrace ops`` prints all)
SECTION = DeviceSection("ops", "op efficiency", _section, text=_text)
FINDINGS = FindingFamily("low efficiency", low_efficiency)
