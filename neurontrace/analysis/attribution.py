"""Stall attribution: every nanosecond of a device's analysis window gets exactly one cause.

Causes, by priority where activities overlap (DESIGN.md, "Stall attribution"):

    compute > collectives > data_movement > host_fallback > host_overhead > idle

Each cause is split one level further (``compute.gemm``, ``data_movement.h2d``,
``host_overhead.launch`` ...): the labels form one priority list, and a single vectorized sweep
(:func:`intervals.sweep`) gives each elementary segment of the window to the first label covering
it. The six causes therefore always sum exactly to the window (``DeviceAttribution.check``).

"The host is busy" means covered by a host *work* event of the process driving the device: a
framework op, a runtime/driver call, a compile/load event or a Python frame. Annotations mark
regions and are not work, except data-loader ranges (the input pipeline is host work).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace import units
from neurontrace.analysis import names
from neurontrace.analysis.executions import device_executions
from neurontrace.analysis.intervals import NONE, gaps, layered, sweep, union, within
from neurontrace.causes import CAUSES
from neurontrace.columns import codes, flat, isin, keep, matches, row_codes, select, take
from neurontrace.trace import Trace

DEVICE_WORK = {"compute": "compute", "collective": "collectives", "memcpy": "data_movement",
               "memset": "data_movement", "dma": "data_movement"}
HOST_WORK = ("framework_op", "runtime", "driver", "compile", "load", "python", "transfer")
HOST_DETAIL_ORDER = ("compile", "load", "startup", "sync", "input_pipeline", "profiler", "launch", "runtime", "dispatch", "python")
DATA_DETAIL_ORDER = ("h2d", "d2h", "d2d", "p2p", "h2h", "dma_weights", "dma_io", "spill", "memset", "other")
CPU_DEVICE = "cpu"
LINK_SAMPLE = 4096  # correlation ids sampled to find the processes driving a device
MAX_GAPS_PER_STALL = 20  # how many compute gaps per requested stall the stall search examines at most
MIN_STALL_NS = 1_000  # shorter stretches are the seams between back-to-back kernels, not stalls

TOP_STALLS = 10  # the longest stalls each device reports unless asked for another number


@dataclass
class Stall:
    cause: str
    detail: str
    start_ns: int
    dur_ns: int
    evidence: list[str]
    source: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"cause": self.cause, "detail": self.detail, "start_ns": self.start_ns, "dur_ns": self.dur_ns,
                "evidence": self.evidence, "source": self.source}


@dataclass
class DeviceAttribution:
    device: str
    rank: int | None
    window: tuple[int, int]
    window_source: str
    causes_ns: dict[str, int]
    detail_ns: dict[str, int]
    top_stalls: list[Stall] = field(default_factory=list)
    window_rule: str = ""  # which rule chose the window (Window.rule)
    window_steps: int = 0  # profiled steps the window covers (0: not a step rule)
    device_lag_ns: tuple[int, int] | None = None  # launched_in_steps: device start/end minus the steps'
    sections: dict[str, Any] = field(default_factory=dict)  # device sections (analysis/contract.py), by key

    @property
    def engine_waits(self) -> dict[str, Any] | None:
        """Neuron devices: waits by producer (analysis/engine_waits.py); None elsewhere."""
        value = self.sections.get("engine_waits")
        return value if isinstance(value, dict) else None

    @property
    def window_ns(self) -> int:
        return self.window[1] - self.window[0]

    def fraction(self, cause: str) -> float:
        return self.causes_ns[cause] / self.window_ns if self.window_ns else 0.0

    def check(self) -> None:
        """The conservation law: the six causes, and the details of each, add up exactly."""
        if sum(self.causes_ns.values()) != self.window_ns:
            raise AssertionError(f"{self.device}: causes sum to {sum(self.causes_ns.values())}, "
                                 f"window is {self.window_ns}")
        for cause in CAUSES:
            part = sum(v for k, v in self.detail_ns.items() if k.split(".", 1)[0] == cause)
            if part != self.causes_ns[cause]:
                raise AssertionError(f"{self.device}: {cause} details sum to {part}, not {self.causes_ns[cause]}")


@dataclass
class _Label:
    cause: str
    detail: str
    starts: np.ndarray
    ends: np.ndarray
    table: pa.Table  # the events behind the intervals ...
    rows: np.ndarray  # ... at these positions


def attribute(
    trace: Trace,
    *,
    window: tuple[int, int] | None = None,
    fallback_event_ids: np.ndarray | None = None,
    top: int = TOP_STALLS,
) -> list[DeviceAttribution]:
    """Attribution for every device of ``trace`` (or the host CPU when it has no device activity).

    A trace without events (a Neuron summary, a capture whose profiles were not decoded) has nothing
    to attribute: no device, rather than an empty ``cpu`` window.
    """
    dev = trace.device_events
    fallback = fallback_event_ids if fallback_event_ids is not None else np.zeros(0, dtype=np.int64)
    if dev.num_rows == 0 and trace.system_events.num_rows == 0:
        return []
    if dev.num_rows == 0:
        ranks = sorted(pc.unique(trace.system_events["rank"]).to_pylist(), key=lambda r: (r is not None, r or 0))
        return [_attribute_cpu(trace, r, window, fallback, top) for r in ranks or [None]]
    # One block per device of each rank: every rank of a job has its own cuda:0.
    pairs = dev.select(["device", "rank"]).group_by(["device", "rank"]).aggregate([]).to_pylist()
    pairs.sort(key=lambda p: (p["rank"] is not None, p["rank"] or 0, str(p["device"])))
    return [_attribute_device(trace, str(p["device"]), p["rank"], window, fallback, top) for p in pairs]


def _attribute_device(trace: Trace, device: str, rank: int | None, window: tuple[int, int] | None,
                      fallback: np.ndarray, top: int) -> DeviceAttribution:
    dev = device_rows(trace, device, rank)
    host = driving_host_events(trace, dev)
    win = Window(window, "option", "--window") if window else choose_window(trace, host, dev)
    labels = _device_labels(dev) + _host_labels(host, fallback)
    return _finish(trace, device, rank, win, labels, top)


def device_rows(trace: Trace, device: str, rank: int | None) -> pa.Table:
    """The events of one attributed device: that device, of that rank (null rank: rank-less events)."""
    return _of_rank(select(trace.device_events, "device", device), rank)


def _attribute_cpu(trace: Trace, rank: int | None, window: tuple[int, int] | None, fallback: np.ndarray,
                   top: int) -> DeviceAttribution:
    """No accelerator in the trace: each rank's CPU is the device, framework ops are its compute."""
    host = _of_rank(trace.system_events, rank)
    ops = select(host, "category", "framework_op")
    win = Window(window, "option", "--window") if window else choose_window(trace, host, ops)
    return _finish(trace, CPU_DEVICE, rank, win, _cpu_labels(host, ops, fallback), top)


