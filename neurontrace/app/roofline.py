"""The ops panel: the roofline and the per-op table of ``neurontrace ops`` for the device and range in view.

The numbers are ``neurontrace.analysis.ops``'s (``ViewModel.ops_view``: one index per device, the last
windows kept), drawn by ``neurontrace.render.plots.roofline``; nothing is computed twice or differently.
The range is the device's analysis window while the timeline shows it (the page opens there), and the
visible range once the user zooms or pans, unless "the analysis window" is chosen. A click on a point or
a row puts the op in the highlight store; the timeline outlines its kernels (``callbacks.marked``).

Data flow::

    analysis ready ──► on_devices ──► device choices
    tab, view, device, range, sort, filter ──► on_ops ──► roofline figure, table rows, status
    point / row click ──► on_pick ──► nt-highlight (the timeline outlines the op's kernels)
"""

from __future__ import annotations

from typing import Any

import dash
from dash import ALL, Input, Output, State, no_update

from neurontrace.analysis.attribution import DeviceAttribution
from neurontrace.analysis.ops import OpsView
from neurontrace.app import layout
from neurontrace.app.callbacks import PageState, focus_view
from neurontrace.app.figures import FONT, MARK_COLOR
from neurontrace.app.inputs import as_int, op_pick_of, view_of
from neurontrace.app.model import ViewModel
from neurontrace.render import plots

TAB = "roofline"
TABLE = "roofline"


def devices(model: ViewModel) -> list[DeviceAttribution]:
    return list(model.analysis.diagnosis.devices) if model.analysis else []


def device_options(model: ViewModel) -> tuple[list[dict[str, Any]], Any]:
    """(the device dropdown's options, the device the page opens on): diagnose's devices by index."""
    ds = devices(model)
    ranks = {d.rank for d in ds}
    options = [{"label": d.device if len(ranks) < 2 else f"rank {d.rank} · {d.device}", "value": i}
               for i, d in enumerate(ds)]
    focus = model.focus()
    first = next((i for i, d in enumerate(ds) if focus and (d.device, d.rank) == focus[0]), 0)
    return options, (first if ds else None)


def ops_range(model: ViewModel, device: Any, mode: Any, view: Any
              ) -> tuple[DeviceAttribution, tuple[int, int], str] | None:
    """(the device, the window in trace-clock ns, what the window is) the panel shows; None before the analysis."""
    ds = devices(model)
    if not ds:
        return None
    which = as_int(device, 0, len(ds) - 1)
    if which is None:
        which = device_options(model)[1]
    d = ds[which]
    stored = view_of(view)
    zoomed = stored is not None and not (isinstance(view, dict) and view.get("auto") is True) \
        and (stored[0], stored[1]) != focus_view(model)
    if mode == "window" or not zoomed or stored is None:
        return d, d.window, "analysis window"
    return d, (model.absolute(stored[0]), model.absolute(stored[1])), "visible range"


def rows(view: OpsView) -> list[dict[str, Any]]:
    """The table's rows, the columns of ``neurontrace ops`` (``layout.ROOFLINE_COLUMNS``)."""
    out = []
    for r in view.report.rows:
        d = r.as_dict()
        out.append({"op": r.op, "op_class": r.op_class, "kernel_class": r.kernel_class, "kernels": r.kernels,
                    "device_ms": r.device_ns / 1e6, "gflop": None if r.flops is None else r.flops / 1e9,
                    "mb": None if r.bytes is None else r.bytes / 1e6, "tflops_per_s": d["tflops_per_s"],
                    "tb_per_s": d["tb_per_s"], "intensity": d["intensity"], "pct_of_peak": d["pct_of_peak"],
                    "bound": r.bound})
    return out


