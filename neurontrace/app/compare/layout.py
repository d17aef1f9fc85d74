"""The two-run page's components: both side cards (title, cause strip, timeline), the toolbar, the
diff table and the details and source panels; what they do is in ``callbacks.py``. The one-trace
page's parts (header, loading and error pages, search results, key buttons) come from
:mod:`neurontrace.app.layout`. Component ids start with ``nt-cmp-`` where the one-trace page has no
component of the same role.
"""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from neurontrace.app import figures, layout
from neurontrace.app.compare import memory
from neurontrace.app.compare.model import FAILED_STAGE, LABELS, READY_STAGE, CompareState
from neurontrace.app.server import FAILED, LOADING

# The figures first and the op's name last, folding: in the 430 px side column a wide name pushed the
# numbers behind a horizontal scroll.
DIFF_COLUMNS = (("status", "status"), ("delta_ms", "Δ (ms)"), ("delta_pct", "Δ %"), ("baseline_ms", "A (ms)"),
                ("change_ms", "B (ms)"), ("kind", "kind"), ("name", "op"))
WRAPPED = ("kind", "name")
ALIGN_NOTE = {True: "x: ms from each run's first analysed step; zooming or panning either timeline moves both.",
              False: "x: ms from each run's first step marker (the trace start without one): a provisional "
                     "alignment until both analyses are done, then each run's first analysed step. Zooming or "
                     "panning either timeline moves both."}



def page(state: CompareState) -> Any:
    """The page body for the state's loading status: the loading or error page, else the two runs."""
    a, b = state.sides["a"], state.sides["b"]
    title = f"{a.path}  ⟷  {b.path}"
    if state.status == FAILED:
        failed = next(s for s in (a, b) if s.status == FAILED)
        return layout.error(failed.path, failed.error or "")
    if state.status == LOADING:
        side = a if a.model is None else b
        return layout.loading(title, f"{side.path}: {side.stage}", side.fraction)
    return compare_page(state)


# -- the page ------------------------------------------------------------------------------------


def _side_card(state: CompareState, side: str) -> html.Div:
    vs = state.sides[side]
    model = vs.model
    assert model is not None
    return html.Div(className="nt-card", children=[
        html.Div(className="nt-summary-head", children=[
            html.H3([f"{LABELS[side]}: ", html.Span(vs.path, style={"textTransform": "none", "letterSpacing": 0})],
                    style={"margin": 0}, id=f"nt-cmp-title-{side}"),
            html.Span(id=f"nt-cmp-status-{side}", className="nt-status"),
        ]),
        dcc.Graph(id=f"nt-cmp-summary-{side}", figure=figures.summary(model, scale_ns=strip_scale(state)),
                  config={"displayModeBar": False}),
        dcc.Graph(id=f"nt-cmp-timeline-{side}", config=layout.GRAPH_CONFIG, clear_on_unhover=True),
    ])


def strip_scale(state: CompareState) -> int | None:
    """The common length of both runs' cause strips: the longest analysis window of either (None until an
    analysis is done). Both strips drawn to 100% hid a 2x slowdown; on one scale they show it."""
    windows = [d.window_ns for m in state.models() if m is not None and m.analysis is not None
               for d in m.analysis.diagnosis.devices]
    return max(windows, default=0) or None


def diff_rows(state: CompareState, picked: str | None = None) -> list[Any]:
    rows = state.rows()
    if state.diff is None:
        key, text = state.stage()
        return [html.Tr(html.Td(text if key == FAILED_STAGE else
                                f"{text} The table fills in when both analyses and the diff are done.",
                                colSpan=len(DIFF_COLUMNS), className="nt-empty", id="nt-cmp-diff-pending"))]
    if not rows:
        return [html.Tr(html.Td("No op got faster or slower, and none was added or removed.",
                                colSpan=len(DIFF_COLUMNS), className="nt-empty"))]
    return [html.Tr([html.Td(layout._cell(r.get(c)), title=str(r.get(c, "")),
                             className="nt-wrap" if c in WRAPPED else None) for c, _ in DIFF_COLUMNS],
                    id={"type": "nt-cmp-row", "index": i}, n_clicks=0,
                    className="nt-tr" + (" nt-cmp-picked" if r["name"] == picked else ""))
            for i, r in enumerate(rows)]


