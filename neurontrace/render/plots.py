"""Plotly figures for notebooks: render what the analyses return, compute nothing new.

Analyses return tables and never plot (DESIGN.md); these helpers draw their results. Each returns a
``plotly.graph_objects.Figure`` (``fig.show()`` in a notebook). plotly is optional:
``pip install 'neurontrace[viewer]'``.

- :func:`cause_bars`: the six stall causes per device, one stacked bar each (a diagnosis);
- :func:`cause_deltas`: baseline versus change per cause and device (a diff);
- :func:`op_deltas`: the ops whose time changed most, coloured by status (a diff);
- :func:`step_durations`: step times of both runs (a diff);
- :func:`bars`: any two columns of a table as bars;
- :func:`timeline`: events as horizontal bars on their tracks (a window of a trace table);
- :func:`roofline`: achieved TFLOP/s against arithmetic intensity under the device's roofs (an op table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from neurontrace._optional import require
from neurontrace.causes import CAUSES
from neurontrace.causes import COLORS as CAUSE_COLORS

STATUS_COLORS = {"added": "#d62728", "slower": "#ff7f0e", "faster": "#2ca02c", "removed": "#1f77b4",
                 "unchanged": "#b0b0b0"}
MAX_TIMELINE_EVENTS = 20_000  # more bars than this make a browser crawl; filter the table first


def _go() -> Any:
    return require("plotly.graph_objects", extra="viewer")


def _doc(obj: Any) -> Mapping[str, Any]:
    """A Diagnosis or Diff as its JSON document (objects with as_dict, or the dict itself)."""
    if isinstance(obj, Mapping):
        return obj
    return dict(obj.as_dict())


def _title(text: str, synthetic: bool) -> str:
    return f"SYNTHETIC: {text}" if synthetic else text


def cause_bars(diagnosis: Any, *, title: str = "Where device time went") -> Any:
    """One stacked horizontal bar per device: milliseconds of each cause (a Diagnosis or its JSON)."""
    go = _go()
    doc = _doc(diagnosis)
    devices = doc.get("devices") or []
    labels = [d["device"] + ("" if d.get("rank") is None else f" r{d['rank']}") for d in devices]
    fig = go.Figure()
    for cause in CAUSES:
        fig.add_bar(name=cause, y=labels, x=[d["causes_ns"].get(cause, 0) / 1e6 for d in devices],
                    orientation="h", marker_color=CAUSE_COLORS[cause])
    fig.update_layout(barmode="stack", title=_title(title, bool(doc.get("synthetic"))), xaxis_title="ms",
                      legend_title="cause", height=200 + 40 * len(devices))
    return fig


def cause_deltas(diff: Any, *, share: bool = False, title: str = "Baseline versus change, per cause") -> Any:
    """Grouped bars per device and cause: baseline next to change (ms, or share of the window)."""
    go = _go()
    doc = _doc(diff)
    fig = go.Figure()
    for side, color in (("baseline", "#7f7f7f"), ("change", "#1f77b4")):
        x: list[str] = []
        y: list[float] = []
        for d in doc.get("devices") or []:
            dev = d["baseline"]["device"]
            other = d["change"]["device"]
            label = dev if dev == other else f"{dev} ↔ {other}"
            for cause in CAUSES:
                c = d["causes_ns"][cause]
                x.append(f"{label}: {cause}")
                y.append(100 * c[f"{side}_share"] if share else (c[side] or 0) / 1e6)
        fig.add_bar(name=side, x=x, y=y, marker_color=color)
    fig.update_layout(barmode="group", title=_title(title, bool(doc.get("synthetic"))),
                      yaxis_title="% of window" if share else "ms")
    return fig


def op_deltas(diff: Any, *, top: int = 15, title: str = "Ops whose time changed most") -> Any:
    """Horizontal bars of the ``top`` largest time changes, coloured by status (added, slower ...)."""
    go = _go()
    ops = getattr(diff, "ops", None)
    rows: Sequence[Mapping[str, Any]]
    if ops is not None:
        rows = [r for r in ops.to_pylist() if r["status"] != "unchanged"][:top]
        synthetic = bool(diff.synthetic)
    else:  # a neurontrace.diff/1 document
        doc = _doc(diff)
        rows = [{"status": o["status"], "name": o["name"], "source": o["source"], "unit": o["unit"],
                 "delta_ns": o["total_ns"]["delta"]} for o in doc.get("ops") or [] if o["status"] != "unchanged"][:top]
        synthetic = bool(doc.get("synthetic"))
    rows = list(reversed(rows))  # largest at the top
    labels = [(f"{r['unit']}: " if r.get("unit") else "") + _short(r["name"]) +
              (f" @ {r['source']}" if r.get("source") else "") for r in rows]
    fig = go.Figure()
    for status, color in STATUS_COLORS.items():
        pick = [i for i, r in enumerate(rows) if r["status"] == status]
        if pick:
            fig.add_bar(name=status, orientation="h", y=[labels[i] for i in pick],
                        x=[rows[i]["delta_ns"] / 1e6 for i in pick], marker_color=color)
    fig.update_layout(title=_title(title, synthetic), xaxis_title="change in total time (ms)",
                      height=200 + 28 * len(rows), yaxis={"categoryorder": "array", "categoryarray": labels})
    return fig


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."


def step_durations(diff: Any, *, title: str = "Step times") -> Any:
    """Each profiled step's duration, baseline and change, with their medians."""
    go = _go()
    doc = _doc(diff)
    steps = doc.get("steps") or {}
    durations = steps.get("durations_ns") or {}
    fig = go.Figure()
    for side, color in (("baseline", "#7f7f7f"), ("change", "#1f77b4")):
        ys = [v / 1e6 for v in durations.get(side) or []]
        fig.add_scatter(name=side, x=list(range(1, len(ys) + 1)), y=ys, mode="lines+markers", line_color=color)
        median = (steps.get("median_ns") or {}).get(side)
        if median is not None:
            fig.add_hline(y=median / 1e6, line_dash="dot", line_color=color,
                          annotation_text=f"{side} median {median / 1e6:.3g} ms")
    fig.update_layout(title=_title(title, bool(doc.get("synthetic"))), xaxis_title="profiled step",
                      yaxis_title="ms")
    return fig