def figure(view: OpsView, device: str, picked: int | None = None) -> dict[str, Any]:
    """The roofline (``plots.roofline``) as the plain dict the page draws, the picked row ringed."""
    doc = view.report.as_dict()
    fig = plots.roofline(doc, device=device, title="Roofline").to_dict()
    row = doc["rows"][picked] if picked is not None and 0 <= picked < len(doc["rows"]) else None
    if row and row.get("intensity") and row.get("tflops_per_s"):
        fig["data"].append({"type": "scatter", "mode": "markers", "name": "picked", "x": [row["intensity"]],
                            "y": [row["tflops_per_s"]], "hoverinfo": "skip", "showlegend": False,
                            "marker": {"symbol": "circle-open", "size": 30, "line": {"width": 3, "color": MARK_COLOR}}})
    fig["layout"].update({"height": 420, "margin": {"l": 70, "r": 12, "t": 40, "b": 50},
                          "font": {"family": FONT, "size": 11, "color": "#263238"}, "title": {
                              "text": fig["layout"].get("title", {}).get("text", ""), "font": {"size": 13}},
                          "hovermode": "closest", "plot_bgcolor": "#ffffff", "paper_bgcolor": "#ffffff",
                          "hoverlabel": {"font": {"family": FONT, "size": 12}, "align": "left"}})
    fig["layout"].pop("template", None)  # plotly's default template: large, and the page styles its own
    return dict(fig)


def status(model: ViewModel, d: DeviceAttribution, window: tuple[int, int], what: str, view: OpsView) -> str:
    # The device and its peak do not depend on the range: a zoom onto a range where no kernel starts keeps
    # the device's name (from its analysis window's table) instead of "the trace does not name the device".
    peak = view.report.devices.get(d.device) or \
        model.ops_view((d.device, d.rank), d.window).report.devices.get(d.device)
    origin = model.absolute(model.time_origin)
    where = f"{what} {(window[0] - origin) / 1e6:+,.3f} to {(window[1] - origin) / 1e6:+,.3f} ms"
    if peak is not None and peak.peak is not None:
        named = peak.peak.device
    elif peak is not None and peak.name:
        named = f"unknown device {peak.name!r}: no peak known, achieved points only"
    else:
        named = "the trace does not name the device: no peak, achieved points only"
    kernels = sum(r.kernels for r in view.report.rows)
    if not view.report.rows:
        return f"{d.device} · {named} · {where} · no kernel starts in this range: zoom out, or show the analysis window"
    unplotted = sum(1 for r in view.report.rows if not (r.intensity and r.tflops_per_s) or r.over_peak is not None)
    impossible = view.report.impossible()
    return (f"{d.device} · {named} · {where} · {kernels:,} kernels in {len(view.report.rows)} rows"
            + (f" ({unplotted} without FLOPs or bytes: in the table, not on the plot)" if unplotted else "")
            + (f" · warning: {', '.join(sorted({r.op for r in impossible}))} came out above the peak, a bug: "
               "no % of peak shown" if impossible else ""))


def relative(model: ViewModel, window: tuple[int, int]) -> list[int]:
    """A trace-clock window as ns after the trace's first event: what the page's stores hold (JavaScript
    numbers are exact to 2**53 only; trace clocks count epoch ns, near 2**61)."""
    return [window[0] - model.index.origin_ns, window[1] - model.index.origin_ns]


def picked_row(model: ViewModel, view: OpsView, d: DeviceAttribution, window: tuple[int, int], highlight: Any
               ) -> int | None:
    pick = op_pick_of(highlight)
    if pick is None or pick[0] != (d.device, d.rank) or list(pick[1] or ()) != relative(model, window):
        return None
    return next((i for i, r in enumerate(view.report.rows) if (r.op, r.kernel_class) == pick[2:]), None)


def on_ops(model: ViewModel, tab: Any, view: Any, device: Any, mode: Any, sort: Any, text: Any, highlight: Any,
           trigger: Any, drawn: Any = None) -> tuple[Any, Any, Any, Any, Any]:
    """(figure, table rows, sort state, status, what is drawn) of the panel; nothing while its tab is not
    shown, and nothing new when the timeline's redraw changed neither the range nor the pick (``drawn``
    says what was drawn last: redrawing the rows under a click would swallow it)."""
    if tab != TAB:
        return (no_update,) * 5
    columns = [c for c, _ in layout.ROOFLINE_COLUMNS]
    sort = sort if isinstance(sort, dict) and sort.get("column") in columns else None
    if isinstance(trigger, dict) and trigger.get("type") == "nt-roof-sort" and trigger.get("column") in columns:
        column = trigger["column"]
        sort = {"column": column, "desc": not (sort is not None and sort.get("column") == column and sort.get("desc"))}
    where = ops_range(model, device, mode, view)
    if where is None:
        return no_update, layout.table_rows(TABLE, [], kind="nt-roof"), no_update, "Analysing…", no_update
    d, window, what = where
    ops = model.ops_view((d.device, d.rank), window)
    picked = picked_row(model, ops, d, window, highlight)
    text = text if isinstance(text, str) else None
    key = {"device": d.device, "rank": d.rank, "window": relative(model, window), "sort": sort, "text": text}
    same = isinstance(drawn, dict) and drawn.get("table") == key
    if same and drawn.get("picked") == picked:
        return (no_update,) * 5
    fig = figure(ops, d.device, picked)
    if same:  # only the ring on the plot moves
        return fig, no_update, no_update, no_update, {"table": key, "picked": picked}
    table = layout.table_rows(TABLE, rows(ops), sort=sort, text=text, kind="nt-roof")
    return fig, table, sort, status(model, d, window, what, ops), {"table": key, "picked": picked}


