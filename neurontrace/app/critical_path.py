"""The viewer's critical-path toggle: outline every event on the path on the timelines, the breakdown beside it.

    "critical path" toggle ──► on_toggle ──► nt-highlight = {"critical_path": true} ──► callbacks.marked outlines
                                         └─► nt-cp-breakdown (the path's length and its parts, docs/critical_path.md)

The path is the one of the analysis window (the job's across ranks), computed once per trace with every event on it
(``diagnose`` keeps only the longest 50 in its document).
"""

from __future__ import annotations

from typing import Any, Protocol

import dash
import numpy as np
from dash import Input, Output, dcc, html, no_update

from neurontrace.analysis import critical_path
from neurontrace.app.model import ViewModel
from neurontrace.units import duration, share


class PageState(Protocol):
    """What the toggle reads of the server's state (``callbacks.PageState`` has more; not imported: no cycle)."""

    def require(self) -> ViewModel: ...


PICK = {"critical_path": True}
_CACHE: dict[int, tuple[np.ndarray, dict[str, int]]] = {}  # id(model) -> (index positions, breakdown)


def is_pick(value: Any) -> bool:
    return isinstance(value, dict) and value.get("critical_path") is True


def panel() -> Any:
    """The toggle and the breakdown (placed in the timeline's toolbar)."""
    return html.Span(className="nt-groups", children=[
        dcc.Checklist(id="nt-cp-toggle", options=[{"label": " Critical path", "value": "on"}], value=[], inline=True,
                      className="nt-groups"),
        html.Span(id="nt-cp-breakdown", className="nt-status"),
    ])


def path_of(model: ViewModel) -> tuple[np.ndarray, dict[str, int]]:
    """(index positions of the events on the path, the path's breakdown by kind), computed once per model."""
    cached = _CACHE.get(id(model))
    if cached is not None:
        return cached
    from neurontrace.analysis.whatif import job_graph

    value = model.analysis.diagnosis.sections.get(critical_path.SECTION.key) if model.analysis else None
    if value is None:
        return np.zeros(0, np.int64), {}
    g = job_graph(model.trace)
    ids, breakdown = critical_path.path_event_ids(g, (value.path.start_ns, value.path.end_ns))
    out = (np.asarray(model.index.positions(ids), np.int64), breakdown)
    _CACHE.clear()  # one trace per viewer
    _CACHE[id(model)] = out
    return out


def marked(model: ViewModel, highlight: Any) -> tuple[int, ...] | None:
    """The positions to outline when the highlight is the critical path (None when it is not)."""
    if not is_pick(highlight):
        return None
    return tuple(path_of(model)[0].tolist())


def breakdown_text(model: ViewModel) -> str:
    positions, parts = path_of(model)
    total = sum(parts.values())
    if not total:
        return "no critical path in this trace"
    top = ", ".join(f"{k} {duration(v)} ({share(v / total)})" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])
                    if v > 0)
    return f"{duration(total)} on {len(positions)} events: {top}"


def on_toggle(model: ViewModel, value: Any, highlight: Any) -> tuple[Any, str]:
    """(new highlight, breakdown text) for the toggle's value."""
    if isinstance(value, list) and "on" in value:
        return PICK, breakdown_text(model)
    return (None if is_pick(highlight) else no_update), ""


def register(app: dash.Dash, state: PageState) -> None:
    @app.callback(Output("nt-highlight", "data", allow_duplicate=True), Output("nt-cp-breakdown", "children"),
                  Input("nt-cp-toggle", "value"), dash.State("nt-highlight", "data"), prevent_initial_call=True)
    def _toggle(value: Any, highlight: Any) -> tuple[Any, str]:
        return on_toggle(state.require(), value, highlight)


__all__ = ["PICK", "breakdown_text", "is_pick", "marked", "on_toggle", "panel", "path_of", "register"]
