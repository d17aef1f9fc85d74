"""What the page does. Each callback is a thin Dash wrapper around a plain function of the model
(``on_timeline``, ``on_navigate``, ``on_details`` ...), so the functions are tested and timed
without a browser (``bench/viewer_speed.py`` calls them directly).

Data flow::

    timeline click / table row / flow link ──► on_navigate ──► nt-selected, nt-goto
    keys ] and [ (follow a flow) ──► on_follow ──► nt-selected, nt-goto
    zoom, pan (nt-zoom), nt-goto, groups, depth, highlight ──► on_timeline ──► figure, nt-view
    nt-view, groups, Python frames, levels, nt-selected ──► CARRY_JS ──► nt-carry (what the user chose on the
        preview, app/preview.py: the full page opens on it, ``chosen``)
    nt-selected ──► on_details ──► details panel, source panel (call stack + lines)
    summary click ──► on_summary ──► nt-highlight (and the summary figure outlines it)
    nt-analysis-ready ──► on_report ──► the Report tab (every registered section's text)

The values the page sends are checked by ``inputs.py`` before any function here reads them.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Protocol

import dash
import numpy as np
from dash import ALL, MATCH, Input, Output, State, html, no_update

from neurontrace.app import critical_path, figures, layout
from neurontrace.app.inputs import MAX_NS, as_int, highlight_of, op_pick_of, view_of
from neurontrace.app.model import ViewModel
from neurontrace.app.search import MAX_QUERY_CHARS, matching_names
from neurontrace.app.source import SourceReader
from neurontrace.causes import CAUSES


class PageState(Protocol):
    """What the callbacks read of the server's state (``server.ViewerState``): declared here, so this module
    does not import the server that registers it (no import cycle, not even a type-only one)."""

    status: str
    model: ViewModel | None
    analysis_error: str | None
    reader: SourceReader

    def page(self, url_query: str = "", carry: Any = None) -> Any: ...

    def require(self) -> ViewModel: ...


SIDE_PANEL_PX = 430 + 60  # the details column and page padding, beside the timeline
ZOOM_PAD = 0.25  # a table row zooms to its interval plus this share of it on each side
BIN_CLICK_ZOOM = 8  # clicking a binned pixel zooms in this many times around it
FOCUS_PAD = 0.01  # the analysis window is shown with this share of it as margin on each side
TIMELINE_SHARE = 0.68  # of the browser window's height, offered to the timeline
MAX_HITS = 50  # search results listed


def marked(model: ViewModel, highlight: Any) -> tuple[int, ...]:
    """Index positions of the kernels of the op picked in the ops panel, or of the events on the critical path
    when its toggle is on (none without either)."""
    on_path = critical_path.marked(model, highlight)
    if on_path is not None:
        return on_path
    pick = op_pick_of(highlight)
    if pick is None or model.analysis is None or \
            pick[0] not in {(d.device, d.rank) for d in model.analysis.diagnosis.devices}:
        return ()
    device, window, op, kernel_class = pick  # the window in ns after the trace's first event (JSON-safe)
    o = model.index.origin_ns
    view = model.ops_view(device, (window[0] + o, window[1] + o) if window else None)
    rows = [i for i, r in enumerate(view.report.rows) if r.op == op and r.kernel_class == kernel_class]
    if not rows:
        return ()
    return tuple(model.index.positions(view.event_ids_of(rows[0])).tolist())


def n_bins_for(viewport: Any) -> int:
    """Pixel columns of the plot area for a browser window ``viewport`` ({"w", "h"}) pixels wide."""
    width = as_int(viewport.get("w") if isinstance(viewport, dict) else viewport, 1, 100_000)
    if width is None:
        return 1200
    return int(max(200, min(2400, width - SIDE_PANEL_PX - figures.LEFT_PX - 40)))


def height_for(viewport: Any) -> int:
    """Pixels offered to the timeline plot in a browser window ``viewport`` pixels high (0: unknown)."""
    height = as_int(viewport.get("h") if isinstance(viewport, dict) else None, 200, 20_000)
    return int(height * TIMELINE_SHARE) if height else 0


def parse_relayout(relayout: Any, span_ns: int, origin: int = 0) -> tuple[int, int] | None:
    """The x window (ns after the first event) a plotly relayout event asks for; None when it is not
    about the x axis or not valid. Its x values are ms from ``origin``, as the figure draws them."""
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
    lo, hi = as_int(a, -MAX_NS // 10**6, MAX_NS // 10**6), as_int(b, -MAX_NS // 10**6, MAX_NS // 10**6)
    if lo is None or hi is None:
        return None
    return int(float(a) * 1e6) + origin, int(float(b) * 1e6) + origin


def clamp(model: ViewModel, t0: int, t1: int) -> tuple[int, int]:
    span = model.index.span_ns
    lo, hi = min(t0, t1), max(t0, t1)
    pad = span // 20
    width = min(hi - lo, span + 2 * pad)
    lo = max(-pad, min(lo, span + pad - width))
    return lo, lo + max(width, 1)


def request(model: ViewModel, view: tuple[int, int], *, expanded: Any = None, depth: Any = None,
            python: Any = None, highlight: Any = None, selected: Any = None, viewport: Any = None,
            origin: int | None = None) -> figures.Request:
    hl = highlight_of(highlight)
    groups = expanded if isinstance(expanded, list) and all(isinstance(g, str) for g in expanded) else None
    return figures.Request(
        t0=view[0], t1=view[1], n_bins=n_bins_for(viewport),
        expanded=frozenset(groups if groups is not None else layout.default_expanded(model)),
        max_depth=as_int(depth, 1, 1000) or layout.DEFAULT_DEPTH,
        python=isinstance(python, list) and "python" in python,
        highlight=hl, selected=as_int(selected), height_px=height_for(viewport),
        origin=model.time_origin if origin is None else origin, marked=marked(model, highlight),
    )


def focus_view(model: ViewModel) -> tuple[int, int] | None:
    """The busiest device's analysis window with a small margin (where the page opens)."""
    focus = model.focus()
    if focus is None:
        return None
    t0, t1 = focus[1]
    pad = int((t1 - t0) * FOCUS_PAD)
    return clamp(model, t0 - pad, t1 + pad)