def on_pick(model: ViewModel, trigger: Any, click: Any, view: Any, device: Any, mode: Any, highlight: Any) -> Any:
    """The highlight store after a click on a roofline point or a table row (the same op again: cleared)."""
    where = ops_range(model, device, mode, view)
    if where is None:
        return no_update
    d, window, _what = where
    ops = model.ops_view((d.device, d.rank), window)
    index = None
    if trigger == "nt-roof-graph" and isinstance(click, dict) and isinstance(click.get("points"), list) \
            and click["points"] and isinstance(click["points"][0], dict):
        index = as_int(click["points"][0].get("customdata"), 0, len(ops.report.rows) - 1)
    elif isinstance(trigger, dict) and trigger.get("type") == "nt-roof-row":
        index = as_int(trigger.get("index"), 0, len(ops.report.rows) - 1)
    if index is None:
        return no_update
    r = ops.report.rows[index]
    pick = {"device": d.device, "rank": d.rank, "window": relative(model, window), "op": r.op,
            "kernel_class": r.kernel_class}
    return None if op_pick_of(highlight) == op_pick_of(pick) else pick


def register(app: dash.Dash, state: PageState) -> None:
    """Attach the panel's callbacks (``callbacks.register`` attaches the rest of the page's)."""

    @app.callback(Output("nt-roof-device", "options"), Output("nt-roof-device", "value"),
                  Input("nt-analysis-ready", "data"))
    def _devices(_ready: Any) -> tuple[Any, Any]:
        model = state.model
        if model is None or model.analysis is None:
            return no_update, no_update
        return device_options(model)

    @app.callback(Output("nt-roof-graph", "figure"), Output({"type": "nt-roof-tbody", "table": TABLE}, "children"),
                  Output({"type": "nt-roof-sort-state", "table": TABLE}, "data"), Output("nt-roof-status", "children"),
                  Output("nt-roof-drawn", "data"),
                  Input("nt-tabs", "value"), Input("nt-view", "data"), Input("nt-roof-device", "value"),
                  Input("nt-roof-range", "value"), Input("nt-highlight", "data"),
                  Input({"type": "nt-roof-sort", "table": TABLE, "column": ALL}, "n_clicks"),
                  Input({"type": "nt-roof-filter", "table": TABLE}, "value"),
                  State({"type": "nt-roof-sort-state", "table": TABLE}, "data"), State("nt-roof-drawn", "data"))
    def _ops(tab: Any, view: Any, device: Any, mode: Any, highlight: Any, _sorts: Any, text: Any,
             sort: Any, drawn: Any) -> tuple[Any, ...]:
        return on_ops(state.require(), tab, view, device, mode, sort, text, highlight, dash.ctx.triggered_id, drawn)

    @app.callback(Output("nt-highlight", "data", allow_duplicate=True),
                  Input("nt-roof-graph", "clickData"),
                  Input({"type": "nt-roof-row", "table": TABLE, "index": ALL}, "n_clicks"),
                  State("nt-view", "data"), State("nt-roof-device", "value"), State("nt-roof-range", "value"),
                  State("nt-highlight", "data"), prevent_initial_call=True)
    def _pick(click: Any, _rows: Any, view: Any, device: Any, mode: Any, highlight: Any) -> Any:
        trigger = dash.ctx.triggered_id
        if isinstance(trigger, dict) and not (dash.ctx.triggered and dash.ctx.triggered[0].get("value")):
            return no_update  # rows just drawn, not clicked
        return on_pick(state.require(), trigger, click, view, device, mode, highlight)


__all__ = ["device_options", "figure", "on_ops", "on_pick", "ops_range", "register", "rows"]