def bars(table: Any, x: str, y: str, *, color: str | None = None, title: str = "",
         horizontal: bool = False) -> Any:
    """Bars of column ``y`` against column ``x`` of a pandas DataFrame or pyarrow Table."""
    go = _go()
    frame = table.to_pandas() if hasattr(table, "to_pandas") and not hasattr(table, "iloc") else table
    fig = go.Figure()
    groups = [(None, frame)] if color is None else list(frame.groupby(color, sort=False, observed=True))
    for key, part in groups:
        xs, ys = list(part[x]), list(part[y])
        fig.add_bar(name=None if key is None else str(key), x=ys if horizontal else xs, y=xs if horizontal else ys,
                    orientation="h" if horizontal else "v")
    fig.update_layout(title=title, barmode="group", xaxis_title=y if horizontal else x,
                      yaxis_title=x if horizontal else y, showlegend=color is not None)
    return fig


def timeline(events: Any, *, lane: str = "track", color: str = "category", title: str = "",
             synthetic: bool = False) -> Any:
    """Events (a system_events / device_events table or DataFrame) as bars on their lanes, in µs
    from the first event. Filter to a window first: at most 20,000 events are drawn."""
    go = _go()
    frame = events.to_pandas() if hasattr(events, "to_pandas") and not hasattr(events, "iloc") else events
    if len(frame) > MAX_TIMELINE_EVENTS:
        raise ValueError(f"{len(frame)} events: too many to draw; filter to at most {MAX_TIMELINE_EVENTS} "
                         "(trace.filter(start_ns=..., end_ns=...))")
    t0 = int(frame["ts_ns"].min()) if len(frame) else 0
    fig = go.Figure()
    for key, part in frame.groupby(color, sort=True, observed=True):
        fig.add_bar(name=str(key), orientation="h", y=part[lane].astype(str), base=(part["ts_ns"] - t0) / 1e3,
                    x=part["dur_ns"].clip(lower=1) / 1e3, hovertext=part["name"].astype(str),
                    hovertemplate="%{hovertext}<br>start %{base:.3f} µs, %{x:.3f} µs<extra></extra>")
    fig.update_layout(title=_title(title or "Timeline", synthetic), barmode="overlay", xaxis_title="µs",
                      height=200 + 30 * frame[lane].nunique())
    return fig


