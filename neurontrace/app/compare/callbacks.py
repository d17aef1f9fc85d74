"""What the two-run page does. As on the one-trace page (``neurontrace/app/callbacks.py``), each Dash
callback registered by :func:`register` is a thin wrapper around a plain function of the
:class:`CompareState` (``on_compare``, ``on_pick``, ``on_search_pair``, ``on_progress``,
``on_details``), tested and timed without a browser; those apply the one-trace functions to the side
an event belongs to.

Data flow::

    zoom/pan of either timeline (nt-cmp-zoom), diff row (nt-cmp-pick), goto, selection, stage
        ──► on_compare ──► both figures, nt-cmp-view, nt-cmp-op
    timeline click / search hit / flow / keys F ] [ ──► on_pick, on_search_pair ──► nt-cmp-selected, nt-cmp-goto
    nt-cmp-selected ──► on_details ──► details panel, source panel
    nt-cmp-poll ──► on_progress ──► stage, cause strips, alignment note, diff table
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import dash
from dash import ALL, Input, Output, State, html, no_update

from neurontrace.app import callbacks, figures, inputs, layout
from neurontrace.app.compare.layout import ALIGN_NOTE, diff_rows, page, strip_scale
from neurontrace.app.compare.model import (
    FAILED_STAGE,
    LABELS,
    READY_STAGE,
    SIDES,
    CompareState,
    View,
    op_positions,
    selection_of,
)
from neurontrace.app.model import ViewModel
from neurontrace.app.server import LOADING


def mark_op(model: ViewModel, drawn: figures.Drawn, name: str, req: figures.Request) -> int:
    """Outline every ``name`` event in the drawn window on its row (its lane, or its group's header
    when the lane is folded away); returns how many were outlined."""
    width = req.t1 - req.t0
    marks = figures.outline(model, drawn.rows, op_positions(model, name, req.t0 - width, req.t1 + width), req,
                            f"diff:{name}")
    drawn.figure["data"].append(marks)
    return len(marks["x"]) // 6


def draw_side(model: ViewModel, window: tuple[int, int], origin: int, *, viewport: Any = None,
              op: str | None = None, selected: int | None = None) -> tuple[dict[str, Any], str]:
    """(figure, status) of one side's timeline for an aligned window (ns from its x = 0, ``origin``
    ns after its first event); half the height a single timeline gets, as two share the page."""
    req = callbacks.request(model, (window[0] + origin, window[1] + origin), viewport=viewport, origin=origin,
                            selected=selected)
    req = dataclasses.replace(req, height_px=req.height_px // 2)
    drawn = figures.timeline(model, req)
    status = drawn.status
    if op:
        status += f" · {mark_op(model, drawn, op, req)} {op} events outlined"
    return drawn.figure, status


def _zoom_of(value: Any) -> tuple[str, Any, Any, int | None] | None:
    """(side, relayout, stamp, the x = 0 it was made at, ns) of the page's zoom store, or None."""
    if not isinstance(value, dict) or value.get("side") not in SIDES:
        return None
    side = str(value["side"])
    origins = value.get("origins")
    drawn = inputs.as_int(origins.get(side)) if isinstance(origins, dict) else None
    return side, value.get("relayout"), value.get("at"), drawn


