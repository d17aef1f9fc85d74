"""Plotly figures of the viewer, built as plain dicts (fast, no validation pass) from the model.

The timeline's y axis is one row per lane (a track at one nesting depth) plus one header row per group
(process or device): a process header sums its threads' busy time, a device header is the device's
*attribution row*, one colour per stall cause. Rows that the level of detail binned are one plotly
heatmap; rows sent as events are horizontal bars (one trace per category, clickable). Numeric arrays
travel as plotly.js typed arrays (base64), which keeps a callback's payload small.

x is milliseconds from the page's *time origin* (``Request.origin``, ns after the trace's first
event): the start of the analysis window once the analysis is done (docs/viewer.md, "Time origin"),
so the axis, the hover texts and the tables read like ``diagnose``. The server always sets the x
range and the ticks itself (labels in ns, µs, ms or s, whichever the zoom needs), so a zoom, a pan or
a click on a table row are all "draw this window".
"""

from __future__ import annotations

import base64
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neurontrace.app import counters, lod, memory_marker
from neurontrace.app.model import MARKER_CATEGORIES, DeviceKey, ViewModel
from neurontrace.app.palette import (
    CATEGORY_COLORS,
    CAUSE_COLORS,
    CAUSE_LABELS,
    LEVELS,
    binned_colorscale,
    rgba,
)
from neurontrace.app.tracks import DEVICE, MARKERS, PYTHON
from neurontrace.causes import CAUSES

ROW_PX = 20
COUNTER_COLOR = "#00838f"
TOP_PX = 50
BOTTOM_PX = 8
LEFT_PX = 250
PAN_MARGIN = 0.125  # data is sent for this share of the width beyond each edge, so a pan shows data at once
MAX_STEP_LABELS = 40
MAX_STEP_LINES = 400
STEP_LABEL_PX = 56
COUNTERS = "counters"  # the counters' key among the expanded groups
MAX_ROWS = 120  # rows drawn at most (beyond them the page is neither readable nor small)
HOVER_CELLS = 150_000  # binned cells beyond which their hover (busy share) is left out of the payload
MAX_HIGHLIGHT_SHAPES = 600
LABEL_CHARS = 38
FONT = "Inter, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"


def typed(values: np.ndarray) -> dict[str, str] | list[Any]:
    """A numpy array as a plotly.js typed-array spec (base64); int64 is narrowed first."""
    arr = np.ascontiguousarray(values)
    if arr.dtype == np.int64:
        lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, 0)
        arr = arr.astype(np.int32 if lo >= -2**31 and hi < 2**31 else np.float64)
    short = {"int8": "i1", "uint8": "u1", "int16": "i2", "uint16": "u2", "int32": "i4", "uint32": "u4",
             "float32": "f4", "float64": "f8"}.get(str(arr.dtype))
    if short is None or arr.size == 0:
        return arr.tolist()  # type: ignore[no-any-return]
    spec = {"dtype": short, "bdata": base64.b64encode(arr.tobytes()).decode("ascii")}
    if arr.ndim > 1:
        spec["shape"] = ", ".join(str(n) for n in arr.shape)
    return spec


@dataclass(frozen=True)
class Row:
    kind: str  # "group" (a process/device summed), "lane", "cause" (a device's attribution)
    label: str
    group: int | None
    lane: int | None = None
    device: DeviceKey | None = None  # (device, rank) of a cause row
    thin: bool = False  # a markers lane (device steps, annotations): thin bars
    counter: int | None = None  # index into model.counters of a counter row


@dataclass(frozen=True)
class Request:
    """What the page asks the timeline for."""

    t0: int  # ns relative to the trace origin
    t1: int
    n_bins: int = 1200
    expanded: frozenset[str] = frozenset()
    max_depth: int = 10  # Python frame levels drawn, innermost first
    python: bool = False  # draw the threads' Python frame layers
    highlight: tuple[str, int | None, str] | None = None  # (device, rank, cause)
    selected: int | None = None  # event id
    origin: int = 0  # ns after the trace's first event that the axis calls 0
    height_px: int = 0  # the height the page offers the timeline (0: just fit the rows)
    marked: tuple[int, ...] = ()  # index positions of events to outline (an op picked in the ops panel)