@dataclass(frozen=True)
class Chosen:
    """What the user chose on the preview page, checked against the model the full page draws (None, or the
    defaults: not chosen, or not valid)."""

    window: tuple[int, int] | None = None  # a zoom or pan (not the page's own move to the analysis window)
    expanded: list[str] | None = None  # the groups, once a box was ticked or unticked (the preview opens folded)
    python: bool = False
    depth: int = layout.DEFAULT_DEPTH
    selected: int | None = None


def chosen(model: ViewModel, carry: Any) -> Chosen:
    """The page's ``nt-carry`` store (kept by CARRY_JS while the preview shows) as a :class:`Chosen`."""
    if not isinstance(carry, dict):
        return Chosen()
    view, groups, python = carry.get("view"), carry.get("groups"), carry.get("python")
    stored = view_of(view)
    moved = stored is not None and isinstance(view, dict) and view.get("auto") is False
    known = {g.key for g in model.index.groups} | {figures.COUNTERS}
    picked = groups if isinstance(groups, list) and len(groups) <= len(known) else None
    depth = as_int(carry.get("depth"))
    selected = as_int(carry.get("selected"))
    return Chosen(
        window=clamp(model, stored[0], stored[1]) if moved and stored else None,
        expanded=None if picked is None else [g for g in picked if isinstance(g, str) and g in known],
        python=isinstance(python, list) and "python" in python,
        depth=depth if depth in layout.DEPTHS else layout.DEFAULT_DEPTH,
        selected=selected if selected is not None and model.index.position(selected) is not None else None)


def url_query(model: ViewModel, view: tuple[int, int], selected: Any) -> str:
    """The page URL's query for a view: the window in the trace's own ns clock, and the selection."""
    query = f"?start_ns={model.absolute(view[0])}&end_ns={model.absolute(view[1])}"
    event = as_int(selected)
    return query + (f"&event={event}" if event is not None and model.index.position(event) is not None else "")