def on_compare(state: CompareState, trigger: Any, view: Any, op: Any, viewport: Any, *, zoom: Any = None,
               goto: Any = None, selected: Any = None, pick: Any = None) -> tuple[Any, ...]:
    """(figure A, figure B, status A, status B, view, op) after a zoom/pan of either side (``zoom``: the
    side, plotly's relayout of it, a stamp, and the alignment it was drawn at), a goto (search, a clicked
    flow, F, ] and [), a selection, a diff row click (``pick``: the row and a stamp, :func:`row_pick`;
    the row's op is outlined, or cleared when it was), a resize or a stage of the analysis: both sides
    always draw the same aligned window.

    A zoom, goto or pick not yet drawn (its stamp is not the view's) is applied whatever fired: Dash keeps the
    answer of a callback's newest call only, so a redraw that fired while a zoom was in flight would
    otherwise undo it. The stored window is moved to today's alignment keeping what A shows, so when
    the analysed alignment replaces the provisional one a zoom the user made stays on the same events
    of A (and B lines up with it); a view nobody moved opens on A's analysis window instead, as the
    one-trace page does."""
    models = dict(zip(SIDES, state.models(), strict=True))
    origins, analysed = state.alignment()
    stored = View.of(view)
    picked = op if isinstance(op, str) else None
    sel = selection_of(state, selected)
    auto = stored.auto if stored else True
    window: tuple[int, int] | None = None
    if stored:
        shift = stored.origins["a"] - origins["a"]
        window = (stored.t0 + shift, stored.t1 + shift)
    zoomed = _zoom_of(zoom)
    nonce = goto.get("nonce") if isinstance(goto, dict) else None
    new_zoom = View.undrawn(stored, "zoom", zoomed[2] if zoomed else None)
    new_goto = View.undrawn(stored, "goto", nonce)
    pick_stamp = pick.get("nonce") if isinstance(pick, dict) else None
    new_pick = View.undrawn(stored, "pick", pick_stamp)
    if new_pick:
        rows = state.rows()
        index = inputs.as_int(pick.get("index"), 0, len(rows) - 1)
        if index is not None:
            name = str(rows[index]["name"])
            picked = None if name == picked else name
    if zoomed is not None and new_zoom and not (trigger == "nt-cmp-goto" and new_goto):
        side, relayout, _stamp, drawn_at = zoomed
        model = models[side]
        drawn = drawn_at if drawn_at is not None else (stored.origins[side] if stored else origins[side])
        asked = callbacks.parse_relayout(relayout, model.index.span_ns, drawn)
        if asked is None and trigger == "nt-cmp-zoom" and not new_pick:
            return (no_update,) * 6
        if asked is not None:
            t0, t1 = callbacks.clamp(model, *asked)
            window, auto = (t0 - origins[side], t1 - origins[side]), False
    elif new_goto and isinstance(goto, dict) and goto.get("side") in SIDES:
        side = str(goto["side"])
        lo, hi = inputs.as_int(goto.get("t0")), inputs.as_int(goto.get("t1"))
        if lo is not None and hi is not None:
            t0, t1 = callbacks.clamp(models[side], lo, hi)
            window, auto = (t0 - origins[side], t1 - origins[side]), False
    switched = stored is not None and analysed and not stored.analysed
    if window is None or (auto and switched):
        a = models["a"]  # first draw, or the analysed alignment arrived on a view nobody moved: A's window
        t0, t1 = callbacks.focus_view(a) or (0, a.index.span_ns)
        window = (t0 - origins["a"], t1 - origins["a"])
    (fa, sa), (fb, sb) = (draw_side(models[s], window, origins[s], viewport=viewport, op=picked,
                                    selected=sel[1] if sel and sel[0] == s else None) for s in SIDES)
    new_view = {"t0": window[0], "t1": window[1], "origins": origins, "analysed": analysed, "auto": auto,
                "goto": nonce, "zoom": zoomed[2] if zoomed else None, "pick": pick_stamp}
    return fa, fb, sa, sb, new_view, (no_update if picked == op else picked)  # the table redraws on a change only


def row_pick(trigger: Any) -> Any:
    """The pick store after a click on a diff row: the row, stamped like a goto so that a redraw racing
    the click's own (Dash keeps the newest call's answer only) still applies it, once."""
    index = inputs.as_int(trigger.get("index")) if isinstance(trigger, dict) else None
    return no_update if index is None else {"index": index, "nonce": time.monotonic_ns()}


def _on_side(side: str, picked: tuple[Any, Any]) -> tuple[Any, Any]:
    """A single-trace (selected, goto) pair as the two-run page's: both name their side."""
    selected, goto = picked
    return ({"side": side, "event": selected} if isinstance(selected, int) else selected,
            goto | {"side": side} if isinstance(goto, dict) else goto)


