"""The viewer's Compile tab: the ``compile`` section (analysis/compile.py) as a panel.

    analysis done ──► on_ready ──► nt-compile: the summary line, one row per compile attempt (frame, compile id,
                                   status, time, cache, why it recompiled or failed), the graph breaks, the
                                   compiled code run (regions, guard checks) and the recompile-limit hits
    a compile row ──► on_compile ──► nt-selected + nt-goto: its compile range selected on the timeline
    a source link ──► on_source ──► nt-source: the lines of that file:line (the source panel's own reader)

A compile attempt is clickable where the trace holds its range: the outermost ``dynamo`` range whose
``dynamo_data`` annotation names its compile id (of its rank). Compile ids and reasons come from the compile
logs beside the trace when there are any (docs/compile.md), else from the trace's own ranges.
"""

from __future__ import annotations

from typing import Any, Protocol

import dash
from dash import ALL, Input, Output, State, html, no_update

from neurontrace import units
from neurontrace.analysis.compile import SECTION, CompileReport, kineto_rows, runtime_text
from neurontrace.app import callbacks, layout
from neurontrace.app.inputs import as_int
from neurontrace.app.model import ViewModel

MAX_ROWS = 200  # compile attempts listed
MATCH_NS = 1_000_000_000  # a logged compile and the trace's range of it start at most this far apart


class PageState(Protocol):
    """What the panel reads of the server's state (``callbacks.PageState``)."""

    reader: Any

    def require(self) -> ViewModel: ...


def report_of(model: ViewModel) -> CompileReport | None:
    rep = model.analysis.diagnosis.sections.get(SECTION.key) if model.analysis is not None else None
    return rep if isinstance(rep, CompileReport) else None


def attempts(model: ViewModel) -> list[dict[str, Any]]:
    """One row per compile attempt, in the report's order, with the event id of its range in the trace
    (None where the trace holds none: a compile before the profile began, or logs of rank-less ranges)."""
    rep = report_of(model)
    if rep is None:
        return []
    ranges = [r for r in kineto_rows(model.trace) if r.get("compile_id")]
    out = []
    for f in rep.frames:
        for c in f.compiles:
            eid = _range_of(ranges, f.rank, c)
            out.append({"frame_id": f.frame_id, "rank": f.rank, "function": f.function, "source": f.source,
                        "compile_id": c.get("compile_id"), "status": c.get("status"), "dur_ns": c.get("dur_ns"),
                        "cache": c.get("cache"), "why": c.get("recompile_reason") or (
                            f"{c.get('fail_type') or ''} {c.get('fail_reason') or ''}".strip() or None),
                        "event_id": eid})
    return out[:MAX_ROWS]


def _range_of(ranges: list[dict[str, Any]], rank: int | None, c: dict[str, Any]) -> int | None:
    """The event id of the trace's range of compile ``c``: the same compile id (and rank, where both name one)
    starting within MATCH_NS of it (Dynamo's logs and Kineto share the host's clock); a compile id seen again
    after torch._dynamo.reset() is another compile. Without a start, the only range of that id."""
    same = [r for r in ranges if r["compile_id"] == c.get("compile_id")
            and (rank is None or r.get("rank") is None or r["rank"] == rank)]
    start = c.get("start_ns")
    if start is None:
        return int(same[0]["event_id"]) if len(same) == 1 else None
    near = min(same, key=lambda r: abs(int(r["start_ns"]) - int(start)), default=None)
    if near is None or abs(int(near["start_ns"]) - int(start)) > MATCH_NS:
        return None
    return int(near["event_id"])


def sources(model: ViewModel) -> list[str]:
    """Every ``file:line`` the panel links: the frames' and the graph breaks', in the panel's order."""
    rep = report_of(model)
    if rep is None:
        return []
    found: list[str] = []
    for s in [f.source for f in rep.frames] + [g.get("source") for f in rep.frames for g in f.graph_breaks]:
        if s and s not in found:
            found.append(str(s))
    return found


def _link(model_sources: list[str], source: str | None) -> Any:
    if not source or source not in model_sources:
        return source or "?"
    return html.Button(source, id={"type": "nt-compile-src", "index": model_sources.index(source)}, n_clicks=0,
                       className="nt-frame", title=f"show the lines of {source}")