def _cpu_labels(host: pa.Table, ops: pa.Table, fallback: np.ndarray) -> list[_Label]:
    s, e = _spans(ops)
    labels = [_Label("compute", "cpu_ops", s, e, ops, np.arange(ops.num_rows))]
    # CPU collectives (gloo:all_reduce ...) are the CPU device's communication, on whichever thread.
    coll = keep(host, matches(host["name"], names.HOST_COLLECTIVE))
    labels += _labels(coll, [coll["name"]], lambda n: ("collectives", names.collective_op(n or "")),
                      np.ones(coll.num_rows, dtype=bool))
    return labels + _host_labels(host, fallback)


def _of_rank(table: pa.Table, rank: int | None) -> pa.Table:
    """Rows of ``rank`` (rows without a rank when ``rank`` is None); one rank (the usual case): no copy."""
    mask = pc.is_null(table["rank"]) if rank is None else pc.fill_null(pc.equal(table["rank"], rank), False)
    return keep(table, mask.to_numpy(zero_copy_only=False))


def _finish(trace: Trace, device: str, rank: int | None, window: Window, labels: list[_Label],
            top: int) -> DeviceAttribution:
    win = window.span
    labels = _ordered(labels)
    owned, unexplained, unions = layered(win, [(lb.starts, lb.ends) for lb in labels])
    causes = dict.fromkeys(CAUSES, 0)
    detail: dict[str, int] = {}
    for lb, ns in zip(labels, owned, strict=True):
        if ns:
            causes[lb.cause] += ns
            key = f"{lb.cause}.{lb.detail}"
            detail[key] = detail.get(key, 0) + ns
    causes["idle"] = unexplained
    if unexplained:
        detail["idle.unexplained"] = unexplained
    out = DeviceAttribution(device, rank, win, window.source, causes, detail, window_rule=window.rule,
                            window_steps=window.steps, device_lag_ns=window.lag_ns)
    out.top_stalls = _top_stalls(trace, win, labels, unions, top)
    out.check()
    return out


def _ordered(labels: list[_Label]) -> list[_Label]:
    """Priority order: cause first (CAUSES), then the detail order of that cause."""
    def key(lb: _Label) -> tuple[int, int, str]:
        order = {"host_overhead": HOST_DETAIL_ORDER, "data_movement": DATA_DETAIL_ORDER}.get(lb.cause, ())
        return CAUSES.index(lb.cause), order.index(lb.detail) if lb.detail in order else len(order), lb.detail
    return sorted((lb for lb in labels if len(lb.starts)), key=key)