def on_pick(state: CompareState, trigger: Any, clicks: dict[str, Any], selected: Any, view: Any) -> tuple[Any, Any]:
    """(selection, goto) after a click on either timeline, a search hit, a flow in the details panel,
    or keys F, ] and [: the one-trace page's functions, on the side the event belongs to."""
    models = dict(zip(SIDES, state.models(), strict=True))
    stored = View.of(view)
    sel = selection_of(state, selected)

    def side_view(side: str) -> Any:
        return stored.side(side) if stored else None

    for side in SIDES:
        if trigger == f"nt-cmp-timeline-{side}":
            return _on_side(side, callbacks.on_navigate(models[side], "nt-timeline", clicks.get(side), side_view(side)))
    if isinstance(trigger, dict) and trigger.get("type") == "nt-hit" and trigger.get("side") in SIDES:
        side = str(trigger["side"])
        return _on_side(side, callbacks.on_navigate(models[side], trigger, None, side_view(side)))
    if sel is None:
        return no_update, no_update
    side, event = sel
    if isinstance(trigger, dict) and trigger.get("type") == "nt-flow":
        return _on_side(side, callbacks.on_navigate(models[side], trigger, None, side_view(side)))
    if trigger == "nt-fit":
        return _on_side(side, (no_update, callbacks.on_fit(models[side], event)))
    if trigger in ("nt-follow-next", "nt-follow-prev"):
        which = "next" if trigger == "nt-follow-next" else "prev"
        return _on_side(side, callbacks.on_follow(models[side], event, which, side_view(side)))
    return no_update, no_update


def on_search_pair(state: CompareState, text: Any, submitted: bool, selected: Any, view: Any,
                   scope: Any) -> tuple[Any, Any, Any]:
    """(results list, selection, goto) for the two-run page's search box: the one-trace search on A, B or
    both; hits are listed in aligned time, and Enter selects the next match after the selected event (or
    the view's start) in aligned time, on either side (A first at equal times), wrapping around."""
    models = dict(zip(SIDES, state.models(), strict=True))
    origins, _analysed = state.alignment()
    sides = [s for s in SIDES if scope in (s, "both")] or list(SIDES)
    found = {s: callbacks.search(models[s], text) for s in sides}
    hits: list[tuple[int, str, int, str, int]] = []
    for s in sides:
        ix = models[s].index
        for p in found[s][0][:callbacks.MAX_HITS].tolist():
            hits.append((int(ix.start[p]) - origins[s], s, int(ix.event_id[p]), str(ix.names[ix.name[p]]),
                         int(ix.end[p] - ix.start[p])))
    hits = sorted(hits)[:callbacks.MAX_HITS]
    note = " · ".join(f"{s.upper()}: {found[s][1]}" for s in sides) if any(found[s][1] for s in sides) else ""
    total = sum(len(found[s][0]) for s in sides)
    results = layout.search_results([(eid, name, start, dur) for start, _s, eid, name, dur in hits], note, total,
                                    sides=[s for _t, s, *_rest in hits])
    if not submitted or not total:
        return results, no_update, no_update
    sel = selection_of(state, selected)
    stored = View.of(view)
    here: tuple[str, int] | None = None  # the selection's side and aligned start
    if sel is not None:
        ix = models[sel[0]].index
        here = sel[0], int(ix.start[ix.position(sel[1])]) - origins[sel[0]]
    candidates: list[tuple[int, str, int]] = []
    for s in sides:
        pos, model = found[s][0], models[s]
        if not len(pos):
            continue
        if sel is not None and sel[0] == s:
            k = callbacks.next_match(model, pos, sel[1], 0)
        elif here is not None:  # selected on the other side: after it in aligned time, A before B at a tie
            k = callbacks.next_match(model, pos, None, here[1] + origins[s] + (1 if s < here[0] else 0))
        else:
            k = callbacks.next_match(model, pos, None, stored.side(s)["t0"] - 1 if stored else -1)
        if k < len(pos):
            candidates.append((int(model.index.start[pos[k]]) - origins[s], s, int(pos[k])))
    if not candidates:  # past the last match on every side: wrap around to the first
        candidates = [(int(models[s].index.start[found[s][0][0]]) - origins[s], s, int(found[s][0][0]))
                      for s in sides if len(found[s][0])]
    _t, side, p = min(candidates)
    event_id = int(models[side].index.event_id[p])
    goto = callbacks.goto_event(models[side], event_id, stored.side(side) if stored else None)
    return (results, *_on_side(side, (event_id, goto)))