@dataclass
class Drawn:
    figure: dict[str, Any]
    rows: list[Row]
    status: str
    events: int = 0
    binned_rows: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def rows(model: ViewModel, expanded: Collection[str], max_depth: int, python: bool = False
         ) -> tuple[list[Row], int]:
    """The timeline's rows, top to bottom: host groups, then devices (each header, then its lanes);
    and how many lane rows were left out to stay within ``MAX_ROWS``.

    A thread's Python layer is drawn only with ``python``, and then only its ``max_depth`` innermost
    levels (the outermost frames are threading / runpy / profiler wrappers); a track holding only
    instants is not drawn at all."""
    ix = model.index
    causes = model.analysis.causes if model.analysis else {}
    out: list[Row] = []
    with_group: set[DeviceKey] = set()
    for g in ix.groups:
        drawn = [ix.tracks[i] for i in g.tracks if not ix.tracks[i].empty and (python or ix.tracks[i].layer != PYTHON)]
        if not drawn and (str(g.device), g.rank) not in causes:
            continue  # nothing of this process to draw (only instants, or only Python frames now hidden)
        is_open = g.key in expanded
        arrow = "▾" if is_open else "▸"
        key = (str(g.device), g.rank)
        if g.side == DEVICE and key in causes:
            with_group.add(key)
            out.append(Row("cause", f"{arrow} {g.label} · stall causes", g.index, device=key))
        else:
            out.append(Row("group", f"{arrow} {g.label}", g.index))
        if is_open:
            for t in drawn:
                depths = range(max(0, t.depth - max_depth), t.depth) if t.layer == PYTHON else range(t.depth)
                for n, d in enumerate(depths):
                    out.append(Row("lane", t.label if n == 0 else "", g.index, lane=t.first_lane + d,
                                   thin=t.layer == MARKERS))
    ranks = {rank for _device, rank in causes}
    for key in causes:  # a trace without a device: the CPU was analysed as the device
        if key not in with_group:
            where = f"{key[0]} (host as device)" + (f" · rank {key[1]}" if len(ranks) > 1 else "")
            out.append(Row("cause", f"{where} · stall causes", None, device=key))
    if model.counters:  # the counters table: one area row per series, collapsible like a group
        is_open = COUNTERS in expanded
        out.append(Row("group", f"{'▾' if is_open else '▸'} counters", None))
        if is_open:
            out += [Row("counter", s.label, None, counter=k) for k, s in enumerate(model.counters)]
    budget = MAX_ROWS - sum(1 for r in out if r.kind != "lane")
    kept: list[Row] = []
    for r in out:
        if r.kind != "lane" or budget > 0:
            kept.append(r)
            budget -= r.kind == "lane"
    return kept, len(out) - len(kept)


