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

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis import names
from neurontrace.analysis.intervals import NONE, Sweep, sweep, union
from neurontrace.trace import Trace

CAUSES = ("compute", "collectives", "data_movement", "host_fallback", "host_overhead", "idle")
DEVICE_WORK = {"compute": "compute", "collective": "collectives", "memcpy": "data_movement",
               "memset": "data_movement", "dma": "data_movement"}
HOST_WORK = ("framework_op", "runtime", "driver", "compile", "load", "python", "transfer")
HOST_DETAIL_ORDER = ("compile", "load", "sync", "input_pipeline", "launch", "runtime", "dispatch", "python")
DATA_DETAIL_ORDER = ("h2d", "d2h", "d2d", "p2p", "h2h", "dma_weights", "dma_io", "spill", "memset", "other")
CPU_DEVICE = "cpu"


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
    table: str  # "device_events" or "system_events": where the intervals' rows live
    rows: np.ndarray


def attribute(
    trace: Trace,
    *,
    window: tuple[int, int] | None = None,
    fallback_event_ids: np.ndarray | None = None,
    top: int = 10,
) -> list[DeviceAttribution]:
    """Attribution for every device of ``trace`` (or the host CPU when it has no device activity)."""
    dev = trace.device_events
    devices = sorted(d for d in pc.unique(dev["device"].cast(pa.string())).to_pylist() if d is not None)
    fallback = fallback_event_ids if fallback_event_ids is not None else np.zeros(0, dtype=np.int64)
    if not devices:
        return [_attribute_cpu(trace, window, fallback, top)]
    return [_attribute_device(trace, d, window, fallback, top) for d in devices]


def _attribute_device(trace: Trace, device: str, window: tuple[int, int] | None, fallback: np.ndarray,
                      top: int) -> DeviceAttribution:
    dev = trace.device_events.filter(pc.equal(trace.device_events["device"].cast(pa.string()), device))
    host = driving_host_events(trace, dev)
    rank = _first(dev["rank"])
    win, source = (window, "--window") if window else default_window(host, dev)
    labels = _device_labels(dev) + _host_labels(host, fallback)
    return _finish(trace, device, rank, win, source, labels, top)


def _attribute_cpu(trace: Trace, window: tuple[int, int] | None, fallback: np.ndarray,
                   top: int) -> DeviceAttribution:
    """No accelerator in the trace: the CPU is the device, framework ops are its compute."""
    host = trace.system_events
    ops = host.filter(pc.equal(host["category"].cast(pa.string()), "framework_op"))
    rank = _first(host["rank"])
    win, source = (window, "--window") if window else default_window(host, ops)
    s, e = _spans(ops)
    labels = [_Label("compute", "cpu_ops", s, e, "system_events", ops["event_id"].to_numpy())]
    labels += _host_labels(host, fallback)
    return _finish(trace, CPU_DEVICE, rank, win, source, labels, top)


def _finish(trace: Trace, device: str, rank: int | None, win: tuple[int, int], source: str,
            labels: list[_Label], top: int) -> DeviceAttribution:
    labels = _ordered(labels)
    result = sweep(win, [(lb.starts, lb.ends) for lb in labels])
    per_label = result.time_per_label(len(labels))
    causes = dict.fromkeys(CAUSES, 0)
    detail: dict[str, int] = {}
    for lb, ns in zip(labels, per_label[:-1], strict=True):
        if ns:
            causes[lb.cause] += int(ns)
            key = f"{lb.cause}.{lb.detail}"
            detail[key] = detail.get(key, 0) + int(ns)
    causes["idle"] = int(per_label[-1])
    if causes["idle"]:
        detail["idle.unexplained"] = causes["idle"]
    out = DeviceAttribution(device, rank, win, source, causes, detail)
    out.top_stalls = _top_stalls(trace, result, labels, top)
    out.check()
    return out


def _ordered(labels: list[_Label]) -> list[_Label]:
    """Priority order: cause first (CAUSES), then the detail order of that cause."""
    def key(lb: _Label) -> tuple[int, int, str]:
        order = {"host_overhead": HOST_DETAIL_ORDER, "data_movement": DATA_DETAIL_ORDER}.get(lb.cause, ())
        return CAUSES.index(lb.cause), order.index(lb.detail) if lb.detail in order else len(order), lb.detail
    return sorted((lb for lb in labels if len(lb.starts)), key=key)


# -- what is device work -------------------------------------------------------------------------


