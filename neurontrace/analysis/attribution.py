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

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis import names
from neurontrace.analysis.compile_spans import compile_spans, inside
from neurontrace.analysis.default_window import Window, choose_window
from neurontrace.analysis.device_activity import unrecorded
from neurontrace.analysis.driving import driving_host_events
from neurontrace.analysis.host_gaps import unrecorded_host_gaps
from neurontrace.analysis.intervals import NONE, clip, layered, sweep, union
from neurontrace.analysis.labels import Label, labels_of, spans
from neurontrace.analysis.slices import DevicePlan, RankPlan, owned_window
from neurontrace.analysis.stall_merge import SliceStalls, edge_runs
from neurontrace.analysis.stalls import TOP_STALLS, Stall, frame_sources, top_stalls
from neurontrace.analysis.startup import startup_calls
from neurontrace.analysis.work import DEVICE_WORK, HOST_WORK, communication_context, device_category_codes
from neurontrace.causes import CAUSES
from neurontrace.columns import flat, isin, keep, matches, of_rank, select, take
from neurontrace.trace import Trace

HOST_DETAIL_ORDER = ("compile", "load", "guards", "startup", "sync", "input_pipeline", "wait", "profiler", "launch", "runtime",
                     "transfer", "dispatch", "python", "unrecorded")
DATA_DETAIL_ORDER = ("h2d", "d2h", "d2d", "p2p", "h2h", "dma_weights", "dma_io", "spill", "memset", "other")
CPU_DEVICE = "cpu"


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
    # Run on one time slice (Options.owned): its edge runs, for merging the stalls (analysis/stall_merge.py)
    slice_stalls: SliceStalls | None = field(default=None, repr=False, compare=False)

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


def attribute(
    trace: Trace,
    *,
    window: tuple[int, int] | None = None,
    fallback_event_ids: np.ndarray | None = None,
    top: int = TOP_STALLS,
    frames: dict[int, str] | None = None,
    plan: RankPlan | None = None,
    owned: tuple[int, int] | None = None,
) -> list[DeviceAttribution]:
    """Attribution for every device of ``trace`` (or the host CPU when it has no device activity).

    A trace without events (a Neuron summary, a capture whose profiles were not decoded) has nothing
    to attribute: no device, rather than an empty ``cpu`` window. Nor does a trace whose host launched device
    work that was not recorded (analysis/device_activity.py): its host ops are not the device's compute.
    ``frames``: the trace's :func:`~neurontrace.analysis.stalls.frame_sources` where the caller has them (found
    once otherwise).

    With ``plan`` and ``owned`` (one time slice of a rank, analysis/slices.py): the whole rank's devices, each
    over the part of its whole-rank window inside the slice, driven by the whole rank's processes; each
    reports ``top + 2`` stalls (two may be cut by the slice's edges) and its edge runs (analysis/stall_merge.py).
    """
    fallback = fallback_event_ids if fallback_event_ids is not None else np.zeros(0, dtype=np.int64)
    if plan is not None:
        frames = frame_sources(trace) if frames is None else frames
        return [_planned(trace, dp, plan, owned, window, fallback, top, frames) for dp in plan.devices]
    out = []
    attributed = _attributed(trace)
    if attributed and frames is None:
        frames = frame_sources(trace)  # once for every device's stalls
    for device, rank in attributed:
        work, host = _window_inputs(trace, device, rank)
        win = Window(window, "option", "--window") if window else choose_window(trace, host, work)
        labels = (_cpu_labels(host, work, fallback) if trace.device_events.num_rows == 0 else
                  _device_labels(work) + _host_labels(host, fallback, trace.flows, work)
                  + unrecorded_host_gaps(host, trace.flows, work))
        out.append(_finish(trace, device, rank, win, labels, top, frames or {}))
    return out


def _planned(trace: Trace, dp: DevicePlan, plan: RankPlan, owned: tuple[int, int] | None,
             window: tuple[int, int] | None, fallback: np.ndarray, top: int,
             frames: dict[int, str]) -> DeviceAttribution:
    whole = Window(window, "option", "--window") if window else dp.window
    part = Window(owned_window(whole.span, owned), whole.rule, whole.source, whole.lag_ns, whole.steps)
    labels = planned_labels(trace, dp, plan, fallback)
    out = _finish(trace, dp.device, dp.rank, part, labels, top + 2, frames, ordered=True,
                  cutoff=(dp.python_cutoff_ns,))
    out.slice_stalls = edge_runs(part.span, labels, [union(*clip(lb.starts, lb.ends, *part.span)) for lb in labels])
    return out