def timeline(model: ViewModel, req: Request) -> Drawn:
    """The timeline figure for one window (see the module docstring)."""
    ix = model.index
    table_rows, hidden = rows(model, req.expanded, req.max_depth, req.python)
    n_rows = max(1, len(table_rows))
    width = max(req.t1 - req.t0, lod.MIN_WIDTH_NS)
    margin = int(width * PAN_MARGIN)
    view_bins = max(50, req.n_bins)
    w = lod.window(req.t0 - margin, req.t0 + width + margin, int(view_bins * (1 + 2 * PAN_MARGIN)))
    bin_ms = w.bin_ns / 1e6
    shown = [r.lane for r in table_rows if r.kind == "lane" and r.lane is not None]
    view = lod.query(ix, shown, w)
    as_events = set(view.event_lanes)
    n_cat = len(ix.categories)
    colors = [CATEGORY_COLORS[c] for c in ix.categories] + [CAUSE_COLORS[c] for c in CAUSES]
    top = 1 + len(colors) * LEVELS
    scale = binned_colorscale(colors)

    z = np.full((n_rows, w.n_bins), np.nan, dtype=np.float32)
    pct = np.zeros((n_rows, w.n_bins), dtype=np.uint8)
    traces: list[dict[str, Any]] = []
    cause_bars: list[tuple[int, DeviceKey, tuple[int, int]]] = []
    binned_rows = 0
    lane_y = np.full(max(ix.n_lanes, 1), -1, dtype=np.int64)
    group_y: dict[int, int] = {}
    for y, row in enumerate(table_rows):
        if row.kind == "lane" and row.lane is not None:
            lane_y[row.lane] = y
            if row.lane in as_events:
                continue
            code, p = lod.encode(view.binned[row.lane], view.touched[row.lane])
        elif row.kind == "counter" and row.counter is not None:
            _counter_trace(model, row.counter, w, y, traces, req.origin)
            continue
        elif row.kind == "group" and row.group is not None:
            group_y[row.group] = y
            # What the process's threads were doing, all nesting levels, steps and annotations left out.
            matrix, touched = lod.group_busy(ix, row.group, w, markers=MARKER_CATEGORIES)
            code, p = lod.encode(matrix, touched)
        else:
            if row.group is not None:
                group_y[row.group] = y
            if model.analysis is None or row.device not in model.analysis.causes:
                continue
            runs = model.analysis.causes[row.device]
            origin = ix.origin_ns
            aw = lod.Window(w.t0 + origin, w.t1 + origin, w.n_bins)
            matrix, touched, span = lod.runs_busy(runs.starts, runs.ends, runs.cause, aw, len(CAUSES),
                                                  model.analysis.coarse.get(row.device))
            if span[1] - span[0] <= view_bins // 3:
                cause_bars.append((y, row.device, span))
                continue
            code, p = lod.encode(matrix, touched)
            code = np.where(code > 0, code + n_cat * LEVELS, 0).astype(np.uint8)
        z[y] = np.where(code > 0, code, np.nan)
        pct[y] = p
        binned_rows += 1

    binned = np.flatnonzero(~np.all(np.isnan(z), axis=1))
    if len(binned):  # one heatmap per block of consecutive binned rows: no payload for the others
        breaks = np.flatnonzero(np.diff(binned) > 1) + 1
        hover = len(binned) * w.n_bins <= HOVER_CELLS  # the busy share per cell costs a byte each
        for block in np.split(binned, breaks):
            a, b = int(block[0]), int(block[-1]) + 1
            cells: dict[str, Any] = {
                "type": "heatmap", "name": "binned", "z": typed(z[a:b]),
                "x0": (w.t0 - req.origin + w.bin_ns / 2) / 1e6, "dx": bin_ms, "y0": a, "dy": 1,
                "coloraxis": "coloraxis", "zsmooth": False, "hoverongaps": False, "xgap": 0, "ygap": 1,
                "hovertemplate": "%{x:.4f} ms · busy %{customdata}%<extra></extra>",
            }
            if hover:
                cells["customdata"] = typed(pct[a:b])
            else:
                cells["hovertemplate"] = "%{x:.4f} ms<extra></extra>"
            traces.append(cells)
    thin = np.array([r.thin for r in table_rows] or [False])
    n_events = _event_traces(model, view, lane_y, bin_ms, traces, req.origin, thin)
    for y, device, span in cause_bars:
        _cause_traces(model, device, span, y, bin_ms, traces, req.origin)
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    _group_bands(table_rows, shapes)
    _step_marks(model, w, shapes, annotations, req.origin)
    if req.highlight:
        _highlight(model, req.highlight, w, n_rows, traces, req.origin)
    if req.marked:
        traces.append(outline(model, table_rows, np.asarray(req.marked, dtype=np.int64), req, "marked"))
    if req.selected is not None:
        _selection(model, req.selected, lane_y, group_y, bin_ms, shapes, traces, req.origin)
    # Few rows: they stretch to the height the page offers; many: ROW_PX each, and the page scrolls.
    height = max(req.height_px, TOP_PX + BOTTOM_PX + ROW_PX * n_rows)
    tick_vals, tick_text = x_ticks(req.t0 - req.origin, req.t0 + width - req.origin, view_bins)

    ticks = [(y, r) for y, r in enumerate(table_rows) if r.label]
    layout = {
        "height": height,
        "margin": {"l": LEFT_PX, "r": 12, "t": TOP_PX, "b": BOTTOM_PX, "pad": 4},
        "font": {"family": FONT, "size": 11, "color": "#263238"},
        "xaxis": {"range": [(req.t0 - req.origin) / 1e6, (req.t0 + width - req.origin) / 1e6], "side": "top",
                  "showgrid": True, "tickmode": "array", "tickvals": tick_vals, "ticktext": tick_text,
                  "gridcolor": "#eceff1", "zeroline": False, "showline": True,
                  "linecolor": "#b0bec5", "ticks": "outside", "tickcolor": "#b0bec5", "automargin": False},
        "yaxis": {"range": [n_rows - 0.5, -0.5], "tickmode": "array", "tickvals": [y for y, _ in ticks],
                  "ticktext": [_tick(r) for _, r in ticks], "fixedrange": True, "showgrid": False,
                  "zeroline": False, "ticks": "", "automargin": False},
        "barmode": "overlay", "bargap": 0, "dragmode": "zoom", "hovermode": "closest", "showlegend": False,
        "uniformtext": {"minsize": 8, "mode": "hide"}, "plot_bgcolor": "#ffffff", "paper_bgcolor": "#ffffff",
        "hoverlabel": {"font": {"family": FONT, "size": 12}, "align": "left"},
        "shapes": shapes, "annotations": annotations,
        "coloraxis": {"colorscale": scale, "cmin": -0.5, "cmax": top - 0.5, "showscale": False},
    }
    status = (f"{n_events:,} events shown, {binned_rows} rows binned at {_duration(w.bin_ns)} per pixel"
              if binned_rows else f"{n_events:,} events shown")
    if hidden:
        status += f"; {hidden} more rows not drawn (collapse groups or lower the stack depth)"
    return Drawn({"data": traces, "layout": layout}, table_rows, status, n_events, binned_rows)