def _device_labels(dev: pa.Table) -> list[_Label]:
    cat = dev["category"].cast(pa.string())
    work = pc.is_in(cat, pa.array(list(DEVICE_WORK))).to_numpy(zero_copy_only=False)
    is_coll = pc.equal(cat, "collective").to_numpy(zero_copy_only=False)
    coll = pa.array(_arg(dev, "Collective name", is_coll), pa.string())
    detail = _per_distinct(
        [cat, dev["name"].cast(pa.string()), dev["direction"].cast(pa.string()),
         dev["track"].cast(pa.string()), coll],
        _device_detail,
    )
    start, end = _spans(dev)
    ids = dev["event_id"].to_numpy()
    return [_Label(DEVICE_WORK[c], d, start[rows], end[rows], "device_events", ids[rows])
            for (c, d), rows in _groups(cat.to_numpy(zero_copy_only=False), detail, work).items()]


def _device_detail(cat: str, name: str, direction: str | None, track: str | None, coll: str | None) -> str:
    if cat == "compute":
        if track and str(track).lower().startswith(("pe", "act", "pool", "dve", "sp", "gpsimd", "engine")):
            return str(track).split()[0].lower()  # Neuron: one detail per engine
        return names.kernel_class(name)
    if cat == "collective":
        return names.collective_op(name, coll)
    if cat == "memset":
        return "memset"
    if cat == "memcpy":
        return direction or "other"
    text = f"{name} {track}".lower()  # Neuron DMA: spill reloads, weight loads, activations/IO
    if "spill" in text:
        return "spill"
    if "weight" in text:
        return "dma_weights"
    return "dma_io"


