"""What the page does. Each callback is a thin Dash wrapper around a plain function of the model
(``on_timeline``, ``on_navigate``, ``on_details`` ...), so the functions are tested and timed
without a browser (``bench/viewer_speed.py`` calls them directly).

Data flow::

    timeline click / table row / flow link ──► on_navigate ──► nt-selected, nt-goto
    zoom, pan, nt-goto, groups, depth, highlight ──► on_timeline ──► figure, nt-view
    nt-selected ──► on_details ──► details panel, source panel (call stack + lines)
    summary click ──► on_summary ──► nt-highlight (and the summary figure outlines it)
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import dash
from dash import ALL, MATCH, Input, Output, State, html, no_update

from neurontrace.app import figures, layout
from neurontrace.app.model import ViewModel
from neurontrace.causes import CAUSES

if TYPE_CHECKING:
    from neurontrace.app.server import ViewerState

SIDE_PANEL_PX = 430 + 60  # the details column and page padding, beside the timeline
ZOOM_PAD = 0.25  # a table row zooms to its interval plus this share of it on each side
BIN_CLICK_ZOOM = 8  # clicking a binned pixel zooms in this many times around it


# -- plain functions -----------------------------------------------------------------------------


def n_bins_for(viewport: Any) -> int:
    """Pixel columns of the plot area for a browser window ``viewport`` pixels wide."""
    if not isinstance(viewport, (int, float)) or viewport <= 0:
        return 1200
    return int(max(200, min(2400, viewport - SIDE_PANEL_PX - figures.LEFT_PX - 40)))


def parse_relayout(relayout: Any, span_ns: int) -> tuple[int, int] | None:
    """The x window a plotly relayout event asks for (None when it is not about the x axis)."""
    if not isinstance(relayout, dict):
        return None
    if relayout.get("xaxis.autorange"):
        return 0, span_ns
    if "xaxis.range[0]" in relayout and "xaxis.range[1]" in relayout:
        a, b = relayout["xaxis.range[0]"], relayout["xaxis.range[1]"]
    elif isinstance(relayout.get("xaxis.range"), list) and len(relayout["xaxis.range"]) == 2:
        a, b = relayout["xaxis.range"]
    else:
        return None
    try:
        return int(float(a) * 1e6), int(float(b) * 1e6)
    except (TypeError, ValueError):
        return None


def clamp(model: ViewModel, t0: int, t1: int) -> tuple[int, int]:
    span = model.index.span_ns
    lo, hi = min(t0, t1), max(t0, t1)
    pad = span // 20
    width = min(hi - lo, span + 2 * pad)
    lo = max(-pad, min(lo, span + pad - width))
    return lo, lo + max(width, 1)


def request(model: ViewModel, view: tuple[int, int], *, expanded: Any = None, depth: Any = None,
            highlight: Any = None, selected: Any = None, viewport: Any = None) -> figures.Request:
    hl = (str(highlight["device"]), highlight.get("rank"), str(highlight["cause"])) \
        if isinstance(highlight, dict) else None
    return figures.Request(
        t0=view[0], t1=view[1], n_bins=n_bins_for(viewport),
        expanded=frozenset(expanded if isinstance(expanded, list) else layout.default_expanded(model)),
        max_depth=int(depth) if isinstance(depth, int) else layout.DEFAULT_DEPTH,
        highlight=hl, selected=int(selected) if isinstance(selected, int) else None,
    )


def on_timeline(model: ViewModel, trigger: str | None, relayout: Any, goto: Any, view: Any,
                **req: Any) -> tuple[Any, Any, Any]:
    """(figure, new view, status) for one timeline update; no_update where nothing changes."""
    current = (int(view["t0"]), int(view["t1"])) if isinstance(view, dict) else (0, model.index.span_ns)
    if trigger == "nt-timeline":
        asked = parse_relayout(relayout, model.index.span_ns)
        if asked is None:
            return no_update, no_update, no_update
        current = clamp(model, *asked)
    elif trigger == "nt-goto" and isinstance(goto, dict):
        current = clamp(model, int(goto["t0"]), int(goto["t1"]))
    elif trigger == "nt-reset":
        current = (0, model.index.span_ns)
    drawn = figures.timeline(model, request(model, current, **req))
    return drawn.figure, {"t0": current[0], "t1": current[1]}, drawn.status


def goto_around(t0: int, t1: int, pad: float = ZOOM_PAD) -> dict[str, Any]:
    width = max(t1 - t0, 1000)
    margin = int(width * pad)
    return {"t0": t0 - margin, "t1": t0 + width + margin, "nonce": time.monotonic_ns()}


def on_navigate(model: ViewModel, trigger: Any, click: Any, view: Any) -> tuple[Any, Any]:
    """(selected event id, window to go to) after a click on the timeline, a table row or a flow link."""
    analysis = model.analysis
    if trigger == "nt-timeline" and isinstance(click, dict) and click.get("points"):
        point = click["points"][0]
        data = _as_list(point.get("customdata"))
        if isinstance(data, list) and data and data[0] is not None and data[0] >= 0:
            return int(data[0]), no_update
        if isinstance(data, list) and len(data) >= 4:  # a run of the attribution row
            return no_update, goto_around(int(data[2]), int(data[3]), 0.1)
        x = point.get("x")
        if isinstance(x, (int, float)) and isinstance(view, dict):  # a binned pixel: zoom in around it
            width = (int(view["t1"]) - int(view["t0"])) / BIN_CLICK_ZOOM
            centre = float(x) * 1e6
            return no_update, {"t0": int(centre - width / 2), "t1": int(centre + width / 2),
                               "nonce": time.monotonic_ns()}
        return no_update, no_update
    if not isinstance(trigger, dict):
        return no_update, no_update
    if trigger.get("type") == "nt-row" and analysis is not None:
        rows = {"stalls": analysis.stalls, "ops": analysis.top_ops, "fallback": analysis.fallback}.get(
            str(trigger.get("table")), [])
        index = trigger.get("index")
        if not isinstance(index, int) or not 0 <= index < len(rows):
            return no_update, no_update
        row = rows[index]
        if trigger.get("table") == "stalls":
            return no_update, goto_around(int(row["t0_ns"]), int(row["t1_ns"]))
        event_id = row.get("event_id")
        if event_id is None:
            return no_update, no_update
        return int(event_id), _goto_event(model, int(event_id), view)
    if trigger.get("type") == "nt-flow":
        event_id = int(trigger["event"])
        if event_id < 0:
            return no_update, no_update
        return event_id, _goto_event(model, event_id, view)
    return no_update, no_update


def _as_list(data: Any) -> Any:
    """Customdata as a list: plotly.js hands typed-array rows over as {"0": .., "1": ..} objects."""
    if isinstance(data, dict) and "0" in data:
        return [data[str(i)] for i in range(len(data)) if str(i) in data]
    return data


def _goto_event(model: ViewModel, event_id: int, view: Any) -> Any:
    """Centre the event, keeping the zoom if it fits, else zooming out to show it whole."""
    pos = model.index.position(event_id)
    if pos is None:
        return no_update
    s, e = int(model.index.start[pos]), int(model.index.end[pos])
    width = int(view["t1"]) - int(view["t0"]) if isinstance(view, dict) else model.index.span_ns
    if e - s > width * 0.8 or width > 400 * max(e - s, 1000):
        return goto_around(s, e, 0.5)
    centre = (s + e) // 2
    return {"t0": centre - width // 2, "t1": centre + width // 2, "nonce": time.monotonic_ns()}


def on_details(model: ViewModel, reader: Any, selected: Any) -> tuple[Any, Any]:
    """(details panel, source panel) for the selected event."""
    if not isinstance(selected, int):
        return no_update, no_update
    event = model.event(selected)
    if event is None:
        return html.Div(f"event {selected} is not in this trace", className="nt-empty"), no_update
    links = []
    for link in model.links(selected):
        other = model.event(link.event_id)
        links.append((link.direction, link.kind, other))
    stack = model.stack(event.get("frame_id"))
    frames = [(f.frame_id, f.location + ("" if f.kind == "python" else f"  [{f.kind}]"), f.is_user) for f in stack]
    best = next((f for f in stack if f.is_user and f.file), next((f for f in stack if f.file), None))
    value = best.frame_id if best else (stack[0].frame_id if stack else None)
    snippet = on_frame(model, reader, value)
    return layout.details(event, links), layout.source_panel(frames, value, snippet)


def on_frame(model: ViewModel, reader: Any, frame_id: Any) -> list[Any]:
    if not isinstance(frame_id, int):
        return []
    stack = model.stack(frame_id)
    if not stack:
        return []
    frame = stack[0]
    chain = " → ".join(f.function or f.kind for f in reversed(stack[:4]) if f.kind != "python") if \
        frame.kind != "python" else ""
    text = frame.location + (f"   ({chain})" if chain else "")
    return layout.snippet(reader.read(frame.file, frame.line), text)


def on_summary(model: ViewModel, trigger: Any, click: Any, highlight: Any) -> tuple[Any, Any]:
    """(summary figure, highlight) after a click on the summary strip or "clear highlight"."""
    new = highlight
    if trigger == "nt-summary" and isinstance(click, dict) and click.get("points") and model.analysis:
        point = click["points"][0]
        curve = point.get("curveNumber")
        data = _as_list(point.get("customdata"))
        devices = model.analysis.diagnosis.devices
        if isinstance(curve, int) and 0 <= curve < len(CAUSES) and isinstance(data, list) and len(data) >= 2:
            d = devices[int(data[1])]
            picked = {"device": d.device, "rank": d.rank, "cause": CAUSES[curve]}
            new = None if picked == highlight else picked
    elif trigger == "nt-clear-highlight":
        new = None
    hl = (new["device"], new.get("rank"), new["cause"]) if isinstance(new, dict) else None
    return figures.summary(model, hl), new


def analysis_note(model: ViewModel) -> str:
    a = model.analysis
    if a is None:
        return ""
    d0 = a.diagnosis.devices[0] if a.diagnosis.devices else None
    note = f"window: {d0.window_source}; analysed in {a.seconds:.2f} s" if d0 else "no device activity"
    if a.cause_error:
        note += f" · {a.cause_error}"
    warnings = [w for acct in model.trace.accounting for w in acct.warnings]
    if warnings:
        note += f" · {len(warnings)} load warning{'s' if len(warnings) > 1 else ''}: {warnings[0]}"
    return note


# -- registration --------------------------------------------------------------------------------


def register(app: dash.Dash, state: ViewerState) -> None:
    """Attach every callback to ``app``; they read the model from ``state``."""

    @app.callback(Output("nt-page", "children"), Output("nt-load-poll", "disabled"),
                  Input("nt-load-poll", "n_intervals"), prevent_initial_call=True)
    def _poll(_n: Any) -> tuple[Any, bool]:
        if state.status == "loading":
            return state.page(), False
        return state.page(), True

    @app.callback(Output("nt-analysis-ready", "data"), Output("nt-analysis-poll", "disabled"),
                  Output("nt-findings", "children"), Output("nt-analysis-status", "children"),
                  Input("nt-analysis-poll", "n_intervals"))
    def _analysis(_n: Any) -> tuple[Any, ...]:
        model = state.model
        if model is None or model.analysis is None:
            text = state.analysis_error or "Analysing (stall attribution, findings)…"
            return no_update, state.analysis_error is not None, no_update, text
        return True, True, layout.findings(model.analysis.findings), analysis_note(model)

    @app.callback(Output({"type": "nt-tbody", "table": MATCH}, "children"),
                  Output({"type": "nt-sort-state", "table": MATCH}, "data"),
                  Input("nt-analysis-ready", "data"), Input({"type": "nt-sort", "table": MATCH, "column": ALL}, "n_clicks"),
                  Input({"type": "nt-filter", "table": MATCH}, "value"),
                  State({"type": "nt-sort-state", "table": MATCH}, "data"))
    def _table(_ready: Any, _sorts: Any, text: Any, sort: Any) -> tuple[Any, Any]:
        model = state.model
        name = str(dash.ctx.outputs_list[0]["id"]["table"])
        if model is None or model.analysis is None:
            return layout.table_rows(name, []), no_update
        trigger = dash.ctx.triggered_id
        if isinstance(trigger, dict) and trigger.get("type") == "nt-sort":
            column = trigger["column"]
            desc = not (isinstance(sort, dict) and sort.get("column") == column and sort.get("desc"))
            sort = {"column": column, "desc": desc}
        rows = {"stalls": model.analysis.stalls, "ops": model.analysis.top_ops,
                "fallback": model.analysis.fallback}[name]
        return layout.table_rows(name, rows, sort=sort, text=text if isinstance(text, str) else None), sort

    @app.callback(Output("nt-summary", "figure"), Output("nt-highlight", "data"),
                  Input("nt-analysis-ready", "data"), Input("nt-summary", "clickData"),
                  Input("nt-clear-highlight", "n_clicks"), State("nt-highlight", "data"),
                  prevent_initial_call=True)
    def _summary(_ready: Any, click: Any, _clear: Any, highlight: Any) -> tuple[Any, Any]:
        model = state.require()
        return on_summary(model, dash.ctx.triggered_id, click, highlight)

    @app.callback(Output("nt-selected", "data"), Output("nt-goto", "data"),
                  Input("nt-timeline", "clickData"), Input({"type": "nt-row", "table": ALL, "index": ALL}, "n_clicks"),
                  Input({"type": "nt-flow", "event": ALL}, "n_clicks"), State("nt-view", "data"),
                  prevent_initial_call=True)
    def _navigate(click: Any, _rows: Any, _flows: Any, view: Any) -> tuple[Any, Any]:
        trigger = dash.ctx.triggered_id
        if isinstance(trigger, dict) and not (dash.ctx.triggered and dash.ctx.triggered[0].get("value")):
            return no_update, no_update  # rows or buttons just drawn, not clicked
        return on_navigate(state.require(), trigger, click, view)

    @app.callback(Output("nt-timeline", "figure"), Output("nt-view", "data"),
                  Output("nt-timeline-status", "children"),
                  Input("nt-timeline", "relayoutData"), Input("nt-goto", "data"), Input("nt-reset", "n_clicks"),
                  Input("nt-groups", "value"), Input("nt-depth", "value"), Input("nt-highlight", "data"),
                  Input("nt-selected", "data"), Input("nt-analysis-ready", "data"),
                  State("nt-view", "data"), State("nt-viewport", "data"), prevent_initial_call=True)
    def _timeline(relayout: Any, goto: Any, _reset: Any, groups: Any, depth: Any, highlight: Any,
                  selected: Any, _ready: Any, view: Any, viewport: Any) -> tuple[Any, Any, Any]:
        fired = {str(key).split(".", 1)[0] for key in dash.ctx.triggered_prop_ids}
        # A table row sets the selection and the window at once: the window wins over "redraw".
        trigger = next((t for t in ("nt-timeline", "nt-goto", "nt-reset") if t in fired), dash.ctx.triggered_id)
        return on_timeline(state.require(), trigger, relayout, goto, view, expanded=groups, depth=depth,
                           highlight=highlight, selected=selected, viewport=viewport)

    @app.callback(Output("nt-details", "children"), Output("nt-source", "children"),
                  Input("nt-selected", "data"), prevent_initial_call=True)
    def _details(selected: Any) -> tuple[Any, Any]:
        return on_details(state.require(), state.reader, selected)

    @app.callback(Output("nt-snippet", "children"), Output({"type": "nt-frame", "frame": ALL}, "className"),
                  Input({"type": "nt-frame", "frame": ALL}, "n_clicks"), prevent_initial_call=True)
    def _frame(_clicks: Any) -> tuple[Any, Any]:
        trigger = dash.ctx.triggered_id
        if not isinstance(trigger, dict) or not (dash.ctx.triggered and dash.ctx.triggered[0].get("value")):
            raise dash.exceptions.PreventUpdate
        model = state.require()
        chosen = int(trigger["frame"])
        classes = []
        for item in dash.ctx.outputs_list[1]:
            fid = int(item["id"]["frame"])
            frame = model.stack(fid)
            classes.append(layout.frame_class(fid == chosen, bool(frame and frame[0].is_user)))
        return on_frame(model, state.reader, chosen), classes

    app.clientside_callback(  # type: ignore[no-untyped-call]
        "function(_) { return window.innerWidth; }",
        Output("nt-viewport", "data"), Input("nt-timeline", "id"),
    )
