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

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis import names, ops_parts
from neurontrace.analysis.attribution import DeviceAttribution
from neurontrace.analysis.contract import Context, DeviceSection, Finding, FindingFamily
from neurontrace.analysis.device_window import whole_window
from neurontrace.analysis.driving import LINKED_BY, device_groups, host_threads, launching_pids
from neurontrace.analysis.kernel_owner import Owners, kernel_owners, outermost
from neurontrace.analysis.neuron_flops import neuron_counters
from neurontrace.analysis.op_costs import CLASS_NAMES, DTYPE_NAMES, Costs, evaluate
from neurontrace.analysis.opcost import FORMULAS
from neurontrace.analysis.peaks import DevicePeak, Peak, device_peak
from neurontrace.analysis.slices import owned_rows
from neurontrace.columns import codes, isin, keep, of_rank, row_codes, select, take
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
        """Achieved over attainable, in percent; None when unknown, or impossible (above 100: ``over_peak``)."""
        eff = self._roof()[0]
        return 100 * eff if eff is not None and eff <= 1.0 else None

    @property
    def over_peak(self) -> float | None:
        """The percent of peak when it came out above 100 (a wrong FLOP count, kernel link or dtype), else None."""
        eff = self._roof()[0]
        return 100 * eff if eff is not None and eff > 1.0 else None

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
                "over_peak": r(self.over_peak, 2), "bound": self.bound}


def share_class(r: OpRow) -> str:
    """The class a row's time is shared under: its kernels' class (names.KERNEL_CLASSES, the attribution's
    ``compute.<class>``), not its op's formula class (a batch norm op whose kernels cuDNN runs is no "unknown");
    CPU ops, which run no kernels, by their formula's class."""
    return r.op_class if r.kernel_class == "cpu_op" else r.kernel_class


@dataclass
class OpsReport:
    rows: list[OpRow]
    devices: dict[str, DevicePeak] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)  # ops with a formula whose shapes did not fit, ...
    links: dict[str, int] = field(default_factory=dict)  # kernels per way their launching op was found
    parts: list[dict[str, Any]] | None = None  # a time slice's groups as sums (ops_parts), for ``merge``

    def impossible(self) -> list[OpRow]:
        """Rows whose efficiency came out above 100% of the device's peak: a bug, never a result (not shown)."""
        return [r for r in self.rows if r.over_peak is not None]

    def warnings(self) -> list[str]:
        """One entry per impossible row, naming the op: what ``ops`` and ``diagnose`` report instead of its figure."""
        def bound(r: OpRow) -> str:
            name = r.peak.peak.device if r.peak and r.peak.peak else "?"
            return f"{name}'s {r.dtype} compute bound" if r.bound == "compute" else f"{name}'s memory bound"
        return [f"{r.op} ({r.kernel_class} kernels on {r.device}{'' if r.rank is None else f', rank {r.rank}'}) at "
                f"{r.over_peak:,.0f}% of {bound(r)}" for r in self.impossible()]

    def classes(self, device: str) -> list[dict[str, Any]]:
        """Per class on one device: kernel time, its share, and the efficiency of the class. The class is
        the one classification (:func:`share_class`), so these shares name what diagnose's compute.<class> do."""
        rows = [r for r in self.rows if r.device == device]
        total = sum(r.device_ns for r in rows) or 1
        by: dict[str, list[OpRow]] = defaultdict(list)
        for r in rows:
            by[share_class(r)].append(r)
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
                "rows": [r.as_dict() for r in self.rows], "skipped": self.skipped, "links": self.links,
                "warnings": self.warnings(),
                "classes": {d: self.classes(d) for d in self.devices}}