# -- pieces --------------------------------------------------------------------------------------


TICK_PX = 120  # about one x tick per this many pixels
UNITS = ((1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns"))


def x_ticks(lo_ns: float, hi_ns: float, n_px: int) -> tuple[list[float], list[str]]:
    """x ticks (in ms, the axis unit) for a window of ``lo_ns..hi_ns`` from the origin, at round steps
    (1, 2, 5 times 10^k ns), labelled in the largest unit the values reach (ns, µs, ms, s) with as many
    decimals as the step needs."""
    span = max(hi_ns - lo_ns, 1.0)
    raw = span / max(1, n_px // TICK_PX)
    power = 10 ** np.floor(np.log10(raw))
    step = float(next(m * power for m in (1, 2, 5, 10) if m * power >= raw))
    step = max(step, 1.0)
    reach = max(abs(lo_ns), abs(hi_ns))
    scale, unit = next(((s, u) for s, u in UNITS if reach >= s), UNITS[-1])
    decimals = min(9, max(0, int(-np.floor(np.log10(step / scale) + 1e-9))))
    first = np.ceil(lo_ns / step) * step
    vals = np.arange(first, hi_ns + step / 2, step)
    vals = vals[vals <= hi_ns]
    text = [f"{v / scale:,.{decimals}f} {unit}".replace("-0 ", "0 ") if abs(v) >= step / 2 else "0"
            for v in vals.tolist()]
    return (vals / 1e6).tolist(), text


def _tick(row: Row) -> str:
    text = row.label if len(row.label) <= LABEL_CHARS else row.label[:LABEL_CHARS - 1] + "…"
    if row.kind == "lane":
        return text
    return f"<b>{text}</b>"


def _duration(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.3g} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.3g} µs"
    return f"{ns:.3g} ns"


def _event_traces(model: ViewModel, view: lod.LaneView, lane_y: np.ndarray, bin_ms: float,
                  traces: list[dict[str, Any]], origin: int, thin: np.ndarray) -> int:
    ix = model.index
    pos = view.event_pos
    if not len(pos):
        return 0
    lanes = np.searchsorted(ix.lane_offsets, pos, side="right") - 1
    y = lane_y[lanes]
    keep = y >= 0
    pos, y = pos[keep], y[keep]
    start_ms = (ix.start[pos] - origin) / 1e6
    dur_ns = ix.end[pos] - ix.start[pos]
    width_ms = np.maximum(dur_ns / 1e6, bin_ms)
    cats = ix.cat[pos]
    for c in np.unique(cats).tolist():
        m = cats == c
        cat = ix.categories[c]
        # customdata stays a plain list: Dash copies it into clickData from the figure as sent,
        # which does not work for typed arrays.
        custom = list(zip(ix.event_id[pos[m]].tolist(), np.round(dur_ns[m] / 1e3, 3).tolist(), strict=True))
        traces.append({
            "type": "bar", "orientation": "h", "name": cat, "base": typed(start_ms[m]), "x": typed(width_ms[m]),
            "y": typed(y[m].astype(np.int32)), "customdata": custom,
            "text": ix.names[ix.name[pos[m]]].tolist(), "width": typed(np.where(thin[y[m]], 0.3, 0.86)),
            "marker": {"color": CATEGORY_COLORS[cat], "line": {"width": 0.5, "color": "#ffffff"}},
            "textposition": "inside", "insidetextanchor": "start", "textangle": 0, "cliponaxis": True,
            "textfont": {"color": "#ffffff", "size": 9}, "constraintext": "inside",
            "hovertemplate": f"<b>%{{text}}</b><br>{cat} · %{{customdata[1]:,.2f}} µs"
                             "<br>starts %{base:.4f} ms<extra></extra>",
        })
    return len(pos)


def _cause_traces(model: ViewModel, device: DeviceKey, span: tuple[int, int], y: int, bin_ms: float,
                  traces: list[dict[str, Any]], shift: int) -> None:
    assert model.analysis is not None
    runs = model.analysis.causes[device]
    origin = model.index.origin_ns
    sl = slice(*span)
    start = runs.starts[sl] - origin
    end = runs.ends[sl] - origin
    cause = runs.cause[sl]
    detail = runs.detail[sl]
    for k in np.unique(cause).tolist():
        m = cause == k
        name = CAUSES[k]
        custom = [[-1, d, a, b] for d, a, b in zip(np.round((end[m] - start[m]) / 1e3, 3).tolist(),
                                                   start[m].tolist(), end[m].tolist(), strict=True)]
        traces.append({
            "type": "bar", "orientation": "h", "name": f"cause:{name}", "base": typed((start[m] - shift) / 1e6),
            "x": typed(np.maximum((end[m] - start[m]) / 1e6, bin_ms)), "y": typed(np.full(int(m.sum()), y, np.int32)),
            "customdata": custom, "text": [runs.details[int(d)] for d in detail[m].tolist()], "width": 0.86,
            "marker": {"color": CAUSE_COLORS[name], "line": {"width": 0}}, "textposition": "none",
            "hovertemplate": f"<b>{CAUSE_LABELS[name]}</b> · %{{text}}<br>%{{customdata[1]:,.2f}} µs"
                             "<extra></extra>",
        })


def _counter_trace(model: ViewModel, k: int, w: lod.Window, y: int, traces: list[dict[str, Any]],
                   origin: int) -> None:
    """One counter series as a filled step area inside its row (the row's height is its peak)."""
    s = model.counters[k]
    held = counters.binned(s, w)
    if not np.isfinite(held).any():
        return
    x = (w.t0 - origin + (np.arange(w.n_bins) + 0.5) * w.bin_ns) / 1e6
    top = y + 0.42 - 0.84 * np.nan_to_num(held, nan=0.0) / (s.peak or 1.0)
    base = y + 0.42
    text = [_value(v, s.unit) for v in held.tolist()]
    traces.append({
        "type": "scatter", "mode": "lines", "name": f"counter:{s.label}", "line": {"shape": "hv", "width": 1,
                                                                                   "color": COUNTER_COLOR},
        "x": typed(np.r_[x, x[-1], x[0]]), "y": typed(np.r_[top, base, base]), "fill": "toself",
        "fillcolor": rgba(COUNTER_COLOR, 0.25), "text": [*text, "", ""], "hoveron": "points",
        "hovertemplate": f"<b>{s.label}</b><br>%{{text}} at %{{x:.4f}} ms<extra></extra>",
    })
    peak = model.memory_peaks.get(s.label)
    if peak is not None and w.t0 <= peak.ts < w.t0 + w.n_bins * w.bin_ns:  # the peak of this row, in view
        traces.append(memory_marker.marker_trace(peak, (peak.ts - origin) / 1e6,
                                                 y + 0.42 - 0.84 * peak.bytes / (s.peak or 1.0)))


def _value(v: float, unit: str) -> str:
    if not np.isfinite(v):
        return "no sample yet"
    if unit == "bytes":
        for scale, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if abs(v) >= scale:
                return f"{v / scale:,.2f} {name}"
        return f"{v:,.0f} B"
    return f"{v:,.4g} {unit}".strip()


def _group_bands(table_rows: list[Row], shapes: list[dict[str, Any]]) -> None:
    for y, row in enumerate(table_rows):
        if row.kind not in ("lane", "counter"):
            shapes.append({"type": "rect", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": y - 0.5,
                           "y1": y + 0.5, "fillcolor": "#f4f6f8", "line": {"width": 0}, "layer": "below"})
            if y:
                shapes.append({"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": y - 0.5,
                               "y1": y - 0.5, "line": {"color": "#cfd8dc", "width": 1}, "layer": "below"})


def _step_marks(model: ViewModel, w: lod.Window, shapes: list[dict[str, Any]],
                annotations: list[dict[str, Any]], origin: int) -> None:
    starts, ends, names = model.steps
    if not len(starts):
        return
    lo = int(np.searchsorted(starts, w.t0, side="left"))
    hi = int(np.searchsorted(starts, w.t1, side="right"))
    idx = np.arange(lo, hi)
    if len(idx) > MAX_STEP_LINES:
        idx = idx[:: int(np.ceil(len(idx) / MAX_STEP_LINES))]
    label = len(idx) <= MAX_STEP_LABELS
    last_px = -1e9
    for i in idx.tolist():
        x = float(starts[i] - origin) / 1e6
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
                       "line": {"color": "#455a64", "width": 1, "dash": "dot"}, "layer": "above"})
        px = (float(starts[i]) - w.t0) / w.bin_ns
        if label and px - last_px >= STEP_LABEL_PX:  # labels closer than this would overlap
            last_px = px
            # Inside the plot's top edge, not among the x tick labels above it (they would overlap).
            annotations.append({"x": x, "y": 1, "xref": "x", "yref": "paper", "yanchor": "top",
                                "xanchor": "left", "text": _short_step(names[i], i), "showarrow": False,
                                "font": {"size": 10, "color": "#37474f"}, "bgcolor": "rgba(255,255,255,0.85)",
                                "borderpad": 1, "xshift": 2})
    if len(ends) and w.t0 <= ends[-1] <= w.t1:
        x = float(ends[-1] - origin) / 1e6
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
                       "line": {"color": "#455a64", "width": 1, "dash": "dot"}, "layer": "above"})