ROOFLINE_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
ROOF_COLORS = {"memory": "#455a64", "compute": "#90a4ae"}


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def roofline_hover(r: Mapping[str, Any]) -> str:
    """The hover text of one op row's point: what ``neurontrace ops`` prints for it."""
    pct = r.get("pct_of_peak")
    return (f"<b>{r['op']}</b> · {r['kernel_class']} · {r['op_class']}<br>"
            f"{r['kernels']:,} kernels of {r['ops']:,} ops · {r['device_ns'] / 1e6:,.3f} ms<br>"
            f"{_num(r.get('tflops_per_s'), '.4g')} TFLOP/s · {_num(r.get('tb_per_s'), '.4g')} TB/s · "
            f"{_num(r.get('intensity'), '.4g')} FLOP/byte<br>"
            + (f"{pct:.1f}% of its roofline bound · {r.get('bound')} bound" if pct is not None
               else "above the peak: a bug, no % of peak shown (see the warning)" if r.get("over_peak") is not None
               else "no % of peak (device or dtype peak unknown)"))


def roofline(ops: Any, *, device: str | None = None, title: str = "Roofline") -> Any:
    """Each op row (``analysis.ops.op_table`` or its JSON) as a point at (FLOP/byte, achieved TFLOP/s),
    sized by device time (``customdata``: the row's index in the JSON's ``rows``), under the device's
    roofs: the memory roof (HBM bandwidth x intensity), one compute roof per dtype peak (dtypes with the
    same peak share one) and the ridge points where they meet. Rows without FLOPs or bytes are left out, and
    so are rows above the peak (``over_peak``: a bug, never drawn as a result); with an unknown device only the
    points are drawn (no peak is guessed)."""
    go = _go()
    doc = _doc(ops)
    devices = doc.get("devices") or {}
    device = device or next(iter(devices), None)
    picked = [(i, r) for i, r in enumerate(doc.get("rows") or [])
              if r["device"] == device and r.get("intensity") and r.get("tflops_per_s") and r.get("over_peak") is None]
    fig = go.Figure()
    peak = (devices.get(device) or {}).get("peak") if device else None
    if peak:
        bw = peak["hbm_tbps"]
        roofs: dict[float, list[str]] = {}
        for dtype in ROOFLINE_DTYPES:
            if peak["tflops"].get(dtype) is not None:
                roofs.setdefault(float(peak["tflops"][dtype]), []).append(dtype)
        ridges = {top: top / bw for top in roofs}  # FLOP/byte where the memory roof meets each compute roof
        xs = [r["intensity"] for _, r in picked] + list(ridges.values())
        lo, hi = (min(xs) / 10, max(xs) * 10) if xs else (0.1, 1e4)
        top_max = max(roofs, default=None)
        end = ridges[top_max] if top_max is not None else hi
        fig.add_scatter(x=[lo, end], y=[lo * bw, end * bw], mode="lines", name=f"HBM {bw:g} TB/s (memory roof)",
                        line={"color": ROOF_COLORS["memory"], "width": 2}, hoverinfo="skip")
        for top, dtypes in sorted(roofs.items()):
            fig.add_scatter(x=[ridges[top], hi], y=[top, top], mode="lines+text",
                            name=f"{'/'.join(dtypes)} roof {top:g} TFLOP/s", text=["", f"{'/'.join(dtypes)} {top:g}"],
                            textposition="top left", textfont={"size": 10, "color": ROOF_COLORS["memory"]},
                            line={"color": ROOF_COLORS["compute"], "dash": "dot"}, hoverinfo="skip")
        if roofs:
            fig.add_scatter(x=list(ridges.values()), y=list(ridges), mode="markers", name="ridge points",
                            marker={"symbol": "diamond", "size": 8, "color": ROOF_COLORS["memory"]},
                            text=[f"ridge point {'/'.join(roofs[t])}: {ridges[t]:.4g} FLOP/byte, {t:g} TFLOP/s"
                                  for t in ridges], hovertemplate="%{text}<extra></extra>")
    by_class: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for i, r in picked:
        by_class.setdefault(r["op_class"], []).append((i, r))
    biggest = max((r["device_ns"] for _, r in picked), default=1) or 1
    for cls, rs in by_class.items():
        fig.add_scatter(x=[r["intensity"] for _, r in rs], y=[r["tflops_per_s"] for _, r in rs], mode="markers",
                        name=cls, customdata=[i for i, _ in rs], text=[roofline_hover(r) for _, r in rs],
                        hovertemplate="%{text}<extra></extra>",
                        marker={"size": [6 + 30 * (r["device_ns"] / biggest) ** 0.5 for _, r in rs],
                                "line": {"width": 1, "color": "#ffffff"}})
    name = peak["device"] if peak else f"{device} (unknown device: no peak, no roofs)"
    fig.update_layout(title=f"{title}: {name}", xaxis={"type": "log", "title": "arithmetic intensity (FLOP/byte)"},
                      yaxis={"type": "log", "title": "achieved TFLOP/s"}, legend_title="op class / roof")
    return fig
