"""Two runs side by side (``neurontrace view A B``): both timelines stacked with one shared zoom, both
cause summary strips, and the ``diff`` op table beside them; a click on a diff row outlines that op
in both timelines.

Built from the single-trace viewer's parts: each side is a :class:`~neurontrace.app.server.ViewerState`
(loading, the :class:`ViewModel`, the analysis), drawn by :func:`figures.timeline` and
:func:`figures.summary`, with the window requests, search, details, fit and flow-follow functions of
:mod:`neurontrace.app.callbacks`, applied to the side an event belongs to. What is new here is the
alignment: each side's x axis is ms from its *first analysed step* (the first step marker, or Neuron
device execution, that starts inside the busiest device's analysis window; the window's start when
there is none), so the two runs line up step for step and one x range means the same moment of both.

The page is progressive: it is drawn as soon as both traces are indexed, aligned provisionally at each
run's first step marker (the trace start without one); the analyses and the diff run after it, and the
page polls their progress (:meth:`CompareState.stage`): each cause strip fills in when its side is
analysed, the alignment switches to the analysed one once both are (keeping what A shows when the
user has zoomed), and the diff table fills in last.
"""

from __future__ import annotations

import dataclasses
import threading
import time
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
LABELS = {"a": "A (baseline)", "b": "B (change)"}
MAX_DIFF_ROWS = 200
DIFF_COLUMNS = (("status", "status"), ("kind", "kind"), ("name", "op"), ("baseline_ms", "A (ms)"),
                ("change_ms", "B (ms)"), ("delta_ms", "Δ (ms)"), ("delta_pct", "Δ %"))
READY_STAGE, FAILED_STAGE = "ready", "failed"
ALIGN_NOTE = {True: "x: ms from each run's first analysed step; zooming or panning either timeline moves both.",
              False: "x: ms from each run's first step marker (the trace start without one): a provisional "
                     "alignment until both analyses are done, then each run's first analysed step. Zooming or "
                     "panning either timeline moves both."}


def provisional_point(model: ViewModel) -> int:
    """Where the x axis reads 0 before the analysis: the first step marker (or Neuron execution), else
    the trace's first event."""
    starts = model.steps[0]
    return int(starts[0]) if len(starts) else 0


def align_point(model: ViewModel) -> int:
    """ns after the trace's first event where its x axis reads 0 once analysed: the first step (or
    execution) starting inside the analysis window, else the window's start (before the analysis,
    or without a device: :func:`provisional_point`)."""
    focus = model.focus()
    if focus is None:
        return provisional_point(model)
    w0, w1 = focus[1]
    starts = model.steps[0]
    inside = starts[(starts >= w0) & (starts < w1)]
    return int(inside[0]) if len(inside) else int(w0)


class CompareState:
    """Two :class:`ViewerState` sides (A the baseline, B the change) and, once both are analysed, their diff."""

    def __init__(self, a: ViewerState, b: ViewerState) -> None:
        self.sides = {"a": a, "b": b}
        self.diff: Diff | None = None
        self.error: str | None = None  # the diff's failure (the timelines stay on the page)

    @property
    def status(self) -> str:
        """Of loading: READY once both traces are indexed (the page shows then; :meth:`stage` says what
        still runs), FAILED when either could not be loaded."""
        if any(s.status == FAILED for s in self.sides.values()):
            return FAILED
        if any(s.model is None for s in self.sides.values()):
            return LOADING
        return READY

    def stage(self) -> tuple[str, str]:
        """(key, text) of what runs after the page is shown: ``analysing-a``, ``analysing-b``,
        ``comparing``, then ``ready``; ``failed`` with the message when an analysis or the diff failed."""
        for k in SIDES:
            if self.sides[k].analysis_error:
                return FAILED_STAGE, f"{LABELS[k]}: {self.sides[k].analysis_error}; no diff"
        if self.error:
            return FAILED_STAGE, self.error
        for k in SIDES:
            model = self.sides[k].model
            if model is None or model.analysis is None:
                return f"analysing-{k}", f"Analysing {LABELS[k]} (stall attribution)…"
        if self.diff is None:
            return "comparing", "Comparing the two runs (diff)…"
        return READY_STAGE, ""

    def load(self, loader: Callable[..., Any] | None = None) -> None:
        """Load and index both sides (one after the other: the machine may be small), then analyse them
        and diff them (:meth:`analyse`); the page shows between the two."""
        for side in self.sides.values():
            if side.model is None:
                side.load(*([loader] if loader is not None else []), analyse=False)
            if side.status == FAILED:
                return
        self.analyse()

    def analyse(self) -> None:
        for side in self.sides.values():
            if side.model is not None and side.model.analysis is None and side.analysis_error is None:
                side.analyse()
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
        if a is None or b is None:
            raise dash.exceptions.PreventUpdate
        return a, b

    def alignment(self) -> tuple[dict[str, int], bool]:
        """Each side's x = 0 (ns after its first event), and whether that is the analysed alignment
        (both sides analysed) or the provisional one."""
        models = dict(zip(SIDES, self.models(), strict=True))
        analysed = all(m.analysis is not None for m in models.values())
        return {k: align_point(m) if analysed else provisional_point(m) for k, m in models.items()}, analysed

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

    def counts(self) -> str:
        """The diff's headline (how many ops changed, the worst regression), empty until it is done."""
        d = self.diff
        if d is None:
            return ""
        head = ", ".join(f"{n} {s}" for s, n in d.ops_summary().items() if s != "unchanged")
        worst = d.worst_regression
        if worst is not None and worst.regression_pct is not None:
            head += f" · {worst.label}: {worst.regression_pct:+.1f}% per step"
        return head

    def page(self) -> Any:
        a, b = self.sides["a"], self.sides["b"]
        title = f"{a.path}  ⟷  {b.path}"
        if self.status == FAILED:
            failed = next(s for s in (a, b) if s.status == FAILED)
            return layout.error(failed.path, failed.error or "")
        if self.status == LOADING:
            side = a if a.model is None else b
            return layout.loading(title, f"{side.path}: {side.stage}", side.fraction)
        return compare_page(self)