@dataclass
class CauseIntervals:
    """Where each cause held on one device: the window cut into maximal runs of one ``cause.detail``.

    The runs are sorted, disjoint and cover the window exactly; per cause they add up to the totals
    :func:`attribute` reports for the same device, window and fallback events (tested on every sample).
    """

    device: str
    rank: int | None
    window: tuple[int, int]  # absolute ns
    starts: np.ndarray  # int64 absolute ns
    ends: np.ndarray
    cause: np.ndarray  # int16 index into CAUSES
    detail: np.ndarray  # int16 index into details
    details: list[str]  # "cause.detail"
    _by_cause: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    def total_ns(self) -> dict[str, int]:
        per = np.zeros(len(CAUSES), dtype=np.int64)
        np.add.at(per, self.cause.astype(np.int64), self.ends - self.starts)  # exact integer sums
        return {c: int(v) for c, v in zip(CAUSES, per.tolist(), strict=True)}

    def of_cause(self, cause: str) -> tuple[np.ndarray, np.ndarray]:
        """The runs of one cause (sorted, disjoint); computed once per cause."""
        if cause not in self._by_cause:
            mine = self.cause == CAUSES.index(cause)
            self._by_cause[cause] = (self.starts[mine], self.ends[mine])
        return self._by_cause[cause]


def cause_intervals(trace: Trace, device: str, rank: int | None, window: tuple[int, int], *,
                    fallback_event_ids: np.ndarray | None = None) -> CauseIntervals:
    """The runs of every cause over ``window`` for ``device`` of ``rank``, from the same labels and
    priority order as :func:`attribute` (``"cpu"`` for a trace analysed with the host as the device).

    Pass the window and fallback events of a :class:`DeviceAttribution` (``diagnose`` reports both) to
    get exactly its totals back, cut in time.
    """
    fallback = fallback_event_ids if fallback_event_ids is not None else np.zeros(0, dtype=np.int64)
    if device == CPU_DEVICE and not select(trace.device_events, "device", device).num_rows:
        host = _of_rank(trace.system_events, rank)
        labels = _cpu_labels(host, select(host, "category", "framework_op"), fallback)
    else:
        dev = _of_rank(select(trace.device_events, "device", device), rank)
        labels = _device_labels(dev) + _host_labels(driving_host_events(trace, dev), fallback)
    labels = _ordered(labels)
    starts, ends, label = sweep(window, [(lb.starts, lb.ends) for lb in labels]).runs()
    details = [f"{lb.cause}.{lb.detail}" for lb in labels] + ["idle.unexplained"]
    label = np.where(label == NONE, len(labels), label)
    cause_of_label = np.array([CAUSES.index(lb.cause) for lb in labels] + [CAUSES.index("idle")], dtype=np.int16)
    # Neighbouring runs of different labels but the same detail text (two labels can share one) merge.
    names_ = list(dict.fromkeys(details))
    detail_of_label = np.array([names_.index(d) for d in details], dtype=np.int16)
    det = detail_of_label[label]
    if len(det):
        first = np.flatnonzero(np.r_[True, det[1:] != det[:-1]])
        last = np.r_[first[1:], len(det)] - 1
        starts, ends, label = starts[first], ends[last], label[first]
    return CauseIntervals(device, rank, window, starts.astype(np.int64), ends.astype(np.int64),
                          cause_of_label[label], detail_of_label[label], names_)


# -- what is device work -------------------------------------------------------------------------


def device_categories(dev: pa.Table) -> np.ndarray:
    """Per device event, the category it counts as (:func:`names.device_category`: the parser's, unless
    its name says it is a collective, a copy or a wait), computed once per distinct (category, name)."""
    codes, keys = _per_distinct([dev["category"], dev["name"]],
                                lambda c, n: names.device_category(c or "", n or ""))
    return np.asarray(keys, dtype=object)[codes] if len(keys) else np.zeros(dev.num_rows, dtype=object)


def _device_labels(dev: pa.Table) -> list[_Label]:
    cat = dev["category"]
    effective = device_categories(dev)
    work = np.isin(effective, list(DEVICE_WORK))
    coll = _collective_names(dev, effective == "collective")
    direction = _directions(dev, effective == "dma")
    columns = [cat, dev["name"], direction, dev["track"], coll]
    return _labels(dev, columns, _device_cause, work)


def _device_cause(cat: str, name: str, direction: str | None, track: str | None,
                  coll: str | None) -> tuple[str, str]:
    effective = names.device_category(cat or "", name or "")
    return DEVICE_WORK.get(effective, ""), _device_detail(effective, name or "", direction, track, coll)


def _device_detail(cat: str, name: str, direction: str | None, track: str | None, coll: str | None) -> str:
    if cat == "compute":
        if track and str(track).lower().startswith(names.NEURON_ENGINES):
            return str(track).split()[0].lower()  # Neuron: one detail per engine
        return names.kernel_class(name)
    if cat == "collective":
        return names.collective_op(name, coll)
    if cat == "memset":
        return "memset"
    if cat == "memcpy" or direction:
        return direction or "other"
    # Neuron DMA queues: spill reloads, weight loads, else activations/IO
    return names.classify(f"{name} {track}", names.NEURON_DMA_KINDS, "dma_io")