def _groups(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> dict[tuple[str, str], np.ndarray]:
    """Row indices grouped by the pair (a, b), over rows where mask holds (few distinct pairs)."""
    rows = np.flatnonzero(mask)
    if not len(rows):
        return {}
    pairs = pa.array(np.char.add(np.char.add(a[rows].astype(str), "\x1f"), b[rows].astype(str)))
    enc = pc.dictionary_encode(pairs)
    code = enc.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(code, kind="stable")
    splits = np.split(rows[order], np.cumsum(np.bincount(code, minlength=len(enc.dictionary)))[:-1])
    keys = [tuple(k.split("\x1f", 1)) for k in enc.dictionary.to_pylist()]
    return {(k[0], k[1]): r for k, r in zip(keys, splits, strict=True)}


def _per_distinct(columns: list[pa.Array | pa.ChunkedArray], fn: Any) -> np.ndarray:
    """``fn`` over each distinct combination of the columns' values (few), spread to all rows."""
    n = len(columns[0])
    if n == 0:
        return np.zeros(0, dtype=object)
    joined = pc.binary_join_element_wise(*[pc.fill_null(c, "\x01") for c in columns], "\x00")
    enc = pc.dictionary_encode(joined)
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    values = []
    for key in enc.dictionary.to_pylist():
        parts = [None if p == "\x01" else p for p in key.split("\x00")]
        values.append(fn(*parts))
    out: np.ndarray = np.asarray(values, dtype=object)[enc.indices.to_numpy(zero_copy_only=False)]
    return out


# -- what is host work ---------------------------------------------------------------------------


def driving_host_events(trace: Trace, dev: pa.Table) -> pa.Table:
    """Host events of the process(es) that launched this device's work.

    Found through correlation ids (runtime call ↔ device op). Without any link, the host events of
    the same rank stand in (a CPU-side profile of a Neuron device, a GPU-only trace).
    """
    host = trace.system_events
    corr = pc.unique(dev["correlation"].drop_null())
    if len(corr):
        linked = host.filter(pc.fill_null(pc.is_in(host["correlation"], corr), False))
        pids = pc.unique(linked["pid"].cast(pa.string()).drop_null())
        if len(pids):
            return host.filter(pc.fill_null(pc.is_in(host["pid"].cast(pa.string()), pids), False))
    rank = _first(dev["rank"])
    if rank is not None:
        return host.filter(pc.fill_null(pc.equal(host["rank"], rank), False))
    return host


def _host_labels(host: pa.Table, fallback: np.ndarray) -> list[_Label]:
    cat = host["category"].cast(pa.string())
    name = host["name"].cast(pa.string())
    start, end = _spans(host)
    ids = host["event_id"].to_numpy()
    is_fallback = np.isin(ids, fallback)
    work = pc.is_in(cat, pa.array(HOST_WORK)).to_numpy(zero_copy_only=False) & ~is_fallback
    # Data-loader ranges are annotations, but what they mark is host work: the input pipeline.
    pipeline = pc.and_(pc.equal(cat, "annotation"), pc.match_substring_regex(name, names.INPUT_PIPELINE.pattern))
    pipeline_np = pc.fill_null(pipeline, False).to_numpy(zero_copy_only=False) & ~is_fallback
    detail = _per_distinct([cat, name], lambda c, n: "input_pipeline" if c == "annotation"
                           else names.host_detail(n or "", c or ""))
    labels = [_Label("host_fallback", "ops", start[is_fallback], end[is_fallback], "system_events",
                     ids[is_fallback])]
    marker = np.full(host.num_rows, "h", dtype=object)
    for (_, d), rows in _groups(marker, detail, work | pipeline_np).items():
        labels.append(_Label("host_overhead", d, start[rows], end[rows], "system_events", ids[rows]))
    return labels


# -- windows -------------------------------------------------------------------------------------


def default_window(host: pa.Table, dev: pa.Table) -> tuple[tuple[int, int], str]:
    """The profiled steps (ProfilerStep#N, Neuron executions); else first to last device activity."""
    steps = host.filter(pc.equal(host["category"].cast(pa.string()), "step"))
    if steps.num_rows:
        s, e = _spans(steps)
        return (int(s.min()), int(e.max())), f"{steps.num_rows} profiled steps"
    execs = dev.filter(pc.equal(dev["category"].cast(pa.string()), "execution"))
    if execs.num_rows:
        s, e = _spans(execs)
        return (int(s.min()), int(e.max())), f"{execs.num_rows} device executions"
    busy = dev if dev.num_rows else host
    if busy.num_rows == 0:
        return (0, 0), "empty trace"
    s, e = _spans(busy)
    return (int(s.min()), int(e.max())), "first to last activity"


# -- top stalls ----------------------------------------------------------------------------------


def _top_stalls(trace: Trace, result: Sweep, labels: list[_Label], top: int) -> list[Stall]:
    start, end, label = result.runs()
    cause = np.array([labels[k].cause if k != NONE else "idle" for k in label], dtype=object)
    stall = cause != "compute"
    # Merge neighbouring runs of one cause (e.g. h2d then d2h) into one stall.
    keep = np.flatnonzero(stall)
    if not len(keep):
        return []
    s, e, lab, cs = start[keep], end[keep], label[keep], cause[keep]
    new = np.r_[True, (cs[1:] != cs[:-1]) | (s[1:] != e[:-1])]
    group = np.cumsum(new) - 1
    g_start = s[new]
    g_end = np.zeros(len(g_start), dtype=np.int64)
    np.maximum.at(g_end, group, e)
    # The label covering the most time in each group names its detail and evidence.
    dominant = _dominant(group, lab, e - s, len(g_start))
    order = np.argsort(-(g_end - g_start), kind="stable")[:top]
    frames = frame_sources(trace)
    out = []
    for gi in order:
        k = int(dominant[gi])
        lb = labels[k] if k != NONE else None
        evidence, source = _evidence(trace, lb, int(g_start[gi]), int(g_end[gi]), frames)
        out.append(Stall(str(cs[new][gi]), lb.detail if lb else "unexplained", int(g_start[gi]),
                         int(g_end[gi] - g_start[gi]), evidence, source))
    return out


def _dominant(group: np.ndarray, lab: np.ndarray, length: np.ndarray, n: int) -> np.ndarray:
    order = np.lexsort((-length, group))
    first = np.r_[True, group[order][1:] != group[order][:-1]]
    out = np.full(n, NONE, dtype=np.int64)
    out[group[order][first]] = lab[order][first]
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
    table = trace.tables[lb.table]
    idx = pc.index_in(pa.array(lb.rows[best]), table["event_id"])
    picked = table.take(idx)
    evidence = [f"{n} ({(e - s) / 1e3:.1f} µs)" for n, s, e in
                zip(picked["name"].cast(pa.string()).to_pylist(), lb.starts[best], lb.ends[best], strict=True)]
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


def _arg(t: pa.Table, key: str, rows: np.ndarray) -> list[Any]:
    """One args key per row (None where absent), parsed only for the rows selected (few)."""
    out: list[Any] = [None] * t.num_rows
    args = t["args"]
    for i in np.flatnonzero(rows):
        text = args[int(i)].as_py()
        if text and f'"{key}"' in text:
            out[i] = json.loads(text).get(key)
    return out


def union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    s, e = union(starts, ends)
    return int((e - s).sum())