def _short_step(name: str, index: int) -> str:
    if name.startswith("ProfilerStep#"):
        return name.replace("ProfilerStep#", "step ")
    return f"exec {index + 1}"  # Neuron device executions (nc_exec_running)


def _highlight(model: ViewModel, highlight: tuple[str, int | None, str], w: lod.Window, n_rows: int,
               traces: list[dict[str, Any]], shift: int) -> None:
    """Bands over the whole timeline where ``cause`` held on the device (merged per pixel when many)."""
    device = (highlight[0], highlight[1])
    cause = highlight[2]
    if not model.analysis or device not in model.analysis.causes or cause not in CAUSES:
        return
    runs = model.analysis.causes[device]
    origin = model.index.origin_ns
    s, e = runs.of_cause(cause)
    lo = int(np.searchsorted(e, w.t0 + origin, side="right"))
    hi = max(lo, int(np.searchsorted(s, w.t1 + origin, side="left")))
    s, e = s[lo:hi] - origin, e[lo:hi] - origin
    if len(s) > MAX_HIGHLIGHT_SHAPES:  # merge to pixel columns
        pre = model.analysis.coarse.get(device)
        if pre is not None and pre.usable(lod.Window(w.t0 + origin, w.t1 + origin, w.n_bins)):
            matrix, _touched = pre.query(lod.Window(w.t0 + origin, w.t1 + origin, w.n_bins))
            on = matrix[CAUSES.index(cause)] > 0
        else:
            matrix, _touched = lod.busy(s, e, np.zeros(len(s), np.int64), w, 1)
            on = matrix[0] > 0
        edges = np.flatnonzero(np.diff(np.r_[0, on.astype(np.int8), 0]))
        s = w.t0 + edges[0::2] * w.bin_ns
        e = w.t0 + edges[1::2] * w.bin_ns
    xs: list[float | None] = []
    ys: list[float | None] = []
    for a, b in zip(((s - shift) / 1e6).tolist(), ((e - shift) / 1e6).tolist(), strict=True):
        xs += [a, a, b, b, a, None]
        ys += [-0.5, n_rows - 0.5, n_rows - 0.5, -0.5, -0.5, None]
    color = CAUSE_COLORS[cause]
    traces.append({"type": "scatter", "mode": "lines", "name": f"highlight:{cause}", "x": xs, "y": ys,
                   "fill": "toself", "fillcolor": rgba(color, 0.16), "line": {"width": 1, "color": rgba(color, 0.5)},
                   "hoverinfo": "skip"})