# -- the view: one aligned window for both sides ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class View:
    """The page's view store: the window in ns from each side's x = 0, the alignment it was drawn
    with (each side's x = 0, and whether analysed), whether the user has moved it, and the stamps of
    the last goto, zoom and diff row pick drawn."""

    t0: int
    t1: int
    origins: dict[str, int]
    analysed: bool
    auto: bool = True
    goto: Any = None
    zoom: Any = None
    pick: Any = None

    @classmethod
    def of(cls, value: Any) -> View | None:
        """The store's value checked (every value from the page is untrusted), or None."""
        if not isinstance(value, dict) or not isinstance(value.get("origins"), dict):
            return None
        t0, t1 = callbacks.as_int(value.get("t0")), callbacks.as_int(value.get("t1"))
        origins = {k: callbacks.as_int(value["origins"].get(k)) for k in SIDES}
        if t0 is None or t1 is None or t1 <= t0 or any(o is None for o in origins.values()):
            return None
        return cls(t0, t1, {k: int(o) for k, o in origins.items() if o is not None}, bool(value.get("analysed")),
                   bool(value.get("auto", True)), value.get("goto"), value.get("zoom"), value.get("pick"))

    @staticmethod
    def undrawn(view: View | None, kind: str, stamp: Any) -> bool:
        """Whether ``stamp``, the stamp of the store ``kind`` ("goto", "zoom" or "pick"; None: empty), is
        one ``view`` was not drawn with (nothing was drawn yet: None)."""
        return stamp is not None and (view is None or getattr(view, kind) != stamp)

    def side(self, side: str) -> dict[str, int]:
        """The window as one side's own view store (ns after its first event), as the single-trace
        functions read it."""
        o = self.origins[side]
        return {"t0": self.t0 + o, "t1": self.t1 + o, "origin": o}


def selection_of(state: CompareState, value: Any) -> tuple[str, int] | None:
    """(side, event id) of the page's selection store when that event is in that side's trace."""
    if not isinstance(value, dict) or value.get("side") not in SIDES:
        return None
    event = callbacks.as_int(value.get("event"))
    model = state.sides[str(value["side"])].model
    if event is None or model is None or model.index.position(event) is None:
        return None
    return str(value["side"]), event


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
    drawn = callbacks.as_int(origins.get(side)) if isinstance(origins, dict) else None
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
        index = callbacks.as_int(pick.get("index"), 0, len(rows) - 1)
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
        lo, hi = callbacks.as_int(goto.get("t0")), callbacks.as_int(goto.get("t1"))
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
    index = callbacks.as_int(trigger.get("index")) if isinstance(trigger, dict) else None
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
    return (key, text, ALIGN_NOTE[analysed], figures.summary(a), figures.summary(b),
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
        dcc.Graph(id=f"nt-cmp-summary-{side}", figure=figures.summary(model), config={"displayModeBar": False}),
        dcc.Graph(id=f"nt-cmp-timeline-{side}", config=layout.GRAPH_CONFIG, clear_on_unhover=True),
    ])


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
    return [html.Tr([html.Td(layout._cell(r.get(c)), title=str(r.get(c, ""))) for c, _ in DIFF_COLUMNS],
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

    def clicked() -> bool:
        """A pattern-matched button fired because it was clicked, not because it was just drawn."""
        return bool(dash.ctx.triggered and dash.ctx.triggered[0].get("value"))

    @app.callback(Output("nt-page", "children"), Output("nt-load-poll", "disabled"),
                  Input("nt-load-poll", "n_intervals"), prevent_initial_call=True)
    def _poll(_n: Any) -> tuple[Any, bool]:
        return state.page(), state.status != LOADING

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
    return app


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