def op_table(trace: Trace, *, window: tuple[int, int] | None = None, device: str | None = None,
             rank: int | None = None, owned: tuple[int, int] | None = None) -> OpsReport:
    """The per-op efficiency table of ``trace`` (kernels starting in ``window``, on ``device``, of ``rank``).

    ``owned``: a time slice's instants; the report then has no rows but ``parts`` (see :func:`merge`)."""
    return OpsIndex(trace, device=device, rank=rank, many_windows=False).view(window, owned).report


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
        self.thread = host_threads(host)
        self.top_of = outermost(host, self.thread)
        self.formula = isin(host["name"], FORMULAS)
        self.cpu = trace.device_events.num_rows == 0 or device == CPU_DEVICE
        self.costs = Costs.empty(host.num_rows + 1)  # one spare row: index 0 stays valid without host rows
        self._done = np.zeros(host.num_rows + 1, dtype=bool)
        self._linked: tuple[Owners, Owners, np.ndarray, np.ndarray] | None = None  # known process / not; flowed; group
        if many_windows and not self.cpu and dev.num_rows:
            self._linked = self._link_once()

    def _link_once(self) -> tuple[Owners, Owners, np.ndarray, np.ndarray] | None:
        host, dev, flows = self.host, self.dev, self.trace.flows
        flowed = _own_flows(host, flows, dev)
        group = device_groups(dev)
        pid = launching_pids(host, flows, dev)[1]
        if len(np.unique(row_codes(group[flowed], pid[flowed]))) > len(np.unique(group[flowed])):
            return None  # a device launched from several processes: link window by window
        linked = kernel_owners(host, flows, dev, self.top_of, self.thread)
        bare = Owners(linked.owner.copy(), linked.launcher.copy(), linked.by.copy())
        if not flowed.all():
            alone = np.flatnonzero(~flowed)
            got = kernel_owners(host, flows, take(dev, alone), self.top_of, self.thread)
            bare.owner[alone], bare.launcher[alone], bare.by[alone] = got.owner, got.launcher, got.by
        return linked, bare, flowed, group

    def view(self, window: tuple[int, int] | None = None, owned: tuple[int, int] | None = None) -> OpsView:
        host = self.host
        if self.cpu:
            tops = np.flatnonzero(self.top_of == np.arange(host.num_rows))
            for span in (window, owned):  # a slice counts the ops starting in it
                if span is not None:
                    ts = host["ts_ns"].to_numpy()[tops]
                    tops = tops[(ts >= span[0]) & (ts < span[1])]
            skipped = self._cost(tops)
            report, row = _cpu_table(host, tops, self._math_ops(tops), self.costs, skipped, owned is not None)
            return OpsView(report, host["event_id"].to_numpy()[tops], row)
        dev = self.dev
        inside = np.ones(dev.num_rows, dtype=bool)
        if window is not None:
            ts = dev["ts_ns"].to_numpy()
            inside = (ts >= window[0]) & (ts < window[1])
            dev = keep(dev, inside)
        if self._linked is not None:
            linked, bare, flowed, group = self._linked
            flowed, group = flowed[inside], group[inside]
            # Where the window holds no kernel with a flow on a device, its other kernels' process is unknown.
            known = np.isin(group, group[flowed])
            owners = Owners(*(np.where(known, a[inside], b[inside]) for a, b in
                              ((linked.owner, bare.owner), (linked.launcher, bare.launcher), (linked.by, bare.by))))
        else:
            owners = kernel_owners(host, self.trace.flows, dev, self.top_of, self.thread)
        skipped = self._cost(np.unique(owners.owner[owners.owner >= 0]))
        mine = None
        if owned is not None:  # a slice: an op counts where its first kernel starts
            mine = owned_rows(dev, owned)
            by = owners.owner >= 0
            skipped = self._cost(ops_parts.first_owned(owners.owner[by], dev["ts_ns"].to_numpy()[by], mine[by]))
        spelled = _spelled_dtypes(dev)
        launcher = owners.launcher
        # The launching op's dtype is its kernels' precision where their names do not say it.
        asked = (spelled < 0) & (launcher >= 0) & (launcher != owners.owner)
        self._cost(np.unique(launcher[asked][self.formula[launcher[asked]]]))
        report, row = _kernel_table(self.trace, host, dev, owners, spelled, self.costs, skipped, mine)
        return OpsView(report, dev["event_id"].to_numpy(), row)

    def _math_ops(self, tops: np.ndarray) -> np.ndarray:
        """Per outermost op of a CPU trace, the op that does its math: itself, or the op of the same name inside
        it with other input types (autocast: ``aten::linear(float)`` casts its inputs, then runs
        ``aten::linear(c10::BFloat16)``; the casts are not the math, and the inner op's dtype is the precision)."""
        math: np.ndarray = tops.copy()
        inner = np.flatnonzero((self.top_of >= 0) & (self.top_of != np.arange(len(self.top_of))))
        if not len(inner) or not len(tops):
            return math
        name = _codes(self.host["name"])[0]
        inner = inner[name[inner] == name[self.top_of[inner]]]
        top = self.top_of[inner]
        both = np.unique(np.r_[inner, top])
        found = pc.struct_field(pc.extract_regex(pc.fill_null(take(self.host["args"], both), ""), _TYPES), "v")
        types = np.asarray(pc.fill_null(found, "").to_numpy(zero_copy_only=False), dtype=object)
        t_inner, t_top = types[np.searchsorted(both, inner)], types[np.searchsorted(both, top)]
        other = (t_inner != t_top) & (t_inner != "") & (t_top != "")
        where = np.full(len(self.top_of), -1, dtype=np.int64)
        where[top[other][::-1]] = inner[other][::-1]  # the first such op of each outermost op
        self._cost(np.unique(inner[other]))  # its dtype is the row's
        found = where[tops]
        return np.asarray(np.where(found >= 0, found, tops))

    def _cost(self, rows: np.ndarray) -> dict[str, int]:
        """Evaluate the ops at ``rows`` not evaluated yet; the skipped counts of ``rows``."""
        new = rows[~self._done[rows]]
        if len(new):
            evaluate(self.host, new, self.costs)
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