MARK_COLOR = "#d500f9"  # outlines of picked ops (the ops panel, the two-run diff table)


def outline(model: ViewModel, table_rows: list[Row], pos: np.ndarray, req: Request, name: str) -> dict[str, Any]:
    """A trace outlining the events at index positions ``pos`` that overlap the window (with a window's
    width on each side, for pans) on their rows: their lane, or their group's header when the lane is
    folded away; at most ``MAX_HIGHLIGHT_SHAPES`` of them."""
    ix = model.index
    width = req.t1 - req.t0
    pos = pos[(ix.start[pos] < req.t1 + width) & (ix.end[pos] > req.t0 - width)][:MAX_HIGHLIGHT_SHAPES]
    lane_y: dict[int, int] = {}
    group_y: dict[int, int] = {}
    for y, row in enumerate(table_rows):
        if row.kind == "lane" and row.lane is not None:
            lane_y[row.lane] = y
        elif row.group is not None:
            group_y.setdefault(row.group, y)
    xs: list[float | None] = []
    ys: list[float | None] = []
    for p in pos.tolist():
        lane = ix.lane_of(p)
        y = lane_y.get(lane, group_y.get(ix.tracks[int(ix.lane_track[lane])].group, -1))
        if y < 0:
            continue
        x0, x1 = (float(ix.start[p]) - req.origin) / 1e6, (float(ix.end[p]) - req.origin) / 1e6
        xs += [x0, x1, x1, x0, x0, None]
        ys += [y - 0.45, y - 0.45, y + 0.45, y + 0.45, y - 0.45, None]
    return {"type": "scatter", "mode": "lines", "name": name, "x": xs, "y": ys,
            "line": {"color": MARK_COLOR, "width": 2}, "hoverinfo": "skip", "fill": "none"}


