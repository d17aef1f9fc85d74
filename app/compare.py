"""Two runs side by side (``neurontrace view A B``): both timelines stacked with one shared zoom, both
cause summary strips, and the ``diff`` op table beside them; a click on a diff row outlines that op
in both timelines.

Built from the single-trace viewer's parts: each side is a :class:`~neurontrace.app.server.ViewerState`
(loading, the :class:`ViewModel`, the analysis), drawn by :func:`figures.timeline` and
:func:`figures.summary`, with the window requests of :mod:`neurontrace.app.callbacks`. What is
new here is the alignment: each side's x axis is ms from its *first analysed step* (the first step
marker, or Neuron device execution, that starts inside the busiest device's analysis window; the
window's start when there is none), so the two runs line up step for step and one x range means
the same moment of both.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any, cast

import dash
import numpy as np
from dash import ALL, Input, Output, State, dcc, html, no_update

from neurontrace.analysis.diff import Diff, diff
from neurontrace.app import callbacks, figures, layout
from neurontrace.app.model import ViewModel
from neurontrace.app.server import FAILED, LOADING, READY, ViewerState
from neurontrace.errors import NeurontraceError

SIDES = ("a", "b")
MAX_DIFF_ROWS = 200
DIFF_COLUMNS = (("status", "status"), ("kind", "kind"), ("name", "op"), ("baseline_ms", "A (ms)"),
                ("change_ms", "B (ms)"), ("delta_ms", "Δ (ms)"), ("delta_pct", "Δ %"))


def align_point(model: ViewModel) -> int:
    """ns after the trace's first event where its x axis reads 0: the first step (or execution)
    starting inside the analysis window, else the window's start (0 until the analysis is done)."""
    focus = model.focus()
    if focus is None:
        return 0
    w0, w1 = focus[1]
    starts = model.steps[0]
    inside = starts[(starts >= w0) & (starts < w1)]
    return int(inside[0]) if len(inside) else int(w0)


class CompareState:
    """Two :class:`ViewerState` sides (A the baseline, B the change) and, once both are analysed, their diff."""

    def __init__(self, a: ViewerState, b: ViewerState) -> None:
        self.sides = {"a": a, "b": b}
        self.diff: Diff | None = None
        self.error: str | None = None

    @property
    def status(self) -> str:
        if self.error or any(s.status == FAILED for s in self.sides.values()):
            return FAILED
        if self.diff is None:
            return LOADING
        return READY

    def load(self, loader: Callable[..., Any] | None = None) -> None:
        """Load and analyse both sides (one after the other: the machine may be small), then diff them."""
        for side in self.sides.values():
            if side.model is None:
                side.load(loader) if loader is not None else side.load()
            if side.status == FAILED:
                return
        self.compare()

    def compare(self) -> None:
        a, b = (self.sides[k].model for k in SIDES)
        if a is None or b is None or a.analysis is None or b.analysis is None:
            self.error = "both traces must load and be analysed before they are compared"
            return
        try:
            self.diff = diff(a.trace, b.trace, baseline_diagnosis=a.analysis.diagnosis,
                             change_diagnosis=b.analysis.diagnosis, baseline_label=self.sides["a"].path,
                             change_label=self.sides["b"].path, fallback_ops=a.fallback_ops)
        except NeurontraceError as exc:
            self.error = f"diff failed: {exc}"

    def models(self) -> tuple[ViewModel, ViewModel]:
        a, b = (self.sides[k].model for k in SIDES)
        if a is None or b is None or self.diff is None:
            raise dash.exceptions.PreventUpdate
        return a, b

    def rows(self) -> list[dict[str, Any]]:
        """The diff's changed ops (added, removed, slower, faster), largest change first, for the table."""
        if self.diff is None:
            return []
        out = []
        for r in self.diff.changed_ops().slice(0, MAX_DIFF_ROWS).to_pylist():
            pct = r["delta_pct"]
            out.append({"status": r["status"], "kind": r["kind"], "name": r["name"],
                        "baseline_ms": r["baseline_ns"] / 1e6, "change_ms": r["change_ns"] / 1e6,
                        "delta_ms": r["delta_ns"] / 1e6,
                        "delta_pct": None if pct is None or np.isnan(pct) else round(float(pct), 1)})
        return out

    def page(self) -> Any:
        a, b = self.sides["a"], self.sides["b"]
        title = f"{a.path}  ⟷  {b.path}"
        if self.status == FAILED:
            failed = next((s for s in (a, b) if s.status == FAILED), None)
            return layout.error(failed.path if failed else title, (failed.error if failed else self.error) or "")
        if self.status == LOADING:
            side = a if a.model is None or a.model.analysis is None else b
            stage = side.stage if side.model is None else "analysing and comparing"
            return layout.loading(title, f"{side.path}: {stage}", side.fraction)
        return compare_page(self)