def content(model: ViewModel) -> list[Any]:
    rep = report_of(model)
    if rep is None or not (rep.frames or rep.regions or rep.neuron or rep.warnings):
        return [html.Div("Nothing compiled in this trace, and no compile log beside it (docs/compile.md).",
                         className="nt-empty")]
    links = sources(model)
    head = html.Tr([html.Th(c) for c in ("frame", "function", "compile", "status", "time", "cache",
                                         "recompiled or failed because")])
    body = []
    for i, a in enumerate(attempts(model)):
        cid: Any = a["compile_id"] or "?"
        if a["event_id"] is not None:
            cid = html.Button(cid, id={"type": "nt-compile-row", "index": i}, n_clicks=0, className="nt-hit",
                              title="select this compile on the timeline")
        body.append(html.Tr([html.Td(str(a["frame_id"]) + (f" (rank {a['rank']})" if a["rank"] is not None else "")),
                             html.Td([a["function"] or "?", " ", _link(links, a["source"])]), html.Td(cid),
                             html.Td(a["status"] or ""), html.Td(units.duration(a["dur_ns"])),
                             html.Td(a["cache"] or ""), html.Td((a["why"] or "")[:300])]))
    breaks = [html.Li([_link(links, g.get("source")), f": {g.get('reason') or '?'}"])
              for f in rep.frames for g in f.graph_breaks]
    limits = [html.Li(f"{lim.get('function')} ({lim.get('source')}) hit {lim.get('reason')}: it runs eagerly from "
                      "then on") for lim in rep.recompile_limits]
    summary = (f"compile {units.duration(rep.compile_ns)}: {sum(len(f.compiles) for f in rep.frames)} attempt(s) of "
               f"{len(rep.frames)} frame(s), {rep.recompiles} recompile(s), {rep.graph_breaks} graph break(s), cache "
               f"{rep.cache_hits} hit(s) / {rep.cache_misses} miss(es), {rep.failed} failed (from "
               f"{', '.join(rep.evidence) or 'the trace'})")
    out: list[Any] = [html.B(summary, id="nt-compile-summary")]
    if body:
        out += [html.Div("Click a compile id to select its range on the timeline, a file:line to show its lines.",
                         className="nt-src-note"),
                html.Table(className="nt-table", id="nt-compile-table", children=[html.Thead(head), html.Tbody(body)])]
    if breaks:
        out += [html.B("Graph breaks"), html.Ul(breaks, id="nt-compile-breaks")]
    if limits:
        out += [html.B("Recompile limit"), html.Ul(limits)]
    ran = runtime_text(rep)
    if ran:
        out += [html.B("The compiled code running"), html.Pre("\n".join(ran), className="nt-pre nt-report-lines")]
    out += [html.Div(w, className="nt-src-note") for w in rep.warnings]
    return out


def on_compile(model: ViewModel, trigger: Any, clicks: Any, view: Any) -> tuple[Any, Any]:
    """(selected event, window to go to) after a click on a compile id."""
    rows = attempts(model)
    index = as_int(trigger.get("index"), 0, len(rows) - 1) if isinstance(trigger, dict) else None
    if index is None or not _clicked(clicks):
        return no_update, no_update
    eid = rows[index]["event_id"]
    if eid is None or model.index.position(int(eid)) is None:
        return no_update, no_update
    return int(eid), callbacks.goto_event(model, int(eid), view)


def on_source(model: ViewModel, reader: Any, trigger: Any, clicks: Any) -> Any:
    """The source panel showing the lines of a clicked file:line."""
    found = sources(model)
    index = as_int(trigger.get("index"), 0, len(found) - 1) if isinstance(trigger, dict) else None
    if index is None or not _clicked(clicks):
        return no_update
    file, _, line = found[index].rpartition(":")
    number = int(line) if line.isdigit() else None
    file = file if number is not None else found[index]
    return [html.Div(f"Source of {found[index]} (from the Compile tab):", className="nt-src-note"),
            html.Div(id="nt-snippet", children=layout.snippet(reader.read(file, number), found[index]))]


def _clicked(clicks: Any) -> bool:
    """A real click: some pattern button's n_clicks is a positive number (Dash also fires on creation)."""
    values = clicks if isinstance(clicks, list) else [clicks]
    return any(as_int(v, 1) is not None for v in values)


def register(app: dash.Dash, state: PageState) -> None:
    @app.callback(Output("nt-compile", "children"), Input("nt-analysis-ready", "data"))
    def _ready(_ready: Any) -> list[Any]:
        model = state.require()
        if model.analysis is None:
            return layout.compile_pending()
        return content(model)

    @app.callback(Output("nt-selected", "data", allow_duplicate=True), Output("nt-goto", "data", allow_duplicate=True),
                  Input({"type": "nt-compile-row", "index": ALL}, "n_clicks"), State("nt-view", "data"),
                  prevent_initial_call=True)
    def _compile(clicks: Any, view: Any) -> tuple[Any, Any]:
        return on_compile(state.require(), dash.ctx.triggered_id, clicks, view)

    @app.callback(Output("nt-source", "children", allow_duplicate=True),
                  Input({"type": "nt-compile-src", "index": ALL}, "n_clicks"), prevent_initial_call=True)
    def _source(clicks: Any) -> Any:
        return on_source(state.require(), state.reader, dash.ctx.triggered_id, clicks)


__all__ = ["attempts", "content", "on_compile", "on_source", "register", "sources"]