_TYPES = r'"Input type":\s*(?P<v>\[[^\]]*\])'


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


def _kernel_table(trace: Trace, host: pa.Table, dev: pa.Table, owners: Owners, spelled: np.ndarray,
                  costs: Costs, skipped: dict[str, int], mine: np.ndarray | None = None) -> tuple[OpsReport, np.ndarray]:
    """The table, and each kernel's row in it. ``mine``: a time slice's kernels (the report: ``parts``)."""
    if dev.num_rows == 0:
        return OpsReport([], {}, skipped), np.zeros(0, dtype=np.int64)
    owner, launcher = owners.owner, owners.launcher
    dur = dev["dur_ns"].to_numpy().astype(np.float64)
    # Each owner's FLOPs and bytes are split over its kernels by duration (equally when all last 0 ns).
    o = np.maximum(owner, 0)
    total = np.bincount(o, weights=dur, minlength=host.num_rows + 1)
    count = np.bincount(o, minlength=host.num_rows + 1)
    share = np.where(total[o] > 0, dur / np.maximum(total[o], 1), 1.0 / np.maximum(count[o], 1))
    known = (owner >= 0) & ~np.isnan(costs.flops[o])
    flops = np.where(known, costs.flops[o] * share, 0.0)
    nbytes = np.where(known, costs.bytes[o] * share, 0.0)
    dtype_code = np.where(known, _kernel_dtypes(spelled, launcher, owner, costs), -1)
    cls_code = np.where(known, costs.cls[o], -1)
    label = np.where(owner >= 0, owner, launcher)
    host_name, host_names = _codes(host["name"])
    op_code = np.full(len(label), len(host_names), dtype=np.int64)  # UNLINKED
    op_code[label >= 0] = host_name[label[label >= 0]]
    op_names = [*host_names, UNLINKED]
    dev_code, dev_names = _codes(dev["device"])
    kclass, classes = _kernel_classes(dev)
    # NeuronCore instructions count their own FLOPs: they are their own op (their HLO op's name).
    nc = neuron_counters(dev)
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
    if mine is not None:
        counted = ops_parts.first_owned(g[linked] * (host.num_rows + 1) + label[linked], dev["ts_ns"].to_numpy()[linked],
                                        mine[linked]) // (host.num_rows + 1)
        keys = [(dev_names[int(groups[0][i])], None if rank_values[group_rank[i]] < 0 else int(rank_values[group_rank[i]]),
                 op_names[int(groups[1][i])], classes[int(groups[2][i])]) for i in range(ng)]
        parts = ops_parts.groups(keys, g, mine, np.bincount(counted, minlength=ng), dur, flops, nbytes, known,
                                 dtype_code, cls_code, class_names)
        links = {name: int(((owners.by == i) & mine).sum()) for i, name in enumerate(LINKED_BY)}
        return OpsReport([], peaks, skipped, links, parts), np.zeros(0, dtype=np.int64)
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
    report, place = _sorted(rows, g, lambda r: (r.device, r.rank is not None, r.rank or 0, -r.device_ns, r.op,
                                                r.kernel_class), peaks, skipped)
    report.links = {name: int((owners.by == i).sum()) for i, name in enumerate(LINKED_BY)}
    return report, place


def _spelled_dtypes(dev: pa.Table) -> np.ndarray:
    """Per kernel, the DTYPE_NAMES index of the precision its name spells (names.KERNEL_PRECISIONS), or -1."""
    kname, knames = _codes(dev["name"])
    per_name = np.array([DTYPE_NAMES.index(p) if (p := names.kernel_precision(k)) in DTYPE_NAMES else -1
                         for k in knames] + [-1], dtype=np.int64)  # once per distinct name (-1: a null name)
    return np.asarray(per_name[kname])