def on_progress(state: CompareState, shown: Any, op: Any) -> tuple[Any, ...]:
    """What the page's progress poll updates when the stage changed since ``shown``: (stage, its text,
    the alignment note, summary A, summary B, diff rows, diff headline, poll disabled)."""
    key, text = state.stage()
    if key == shown:
        return (no_update,) * 8
    _origins, analysed = state.alignment()
    a, b = state.models()
    scale = strip_scale(state)
    return (key, text, ALIGN_NOTE[analysed], figures.summary(a, scale_ns=scale), figures.summary(b, scale_ns=scale),
            diff_rows(state, op if isinstance(op, str) else None), state.counts(), key in (READY_STAGE, FAILED_STAGE))


def on_details(state: CompareState, selected: Any) -> tuple[Any, Any]:
    """(details panel, source panel) of the selected event, on its side."""
    sel = selection_of(state, selected)
    if sel is None:
        return no_update, no_update
    side, event = sel
    points, analysed = state.alignment()
    origin = (points[side], "the first analysed step" if analysed else "the first step marker (provisional)")
    details, source = callbacks.on_details(state.models()[SIDES.index(side)], state.sides[side].reader, event, origin)
    return [html.Div(f"in {LABELS[side]}", className="nt-src-note", id="nt-cmp-details-side"), *details], source