def _selection(model: ViewModel, event_id: int, lane_y: np.ndarray, group_y: dict[int, int], bin_ms: float,
               shapes: list[dict[str, Any]], traces: list[dict[str, Any]], origin: int) -> None:
    ix = model.index

    def place(eid: int) -> tuple[float, float, float] | None:
        pos = ix.position(eid)
        if pos is None:
            return None
        lane = ix.lane_of(pos)
        y = int(lane_y[lane])
        if y < 0:
            y = group_y.get(ix.tracks[int(ix.lane_track[lane])].group, -1)
        if y < 0:
            return None
        return float(ix.start[pos] - origin) / 1e6, float(ix.end[pos] - origin) / 1e6, float(y)

    me = place(event_id)
    if me is None:
        return
    x0, x1, y = me
    shapes.append({"type": "rect", "xref": "x", "yref": "y", "x0": x0, "x1": max(x1, x0 + bin_ms),
                   "y0": y - 0.48, "y1": y + 0.48, "line": {"color": "#000000", "width": 2}, "layer": "above"})
    xs: list[float | None] = []
    ys: list[float | None] = []
    sizes: list[int] = []
    for link in model.links(event_id):
        other = place(link.event_id)
        if other is None:
            continue
        (ax, ay), (bx, by) = ((x0, y), (other[0], other[2])) if link.direction == "out" else \
            ((other[0], other[2]), (x0, y))
        xs += [ax, bx, None]
        ys += [ay, by, None]
        sizes += [6, 11, 0]
    if xs:
        traces.append({"type": "scatter", "mode": "lines+markers", "name": "flows", "x": xs, "y": ys,
                       "line": {"color": "#d84315", "width": 1.5},
                       "marker": {"symbol": "arrow", "angleref": "previous", "size": sizes, "color": "#d84315"},
                       "hoverinfo": "skip", "cliponaxis": True})