def _directions(dev: pa.Table, rows_mask: np.ndarray) -> pa.Array:
    """The direction column, completed for copies whose direction is only in their args (MTIA DMA)."""
    direction = flat(dev["direction"])
    missing = rows_mask & ~direction.is_valid().to_numpy(zero_copy_only=False)
    if not missing.any():
        return direction
    rows = np.flatnonzero(missing)
    args = pc.fill_null(take(dev["args"], rows), "").to_pylist()
    filled = direction.cast(pa.string()).to_pylist()
    for r, a in zip(rows.tolist(), args, strict=True):  # the copies without a direction only
        m = names.DIRECTION.search(a)
        filled[r] = names.DIRECTION_WORDS[m.group(1)] if m else None
    return pa.array(filled, pa.string()).dictionary_encode()


def _labels(table: pa.Table, columns: list[Any], fn: Any, mask: np.ndarray) -> list[_Label]:
    """One label per distinct (cause, detail) that ``fn`` gives the rows selected by ``mask``."""
    codes, keys = _per_distinct(columns, fn)
    rows = np.flatnonzero(mask)
    if not len(rows):
        return []
    start, end = _spans(table)
    code = codes[rows]
    # Few labels: 16-bit codes let numpy's stable sort use radix sort, linear in the rows.
    order = np.argsort(code.astype(np.int16) if len(keys) < 2**15 else code, kind="stable")
    counts = np.bincount(code, minlength=len(keys))
    out = []
    for k, part in zip(keys, np.split(rows[order], np.cumsum(counts)[:-1]), strict=True):
        if len(part):
            out.append(_Label(k[0], k[1], start[part], end[part], table, part))
    return out


def _per_distinct(columns: list[Any], fn: Any) -> tuple[np.ndarray, list[Any]]:
    """(code per row, ``fn`` of each distinct combination of the columns' values): fn runs once per
    distinct combination (few), never per row."""
    n = len(columns[0])
    combined = np.zeros(n, dtype=np.int64)
    dictionaries = []
    for col in columns:
        idx, values = codes(col)  # Trace string columns are dictionaries already
        combined = combined * (len(values) + 1) + idx + 1  # 0 = null
        dictionaries.append([None, *values])
    if int(combined.max(initial=0)) < 4 * n + 1024:  # few combinations: count instead of sorting
        present = np.flatnonzero(np.bincount(combined))
        lookup = np.zeros(int(present[-1]) + 1 if len(present) else 1, dtype=np.int64)
        lookup[present] = np.arange(len(present))
        distinct, inverse = present, lookup[combined]
    else:
        distinct, inverse = np.unique(combined, return_inverse=True)
    results: list[Any] = []
    code_of_combo = []
    for combo in distinct.tolist():
        values, rest = [], combo
        for d in reversed(dictionaries):
            rest, i = divmod(rest, len(d))
            values.append(d[i])
        result = fn(*reversed(values))
        if result not in results:
            results.append(result)
        code_of_combo.append(results.index(result))
    return np.asarray(code_of_combo, dtype=np.int64)[inverse.reshape(-1)], results


# -- what is host work ---------------------------------------------------------------------------


def driving_host_events(trace: Trace, dev: pa.Table) -> pa.Table:
    """Host events of the process(es) that launched this device's work.

    Found through correlation ids (runtime call ↔ device op). Without any link, the host events of
    the same rank stand in (a CPU-side profile of a Neuron device, a GPU-only trace). Without the
    ``args`` column: the analyses read names, times and links, and a copy of ``args`` is most of a rank.
    """
    host = trace.system_events.drop_columns(["args"])
    rank = _first(dev["rank"])
    if rank is not None:  # correlation ids repeat across ranks: look only at this rank's host events
        host = keep(host, pc.fill_null(pc.equal(host["rank"], rank), False).to_numpy(zero_copy_only=False))
    src = launch_sources(trace, dev)  # launch flows name their host end exactly (no id collisions)
    if len(src):
        linked = host.filter(pa.array(np.isin(host["event_id"].to_numpy(), src)))
        pids = [p for p in pc.unique(linked["pid"].cast(pa.string())).to_pylist() if p is not None]
        if pids:
            return keep(host, isin(host["pid"], pids))
    corr = dev["correlation"].drop_null()
    if len(corr) > LINK_SAMPLE:  # a few thousand links name the driving processes as well as all do
        corr = corr.take(pa.array(np.linspace(0, len(corr) - 1, LINK_SAMPLE).astype(np.int64)))
    if len(corr):
        linked = host.filter(pc.fill_null(pc.is_in(host["correlation"], pc.unique(corr)), False))
        pids = [p for p in pc.unique(linked["pid"].cast(pa.string())).to_pylist() if p is not None]
        if pids:
            return keep(host, isin(host["pid"], pids))
    return host