def on_timeline(model: ViewModel, trigger: str | None, relayout: Any, goto: Any, view: Any,
                **req: Any) -> tuple[Any, Any, Any]:
    """(figure, new view, status) for one timeline update; no_update where nothing changes."""
    stored = view_of(view)
    current = (stored[0], stored[1]) if stored else (0, model.index.span_ns)
    auto = not isinstance(view, dict) or bool(view.get("auto", True))
    # A goto or zoom not yet drawn wins whatever fired: a redraw racing it (the window resized, the
    # analysis finished) read the view from before it, and would otherwise undo it.
    nonce = goto.get("nonce") if isinstance(goto, dict) else None
    stamp = relayout.get("nt.zoom") if isinstance(relayout, dict) else None  # set by ZOOM_JS
    drawn_before = view if isinstance(view, dict) else {}
    if trigger in ("nt-viewport", "nt-analysis-ready", "nt-selected"):
        if nonce is not None and drawn_before.get("goto") != nonce:
            trigger = "nt-goto"
        elif stamp is not None and drawn_before.get("zoom") != stamp:
            trigger = "nt-timeline"
    if trigger == "nt-timeline":
        asked = parse_relayout(relayout, model.index.span_ns, stored[2] if stored else 0)
        if asked is None:
            return no_update, no_update, no_update
        current, auto = clamp(model, *asked), False
    elif trigger == "nt-goto" and isinstance(goto, dict):
        t0, t1 = as_int(goto.get("t0")), as_int(goto.get("t1"))
        if t0 is None or t1 is None:
            return no_update, no_update, no_update
        current, auto = clamp(model, t0, t1), False
    elif trigger == "nt-reset":
        current, auto = (0, model.index.span_ns), False
    elif trigger == "nt-focus" or (auto and trigger == "nt-analysis-ready"):
        current = focus_view(model) or current
    r = request(model, current, **req)
    drawn = figures.timeline(model, r)
    new_view = {"t0": current[0], "t1": current[1], "origin": r.origin, "auto": auto,
                "query": url_query(model, current, req.get("selected")), "goto": nonce, "zoom": stamp}
    return drawn.figure, new_view, drawn.status


def goto_around(t0: int, t1: int, pad: float = ZOOM_PAD) -> dict[str, Any]:
    width = max(t1 - t0, 1000)
    margin = int(width * pad)
    return {"t0": t0 - margin, "t1": t0 + width + margin, "nonce": time.monotonic_ns()}