def _kernel_dtypes(spelled: np.ndarray, launcher: np.ndarray, owner: np.ndarray, costs: Costs) -> np.ndarray:
    """Per kernel, the DTYPE_NAMES index of the precision it computes in: as its name spells it (``spelled``),
    else the launching op's (the inner ``aten::addmm(c10::Half)`` of an autocast ``aten::linear(float)``), else
    the owner's; -1 when none is known."""
    inner = np.where(launcher >= 0, costs.dtype[np.maximum(launcher, 0)], -1)
    outer = np.where(owner >= 0, costs.dtype[np.maximum(owner, 0)], -1)
    return np.where(spelled >= 0, spelled, np.where(inner >= 0, inner, outer))


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


def _cpu_table(host: pa.Table, tops: np.ndarray, math: np.ndarray, costs: Costs, skipped: dict[str, int],
               as_parts: bool = False) -> tuple[OpsReport, np.ndarray]:
    """No device kernels: each outermost formula op is measured by the host duration of the op doing its math
    (``math``: itself, or autocast's inner op), at that op's precision. ``as_parts``: a time slice's table
    (``tops``: the ops starting in it), as ``parts``."""
    if not len(tops):
        return OpsReport([], {}, skipped, parts=[] if as_parts else None), np.zeros(0, dtype=np.int64)
    dur = host["dur_ns"].to_numpy()[math].astype(np.float64)
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
    dtype = _mode(g, np.where(known, costs.dtype[math], -1), ng)
    cls = _mode(g, np.where(known, costs.cls[tops], -1), ng)
    peak = DevicePeak(CPU_DEVICE, None, None)
    if as_parts:
        named = [(CPU_DEVICE, None if rank_values[g_rank[i]] < 0 else int(rank_values[g_rank[i]]),
                  host_names[int(g_names[i])], "cpu_op") for i in range(ng)]
        parts = ops_parts.groups(named, g, np.ones(len(g), dtype=bool), count, dur, np.where(known, costs.flops[tops], 0.0),
                                 np.where(known, costs.bytes[tops], 0.0), known, np.where(known, costs.dtype[math], -1),
                                 np.where(known, costs.cls[tops], -1), CLASS_NAMES)
        return OpsReport([], {CPU_DEVICE: peak}, skipped, parts=parts), np.zeros(0, dtype=np.int64)
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
    links: dict[str, int] = field(default_factory=dict)  # kernels by how they were tied to their op (LINKED_BY)
    warnings: list[str] = field(default_factory=list)  # ops whose figure came out above 100% of the peak
    parts: list[dict[str, Any]] | None = None  # a time slice's value only: its groups as sums (ops_parts)

    def as_dict(self) -> dict[str, Any]:
        out = {"device_name": self.device_name, "peak": self.peak, "classes": self.classes, "top": self.top,
               "skipped": self.skipped, "links": self.links, "warnings": self.warnings}
        if self.parts is not None:
            out["parts"] = self.parts
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OpEfficiency:
        return cls(d.get("device_name"), d.get("peak"), list(d.get("classes") or []), list(d.get("top") or []),
                   dict(d.get("skipped") or {}), dict(d.get("links") or {}), list(d.get("warnings") or []),
                   d.get("parts"))


def _section(ctx: Context, d: DeviceAttribution) -> OpEfficiency | None:
    owned = ctx.options.owned
    if owned is not None:
        return _slice_section(ctx, d, owned)
    rep = op_table(ctx.trace, window=d.window, device=d.device, rank=d.rank)
    if not rep.rows:
        return None
    peak = rep.devices.get(d.device)
    return OpEfficiency(peak.name if peak else None, peak.peak.as_dict() if peak and peak.peak else None,
                        rep.classes(d.device), [r.as_dict() for r in rep.rows[:TOP_ROWS]], rep.skipped, rep.links,
                        rep.warnings())


def _slice_section(ctx: Context, d: DeviceAttribution, owned: tuple[int, int]) -> OpEfficiency:
    """A time slice's value: the device's peak and its groups as sums (``parts``), for :func:`merge`."""
    peak = DevicePeak(CPU_DEVICE, None, None) if d.device == CPU_DEVICE else device_peak(ctx.trace, d.device)
    parts: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    links: dict[str, int] = {}
    if d.device == CPU_DEVICE or ctx.trace.device_events.num_rows:  # a slice may hold none of the device's work
        rep = op_table(ctx.trace, window=whole_window(ctx, d), device=d.device, rank=d.rank, owned=owned)
        parts, skipped, links = rep.parts or [], rep.skipped, rep.links
    return OpEfficiency(peak.name, peak.peak.as_dict() if peak.peak else None, [], [], skipped, links, [], parts)


