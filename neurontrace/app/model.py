"""The viewer's model of one trace: the track index, the analysis, and event/frame/flow look-ups.

Built once per trace, read by every callback; nothing here imports Dash or plotly, so the model is
tested and benchmarked without a browser. The index (fast) is built first so the timeline can draw;
the analysis (``diagnose`` and the cause intervals, which take longer on big traces) is a second
step, :meth:`ViewModel.analyse`, that the server runs right after.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from neurontrace.analysis.attribution import CauseIntervals, cause_intervals
from neurontrace.analysis.diagnose import Diagnosis, diagnose
from neurontrace.analysis.ops import OpsIndex, OpsView
from neurontrace.app import counters, lod, memory_marker, tables
from neurontrace.app.tracks import DEVICE, DEVICE_TABLE, SYSTEM_TABLE, TrackIndex, build
from neurontrace.causes import CAUSES
from neurontrace.columns import codes
from neurontrace.errors import MixedRunsError
from neurontrace.trace import Trace

DeviceKey = tuple[str, "int | None"]  # (device, rank): one attribution block each
MAX_LINKS = 40  # flows listed and drawn for one selected event
# Left out of a group's summary row: markers of regions, and Python frames, which wrap everything
# (the row shows what the ops, runtime calls and kernels did).
MARKER_CATEGORIES = ("step", "annotation", "python")
MAX_STACK = 64  # frames listed for one event
MAX_OPS_VIEWS = 32  # op tables kept per model (one per device and window asked for)


@dataclass
class Analysis:
    diagnosis: Diagnosis
    causes: dict[DeviceKey, CauseIntervals]  # by (device, rank), as diagnose reports devices
    coarse: dict[DeviceKey, lod.Coarse]  # whole-trace coverage of each cause (zoomed-out views)
    stalls: list[dict[str, Any]]
    fallback: list[dict[str, Any]]
    top_ops: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    seconds: float
    cause_error: str | None = None
    report: list[dict[str, Any]] = field(default_factory=list)  # every registered section's text (tables.report_rows)


@dataclass(frozen=True)
class Frame:
    frame_id: int
    file: str | None
    line: int | None
    function: str | None
    kind: str
    is_user: bool

    @property
    def location(self) -> str:
        if self.file:
            where = f"{self.file}:{self.line}" if self.line is not None else self.file
            return f"{where} {self.function}" if self.function else where
        return self.function or "?"


@dataclass(frozen=True)
class Link:
    direction: str  # "out" (this event → other) or "in" (other → this event)
    kind: str  # flows.kind (launch, fwdbwd, dependency, other), or "correlation" / "external id"
    event_id: int


@dataclass
class ViewModel:
    trace: Trace
    title: str
    index: TrackIndex
    steps: tuple[np.ndarray, np.ndarray, list[str]]  # relative start, end, label of step markers
    synthetic: bool = False
    fallback_ops: Sequence[str] = ()
    analysis: Analysis | None = None
    build_seconds: float = 0.0
    counters: list[counters.Series] = field(default_factory=list)
    memory_peaks: dict[str, memory_marker.PeakMarker] = field(default_factory=dict)  # counter label -> peak
    compiles: Any = None  # compile-log rows beside the trace (schema.COMPILES), for the compile section
    compile_warnings: tuple[str, ...] = ()
    _frames: dict[int, tuple[int | None, Frame]] = field(default_factory=dict, repr=False)
    _links: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _ops: dict[DeviceKey, OpsIndex] = field(default_factory=dict, repr=False)
    _ops_views: dict[tuple[DeviceKey, tuple[int, int] | None], OpsView] = field(default_factory=dict, repr=False)
    _ops_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def build(cls, trace: Trace, *, title: str = "trace", fallback_ops: Sequence[str] = (),
              index: TrackIndex | None = None) -> ViewModel:
        """The model of ``trace``; ``index``: its track index already built (and its level of detail prepared),
        e.g. the one stored beside a dataset's parts (``app/index_store.py``), else it is built here."""
        t0 = time.perf_counter()
        if index is None:
            index = build(trace)
            lod.prepare(index, markers=MARKER_CATEGORIES)
        model = cls(trace=trace, title=title, index=index, steps=_steps(trace, index),
                    synthetic=bool(trace.meta("synthetic", False)), fallback_ops=tuple(fallback_ops))
        model._frames = _frames(trace.frames)
        model.counters = counters.series(trace, index.origin_ns)
        model.memory_peaks = memory_marker.peaks(trace, index.origin_ns)
        model.build_seconds = time.perf_counter() - t0
        return model

    def analyse(self) -> Analysis:
        """Run ``diagnose`` and cut each device's window into cause runs (the slow part)."""
        t0 = time.perf_counter()
        try:
            diag = diagnose(self.trace, fallback_ops=self.fallback_ops, compiles=self.compiles,
                            compile_warnings=self.compile_warnings)
        except MixedRunsError as exc:  # logs beside the trace of another run: left out, and said so
            diag = diagnose(self.trace, fallback_ops=self.fallback_ops,
                            compile_warnings=(f"the compile logs beside the trace were not used: {exc}",))
        fallback_ids = np.array([i for op in diag.fallback_ops for i in op.event_ids], dtype=np.int64)
        causes: dict[DeviceKey, CauseIntervals] = {}
        coarse: dict[DeviceKey, lod.Coarse] = {}
        error = None
        origin = self.index.origin_ns
        try:
            for d in diag.devices:
                key = (d.device, d.rank)
                runs = causes[key] = cause_intervals(self.trace, d.device, d.rank, d.window,
                                                     fallback_event_ids=fallback_ids)
                if len(runs.starts) >= lod.COARSE_MIN_EVENTS:
                    coarse[key] = lod.coarse(runs.starts, runs.ends, runs.cause, origin,
                                                  origin + self.index.span_ns, len(CAUSES))
        except Exception as exc:  # the timeline still works without the cause rows
            error = f"cause intervals unavailable ({type(exc).__name__}: {exc})"
        self.analysis = Analysis(
            diagnosis=diag, causes=causes, coarse=coarse, stalls=tables.stall_rows(diag, origin),
            fallback=tables.fallback_rows(diag), top_ops=tables.top_ops(self.index),
            findings=tables.finding_rows(diag), seconds=time.perf_counter() - t0, cause_error=error,
            report=tables.report_rows(diag),
        )
        focus = self.focus()
        if focus is not None:  # the ops panel opens on this device: link its kernels now, in the background
            self.ops_view(focus[0], None)
        return self.analysis

    def ops_view(self, device: DeviceKey, window: tuple[int, int] | None) -> OpsView:
        """The op table (``neurontrace ops``) of one device over ``window`` (trace-clock ns; None: the whole
        trace), from an index built once per device; the last few windows asked for are kept."""
        with self._ops_lock:  # callbacks run in threads: one index build per device
            key = (device, window)
            if key in self._ops_views:
                return self._ops_views[key]
            index = self._ops.get(device)
            if index is None:
                index = self._ops[device] = OpsIndex(self.trace, device=device[0], rank=device[1])
            view = index.view(window)
            if len(self._ops_views) >= MAX_OPS_VIEWS:
                self._ops_views.pop(next(iter(self._ops_views)))
            self._ops_views[key] = view
            return view

    # -- where the page opens, and its time origin ---------------------------------------------

    def focus(self) -> tuple[DeviceKey, tuple[int, int]] | None:
        """The busiest device (most non-idle time) and its analysis window, in ns after the trace's
        first event; None until the analysis is done (or without devices)."""
        if self.analysis is None or not self.analysis.diagnosis.devices:
            return None
        d = max(self.analysis.diagnosis.devices, key=lambda d: d.window_ns - d.causes_ns.get("idle", 0))
        o = self.index.origin_ns
        return (d.device, d.rank), (d.window[0] - o, d.window[1] - o)

    @property
    def time_origin(self) -> int:
        """What the page calls time 0, in ns after the trace's first event: the report's time 0
        (``Diagnosis.origin_ns``, the analysis windows' start, as ``diagnose`` prints it), the first event
        until it is known."""
        origin = None if self.analysis is None else self.analysis.diagnosis.origin_ns
        return 0 if origin is None else origin - self.index.origin_ns

    def absolute(self, rel_ns: int) -> int:
        """A time in ns after the trace's first event, on the trace's own clock."""
        return self.index.origin_ns + rel_ns

    # -- look-ups -------------------------------------------------------------------------------

    @property
    def device_groups(self) -> list[str]:
        return [g.device for g in self.index.groups if g.side == DEVICE and g.device]

    def event(self, event_id: int) -> dict[str, Any] | None:
        """Every column of the event with this id (args decoded), plus its lane; None if unknown."""
        pos = self.index.position(event_id)
        if pos is None:
            return None
        which = int(self.index.table[pos])
        table = self.trace.system_events if which == SYSTEM_TABLE else self.trace.device_events
        row = table.slice(int(self.index.row[pos]), 1).to_pylist()[0]
        with contextlib.suppress(ValueError):  # args that are not JSON stay text
            row["args"] = json.loads(row["args"]) if row.get("args") else {}
        row["side"] = "host" if which == SYSTEM_TABLE else "device"
        row["lane"] = self.index.lane_of(pos)
        row["rel_ns"] = int(self.index.start[pos])
        return dict(row)

    def stack(self, frame_id: int | None) -> list[Frame]:
        """The frame and its callers, innermost first."""
        out: list[Frame] = []
        node = frame_id
        while node is not None and node in self._frames and len(out) < MAX_STACK:
            parent, frame = self._frames[node]
            out.append(frame)
            node = parent
        return out

    def links(self, event_id: int) -> list[Link]:
        """Flows touching the event, then correlation / external-id partners in the other table."""
        if not self._links:  # the columns of every event: gathered on the first click, not when the page opens
            self._links = _link_columns(self.trace)
        cols = self._links
        out: list[Link] = []
        seen: set[int] = set()

        def add(direction: str, kind: str, ids: np.ndarray) -> None:
            for other in ids.tolist():
                if other != event_id and other not in seen and len(out) < MAX_LINKS:
                    seen.add(other)
                    out.append(Link(direction, kind, int(other)))

        src, dst, kind = cols["flow_src"], cols["flow_dst"], cols["flow_kind"]
        kinds = cols["flow_kinds"]
        for hit, other, direction in ((np.flatnonzero(src == event_id), dst, "out"),
                                      (np.flatnonzero(dst == event_id), src, "in")):
            for k in np.unique(kind[hit]).tolist():
                rows = hit[kind[hit] == k]
                ids = other[rows]
                add(direction, str(kinds[k]) if 0 <= k < len(kinds) else "other", ids[ids >= 0])
        pos = self.index.position(event_id)
        if pos is None:
            return out
        which = int(self.index.table[pos])
        row = int(self.index.row[pos])
        mine, theirs = ("sys", "dev") if which == SYSTEM_TABLE else ("dev", "sys")
        corr = cols[f"{mine}_corr"][row]
        if corr >= 0:
            partners = cols[f"{theirs}_id"][cols[f"{theirs}_corr"] == corr]
            add("out" if which == SYSTEM_TABLE else "in", "correlation", partners)
        ext = cols[f"{mine}_ext"][row]
        if which == SYSTEM_TABLE and ext >= 0 and cols["sys_is_op"][row]:
            add("out", "external id", cols["dev_id"][cols["dev_ext"] == ext])
        return out