def _host_labels(host: pa.Table, fallback: np.ndarray) -> list[_Label]:
    cat = host["category"]
    name = host["name"]
    ids = host["event_id"].to_numpy()
    is_fallback = np.isin(ids, fallback)
    work = isin(cat, HOST_WORK)
    # Data-loader ranges are annotations, but what they mark is host work: the input pipeline.
    pipeline_np = isin(cat, ["annotation"]) & matches(name, names.INPUT_PIPELINE)
    start, end = _spans(host)
    # CUDA/HIP calls longer than names.STARTUP_CALL_NS are start-up unless they synchronize.
    long_call = isin(cat, ["runtime", "driver"]) & (end - start > names.STARTUP_CALL_NS)
    long_call &= matches(name, names.DEVICE_API) if long_call.any() else long_call
    long_col = pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(long_call), np.int32), mask=~long_call),
                                              pa.array(["long"]))
    labels = [_Label("host_fallback", "ops", start[is_fallback], end[is_fallback], host,
                     np.flatnonzero(is_fallback))]
    return labels + _labels(host, [cat, name, long_col],
                            lambda c, n, long: ("host_overhead", _host_detail(c, n, long is not None)),
                            (work | pipeline_np) & ~is_fallback)


def _host_detail(category: str | None, name: str | None, long_call: bool = False) -> str:
    if category == "annotation":
        return "input_pipeline"
    detail = names.host_detail(name or "", category or "")
    return "startup" if long_call and detail in ("launch", "runtime") else detail


# -- windows -------------------------------------------------------------------------------------


@dataclass
class Window:
    """The analysis window of one device and the rule that chose it (docs/diagnose.md, "Window")."""

    span: tuple[int, int]
    rule: str  # option | launched_in_steps | steps | executions | activity | empty
    source: str  # the rule in words, for the report
    lag_ns: tuple[int, int] | None = None  # (first launched device start - steps start, last end - steps end)
    steps: int = 0  # profiled steps the window covers (the step rules)


def launch_sources(trace: Trace, dev: pa.Table) -> np.ndarray:
    """Host event ids of the launch flows that end on an event of ``dev`` (empty without flows)."""
    flows = trace.flows
    if flows.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    launch = select(flows, "kind", "launch")
    dst = launch["dst_event_id"].fill_null(-1).to_numpy()
    hit = np.isin(dst, dev["event_id"].to_numpy())
    return np.asarray(launch["src_event_id"].fill_null(-1).to_numpy()[hit], dtype=np.int64)


def correlation_calls(host: pa.Table, flows: pa.Table, dev: pa.Table, calls: np.ndarray) -> np.ndarray:
    """Per row of ``dev``, the row of ``host`` among ``calls`` with its correlation id, or -1.

    Correlation ids repeat across ranks, and across processes of one rank when files are merged without
    ranks, so the key is (rank, pid, correlation) where the device row's launching process is known, else
    (rank, correlation). Kineto writes device events under the device's own pid, not the launcher's: the
    process is known only through launch flows, the row's own or, for a row without one, those of the other
    work on its device when they all come from one process (``launching_pids``)."""
    out = np.full(dev.num_rows, -1, dtype=np.int64)
    if dev.num_rows == 0 or len(calls) == 0:
        return out
    pid_h, pid_d = launching_pids(host, flows, dev)

    def ints(t: pa.Table, col: str) -> np.ndarray:
        return np.asarray(pc.fill_null(t[col], -1).to_numpy(zero_copy_only=False), dtype=np.int64)

    hc, hr, dc, dr = ints(host, "correlation")[calls], ints(host, "rank")[calls], ints(dev, "correlation"), ints(
        dev, "rank")
    for known in (True, False):
        q = np.flatnonzero((pid_d >= 0) == known)
        if not len(q):
            continue
        by_pid = np.r_[pid_h[calls], pid_d[q]] if known else np.zeros(len(calls) + len(q), np.int64)
        key = row_codes(np.r_[hr, dr[q]], by_pid, np.r_[hc, dc[q]])
        src, qk = key[:len(calls)], key[len(calls):]
        order = np.argsort(src, kind="stable")  # the first call of a key wins, as before
        pos = np.minimum(np.searchsorted(src[order], qk), len(order) - 1)
        hit = (src[order][pos] == qk) & (dc[q] >= 0) & (hc[order][pos] >= 0)
        out[q[hit]] = calls[order[pos[hit]]]
    return out


def device_groups(dev: pa.Table) -> np.ndarray:
    """One code per (rank, device) of each row of ``dev``: the devices of a job, every rank's cuda:0 its own."""
    return row_codes(pc.fill_null(dev["rank"], -1).to_numpy(zero_copy_only=False).astype(np.int64),
                     codes(dev["device"])[0].astype(np.int64))