def merge(values: list[OpEfficiency | None]) -> OpEfficiency | None:
    """One device's per-slice values (time order) -> the rank's: each group's sums and counts added
    (ops_parts.merge), then the rows, classes and top rows made as :func:`op_table` makes them.

    Exact at any cut on a CPU trace (an op is counted where it starts, by its own time). With kernels, a
    slice links a kernel to its op through the op's launch call, and splits an op's FLOPs over all its
    kernels: exact when the slice's trace reaches, beyond its instants, from the start of the op owning any
    kernel it holds to the end of that op's last kernel (the module doc of analysis/launch.py: ``2 * R``
    with R from the op's start, analysis/slice_reach.py)."""
    got = [v for v in values if v is not None]
    groups = ops_parts.merge(v.parts or [] for v in got)
    if not groups:
        return None
    first = got[0]
    device = str(groups[0]["key"][0])
    peak = DevicePeak(device, first.device_name, Peak(**first.peak) if first.peak else None)
    rows = [OpRow(dev, op, ops_parts.mode_class(p["cls"]), kclass, p["kernels"], p["ops"], p["ns"],
                  round(p["flops"]) if p["known"] else None, round(p["bytes"]) if p["known"] else None,
                  ops_parts.mode_dtype(p["dtype"]), peak, rank) for p in groups for dev, rank, op, kclass in [p["key"]]]
    rows.sort(key=lambda r: (r.device, r.rank is not None, r.rank or 0, -r.device_ns, r.op, r.kernel_class))
    skipped = {k: n for k in ("no shapes", "shapes do not fit the formula")
               if (n := sum(v.skipped.get(k, 0) for v in got))}
    links = {k: sum(v.links.get(k, 0) for v in got) for k in dict.fromkeys(k for v in got for k in v.links)}
    rep = OpsReport(rows, {device: peak}, skipped, links)
    return OpEfficiency(first.device_name, first.peak, rep.classes(device), [r.as_dict() for r in rep.rows[:TOP_ROWS]],
                        rep.skipped, rep.links, rep.warnings())


def _text(v: OpEfficiency) -> list[str]:
    pk = v.peak
    head = (f"peak: {pk['device']} ({pk['source']})" if pk else
            f"peak: unknown device {v.device_name!r}: no % of peak" if v.device_name else
            "peak: the trace does not name the device: no % of peak")
    parts = [f"{c['op_class']} {100 * c['share']:.1f}% of kernel time"
             + (f" at {c['pct_of_peak']:.1f}% of peak" if c["pct_of_peak"] is not None else "")
             for c in v.classes[:6]]
    out = [head, "; ".join(parts)]
    unlinked, total = v.links.get("unlinked", 0), sum(v.links.get(k, 0) for k in LINKED_BY)
    if unlinked:
        out.append(f"{unlinked} of {total} kernels have no launching CPU op (no launch call, or none encloses it)")
    if v.warnings:
        out.append(f"warning: {_listed(v.warnings)}: above 100% of the peak is impossible (wrong FLOPs, kernel "
                   "links, precision or peak): no % of peak shown for them")
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
                "torch.compile fusion, scaled_dot_product_attention).", d.device, d.rank))
    return out


def _listed(items: list[str], most: int = 5) -> str:
    return "; ".join(items[:most]) + (f"; and {len(items) - most} more" if len(items) > most else "")


def impossible_efficiency(ctx: Context) -> list[Finding]:
    """A % of peak above 100 is a bug (wrong FLOPs, kernel links or precision): a warning naming the op, never a result."""
    out = []
    for d in ctx.devices:
        v = d.sections.get(SECTION.key)
        if isinstance(v, OpEfficiency) and v.warnings:
            out.append(Finding(
                "impossible_efficiency", "warning", "An op's efficiency came out above 100% of the device's peak",
                f"on {d.device}: {_listed(v.warnings)}",
                "Not shown as a result. Check the op's recorded shapes and dtype, the device's peak "
                "(`neurontrace ops TRACE --json`: devices), and report the trace: the kernels credited to the op "
                "do more work than it does, or the precision chosen is too low.", d.device))
    return out


def findings(ctx: Context) -> list[Finding]:
    return low_efficiency(ctx) + impossible_efficiency(ctx)


TOP_ROWS = 10  # rows of the op table kept in the diagnose JSON (``neurontrace ops`` prints all)
SECTION = DeviceSection("ops", "op efficiency", _section, to_json=lambda v: v.as_dict(),
                        from_json=OpEfficiency.from_dict, text=_text, merge=merge)
FINDINGS = FindingFamily("low efficiency", findings)