# -- helpers -------------------------------------------------------------------------------------


def _steps(trace: Trace, index: TrackIndex) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Step markers: ProfilerStep#N host events, else device executions (Neuron)."""
    for table, category in ((trace.system_events, "step"), (trace.device_events, "execution")):
        cat_idx, values = codes(table["category"])
        if category not in values:
            continue
        rows = np.flatnonzero(cat_idx == values.index(category))
        ts = table["ts_ns"].to_numpy()[rows] - index.origin_ns
        te = ts + table["dur_ns"].to_numpy()[rows]
        names = table["name"].take(pa.array(rows)).cast(pa.string()).to_pylist()
        order = np.argsort(ts, kind="stable")
        # One device's executions can repeat per engine track; keep distinct start times.
        ts, te = ts[order], te[order]
        names = [str(names[i]) for i in order.tolist()]
        keep = np.r_[True, ts[1:] != ts[:-1]] if len(ts) else np.zeros(0, bool)
        return ts[keep], te[keep], [n for n, k in zip(names, keep.tolist(), strict=True) if k]
    empty = np.zeros(0, dtype=np.int64)
    return empty, empty, []


def _frames(frames: pa.Table) -> dict[int, tuple[int | None, Frame]]:
    out: dict[int, tuple[int | None, Frame]] = {}
    cols = [frames[c].to_pylist() if not pa.types.is_dictionary(frames[c].type)
            else frames[c].cast(pa.string()).to_pylist()
            for c in ("frame_id", "parent_id", "file", "line", "function", "kind", "is_user")]
    for fid, parent, file_, line, fn, kind, user in zip(*cols, strict=True):
        out[int(fid)] = (parent, Frame(int(fid), file_, line, fn, str(kind), bool(user)))
    return out