# -- drawing -------------------------------------------------------------------------------------


def op_positions(model: ViewModel, name: str, t0: int, t1: int) -> np.ndarray:
    """Index positions of the events named ``name`` that overlap [t0, t1) (ns after the first event)."""
    ix = model.index
    codes = np.flatnonzero(ix.names == name)
    if not len(codes):
        return np.zeros(0, dtype=np.int64)
    pos = np.flatnonzero(np.isin(ix.name, codes))
    return pos[(ix.start[pos] < t1) & (ix.end[pos] > t0)]


def mark_op(model: ViewModel, drawn: figures.Drawn, name: str, req: figures.Request) -> int:
    """Outline every ``name`` event in the drawn window on its row (its lane, or its group's header
    when the lane is folded away); returns how many were outlined."""
    width = req.t1 - req.t0
    marks = figures.outline(model, drawn.rows, op_positions(model, name, req.t0 - width, req.t1 + width), req,
                            f"diff:{name}")
    drawn.figure["data"].append(marks)
    return len(marks["x"]) // 6


def draw_side(model: ViewModel, window_ms: tuple[float, float] | None, *, viewport: Any = None,
              op: str | None = None) -> tuple[dict[str, Any], str]:
    """(figure, status) of one side's timeline for an aligned window in ms from its first analysed step
    (its focus window when None); half the height a single timeline gets, as two share the page."""
    origin = align_point(model)
    if window_ms is None:
        view = callbacks.focus_view(model) or (0, model.index.span_ns)
    else:
        view = int(window_ms[0] * 1e6) + origin, int(window_ms[1] * 1e6) + origin
    req = callbacks.request(model, view, viewport=viewport, origin=origin)
    req = dataclasses.replace(req, height_px=req.height_px // 2)
    drawn = figures.timeline(model, req)
    status = drawn.status
    if op:
        status += f" · {mark_op(model, drawn, op, req)} {op} events outlined"
    return drawn.figure, status


def aligned_window(model: ViewModel, relayout: Any) -> tuple[float, float] | None:
    """The window a zoom or pan of one side asks for, in ms from that side's first analysed step."""
    origin = align_point(model)
    asked = callbacks.parse_relayout(relayout, model.index.span_ns, origin)
    if asked is None:
        return None
    t0, t1 = callbacks.clamp(model, *asked)
    return (t0 - origin) / 1e6, (t1 - origin) / 1e6


def on_compare(state: CompareState, trigger: Any, relayouts: dict[str, Any], view: Any, op: Any,
               viewport: Any) -> tuple[Any, ...]:
    """(figure A, figure B, status A, status B, view, op) after a zoom/pan of either side, a diff row
    click or a resize: both sides always draw the same aligned window."""
    models = dict(zip(SIDES, state.models(), strict=True))
    window: tuple[float, float] | None = None
    if isinstance(view, dict):
        lo = callbacks.as_int(view.get("t0_us"))
        hi = callbacks.as_int(view.get("t1_us"))
        window = (lo / 1e3, hi / 1e3) if lo is not None and hi is not None else None
    picked = op if isinstance(op, str) else None
    for side in SIDES:
        if trigger == f"nt-cmp-timeline-{side}":
            asked = aligned_window(models[side], relayouts[side])
            if asked is None:
                return (no_update,) * 6
            window = asked
    if isinstance(trigger, dict) and trigger.get("type") == "nt-cmp-row":
        rows = state.rows()
        index = callbacks.as_int(trigger.get("index"), 0, len(rows) - 1)
        if index is not None:
            name = str(rows[index]["name"])
            picked = None if name == picked else name
    if window is None:  # first draw: side A's focus window, in A's aligned ms
        a = models["a"]
        t0, t1 = callbacks.focus_view(a) or (0, a.index.span_ns)
        window = ((t0 - align_point(a)) / 1e6, (t1 - align_point(a)) / 1e6)
    (fa, sa), (fb, sb) = (draw_side(models[s], window, viewport=viewport, op=picked) for s in SIDES)
    new_view = {"t0_us": int(window[0] * 1e3), "t1_us": int(window[1] * 1e3)}
    return fa, fb, sa, sb, new_view, (no_update if picked == op else picked)  # the table redraws on a change only


# -- the page ------------------------------------------------------------------------------------


def _side_card(state: CompareState, side: str) -> html.Div:
    vs = state.sides[side]
    model = vs.model
    assert model is not None
    label = "A (baseline)" if side == "a" else "B (change)"
    return html.Div(className="nt-card", children=[
        html.Div(className="nt-summary-head", children=[
            html.H3([f"{label}: ", html.Span(vs.path, style={"textTransform": "none", "letterSpacing": 0})],
                    style={"margin": 0}, id=f"nt-cmp-title-{side}"),
            html.Span(id=f"nt-cmp-status-{side}", className="nt-status"),
        ]),
        dcc.Graph(id=f"nt-cmp-summary-{side}", figure=figures.summary(model), config={"displayModeBar": False}),
        dcc.Graph(id=f"nt-cmp-timeline-{side}", config=layout.GRAPH_CONFIG),
    ])


def diff_rows(rows: list[dict[str, Any]], picked: str | None = None) -> list[Any]:
    if not rows:
        return [html.Tr(html.Td("No op got faster or slower, and none was added or removed.",
                                colSpan=len(DIFF_COLUMNS), className="nt-empty"))]
    return [html.Tr([html.Td(layout._cell(r.get(c)), title=str(r.get(c, ""))) for c, _ in DIFF_COLUMNS],
                    id={"type": "nt-cmp-row", "index": i}, n_clicks=0,
                    className="nt-tr" + (" nt-cmp-picked" if r["name"] == picked else ""))
            for i, r in enumerate(rows)]


def compare_page(state: CompareState) -> html.Div:
    a, b = state.models()
    d = state.diff
    assert d is not None
    counts = d.ops_summary()
    worst = d.worst_regression
    head = ", ".join(f"{n} {s}" for s, n in counts.items() if s != "unchanged")
    if worst is not None and worst.regression_pct is not None:
        head += f" · {worst.label}: {worst.regression_pct:+.1f}% per step"
    synthetic = [("SYNTHETIC", True)] if a.synthetic or b.synthetic else []
    return html.Div(className="nt-app", children=[
        layout.header(f"{state.sides['a'].path}  ⟷  {state.sides['b'].path}", [("compare", False), *synthetic]),
        html.Div(className="nt-main", children=[
            html.Div(className="nt-row", children=[
                html.Div(className="nt-col-main", children=[
                    html.Div("x: ms from each run's first analysed step; zooming or panning either timeline "
                             "moves both.", className="nt-src-note"),
                    _side_card(state, "a"), _side_card(state, "b"),
                ]),
                html.Div(className="nt-col-side", children=[html.Div(className="nt-card", children=[
                    html.H3("diff: ops that changed (A → B)"),
                    html.Div(head, className="nt-src-note", id="nt-cmp-counts"),
                    html.Div("Click a row to outline that op in both timelines (click again to clear).",
                             className="nt-src-note"),
                    html.Div(className="nt-table-wrap", style={"maxHeight": "calc(100vh - 200px)"},
                             children=html.Table(className="nt-table", children=[
                                 html.Thead(html.Tr([html.Th(html.Span(label, className="nt-th"))
                                                     for _, label in DIFF_COLUMNS])),
                                 html.Tbody(diff_rows(state.rows()), id="nt-cmp-diff"),
                             ])),
                ])]),
            ]),
        ]),
        dcc.Store(id="nt-cmp-view", data=None), dcc.Store(id="nt-cmp-op", data=None),
        dcc.Store(id="nt-viewport", data=None),
        html.Div(id="nt-timeline"),  # the single-trace keys script looks for it; absent here, it does nothing
    ])


def create_compare_app(state: CompareState) -> dash.Dash:
    """The Dash app comparing ``state``'s two runs (as :func:`server.create_app` for one)."""
    from pathlib import Path

    app = dash.Dash(__name__, title="neurontrace compare", update_title=cast(str, None),
                    suppress_callback_exceptions=True, serve_locally=True,
                    assets_folder=str(Path(__file__).parent / "assets"))
    app.index_string = layout.INDEX

    def root() -> Any:
        ready = state.status != LOADING
        return html.Div([html.Div(state.page(), id="nt-page"),
                         dcc.Interval(id="nt-load-poll", interval=300, disabled=ready)])

    app.layout = root

    @app.callback(Output("nt-page", "children"), Output("nt-load-poll", "disabled"),
                  Input("nt-load-poll", "n_intervals"), prevent_initial_call=True)
    def _poll(_n: Any) -> tuple[Any, bool]:
        return state.page(), state.status != LOADING

    @app.callback(Output("nt-cmp-timeline-a", "figure"), Output("nt-cmp-timeline-b", "figure"),
                  Output("nt-cmp-status-a", "children"), Output("nt-cmp-status-b", "children"),
                  Output("nt-cmp-view", "data"), Output("nt-cmp-op", "data"),
                  Input("nt-cmp-timeline-a", "relayoutData"), Input("nt-cmp-timeline-b", "relayoutData"),
                  Input({"type": "nt-cmp-row", "index": ALL}, "n_clicks"), Input("nt-viewport", "data"),
                  State("nt-cmp-view", "data"), State("nt-cmp-op", "data"))
    def _compare(relayout_a: Any, relayout_b: Any, _rows: Any, viewport: Any, view: Any,
                 op: Any) -> tuple[Any, ...]:
        trigger = dash.ctx.triggered_id
        if isinstance(trigger, dict) and not (dash.ctx.triggered and dash.ctx.triggered[0].get("value")):
            raise dash.exceptions.PreventUpdate  # rows just drawn, not clicked
        return on_compare(state, trigger, {"a": relayout_a, "b": relayout_b}, view, op, viewport)

    @app.callback(Output("nt-cmp-diff", "children"), Input("nt-cmp-op", "data"), prevent_initial_call=True)
    def _rows(op: Any) -> Any:
        return diff_rows(state.rows(), op if isinstance(op, str) else None)

    app.clientside_callback(  # type: ignore[no-untyped-call]
        callbacks.VIEWPORT_JS, Output("nt-viewport", "data"), Input("nt-cmp-timeline-a", "id"),
    )
    return app


def serve_pair(a: Any, b: Any, *, host: str = "127.0.0.1", port: int = 0,
               background: bool = True) -> tuple[Any, CompareState]:
    """Serve two traces (paths) side by side from Python; ``server.url`` is the page."""
    from neurontrace.app.server import Server

    state = CompareState(ViewerState(str(a)), ViewerState(str(b)))
    threading.Thread(target=state.load, daemon=True).start()
    server = Server(create_compare_app(state), host, port)
    if background:
        server.start()
    return server, state