def planned_labels(trace: Trace, dp: DevicePlan, plan: RankPlan, fallback: np.ndarray) -> list[Label]:
    """The labels of one planned device on a slice of its rank, as :func:`attribute` makes them on the rank, in
    priority order."""
    if plan.cpu:
        host = of_rank(trace.system_events, dp.rank)
        return _ordered(_cpu_labels(host, cpu_work(host), fallback, dp.startup_ids))
    work = device_rows(trace, dp.device, dp.rank)
    host = of_rank(trace.system_events.drop_columns(["args"]), dp.rank)
    host = keep(host, isin(host["pid"], list(dp.pids))) if dp.pids else host
    return _ordered(_device_labels(work) + _host_labels(host, fallback, trace.flows, work, dp.startup_ids)
                    + unrecorded_host_gaps(host, trace.flows, work))


def default_windows(trace: Trace) -> list[tuple[str, int | None, Window]]:
    """(device, rank, its default analysis window) of every attributed device, in report order: the windows
    ``diagnose`` analyses without ``--window`` (and ``ops`` too, so both share one table of shares)."""
    return [(device, rank, choose_window(trace, *reversed(_window_inputs(trace, device, rank))))
            for device, rank in _attributed(trace)]


def default_origin(trace: Trace) -> int | None:
    """The report's time 0: the earliest start of the devices' default analysis windows. ``diagnose`` prints
    times from it, ``--window`` offsets count from it, and it is the viewer's x = 0; None without events."""
    return min((w.span[0] for _, _, w in default_windows(trace)), default=None)


def _attributed(trace: Trace) -> list[tuple[str, int | None]]:
    """(device, rank) of every attributed device in report order; the CPU of each rank without devices."""
    dev = trace.device_events
    if dev.num_rows == 0 and trace.system_events.num_rows == 0:
        return []
    missing = unrecorded(trace)
    if missing is not None and missing.no_verdict:  # device work launched, not recorded: no verdict from host events
        return []
    if dev.num_rows == 0:
        ranks = sorted(pc.unique(trace.system_events["rank"]).to_pylist(), key=lambda r: (r is not None, r or 0))
        return [(CPU_DEVICE, r) for r in ranks or [None]]
    # One block per device of each rank: every rank of a job has its own cuda:0.
    pairs = dev.select(["device", "rank"]).group_by(["device", "rank"]).aggregate([]).to_pylist()
    pairs.sort(key=lambda p: (p["rank"] is not None, p["rank"] or 0, str(p["device"])))
    return [(str(p["device"]), p["rank"]) for p in pairs]


def _window_inputs(trace: Trace, device: str, rank: int | None) -> tuple[pa.Table, pa.Table]:
    """(the device's work, the host events driving it): what the window rule and the labels read.

    No accelerator in the trace: each rank's CPU is the device, framework ops are its compute (:func:`cpu_work`)."""
    if trace.device_events.num_rows == 0:
        host = of_rank(trace.system_events, rank)
        return cpu_work(host), host
    work = device_rows(trace, device, rank)
    return work, driving_host_events(trace, work)


def cpu_work(host: pa.Table) -> pa.Table:
    """A CPU-only trace's compute: its framework ops, except the compile ranges and the ops they run (fake-tensor
    tracing, codegen): those are host_overhead.compile (analysis/compile_spans.py); and except Dynamo's guard
    checks before each compiled call (``TorchDynamo Cache Lookup``): host_overhead.guards."""
    ops = select(host, "category", "framework_op")
    ops = keep(ops, ~matches(ops["name"], names.GUARD_CHECK))
    compiling = compile_spans(host)
    return keep(ops, ~inside(ops["ts_ns"].to_numpy(), compiling)) if len(compiling[0]) else ops


def device_rows(trace: Trace, device: str, rank: int | None) -> pa.Table:
    """The events of one attributed device: that device, of that rank (null rank: rank-less events)."""
    return of_rank(select(trace.device_events, "device", device), rank)


def _cpu_labels(host: pa.Table, ops: pa.Table, fallback: np.ndarray, startup: np.ndarray | None = None) -> list[Label]:
    s, e = spans(ops)
    labels = [Label("compute", "cpu_ops", s, e, ops, np.arange(ops.num_rows))]
    # CPU collectives (gloo:all_reduce ...) are the CPU device's communication, on whichever thread.
    coll = keep(host, matches(host["name"], names.HOST_COLLECTIVE))
    labels += labels_of(coll, [coll["name"]], lambda n: ("collectives", names.collective_op(n or "")),
                      np.ones(coll.num_rows, dtype=bool))
    return labels + _host_labels(host, fallback, startup=startup)


def _finish(trace: Trace, device: str, rank: int | None, window: Window, labels: list[Label],
            top: int, frames: dict[int, str], ordered: bool = False,
            cutoff: tuple[int | None] | None = None) -> DeviceAttribution:
    win = window.span
    labels = labels if ordered else _ordered(labels)
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
    out.top_stalls = top_stalls(trace, win, labels, unions, top, frames, cutoff)
    out.check()
    return out