def compare_page(state: CompareState) -> html.Div:
    a, b = state.models()
    key, text = state.stage()
    _origins, analysed = state.alignment()
    synthetic = [("SYNTHETIC", True)] if a.synthetic or b.synthetic else []
    return html.Div(className="nt-app", children=[
        layout.header(f"{state.sides['a'].path}  ⟷  {state.sides['b'].path}", [("compare", False), *synthetic]),
        html.Div(className="nt-main", children=[
            html.Div(className="nt-row", children=[
                html.Div(className="nt-col-main", children=[
                    html.Div(className="nt-toolbar", children=[
                        html.Div(ALIGN_NOTE[analysed], className="nt-src-note", id="nt-cmp-align",
                                 style={"margin": 0}),
                        html.Span(text, id="nt-cmp-progress", className="nt-status"),
                    ]),
                    html.Div(className="nt-toolbar", children=[
                        dcc.Input(id="nt-search", type="search", debounce=False, n_submit=0,
                                  placeholder="search events (text or /regex/)", className="nt-filter nt-search"),
                        dcc.RadioItems(id="nt-cmp-scope", value="both", inline=True, className="nt-groups",
                                       options=[{"label": " A", "value": "a"}, {"label": " B", "value": "b"},
                                                {"label": " both", "value": "both"}]),
                        html.Span(layout.KEYS_NOTE, className="nt-src-note", style={"margin": 0}),
                    ]),
                    html.Div(id="nt-search-results"),
                    _side_card(state, "a"), _side_card(state, "b"),
                ]),
                html.Div(className="nt-col-side", children=[
                    html.Div(className="nt-card", children=[
                        html.H3("diff: ops that changed (A → B)"),
                        html.Div(state.counts(), className="nt-src-note", id="nt-cmp-counts"),
                        html.Div("Click a row to outline that op in both timelines (click again to clear).",
                                 className="nt-src-note"),
                        html.Div(className="nt-table-wrap", style={"maxHeight": "40vh"},
                                 children=html.Table(className="nt-table", children=[
                                     html.Thead(html.Tr([html.Th(html.Span(label, className="nt-th"))
                                                         for _, label in DIFF_COLUMNS])),
                                     html.Tbody(diff_rows(state), id="nt-cmp-diff"),
                                 ])),
                    ]),
                    html.Div(className="nt-card", children=[  # app/compare/memory.py
                        html.H3("memory (A → B)"),
                        html.Div(memory.panel(state), id="nt-cmp-memory"),
                    ]),
                    html.Div(className="nt-card", children=[
                        html.H3("Event"),
                        html.Div(id="nt-details", children=html.Div(
                            "Click an event on either timeline (zoom in until single events show), or search.",
                            className="nt-empty")),
                    ]),
                    html.Div(className="nt-card", children=[html.H3("Source"), html.Div(id="nt-source", children=html.Div(
                        "The selected event's call stack and source lines.", className="nt-empty"))]),
                ]),
            ]),
        ]),
        *layout.key_buttons(),
        dcc.Store(id="nt-cmp-view", data=None), dcc.Store(id="nt-cmp-op", data=None),
        dcc.Store(id="nt-cmp-selected", data=None), dcc.Store(id="nt-cmp-goto", data=None),
        dcc.Store(id="nt-cmp-zoom", data=None), dcc.Store(id="nt-cmp-pick", data=None),
        dcc.Store(id="nt-viewport", data=None), dcc.Store(id="nt-cmp-stage", data=key),
        dcc.Interval(id="nt-cmp-poll", interval=400, disabled=key in (READY_STAGE, FAILED_STAGE)),
    ])