def _filled(col: pa.ChunkedArray, fill: int = -1) -> np.ndarray:
    return np.asarray(col.fill_null(fill).to_numpy(), dtype=np.int64)


def _link_columns(trace: Trace) -> dict[str, Any]:
    sys_t, dev_t, flows = trace.system_events, trace.device_events, trace.flows
    kind_idx, kinds = codes(flows["kind"])
    cat_idx, cats = codes(sys_t["category"])
    op_code = cats.index("framework_op") if "framework_op" in cats else -2
    return {
        "flow_src": _filled(flows["src_event_id"]), "flow_dst": _filled(flows["dst_event_id"]),
        "flow_kind": kind_idx, "flow_kinds": np.array([str(k) for k in kinds], dtype=object),
        "sys_id": sys_t["event_id"].to_numpy(), "dev_id": dev_t["event_id"].to_numpy(),
        "sys_corr": _filled(sys_t["correlation"]), "dev_corr": _filled(dev_t["correlation"]),
        "sys_ext": _filled(sys_t["external_id"]), "dev_ext": _filled(dev_t["external_id"]),
        "sys_is_op": cat_idx == op_code,
    }


__all__ = ["DEVICE_TABLE", "SYSTEM_TABLE", "Analysis", "DeviceKey", "Frame", "Link", "ViewModel"]