# -- summary strip -------------------------------------------------------------------------------


def summary(model: ViewModel, highlight: tuple[str, int | None, str] | None = None, *,
            scale_ns: int | None = None) -> dict[str, Any]:
    """One stacked bar per device: the six causes as shares of its window; click a part to highlight it.
    With ``scale_ns`` (the two-run page: the longest window of both runs) each bar is drawn to its real length
    in ms on that common scale, so a run twice as slow has a bar twice as long; the labels keep the shares."""
    if model.analysis is None or not model.analysis.diagnosis.devices:  # still analysing, or nothing to show
        return {"data": [], "layout": {"height": 30, "xaxis": {"visible": False}, "yaxis": {"visible": False},
                                       "margin": {"l": 0, "r": 0, "t": 0, "b": 0},
                                       "plot_bgcolor": "#ffffff", "paper_bgcolor": "#ffffff"}}
    devices = model.analysis.diagnosis.devices
    ranks = {d.rank for d in devices}
    labels = [(f"<b>{d.device}</b>" if len(ranks) < 2 else f"<b>rank {d.rank} · {d.device}</b>")
              + f"  {d.window_ns / 1e6:,.1f} ms" for d in devices]
    traces = []
    for cause in CAUSES:
        pct = [100 * d.fraction(cause) for d in devices]
        ms = [d.causes_ns[cause] / 1e6 for d in devices]
        length = pct if scale_ns is None else ms
        line_w = [2 if highlight == (d.device, d.rank, cause) else 0 for d in devices]
        name = CAUSE_LABELS[cause] + (f" {pct[0]:.1f}%" if len(devices) == 1 else "")
        traces.append({
            "type": "bar", "orientation": "h", "name": name, "x": length, "y": labels,
            "customdata": [[m, i, p] for i, (m, p) in enumerate(zip(ms, pct, strict=True))],
            "text": [f"{CAUSE_LABELS[cause]} {p:.1f}%" if p >= 9 else (f"{p:.0f}%" if p >= 3 else "") for p in pct],
            "textposition": "inside", "insidetextanchor": "middle", "textangle": 0,
            "textfont": {"color": "#ffffff" if cause not in ("idle", "host_overhead") else "#263238", "size": 11},
            "marker": {"color": CAUSE_COLORS[cause], "line": {"color": "#000000", "width": line_w}},
            "hovertemplate": f"<b>{CAUSE_LABELS[cause]}</b>: %{{customdata[2]:.1f}}% · %{{customdata[0]:,.3f}} ms"
                             "<br>click to highlight on the timeline<extra>%{y}</extra>",
        })
    return {"data": traces, "layout": {
        "barmode": "stack", "height": 40 + 30 * len(devices),
        "margin": {"l": 190, "r": 12, "t": 4, "b": 30, "pad": 4},
        "font": {"family": FONT, "size": 11, "color": "#263238"},
        "xaxis": {"range": [0, 100 if scale_ns is None else scale_ns / 1e6], "fixedrange": True, "showgrid": False,
                  "zeroline": False, "showticklabels": scale_ns is not None,
                  **({} if scale_ns is None else {"ticksuffix": " ms"})},
        "yaxis": {"fixedrange": True, "autorange": "reversed", "automargin": False},
        "showlegend": True, "legend": {"orientation": "h", "y": 0, "yanchor": "top", "x": 0, "traceorder": "normal", "itemclick": False,
                                       "itemdoubleclick": False, "font": {"size": 11}},
        "plot_bgcolor": "#ffffff", "paper_bgcolor": "#ffffff", "bargap": 0.35,
        "hoverlabel": {"font": {"family": FONT, "size": 12}},
    }}