def on_navigate(model: ViewModel, trigger: Any, click: Any, view: Any) -> tuple[Any, Any]:
    """(selected event id, window to go to) after a click on the timeline, a table row, a flow link or
    a search result."""
    analysis = model.analysis
    if trigger == "nt-timeline" and isinstance(click, dict) and isinstance(click.get("points"), list) \
            and click["points"] and isinstance(click["points"][0], dict):
        point = click["points"][0]
        data = _as_list(point.get("customdata"))
        first = as_int(data[0]) if isinstance(data, list) and data else None
        if first is not None and first >= 0 and model.index.position(first) is not None:
            return first, no_update
        if isinstance(data, list) and len(data) >= 4:  # a run of the attribution row
            a, b = as_int(data[2]), as_int(data[3])
            return (no_update, goto_around(a, b, 0.1)) if a is not None and b is not None else (no_update, no_update)
        stored = view_of(view)
        x = as_int(point.get("x"), -MAX_NS // 10**6, MAX_NS // 10**6)
        if x is not None and stored:  # a binned pixel: zoom in around it
            width = (stored[1] - stored[0]) / BIN_CLICK_ZOOM
            centre = float(point["x"]) * 1e6 + stored[2]
            return no_update, {"t0": int(centre - width / 2), "t1": int(centre + width / 2),
                               "nonce": time.monotonic_ns()}
        return no_update, no_update
    if not isinstance(trigger, dict):
        return no_update, no_update
    if trigger.get("type") == "nt-row" and analysis is not None:
        rows = {"stalls": analysis.stalls, "ops": analysis.top_ops, "fallback": analysis.fallback}.get(
            str(trigger.get("table")), [])
        index = as_int(trigger.get("index"), 0, len(rows) - 1)
        if index is None:
            return no_update, no_update
        row = rows[index]
        if trigger.get("table") == "stalls":
            return no_update, goto_around(int(row["t0_ns"]), int(row["t1_ns"]))
        event_id = row.get("event_id")
        if event_id is None:
            return no_update, no_update
        return int(event_id), goto_event(model, int(event_id), view)
    if trigger.get("type") in ("nt-flow", "nt-hit"):
        event_id = as_int(trigger.get("event"))
        if event_id is None or event_id < 0 or model.index.position(event_id) is None:
            return no_update, no_update
        return event_id, goto_event(model, event_id, view)
    return no_update, no_update


def on_url(model: ViewModel, search: Any, view: Any = None) -> tuple[Any, Any]:
    """(selected event, window to go to) of a page URL ``?start_ns=…&end_ns=…&event=…`` (the
    window in the trace's own ns clock); no_update for what the URL does not say (or says wrongly), and for
    the window already in ``view`` (the page's own, written into the URL by the page before: the preview's,
    which is no move of the user's, so the page still moves to the analysis window when it is known)."""
    if not isinstance(search, str) or len(search) > 2000:
        return no_update, no_update
    query = urllib.parse.parse_qs(search.lstrip("?"))

    def number(key: str) -> int | None:
        values = query.get(key) or [""]
        return int(values[0]) if re.fullmatch(r"-?\d{1,20}", values[0]) else None

    start, end, event = number("start_ns"), number("end_ns"), number("event")
    goto: Any = no_update
    if start is not None and end is not None and end > start:
        o = model.index.origin_ns
        t0, t1 = as_int(start - o), as_int(end - o)
        shown = view_of(view)
        if t0 is not None and t1 is not None and (shown is None or shown[:2] != (t0, t1)):
            goto = {"t0": t0, "t1": t1, "nonce": time.monotonic_ns()}
    selected = event if event is not None and model.index.position(event) is not None else no_update
    return selected, goto


def search(model: ViewModel, text: Any) -> tuple[np.ndarray, str]:
    """Positions (in start order) of the events whose name matches ``text``: a case-insensitive
    substring, or a regular expression written ``/like this/`` (RE2, linear time: app/search.py); and a
    line saying what was found, or why the pattern was refused."""
    hit_names, refused = matching_names(model.index.names, text)
    if refused is not None:
        return np.zeros(0, dtype=np.int64), refused
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_QUERY_CHARS:
        return np.zeros(0, dtype=np.int64), ""
    pos = np.flatnonzero(np.isin(model.index.name, hit_names)) if len(hit_names) else np.zeros(0, dtype=np.int64)
    pos = pos[np.argsort(model.index.start[pos], kind="stable")]
    return pos, f"{len(pos):,} event{'s' if len(pos) != 1 else ''} match"


def on_search(model: ViewModel, text: Any, submitted: bool, selected: Any, view: Any) -> tuple[Any, Any, Any]:
    """(results list, selected, goto) for the search box: typing lists matches; Enter selects the
    next match after the selected event (or after the view's start) and zooms to it."""
    pos, note = search(model, text)
    ix = model.index
    origin = model.time_origin
    hits = [(int(ix.event_id[p]), str(ix.names[ix.name[p]]), int(ix.start[p]) - origin, int(ix.end[p] - ix.start[p]))
            for p in pos[:MAX_HITS].tolist()]
    results = layout.search_results(hits, note, len(pos))
    if not submitted or not len(pos):
        return results, no_update, no_update
    stored = view_of(view)
    k = next_match(model, pos, selected, stored[0] - 1 if stored else -1)
    nxt = int(pos[k % len(pos)])  # past the last match: wrap around to the first
    event_id = int(ix.event_id[nxt])
    return results, event_id, goto_event(model, event_id, view)


def next_match(model: ViewModel, pos: np.ndarray, selected: Any, after: int) -> int:
    """Index into ``pos`` (search hits in start order) of the next match after the selected event, or,
    with none selected (or not one of this trace's), of the first starting at or after ``after`` (ns
    after the first event); ``len(pos)`` when there is none (the caller wraps around)."""
    ix = model.index
    sel = as_int(selected)
    p = ix.position(sel) if sel is not None else None
    starts = ix.start[pos]
    if p is None:
        return int(np.searchsorted(starts, after, side="left"))
    here, here_id = int(ix.start[p]), int(ix.event_id[p])
    k = int(np.searchsorted(starts, here, side="right"))
    same = np.flatnonzero(starts == here)  # several matches can start together: step past the selected one
    ids = ix.event_id[pos[same]].tolist()
    if here_id in ids and ids.index(here_id) + 1 < len(ids):
        k = int(same[ids.index(here_id) + 1])
    return k


def on_fit(model: ViewModel, selected: Any) -> Any:
    """The window showing the selected event whole (key F)."""
    event_id = as_int(selected)
    pos = model.index.position(event_id) if event_id is not None else None
    if pos is None:
        return no_update
    return goto_around(int(model.index.start[pos]), int(model.index.end[pos]), 0.1)


FOLLOW = {"next": "out", "prev": "in"}  # key ] follows a flow out of the event, [ one into it


def on_follow(model: ViewModel, selected: Any, which: str, view: Any) -> tuple[Any, Any]:
    """(selected, goto) for keys ] and [: the other end of the selected event's first outgoing (``next``)
    or incoming (``prev``) flow (launch → kernel, kernel → its launch; then correlation and external-id
    partners, in the order the details panel lists them), selected and brought on screen."""
    event_id = as_int(selected)
    if event_id is None or model.index.position(event_id) is None or which not in FOLLOW:
        return no_update, no_update
    other = next((link.event_id for link in model.links(event_id) if link.direction == FOLLOW[which]
                  and model.index.position(link.event_id) is not None), None)
    if other is None:
        return no_update, no_update
    return other, goto_event(model, other, view)


def _as_list(data: Any) -> Any:
    """Customdata as a list: plotly.js hands typed-array rows over as {"0": .., "1": ..} objects."""
    if isinstance(data, dict) and "0" in data:
        return [data[str(i)] for i in range(len(data)) if str(i) in data]
    return data


def goto_event(model: ViewModel, event_id: int, view: Any) -> Any:
    """Centre the event, keeping the zoom if it fits, else zooming out to show it whole."""
    pos = model.index.position(event_id)
    if pos is None:
        return no_update
    s, e = int(model.index.start[pos]), int(model.index.end[pos])
    stored = view_of(view)
    width = max(stored[1] - stored[0], 1) if stored else model.index.span_ns
    if e - s > width * 0.8 or width > 400 * max(e - s, 1000):
        return goto_around(s, e, 0.5)
    centre = (s + e) // 2
    return {"t0": centre - width // 2, "t1": centre + width // 2, "nonce": time.monotonic_ns()}


def on_details(model: ViewModel, reader: Any, selected: Any, origin: tuple[int, str] | None = None
               ) -> tuple[Any, Any]:
    """(details panel, source panel) for the selected event; its start from ``origin`` ((ns after the
    first event, its name); default: the page's time origin, as the x axis)."""
    selected = as_int(selected)
    if selected is None:
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
    at, name = origin if origin is not None else time_origin(model)
    return layout.details(event, links, at, name), layout.source_panel(frames, value, snippet)


def time_origin(model: ViewModel) -> tuple[int, str]:
    """The one-trace page's time 0 and its name (docs/viewer.md, "Time origin")."""
    return (model.time_origin, "the analysis window start") if model.focus() is not None else (0, "trace start")


def on_frame(model: ViewModel, reader: Any, frame_id: Any) -> list[Any]:
    frame_id = as_int(frame_id)
    if frame_id is None:
        return []
    stack = model.stack(frame_id)
    if not stack:
        return []
    frame = stack[0]
    chain = " → ".join(f.function or f.kind for f in reversed(stack[:4]) if f.kind != "python") if \
        frame.kind != "python" else ""
    text = frame.location + (f"   ({chain})" if chain else "")
    return layout.snippet(reader.read(frame.file, frame.line), text)


def on_frame_click(model: ViewModel, reader: Any, trigger: Any, frame_ids: list[Any]) -> tuple[Any, Any]:
    """(lines, class of each frame button) after a click on a frame of the call stack."""
    chosen = as_int(trigger.get("frame")) if isinstance(trigger, dict) else None
    if chosen is None:
        raise dash.exceptions.PreventUpdate
    classes = []
    for fid in (as_int(f) for f in frame_ids):
        frame = model.stack(fid)
        classes.append(layout.frame_class(fid == chosen, bool(frame and frame[0].is_user)))
    return on_frame(model, reader, chosen), classes


def on_summary(model: ViewModel, trigger: Any, click: Any, highlight: Any) -> tuple[Any, Any]:
    """(summary figure, highlight) after a click on the summary strip or "clear highlight"."""
    new = highlight if highlight_of(highlight) else None
    points = click.get("points") if isinstance(click, dict) else None
    if trigger == "nt-summary" and isinstance(points, list) and points and isinstance(points[0], dict) \
            and model.analysis:
        point = points[0]
        curve = point.get("curveNumber")
        data = _as_list(point.get("customdata"))
        devices = model.analysis.diagnosis.devices
        which = as_int(data[1], 0, len(devices) - 1) if isinstance(data, list) and len(data) >= 2 else None
        k = as_int(curve, 0, len(CAUSES) - 1)
        if k is not None and which is not None:
            d = devices[which]
            picked = {"device": d.device, "rank": d.rank, "cause": CAUSES[k]}
            new = None if picked == highlight else picked
    elif trigger == "nt-clear-highlight":
        new = None
    return figures.summary(model, highlight_of(new)), new


def on_report(state: PageState) -> list[Any]:
    """The Report tab: each registered section's title and text lines (``tables.report_rows``), or what
    the analysis is doing meanwhile; reads the state only (the trigger's value is not trusted, nor needed)."""
    model = state.model
    if model is None or model.analysis is None:
        return layout.report_pending(state.analysis_error)
    return layout.report(model.analysis.report)


def on_headline(state: PageState) -> str:
    """The title bar's verdict: ``diagnose``'s headline once the analysis is done, empty before."""
    model = state.model
    if model is None or model.analysis is None:
        return ""
    return model.analysis.diagnosis.headline


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
        note += f" · {len(warnings)} load warning{'s' if len(warnings) > 1 else ''}: " + " · ".join(warnings)
    return note


# -- registration --------------------------------------------------------------------------------


def register(app: dash.Dash, state: PageState) -> None:
    """Attach every callback to ``app``; they read the model from ``state``."""

    @app.callback(Output("nt-page", "children"), Output("nt-load-poll", "disabled"), Output("nt-page-stage", "data"),
                  Input("nt-load-poll", "n_intervals"), State("nt-page-stage", "data"), State("nt-carry", "data"),
                  prevent_initial_call=True)
    def _poll(_n: Any, shown: Any, carry: Any) -> tuple[Any, bool, Any]:
        status = state.status  # loading: progress each tick; the preview, then the full page, once each
        waiting = status in ("loading", "preview")
        if status == shown and status != "loading":
            return no_update, not waiting, no_update
        # the full page after the preview opens where the user was on it (their zoom, groups, selection)
        return state.page(carry=carry if shown == "preview" else None), not waiting, status

    @app.callback(Output("nt-analysis-ready", "data"), Output("nt-analysis-poll", "disabled"),
                  Output("nt-findings", "children"), Output("nt-analysis-status", "children"),
                  Input("nt-analysis-poll", "n_intervals"))
    def _analysis(_n: Any) -> tuple[Any, ...]:
        model = state.model
        if model is None or model.analysis is None:
            text = state.analysis_error or "Analysing (stall attribution, findings)…"
            return no_update, state.analysis_error is not None, no_update, text
        return True, True, layout.findings(model.analysis.findings), analysis_note(model)

    @app.callback(Output("nt-report", "children"), Input("nt-analysis-ready", "data"))
    def _report(_ready: Any) -> list[Any]:
        return on_report(state)

    @app.callback(Output("nt-headline", "children"), Input("nt-analysis-ready", "data"))
    def _headline(_ready: Any) -> str:
        return on_headline(state)

    @app.callback(Output({"type": "nt-tbody", "table": MATCH}, "children"),
                  Output({"type": "nt-sort-state", "table": MATCH}, "data"),
                  Input("nt-analysis-ready", "data"), Input({"type": "nt-sort", "table": MATCH, "column": ALL}, "n_clicks"),
                  Input({"type": "nt-filter", "table": MATCH}, "value"),
                  State({"type": "nt-sort-state", "table": MATCH}, "data"))
    def _table(_ready: Any, _sorts: Any, text: Any, sort: Any) -> tuple[Any, Any]:
        model = state.model
        name = str(dash.ctx.outputs_list[0]["id"]["table"])
        if name not in layout.TABLES:
            raise dash.exceptions.PreventUpdate
        if model is None or model.analysis is None:
            return layout.table_rows(name, []), no_update
        columns = [c for c, _ in layout.TABLES[name]]
        if not (isinstance(sort, dict) and sort.get("column") in columns):
            sort = None
        trigger = dash.ctx.triggered_id
        if isinstance(trigger, dict) and trigger.get("type") == "nt-sort" and trigger.get("column") in columns:
            column = trigger["column"]
            desc = not (sort is not None and sort.get("column") == column and sort.get("desc"))
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
                  Input({"type": "nt-flow", "event": ALL}, "n_clicks"),
                  Input({"type": "nt-hit", "event": ALL}, "n_clicks"), State("nt-view", "data"),
                  prevent_initial_call=True)
    def _navigate(click: Any, _rows: Any, _flows: Any, _hits: Any, view: Any) -> tuple[Any, Any]:
        trigger = dash.ctx.triggered_id
        if isinstance(trigger, dict) and not (dash.ctx.triggered and dash.ctx.triggered[0].get("value")):
            return no_update, no_update  # rows or buttons just drawn, not clicked
        return on_navigate(state.require(), trigger, click, view)

    @app.callback(Output("nt-selected", "data", allow_duplicate=True), Output("nt-goto", "data", allow_duplicate=True),
                  Input("nt-url", "search"), State("nt-view", "data"), prevent_initial_call="initial_duplicate")
    def _url(search: Any, view: Any) -> tuple[Any, Any]:
        return on_url(state.require(), search, view)

    @app.callback(Output("nt-search-results", "children"), Output("nt-selected", "data", allow_duplicate=True),
                  Output("nt-goto", "data", allow_duplicate=True),
                  Input("nt-search", "value"), Input("nt-search", "n_submit"),
                  State("nt-selected", "data"), State("nt-view", "data"), prevent_initial_call=True)
    def _search(text: Any, _submit: Any, selected: Any, view: Any) -> tuple[Any, Any, Any]:
        submitted = "nt-search.n_submit" in dash.ctx.triggered_prop_ids
        return on_search(state.require(), text, submitted, selected, view)

    @app.callback(Output("nt-goto", "data", allow_duplicate=True), Input("nt-fit", "n_clicks"),
                  State("nt-selected", "data"), prevent_initial_call=True)
    def _fit(_n: Any, selected: Any) -> Any:
        return on_fit(state.require(), selected)

    @app.callback(Output("nt-selected", "data", allow_duplicate=True), Output("nt-goto", "data", allow_duplicate=True),
                  Input("nt-follow-next", "n_clicks"), Input("nt-follow-prev", "n_clicks"),
                  State("nt-selected", "data"), State("nt-view", "data"), prevent_initial_call=True)
    def _follow(_next: Any, _prev: Any, selected: Any, view: Any) -> tuple[Any, Any]:
        which = "next" if dash.ctx.triggered_id == "nt-follow-next" else "prev"
        return on_follow(state.require(), selected, which, view)

    @app.callback(Output("nt-timeline", "figure"), Output("nt-view", "data"),
                  Output("nt-timeline-status", "children"),
                  Input("nt-zoom", "data"), Input("nt-goto", "data"), Input("nt-reset", "n_clicks"),
                  Input("nt-focus", "n_clicks"), Input("nt-groups", "value"), Input("nt-depth", "value"),
                  Input("nt-python", "value"), Input("nt-highlight", "data"),
                  Input("nt-selected", "data"), Input("nt-analysis-ready", "data"), Input("nt-viewport", "data"),
                  State("nt-view", "data"), prevent_initial_call=True)
    def _timeline(relayout: Any, goto: Any, _reset: Any, _focus: Any, groups: Any, depth: Any, python: Any,
                  highlight: Any, selected: Any, _ready: Any, viewport: Any, view: Any) -> tuple[Any, Any, Any]:
        fired = {str(key).split(".", 1)[0] for key in dash.ctx.triggered_prop_ids}
        # A table row sets the selection and the window at once: the window wins over "redraw".
        trigger = next((t for t in ("nt-zoom", "nt-goto", "nt-reset", "nt-focus") if t in fired),
                       dash.ctx.triggered_id)
        trigger = "nt-timeline" if trigger == "nt-zoom" else trigger  # a zoom or pan of the timeline
        return on_timeline(state.require(), trigger, relayout, goto, view, expanded=groups, depth=depth,
                           python=python, highlight=highlight, selected=selected, viewport=viewport)

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
        return on_frame_click(state.require(), state.reader, trigger,
                              [item["id"]["frame"] for item in dash.ctx.outputs_list[1]])

    app.clientside_callback(  # type: ignore[no-untyped-call]
        VIEWPORT_JS, Output("nt-viewport", "data"), Input("nt-timeline", "id"),
    )
    app.clientside_callback(  # type: ignore[no-untyped-call]
        ZOOM_JS, Output("nt-zoom", "data"), Input("nt-timeline", "relayoutData"), prevent_initial_call=True,
    )
    app.clientside_callback(  # type: ignore[no-untyped-call]
        URL_JS, Output("nt-link", "value"), Input("nt-view", "data"),
    )
    app.clientside_callback(  # type: ignore[no-untyped-call]
        CARRY_JS, Output("nt-carry", "data"), Input("nt-view", "data"), Input("nt-groups", "value"),
        Input("nt-python", "value"), Input("nt-depth", "value"), Input("nt-selected", "data"),
        State("nt-carry", "data"), prevent_initial_call=True,
    )
    app.clientside_callback(  # type: ignore[no-untyped-call]
        COPY_JS, Output("nt-copy", "children"), Input("nt-copy", "n_clicks"), prevent_initial_call=True,
    )
    app.clientside_callback(  # type: ignore[no-untyped-call]
        PANEL_JS, Output("nt-side", "className"), Output("nt-panels", "children"),
        Input("nt-panels", "n_clicks"), prevent_initial_call=True,
    )


# -- in the browser ------------------------------------------------------------------------------

# The window size, and again (debounced) whenever it changes: the timeline refits its width and height.
VIEWPORT_JS = """
function(_) {
  const size = () => ({w: window.innerWidth, h: window.innerHeight});
  if (!window.ntResize) {
    window.ntResize = true;
    let timer = null;
    window.addEventListener('resize', () => {
      clearTimeout(timer);
      timer = setTimeout(() => dash_clientside.set_props('nt-viewport', {data: size()}), 250);
    });
    document.addEventListener('keydown', ntKey);
  }
  return size();
}
"""

# Only relayouts of the x axis reach the server (as the zoom store, stamped so that a repeat fires too).
# Plotly also reports resizes ({"autosize": true}); sent on, such a call, newer, would take the place of
# a zoom still in flight (Dash keeps the answer of a callback's newest call only), and the zoomed window
# would keep the data of the window before it.
X_RELAYOUT = "r && Object.keys(r).some(k => k.startsWith('xaxis.'))"
ZOOM_JS = """
function(r) {
  if (!(""" + X_RELAYOUT + """)) return dash_clientside.no_update;
  window.ntZooms = (window.ntZooms || 0) + 1;
  return Object.assign({'nt.zoom': window.ntZooms}, r);
}
"""

# The page URL follows the view (history.replaceState: no reload, no history entry per zoom).
URL_JS = """
function(view) {
  if (!view || !view.query) return window.dash_clientside.no_update;
  window.history.replaceState(null, '', window.location.pathname + view.query);
  return window.location.href;
}
"""

# What the user chose, kept outside the page (nt-carry, in the root layout) so that the page replacing the
# preview can open on it (``chosen``). The groups only once a box was clicked: the preview opens them all
# folded, the full page with its own default unless the user chose.
CARRY_JS = """
function(view, groups, python, depth, selected, carry) {
  const kept = Object.assign({}, carry || {}, {view: view, python: python, depth: depth, selected: selected});
  const ctx = window.dash_clientside.callback_context;
  if (ctx.triggered.some(t => t.prop_id === 'nt-groups.value')) kept.groups = groups;
  return kept;
}
"""

COPY_JS = """
function(_) {
  const link = window.location.href;
  const box = document.getElementById('nt-link');
  if (box) { box.value = link; box.select(); }
  try { navigator.clipboard.writeText(link); } catch (e) {}
  try { document.execCommand('copy'); } catch (e) {}
  return 'Link copied';
}
"""

PANEL_JS = """
function(n) {
  const hidden = n % 2 === 1;
  setTimeout(() => window.dispatchEvent(new Event('resize')), 50);
  return [hidden ? 'nt-col-side nt-hidden' : 'nt-col-side', hidden ? 'Show details ◀' : 'Hide details ▶'];
}
"""