def _ordered(labels: list[Label]) -> list[Label]:
    """Priority order: cause first (CAUSES), then the detail order of that cause."""
    return sorted((lb for lb in labels if len(lb.starts)), key=lambda lb: detail_priority(lb.cause, lb.detail))


def detail_priority(cause: str, detail: str) -> tuple[int, int, str]:
    """Where ``cause.detail`` comes in the priority order (and in ``detail_ns``)."""
    order = {"host_overhead": HOST_DETAIL_ORDER, "data_movement": DATA_DETAIL_ORDER}.get(cause, ())
    return CAUSES.index(cause), order.index(detail) if detail in order else len(order), detail


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
        host = of_rank(trace.system_events, rank)
        labels = _cpu_labels(host, cpu_work(host), fallback)
    else:
        dev = device_rows(trace, device, rank)
        host = driving_host_events(trace, dev)
        labels = _device_labels(dev) + _host_labels(host, fallback, trace.flows, dev)
        labels += unrecorded_host_gaps(host, trace.flows, dev)
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


# -- what each event is labelled -----------------------------------------------------------------


def _device_labels(dev: pa.Table) -> list[Label]:
    code, keys = device_category_codes(dev)

    def of(*wanted: str) -> np.ndarray:
        return np.isin(code, [i for i, k in enumerate(keys) if k in wanted])

    work = of(*DEVICE_WORK)
    effective = np.asarray(keys, dtype=object)[code] if keys and (of("collective").any()) else None
    context = communication_context(dev, effective) if effective is not None else None
    coll = _collective_names(dev, of("collective"), context)
    direction = _directions(dev, of("dma"))
    category = pa.DictionaryArray.from_arrays(pa.array(code.astype(np.int32)), pa.array(keys, pa.string()))
    columns = [category, dev["name"], direction, dev["track"], coll]
    return labels_of(dev, columns, _device_cause, work)


def _device_cause(effective: str, name: str, direction: str | None, track: str | None,
                  coll: str | None) -> tuple[str, str]:
    return DEVICE_WORK.get(effective or "", ""), _device_detail(effective or "", name or "", direction, track, coll)


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


def _host_labels(host: pa.Table, fallback: np.ndarray, flows: pa.Table | None = None,
                 dev: pa.Table | None = None, startup: np.ndarray | None = None) -> list[Label]:
    cat = host["category"]
    name = host["name"]
    ids = host["event_id"].to_numpy()
    is_fallback = np.isin(ids, fallback)
    work = isin(cat, HOST_WORK)
    # Data-loader ranges are annotations, but what they mark is host work: the input pipeline.
    pipeline_np = isin(cat, ["annotation"]) & matches(name, names.INPUT_PIPELINE)
    start, end = spans(host)
    # Calls that pay for first use (analysis/startup.py) are start-up, not launch overhead.
    long_call = startup_calls(host, flows if flows is not None else Trace().flows, dev) if startup is None else \
        np.isin(ids, startup)  # a slice of a rank: the rank's start-up calls (analysis/slice_plan.py)
    long_col = pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(long_call), np.int32), mask=~long_call),
                                              pa.array(["long"]))
    labels = [Label("host_fallback", "ops", start[is_fallback], end[is_fallback], host,
                     np.flatnonzero(is_fallback))]
    return labels + labels_of(host, [cat, name, long_col],
                            lambda c, n, long: ("host_overhead", _host_detail(c, n, long is not None)),
                            (work | pipeline_np) & ~is_fallback)


def _host_detail(category: str | None, name: str | None, long_call: bool = False) -> str:
    if category == "annotation":
        return "input_pipeline"
    detail = names.host_detail(name or "", category or "")
    return "startup" if long_call and detail in ("launch", "runtime") else detail


def _collective_names(dev: pa.Table, collective: np.ndarray, context: list[str | None] | None = None) -> pa.Array:
    """The ``Collective name`` arg Kineto copies onto collective kernels (null elsewhere), vectorized
    over the collective rows only, and dictionary encoded as every string column of the Trace is; for a
    kernel that is a collective by the range it ran in (work.communication_context), that range's name."""
    rows = np.flatnonzero(collective)
    if not len(rows):
        return pa.nulls(dev.num_rows, pa.string())
    args = pc.fill_null(take(dev["args"], rows), "")
    found = pc.struct_field(pc.extract_regex(args, r'"Collective name":\s*"(?P<name>[^"]*)"'), "name")
    if context is not None:  # the range's name where the kernel records none
        found = pc.coalesce(found, pa.array([context[r] for r in rows.tolist()], pa.string()))
    names = flat(found).dictionary_encode()
    # Spread to all rows through the indices alone: -1 (null) outside the collective rows.
    index = np.full(dev.num_rows, -1, dtype=np.int32)
    index[rows] = pc.fill_null(names.indices, -1).to_numpy(zero_copy_only=False)
    return pa.DictionaryArray.from_arrays(pa.array(index, mask=index < 0), names.dictionary)