def launching_pids(host: pa.Table, flows: pa.Table, dev: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(a code per ``host`` row for its pid, the code of the launching process per ``dev`` row or -1).

    A device row's process: the host end of its own launch flow; else the one process whose launch flows end
    on its (rank, device), when there is exactly one; else unknown."""
    pid_h = codes(host["pid"])[0].astype(np.int64) if host.num_rows else np.zeros(0, np.int64)
    pid_d = np.full(dev.num_rows, -1, dtype=np.int64)
    if flows.num_rows == 0 or dev.num_rows == 0 or host.num_rows == 0:
        return pid_h, pid_d
    launch = select(flows, "kind", "launch")
    src = launch["src_event_id"].fill_null(-1).to_numpy()
    dst = launch["dst_event_id"].fill_null(-1).to_numpy()
    h_ids, d_ids = host["event_id"].to_numpy(), dev["event_id"].to_numpy()
    h_order, d_order = np.argsort(h_ids, kind="stable"), np.argsort(d_ids, kind="stable")
    hp = np.minimum(np.searchsorted(h_ids[h_order], src), len(h_order) - 1)
    dp = np.minimum(np.searchsorted(d_ids[d_order], dst), len(d_order) - 1)
    ok = (h_ids[h_order][hp] == src) & (d_ids[d_order][dp] == dst)
    pid_d[d_order[dp[ok]]] = pid_h[h_order[hp[ok]]]
    group = device_groups(dev)
    for g in np.unique(group[pid_d < 0]).tolist():  # one pass per device without a flow on every row
        pids = np.unique(pid_d[(group == g) & (pid_d >= 0)])
        if len(pids) == 1:
            pid_d[(group == g) & (pid_d < 0)] = pids[0]
    return pid_h, pid_d


def _launched_rows(trace: Trace, host: pa.Table, dev: pa.Table, lo: int, hi: int) -> np.ndarray:
    """Rows of ``dev`` (device work) launched by a host event that started inside [lo, hi), plus device
    work with no link at all that overlaps [lo, hi) (excerpts and traces that lost their links). Work
    whose launch flow has no host end was launched before the recording began: it is not the steps'.

    Linked by launch flows (exact event ids), else by correlation id within the rank (the host
    events given are one rank's: ids repeat across ranks).
    """
    hs = host["ts_ns"].to_numpy()
    in_steps = (hs >= lo) & (hs < hi)
    host_ids = host["event_id"].to_numpy()
    dev_ids = dev["event_id"].to_numpy()
    work = np.isin(device_categories(dev), list(DEVICE_WORK))
    flows = select(trace.flows, "kind", "launch") if trace.flows.num_rows else trace.flows
    src = flows["src_event_id"].fill_null(-1).to_numpy()
    dst = flows["dst_event_id"].fill_null(-1).to_numpy()
    hcorr = pc.fill_null(host["correlation"], -1).to_numpy()
    dcorr = pc.fill_null(dev["correlation"], -1).to_numpy()
    by_flow = np.isin(dev_ids, dst)  # any launch flow, its host end recorded or not
    by_corr = (dcorr >= 0) & np.isin(dcorr, hcorr[hcorr >= 0])
    launched = np.isin(dev_ids, dst[np.isin(src, host_ids[in_steps])])
    launched |= ~by_flow & (dcorr >= 0) & np.isin(dcorr, hcorr[in_steps & (hcorr >= 0)])
    ds, de = _spans(dev)
    unlinked = ~by_flow & ~by_corr & (ds < hi) & (de > lo)
    if not (launched & work).any():
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero((launched | unlinked) & work)


def choose_window(trace: Trace, host: pa.Table, dev: pa.Table) -> Window:
    """The default window of one device, first rule that applies:

    1. ``launched_in_steps``: when the device work launched inside the profiled steps (ProfilerStep#N
       of the driving process, largest back-to-back run; linked by launch flows or correlation ids)
       runs past the steps' end, the device lags the host (deep launch queues): the window is the
       span of that work, not the host's step boundaries.
    2. ``steps``: the profiled steps themselves (the device kept up, or no device work links to them).
    With step rules the lag (device work start/end minus the steps' start/end) is reported.
    3. ``executions``: Neuron device executions.
    4. ``activity``: first to last activity of the device and of the host work that drove it.
    """
    steps = select(host, "category", "step")
    if steps.num_rows:
        s, e = _spans(steps)
        lo, hi, n = _step_cluster(s, e)
        more = "" if n == steps.num_rows else f" of {steps.num_rows}, the largest contiguous run"
        rows = _launched_rows(trace, host, dev, lo, hi) if dev.num_rows else np.zeros(0, dtype=np.int64)
        if len(rows):
            ds, de = _spans(dev)
            dlo, dhi = int(ds[rows].min()), int(de[rows].max())
            lag = (dlo - lo, dhi - hi)
            if dhi > hi:  # the device lags: the steps' work runs past the steps
                return Window((dlo, dhi), "launched_in_steps",
                              f"device work launched in {n} profiled steps{more}", lag, n)
            return Window((lo, hi), "steps", f"{n} profiled steps{more}", lag, n)
        return Window((lo, hi), "steps", f"{n} profiled steps{more}", steps=n)
    execs = device_executions(dev)  # each execution once (ExecutionInfo and nc_exec_running are one run)
    if execs.num_rows:
        s, e = _spans(execs)
        return Window((int(s.min()), int(e.max())), "executions", f"{execs.num_rows} device executions")
    work = keep(host, isin(host["category"], HOST_WORK)) if host.num_rows else host
    spans = [_spans(t) for t in (dev, work) if t.num_rows]
    if not spans:
        return Window((0, 0), "empty", "empty trace")
    return Window((min(int(a.min()) for a, _ in spans), max(int(b.max()) for _, b in spans)), "activity",
                  "first to last activity")


def default_window(host: pa.Table, dev: pa.Table) -> tuple[tuple[int, int], str]:
    """The default window without link information (the steps, executions or activity rules)."""
    w = choose_window(Trace(), host, dev)
    return w.span, w.source


def _step_cluster(starts: np.ndarray, ends: np.ndarray) -> tuple[int, int, int]:
    """The longest run of back-to-back steps (ties: the later, steady-state one).

    A schedule may record separate windows (a warm-up step, later the steady state); the time
    between them was not profiled, so one window must not span it. Steps are back to back when
    the gap between them is at most half the median step.
    """
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    slack = np.median(e - s) / 2
    new = np.r_[True, s[1:] > reach[:-1] + slack]
    cluster = np.cumsum(new) - 1
    sizes = np.bincount(cluster)
    best = len(sizes) - 1 - int(np.argmax(sizes[::-1]))
    pick = cluster == best
    return int(s[pick].min()), int(e[pick].max()), int(pick.sum())


# -- top stalls ----------------------------------------------------------------------------------


def _top_stalls(trace: Trace, win: tuple[int, int], labels: list[_Label],
                unions: list[tuple[np.ndarray, np.ndarray]], top: int) -> list[Stall]:
    """The longest stretches of one non-compute cause, with the events that explain them.

    Stalls live in the gaps between compute. Gaps are visited longest first and cut into runs of
    one cause by an exact sweep of the gaps alone. The visit stops once no remaining gap can hold
    a run longer than the shortest of the ``top`` runs found (then the answer is exact), or after
    ``MAX_GAPS_PER_STALL * top`` gaps (then they are the longest runs within the longest gaps).
    """
    compute = [u for lb, u in zip(labels, unions, strict=True) if lb.cause == "compute" and len(u[0])]
    if len(compute) == 1:  # a single label's union is already the union of compute
        cs, ce = compute[0]
    else:
        empty = [np.zeros(0, dtype=np.int64)]
        cs, ce = union(np.concatenate([u[0] for u in compute] + empty),
                       np.concatenate([u[1] for u in compute] + empty))
    gs, ge = gaps(win, cs, ce)
    runs: list[tuple[int, int, int, str]] = []  # (length, start, label index or NONE, cause)
    longest = _longest(ge - gs, MAX_GAPS_PER_STALL * top)
    for gi, found in _gap_runs(longest, gs, ge, labels, unions, top):
        if len(runs) >= top and ge[gi] - gs[gi] <= runs[top - 1][0]:
            break
        runs += [r for r in found if r[0] >= MIN_STALL_NS]
        runs.sort(key=lambda r: (-r[0], r[1]))
        del runs[top:]
    frames = frame_sources(trace)
    out = []
    for length, start, k, cause in runs:
        lb = labels[k] if k != NONE else None
        evidence, source = _evidence(trace, lb, start, start + length, frames)
        out.append(Stall(cause, lb.detail if lb else "unexplained", start, length, evidence, source))
    return out


def _longest(values: np.ndarray, n: int) -> np.ndarray:
    """Positions of the ``n`` largest values, largest first, ties in position order (as a stable sort
    of all of them would give), without sorting all of them."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    candidates = np.arange(len(values))
    if n < len(values):  # keep those at least as large as the n-th largest, ties included
        candidates = np.flatnonzero(values >= np.partition(values, len(values) - n)[len(values) - n])
    return candidates[np.argsort(-values[candidates], kind="stable")][:n]


def _gap_runs(order: np.ndarray, gs: np.ndarray, ge: np.ndarray, labels: list[_Label],
              unions: list[tuple[np.ndarray, np.ndarray]], batch: int
              ) -> Iterator[tuple[int, list[tuple[int, int, int, str]]]]:
    """(gap index, its runs) for the gaps in ``order``. Gaps are cut in batches of doubling size:
    one sweep per batch rather than per gap, while a visit that stops early cuts few gaps it did not need."""
    done = 0
    while done < len(order):
        visit = order[done:done + batch]
        yield from zip(visit.tolist(), _runs_in(gs[visit], ge[visit], labels, unions), strict=True)
        done += len(visit)
        batch *= 2


def _runs_in(lo: np.ndarray, hi: np.ndarray, labels: list[_Label],
             unions: list[tuple[np.ndarray, np.ndarray]]) -> list[list[tuple[int, int, int, str]]]:
    """Runs of one cause inside each gap [lo[i], hi[i]); each named after the label owning most of it.

    One sweep cuts all the gaps: each label is cut to the gaps, and the gaps themselves come last,
    as the idle label, so time outside every gap stays NONE and no run crosses a gap's edge.
    """
    at = np.argsort(lo)  # the gaps (disjoint, never touching) in time order
    los, his = lo[at], hi[at]
    idle = len(labels)
    cut = [within(us, ue, los, his) for us, ue in unions] + [(los, his)]
    start, end, label = sweep((int(los[0]), int(his[-1])), cut).runs()
    inside = label != NONE
    start, end, label = start[inside], end[inside], label[inside]
    gap = np.searchsorted(los, start, side="right") - 1  # the gap (in time order) of each run
    cause = np.array([CAUSES.index(lb.cause) for lb in labels] + [CAUSES.index("idle")])[label]
    # A run: consecutive sweep runs of one gap and one cause.
    new = np.r_[True, (gap[1:] != gap[:-1]) | (cause[1:] != cause[:-1])]
    first = np.flatnonzero(new)
    last = np.r_[first[1:], len(new)] - 1
    # Its owner: the label with the most time in it; a tie goes to the label appearing first.
    run = np.cumsum(new) - 1
    pair, seen, which = np.unique(run * (idle + 1) + label, return_index=True, return_inverse=True)
    total = np.zeros(len(pair), dtype=np.int64)  # time per (run, label)
    np.add.at(total, which.reshape(-1), end - start)
    pair_run, pair_label = np.divmod(pair, idle + 1)
    best = np.lexsort((seen, -total, pair_run))  # per run: most time first, then first seen
    owner = pair_label[best[np.r_[True, np.diff(pair_run[best]) != 0]]]
    out: list[list[tuple[int, int, int, str]]] = [[] for _ in range(len(lo))]
    for g, s, e, k, c in zip(gap[first].tolist(), start[first].tolist(), end[last].tolist(), owner.tolist(),
                             cause[first].tolist(), strict=True):  # the runs found (a handful per gap)
        out[int(at[g])].append((e - s, s, NONE if k == idle else k, CAUSES[c]))
    return out


def _evidence(trace: Trace, lb: _Label | None, lo: int, hi: int,
              frames: dict[int, str]) -> tuple[list[str], str | None]:
    if lb is None:
        return ["no device or host activity recorded"], None
    hit = np.flatnonzero((lb.starts < hi) & (lb.ends > lo))
    if not len(hit):
        return [], None
    overlap = np.minimum(lb.ends[hit], hi) - np.maximum(lb.starts[hit], lo)
    # Score overlap²/duration: events that cover much of the stall and little else are the most
    # specific (an innermost Python frame beats <module>, which covers everything).
    score = overlap.astype(np.float64) ** 2 / np.maximum(lb.ends[hit] - lb.starts[hit], 1)
    best = hit[np.argsort(-score, kind="stable")[:3]]
    picked = lb.table.select(["name", "frame_id"]).take(pa.array(lb.rows[best]))
    evidence = [f"{n} ({units.duration(int(e - s))})" for n, s, e in
                zip(picked["name"].cast(pa.string()).to_pylist(), lb.starts[best], lb.ends[best], strict=True)]
    if names.OWN_FRAME.search(evidence[0]):  # inside capture.step() / torch.profiler: not the user's line
        return evidence, None
    source = next((frames[f] for f in picked["frame_id"].to_pylist() if f is not None and f in frames), None)
    return evidence, source


def frame_sources(trace: Trace) -> dict[int, str]:
    """Per frame id: "file:line function" of its nearest user-code frame (itself, or a caller)."""
    f = trace.frames
    parent = dict(zip(f["frame_id"].to_pylist(), f["parent_id"].to_pylist(), strict=True))
    user = dict(zip(f["frame_id"].to_pylist(), f["is_user"].to_pylist(), strict=True))
    text = {fid: (f"{file_}:{line} {fn}" if file_ else str(fn)) for fid, file_, line, fn in zip(
        f["frame_id"].to_pylist(), f["file"].cast(pa.string()).to_pylist(), f["line"].to_pylist(),
        f["function"].cast(pa.string()).to_pylist(), strict=True)}
    out = {}
    for fid, own in text.items():
        node: int | None = fid
        while node is not None and not user.get(node):
            node = parent.get(node)
        out[fid] = text[node] if node is not None else own
    return out


# -- helpers -------------------------------------------------------------------------------------


def _spans(t: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    s = t["ts_ns"].to_numpy()
    return s, s + t["dur_ns"].to_numpy()


def _first(col: pa.ChunkedArray) -> int | None:
    vals = col.drop_null()
    return int(vals[0].as_py()) if len(vals) else None


def _collective_names(dev: pa.Table, collective: np.ndarray) -> pa.Array:
    """The ``Collective name`` arg Kineto copies onto collective kernels (null elsewhere), vectorized
    over the collective rows only, and dictionary encoded as every string column of the Trace is."""
    rows = np.flatnonzero(collective)
    if not len(rows):
        return pa.nulls(dev.num_rows, pa.string())
    args = pc.fill_null(take(dev["args"], rows), "")
    found = pc.struct_field(pc.extract_regex(args, r'"Collective name":\s*"(?P<name>[^"]*)"'), "name")
    names = flat(found).dictionary_encode()
    # Spread to all rows through the indices alone: -1 (null) outside the collective rows.
    index = np.full(dev.num_rows, -1, dtype=np.int32)
    index[rows] = pc.fill_null(names.indices, -1).to_numpy(zero_copy_only=False)
    return pa.DictionaryArray.from_arrays(pa.array(index, mask=index < 0), names.dictionary)
