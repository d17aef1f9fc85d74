"""The memory peak on the viewer's memory counter rows: a marker at each device's peak whose hover lists what
was live there, by op and source line (the memory section, analysis/memory.py). Pure data; no Dash.

A peak belongs to the ``[memory] Total Allocated · DEVICE`` counter row (app/counters.py labels). Clicking the
marker selects the op that allocated the largest block live there, so the details and source panels show it
and its source lines (or, without one, zooms in around the peak as a click on any binned point does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from neurontrace import units
from neurontrace.analysis.memory import memory
from neurontrace.trace import Trace

LIVE_LINES = 8  # live groups listed in the hover


@dataclass(frozen=True)
class PeakMarker:
    ts: int  # ns after the viewer's origin
    bytes: int
    text: str  # the hover's HTML: the peak, then what was live (bytes, op, file:line)
    event_id: int  # the op event of the largest live block (-1: none recorded)


def peaks(trace: Trace, origin_ns: int) -> dict[str, PeakMarker]:
    """Counter-row label -> the marker of that device's peak (one per device: the process that peaked highest)."""
    m = memory(trace)
    if m is None:
        return {}
    out: dict[str, PeakMarker] = {}
    for d in sorted(m.devices, key=lambda d: d.peak_allocated_bytes or 0):
        if d.peak_allocated_bytes is None or d.peak_ts_ns is None or not d.totals_recorded:
            continue
        lines = [f"<b>peak {units.size(d.peak_allocated_bytes)} allocated</b> on {d.device}"]
        lines += [f"{units.size(g.bytes)} in {g.count} · {_html(g.op or '-')} · {_html(g.source or '-')}"
                  for g in d.live_at_peak[:LIVE_LINES]]
        if d.live_at_peak_before_trace_bytes:
            lines.append(f"{units.size(d.live_at_peak_before_trace_bytes)} allocated before the trace began")
        biggest = max(d.live_at_peak, key=lambda g: g.largest_bytes, default=None)
        event = biggest.op_event_id if biggest is not None and biggest.op_event_id is not None else -1
        if event >= 0:
            lines.append("click: select the op of the largest live block")
        out[f"[memory] Total Allocated · {d.device}"] = PeakMarker(d.peak_ts_ns - origin_ns, d.peak_allocated_bytes,
                                                                  "<br>".join(lines), event)
    return out


def marker_trace(p: PeakMarker, x_ms: float, y: float) -> dict[str, Any]:
    """The plotly trace of one marker at ``x_ms`` on the axis, height ``y`` (the top of its counter row)."""
    return {"type": "scatter", "mode": "markers", "name": "memory-peak", "x": [x_ms], "y": [y],
            "marker": {"symbol": "triangle-down", "size": 11, "color": "#d62728"}, "text": [p.text],
            "customdata": [[p.event_id]], "hovertemplate": "%{text}<extra></extra>"}


def _html(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