def register(app: dash.Dash, state: CompareState) -> None:
    """Attach every callback of the two-run page to ``app``; they read both sides from ``state``."""

    def clicked() -> bool:
        """A pattern-matched button fired because it was clicked, not because it was just drawn."""
        return bool(dash.ctx.triggered and dash.ctx.triggered[0].get("value"))

    @app.callback(Output("nt-page", "children"), Output("nt-load-poll", "disabled"),
                  Input("nt-load-poll", "n_intervals"), prevent_initial_call=True)
    def _poll(_n: Any) -> tuple[Any, bool]:
        return page(state), state.status != LOADING

    @app.callback(Output("nt-cmp-stage", "data"), Output("nt-cmp-progress", "children"),
                  Output("nt-cmp-align", "children"), Output("nt-cmp-summary-a", "figure"),
                  Output("nt-cmp-summary-b", "figure"), Output("nt-cmp-diff", "children", allow_duplicate=True),
                  Output("nt-cmp-counts", "children"), Output("nt-cmp-poll", "disabled"),
                  Input("nt-cmp-poll", "n_intervals"), State("nt-cmp-stage", "data"), State("nt-cmp-op", "data"),
                  prevent_initial_call=True)
    def _progress(_n: Any, shown: Any, op: Any) -> tuple[Any, ...]:
        return on_progress(state, shown, op)

    @app.callback(Output("nt-cmp-timeline-a", "figure"), Output("nt-cmp-timeline-b", "figure"),
                  Output("nt-cmp-status-a", "children"), Output("nt-cmp-status-b", "children"),
                  Output("nt-cmp-view", "data"), Output("nt-cmp-op", "data"),
                  Input("nt-cmp-zoom", "data"), Input("nt-cmp-pick", "data"),
                  Input("nt-viewport", "data"), Input("nt-cmp-stage", "data"), Input("nt-cmp-goto", "data"),
                  Input("nt-cmp-selected", "data"), State("nt-cmp-view", "data"), State("nt-cmp-op", "data"))
    def _compare(zoom: Any, pick: Any, viewport: Any, _stage: Any, goto: Any, selected: Any, view: Any,
                 op: Any) -> tuple[Any, ...]:
        return on_compare(state, dash.ctx.triggered_id, view, op, viewport, zoom=zoom, goto=goto, selected=selected,
                          pick=pick)

    @app.callback(Output("nt-cmp-pick", "data"), Input({"type": "nt-cmp-row", "index": ALL}, "n_clicks"),
                  prevent_initial_call=True)
    def _row(_clicks: Any) -> Any:
        if not clicked():
            raise dash.exceptions.PreventUpdate  # rows just drawn, not clicked
        return row_pick(dash.ctx.triggered_id)

    @app.callback(Output("nt-cmp-diff", "children"), Input("nt-cmp-op", "data"), prevent_initial_call=True)
    def _rows(op: Any) -> Any:
        return diff_rows(state, op if isinstance(op, str) else None)

    @app.callback(Output("nt-cmp-selected", "data"), Output("nt-cmp-goto", "data"),
                  Input("nt-cmp-timeline-a", "clickData"), Input("nt-cmp-timeline-b", "clickData"),
                  Input({"type": "nt-hit", "event": ALL, "side": ALL}, "n_clicks"),
                  Input({"type": "nt-flow", "event": ALL}, "n_clicks"), Input("nt-fit", "n_clicks"),
                  Input("nt-follow-next", "n_clicks"), Input("nt-follow-prev", "n_clicks"),
                  State("nt-cmp-selected", "data"), State("nt-cmp-view", "data"), prevent_initial_call=True)
    def _pick(click_a: Any, click_b: Any, _hits: Any, _flows: Any, _fit: Any, _next: Any, _prev: Any,
              selected: Any, view: Any) -> tuple[Any, Any]:
        trigger = dash.ctx.triggered_id
        if isinstance(trigger, dict) and not clicked():
            return no_update, no_update
        return on_pick(state, trigger, {"a": click_a, "b": click_b}, selected, view)

    @app.callback(Output("nt-search-results", "children"), Output("nt-cmp-selected", "data", allow_duplicate=True),
                  Output("nt-cmp-goto", "data", allow_duplicate=True),
                  Input("nt-search", "value"), Input("nt-search", "n_submit"), Input("nt-cmp-scope", "value"),
                  State("nt-cmp-selected", "data"), State("nt-cmp-view", "data"), prevent_initial_call=True)
    def _search(text: Any, _submit: Any, scope: Any, selected: Any, view: Any) -> tuple[Any, Any, Any]:
        submitted = "nt-search.n_submit" in dash.ctx.triggered_prop_ids
        return on_search_pair(state, text, submitted, selected, view, scope)

    @app.callback(Output("nt-details", "children"), Output("nt-source", "children"),
                  Input("nt-cmp-selected", "data"), prevent_initial_call=True)
    def _details(selected: Any) -> tuple[Any, Any]:
        return on_details(state, selected)

    @app.callback(Output("nt-snippet", "children"), Output({"type": "nt-frame", "frame": ALL}, "className"),
                  Input({"type": "nt-frame", "frame": ALL}, "n_clicks"), State("nt-cmp-selected", "data"),
                  prevent_initial_call=True)
    def _frame(_clicks: Any, selected: Any) -> tuple[Any, Any]:
        sel = selection_of(state, selected)
        if sel is None or not clicked():
            raise dash.exceptions.PreventUpdate
        side = state.sides[sel[0]]
        assert side.model is not None
        return callbacks.on_frame_click(side.model, side.reader, dash.ctx.triggered_id,
                                        [item["id"]["frame"] for item in dash.ctx.outputs_list[1]])

    app.clientside_callback(  # type: ignore[no-untyped-call]
        callbacks.VIEWPORT_JS, Output("nt-viewport", "data"), Input("nt-cmp-timeline-a", "id"),
    )
    app.clientside_callback(  # type: ignore[no-untyped-call]
        ZOOM_JS, Output("nt-cmp-zoom", "data"), Input("nt-cmp-timeline-a", "relayoutData"),
        Input("nt-cmp-timeline-b", "relayoutData"), State("nt-cmp-view", "data"), prevent_initial_call=True,
    )


# A zoom or pan of either timeline, as the page's zoom store: the side, plotly's relayout, a stamp, and
# the alignment the figure was drawn at (from the view store, set with the figure). Only relayouts of the
# x axis count (see callbacks.ZOOM_JS).
ZOOM_JS = """
function(ra, rb, view) {
  const fired = (dash_clientside.callback_context.triggered[0] || {}).prop_id || '';
  const side = fired.startsWith('nt-cmp-timeline-a') ? 'a' : 'b';
  const r = side === 'a' ? ra : rb;
  if (!(""" + callbacks.X_RELAYOUT + """)) return dash_clientside.no_update;
  window.ntZooms = (window.ntZooms || 0) + 1;
  return {side: side, relayout: r, at: window.ntZooms, origins: view && view.origins};
}
"""


