"""The page: header, summary strip, timeline with its controls, details and source panels, tables.

Components only; what they do is in ``callbacks.py``. Component ids start with ``nt-``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dash import dcc, html

from neurontrace.app import figures
from neurontrace.app.critical_path import panel as critical_path_panel
from neurontrace.app.model import ViewModel
from neurontrace.app.palette import CATEGORY_COLORS, CAUSE_COLORS, CAUSE_LABELS
from neurontrace.app.source import OK, REFUSED, Snippet
from neurontrace.app.tracks import PYTHON

DEFAULT_DEPTH = 10
DEPTHS = (2, 4, 6, 10, 16, 32, 1000)
MAX_EXPANDED_ROWS = 80  # beyond this many rows at first sight, host processes start collapsed

# The page's styles (assets/neurontrace.css), its keys (assets/keys.js: W/S zoom, A/D pan, F fit, ] and [
# follow a flow, / search) and its HTML index (assets/index.html) are files of the assets folder, which
# Dash serves itself (``assets_folder=ASSETS``: every .css and .js file there is linked from the page).
ASSETS = Path(__file__).parent / "assets"
INDEX = (ASSETS / "index.html").read_text(encoding="utf-8")

KEYS_NOTE = "Keys: W/S zoom, A/D pan, F fit the selected event, ] / [ follow its flow out / in, / search."


def key_buttons() -> list[Any]:
    """The hidden buttons the keys click (F, ], [), on every page that has a selection."""
    return [html.Button(id=i, style={"display": "none"}) for i in ("nt-fit", "nt-follow-next", "nt-follow-prev")]


GRAPH_CONFIG: Any = {
    "displaylogo": False, "scrollZoom": True, "doubleClick": "reset",
    "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d", "toImage", "zoomIn2d", "zoomOut2d",
                               "toggleSpikelines", "hoverClosestCartesian", "hoverCompareCartesian",
                               "sendChartToCloud", "sendDataToCloud", "editInChartStudio"],  # local only: no uploads
}


def header(title: str, badges: list[tuple[str, bool]], headline: str = "") -> html.Div:
    return html.Div(className="nt-header", children=[
        html.Div(className="nt-logo", children=["neuron", html.Span("trace")]),
        html.Div(title, className="nt-title", id="nt-trace-title"),
        # diagnose's verdict line (analysis/headline.py), filled in when the analysis is done
        html.Div(headline, className="nt-headline", id="nt-headline"),
        html.Div(className="nt-spacer"),
        html.Div([html.Span(text, className="nt-badge warn" if warn else "nt-badge") for text, warn in badges]),
    ])


def loading(path: str, stage: str, fraction: float | None) -> html.Div:
    bar = html.Div(className="nt-bar", children=html.Div(style={"width": f"{100 * (fraction or 0.02):.0f}%"}))
    return html.Div([
        header(path, []),
        html.Div(className="nt-loading", id="nt-loading", children=[
            html.H2("Loading trace…", style={"fontWeight": 600}),
            html.Div(path, className="nt-src-path"),
            bar,
            html.Div(stage, id="nt-loading-stage", className="nt-src-note"),
        ]),
    ])


def error(path: str, message: str) -> html.Div:
    return html.Div([
        header(path, [("failed to load", True)]),
        html.Div(className="nt-error", id="nt-load-error", children=[
            html.H2("This trace could not be loaded", style={"marginTop": 0}),
            html.Pre(message),
            html.P("Check the path and format (`neurontrace info PATH` says what was detected), "
                   "then start the viewer again.", className="nt-src-note"),
        ]),
    ])


def default_expanded(model: ViewModel) -> list[str]:
    """Every group open unless that makes the page too tall; then devices open, processes closed."""
    ix = model.index
    rows = sum(1 + sum(min(ix.tracks[t].depth, DEFAULT_DEPTH) for t in g.tracks) for g in ix.groups)
    counters = [figures.COUNTERS] if model.counters else []  # counter rows open (a handful at most)
    if rows <= MAX_EXPANDED_ROWS:
        return [g.key for g in ix.groups] + counters
    out = []
    budget = MAX_EXPANDED_ROWS
    for g in sorted(ix.groups, key=lambda g: g.side != "device"):
        size = sum(min(ix.tracks[t].depth, DEFAULT_DEPTH) for t in g.tracks)
        if size <= budget:
            out.append(g.key)
            budget -= size
    return [*out, *counters]


def legend(model: ViewModel) -> list[Any]:
    """One chip per colour: the event categories present, then the stall causes not already listed
    (the compute cause and the compute category are one colour and one entry)."""
    entries: dict[str, list[str]] = {}
    for c in model.index.categories:
        entries.setdefault(CATEGORY_COLORS[c], []).append(c)
    causes: dict[str, list[str]] = {}
    for c in CAUSE_COLORS:
        label = CAUSE_LABELS[c]
        if CAUSE_COLORS[c] in entries or label.rstrip("s") in model.index.categories:
            continue
        causes.setdefault(CAUSE_COLORS[c], []).append(label)

    def chips(group: dict[str, list[str]]) -> list[Any]:
        return [html.Span([html.Span(className="nt-chip", style={"background": color}), " / ".join(names)],
                          className="nt-legend-item") for color, names in group.items()]

    return [*chips(entries), *([html.Span("stall causes:", className="nt-legend-head"), *chips(causes)]
                               if causes else [])]


def main(model: ViewModel, first: figures.Drawn, expanded: list[str], source_roots: list[str],
         view: dict[str, Any], selected: int | None = None, *, python: bool = False,
         depth: int = DEFAULT_DEPTH) -> html.Div:
    ix = model.index
    badges = [(model.trace.meta("format", "trace") or "trace", False), (f"{ix.n_events:,} events", False)]
    if model.synthetic:
        badges.append(("SYNTHETIC", True))
    synthetic = [html.Div("SYNTHETIC profile: generated from a scenario to the documented format, not measured on "
                          "hardware.", className="nt-synthetic")] if model.synthetic else []
    has_python = any(t.layer == PYTHON and not t.empty for t in ix.tracks)
    return html.Div(className="nt-app", children=[
        header(model.title, badges),
        dcc.Location(id="nt-url", refresh=False),
        html.Div(className="nt-main", children=[
            *synthetic,
            html.Div(className="nt-card nt-summary-card", children=[
                html.Div(className="nt-summary-head", children=[
                    html.H3("Stall attribution per device", style={"margin": 0}),
                    html.Span("click a cause to highlight where it holds", className="nt-status"),
                    html.Div(id="nt-analysis-status", className="nt-src-note"),
                ]),
                dcc.Graph(id="nt-summary", figure=figures.summary(model), config={"displayModeBar": False},
                          style={"height": "auto"}),
            ]),
            html.Div(className="nt-row", children=[
                html.Div(className="nt-col-main", children=[html.Div(className="nt-card", children=[
                    html.Div(className="nt-toolbar", children=[
                        html.H3("Timeline", style={"margin": 0}),
                        html.Button("Analysis window", id="nt-focus", className="nt-btn",
                                    title="zoom to the busiest device's analysis window (where the page opens)"),
                        html.Button("Whole trace", id="nt-reset", className="nt-btn"),
                        html.Button("Clear highlight", id="nt-clear-highlight", className="nt-btn"),
                        critical_path_panel(),
                        dcc.Checklist(id="nt-python", options=[{"label": " Python frames", "value": "python",
                                                                "disabled": not has_python}],
                                      value=["python"] if python else [], inline=True, className="nt-groups"),
                        html.Label("levels", title="Python frame levels drawn, innermost first"),
                        dcc.Dropdown(id="nt-depth", options=[{"label": "all" if d >= 1000 else str(d), "value": d}
                                                             for d in DEPTHS],
                                     value=depth, clearable=False, searchable=False,
                                     style={"width": "70px", "fontSize": "12px"}),
                        dcc.Input(id="nt-search", type="search", debounce=False, placeholder="search events (text or /regex/)",
                                  className="nt-filter nt-search", n_submit=0),
                        html.Button("Copy link", id="nt-copy", className="nt-btn",
                                    title="copy a link to this view (window and selected event)"),
                        dcc.Input(id="nt-link", type="text", readOnly=True, className="nt-link", value=""),
                        html.Button("Hide details ▶", id="nt-panels", className="nt-btn", n_clicks=0),
                    ]),
                    html.Div(className="nt-toolbar", children=[
                        html.Label("groups"),
                        dcc.Checklist(id="nt-groups", className="nt-groups",
                                      options=[{"label": g.label, "value": g.key} for g in ix.groups
                                               if any(not ix.tracks[t].empty for t in g.tracks)]
                                      + ([{"label": "counters", "value": figures.COUNTERS}] if model.counters else []),
                                      value=expanded, inline=True),
                        html.Span(first.status, id="nt-timeline-status", className="nt-status"),
                    ]),
                    html.Div(legend(model), className="nt-legend", id="nt-legend"),
                    html.Div(id="nt-search-results"),
                    html.Div(className="nt-scroll", children=dcc.Graph(
                        id="nt-timeline", figure=first.figure, config=GRAPH_CONFIG, clear_on_unhover=True)),
                    html.Div(className="nt-src-note", children=(
                        f"{KEYS_NOTE} Times are from the "
                        "analysis window start; an event's details also give the trace's own ns.")),
                ])]),
                html.Div(id="nt-side", className="nt-col-side", children=[
                    html.Div(className="nt-card", children=[
                        html.H3("Event"),
                        html.Div(id="nt-details", children=html.Div(
                            "Click an event on the timeline (zoom in until single events show).",
                            className="nt-empty")),
                    ]),
                    html.Div(className="nt-card", children=[
                        html.H3("Source"),
                        html.Div(id="nt-source", children=html.Div(
                            f"Source roots: {', '.join(source_roots) or '(none)'}", className="nt-empty")),
                    ]),
                ]),
            ]),
            html.Div(className="nt-card", children=[
                dcc.Tabs(id="nt-tabs", className="nt-tabs", value="stalls", children=[
                    dcc.Tab(label="Top stalls", value="stalls", children=[_table("stalls")]),
                    dcc.Tab(label="Top ops & kernels", value="ops", children=[_table("ops")]),
                    dcc.Tab(label="Fallback ops", value="fallback", children=[_table("fallback")]),
                    dcc.Tab(label="Findings", value="findings", children=[html.Div(id="nt-findings")]),
                    dcc.Tab(label="Report", value="report", children=[html.Div(id="nt-report")]),
                    dcc.Tab(label="Compile", value="compile",  # app/compile_panel.py
                            children=[html.Div(id="nt-compile", children=compile_pending())]),
                    dcc.Tab(label="Ops & roofline", value="roofline", children=[ops_panel()]),
                ]),
            ]),
        ]),
        *key_buttons(),
        dcc.Store(id="nt-zoom", data=None),
        dcc.Store(id="nt-view", data=view),
        dcc.Store(id="nt-selected", data=selected),
        dcc.Store(id="nt-highlight", data=None),
        dcc.Store(id="nt-goto", data=None),
        dcc.Store(id="nt-viewport", data=None),
        dcc.Store(id="nt-analysis-ready", data=model.analysis is not None),
        dcc.Interval(id="nt-analysis-poll", interval=500, disabled=model.analysis is not None),
    ])


def search_results(hits: list[tuple[int, str, int, int]], note: str, total: int,
                   sides: list[str] | None = None) -> list[Any]:
    """The search box's results: (event id, name, start from the time origin, duration), in time order;
    on the two-run page each hit also names its side ("a" or "b", in ``sides``)."""
    if not note:
        return []
    more = f" (first {len(hits)} listed; Enter steps through all)" if total > len(hits) else \
        (" (Enter steps through them)" if hits else "")

    def button(k: int, eid: int, name: str, start: int, dur: int) -> html.Button:
        side = sides[k] if sides else None
        key: dict[str, Any] = {"type": "nt-hit", "event": eid} | ({"side": side} if side else {})
        return html.Button(f"{side.upper() + '  ' if side else ''}{_fmt_ns(start)}  {name}  ({_fmt_ns(dur)})",
                           title=name, n_clicks=0, id=key, className="nt-hit")

    return [html.Div(note + more, className="nt-src-note", id="nt-search-note"),
            html.Div(className="nt-hits", children=[button(k, *hit) for k, hit in enumerate(hits)])] \
        if hits or total else [html.Div(note, className="nt-src-note", id="nt-search-note")]


STALL_COLUMNS = [("device", "device"), ("cause", "cause"), ("detail", "detail"), ("start_ms", "start (ms)"),
                 ("dur_ms", "duration (ms)"), ("source", "source line"), ("evidence", "evidence")]
OP_COLUMNS = [("name", "name"), ("side", "side"), ("category", "category"), ("calls", "calls"),
              ("total_ms", "total (ms)"), ("share", "% of trace"), ("mean_us", "mean (µs)"), ("max_us", "max (µs)")]
FALLBACK_COLUMNS = [("name", "op"), ("calls", "calls"), ("host_ms", "host (ms)"),
                    ("device_idle_ms", "device idle (ms)"), ("found_by", "found by"), ("source", "source line")]
# The columns of `neurontrace ops` (docs/ops.md); rows come from neurontrace/app/roofline.py.
ROOFLINE_COLUMNS = [("op", "op"), ("op_class", "op class"), ("kernel_class", "kernel class"), ("kernels", "kernels"),
                    ("device_ms", "device time (ms)"), ("gflop", "GFLOP"), ("mb", "MB"), ("tflops_per_s", "TFLOP/s"),
                    ("tb_per_s", "TB/s"), ("intensity", "FLOP/byte"), ("pct_of_peak", "% of peak"),
                    ("bound", "bound")]
TABLES = {"stalls": STALL_COLUMNS, "ops": OP_COLUMNS, "fallback": FALLBACK_COLUMNS, "roofline": ROOFLINE_COLUMNS}
EMPTY = {"stalls": "No stalls: the device computed through the whole window (or the analysis is still running).",
         "ops": "No framework ops or device kernels in this trace.",
         "fallback": "No host fallback found (name ops with --fallback-ops, or see docs/diagnose.md).",
         "roofline": "No kernels (or, in a CPU trace, no ops with a FLOP formula) in this range."}
MAX_TABLE_ROWS = 200


def _table(name: str, kind: str = "nt") -> html.Div:
    """A sortable, filterable table; its rows (``table_rows``) are clickable. ``kind`` prefixes the ids'
    types, so a table with callbacks of its own (the ops panel's, ``nt-roof``) is not matched by the others'."""
    head = html.Tr([html.Th(html.Button(label, id={"type": f"{kind}-sort", "table": name, "column": col},
                                        className="nt-th", n_clicks=0)) for col, label in TABLES[name]])
    return html.Div([
        dcc.Input(id={"type": f"{kind}-filter", "table": name}, type="text", debounce=True, placeholder="filter rows…",
                  className="nt-filter"),
        html.Div(className="nt-table-wrap", children=html.Table(className="nt-table", children=[
            html.Thead(head), html.Tbody(id={"type": f"{kind}-tbody", "table": name}),
        ])),
        dcc.Store(id={"type": f"{kind}-sort-state", "table": name}, data=None),
    ])


ROOFLINE_CONFIG: Any = {**GRAPH_CONFIG, "scrollZoom": False}
RANGES = [{"label": " the view (the analysis window until you zoom)", "value": "view"},
          {"label": " the analysis window", "value": "window"}]


def ops_panel() -> html.Div:
    """The ops tab: which device and range, the roofline, and the per-op table of ``neurontrace ops``."""
    return html.Div([
        html.Div(className="nt-toolbar", style={"marginTop": "8px"}, children=[
            html.Label("device"),
            dcc.Dropdown(id="nt-roof-device", options=[], value=None, clearable=False, searchable=False,
                         style={"width": "220px", "fontSize": "12px"}),
            html.Label("ops in"),
            dcc.RadioItems(id="nt-roof-range", options=RANGES, value="view", inline=True, className="nt-groups"),
            html.Span(id="nt-roof-status", className="nt-status"),
        ]),
        html.Div("Click a point or a row to outline that op's kernels on the timeline (Clear highlight clears it).",
                 className="nt-src-note"),
        dcc.Graph(id="nt-roof-graph", config=ROOFLINE_CONFIG, style={"height": "420px"}),
        _table("roofline", "nt-roof"),
        dcc.Store(id="nt-roof-drawn", data=None),
    ])


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4f}".rstrip("0").rstrip(".") if abs(value) < 1000 else f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "" if value is None else str(value)


def table_rows(name: str, rows: list[dict[str, Any]], *, sort: dict[str, Any] | None = None,
               text: str | None = None, kind: str = "nt") -> list[Any]:
    """Rows of table ``name`` (sorted by ``sort``, kept if a cell contains ``text``); each row's id
    carries its position in ``rows``, so a click names the row whatever the order on screen."""
    columns = [c for c, _ in TABLES[name]]
    indexed = list(enumerate(rows))
    if text:
        needle = text.lower()
        indexed = [(i, r) for i, r in indexed if any(needle in str(r.get(c, "")).lower() for c in columns)]
    if sort and sort.get("column") in columns:
        col = sort["column"]
        # Numbers sort as numbers; empty cells (None: unknown) go last in either direction.
        numeric = all(isinstance(r.get(col), (int, float)) for _, r in indexed if r.get(col) is not None)
        empty = [ir for ir in indexed if ir[1].get(col) is None] if numeric else []

        def by(ir: tuple[int, dict[str, Any]]) -> Any:
            return ir[1].get(col) if numeric else str(ir[1].get(col, "")).lower()

        indexed = sorted((ir for ir in indexed if not (numeric and ir[1].get(col) is None)), key=by,
                         reverse=bool(sort.get("desc"))) + empty
    if not indexed:
        return [html.Tr(html.Td(EMPTY[name] if not text else "No row matches the filter.", colSpan=len(columns),
                                className="nt-empty"))]
    return [html.Tr([html.Td(_cell(r.get(c)), title=str(r.get(c, ""))) for c in columns],
                    id={"type": f"{kind}-row", "table": name, "index": i}, n_clicks=0, className="nt-tr")
            for i, r in indexed[:MAX_TABLE_ROWS]]


def findings(rows: list[dict[str, Any]]) -> list[Any]:
    if not rows:
        return [html.Div("No findings: nothing crossed a threshold (docs/diagnose.md lists them).",
                         className="nt-empty")]
    return [html.Div(className=f"nt-finding {f['severity']}", children=[
        html.Span(f["severity"], className="nt-sev"), html.B(f["title"]),
        html.P(f["evidence"]), html.P(["What to do: ", f["advice"]], className="nt-src-note"),
    ]) for f in rows]


def report(rows: list[dict[str, Any]]) -> list[Any]:
    """The Report tab: each section's title (and the device it is about) over its plain text lines, as
    ``diagnose`` prints them."""
    if not rows:
        return [html.Div("No section has anything to report for this trace (docs/diagnose.md lists them).",
                         className="nt-empty")]
    return [html.Div(className="nt-report-part", id={"type": "nt-report-part", "key": r["key"], "index": i},
                     children=[html.B(r["title"]), *([html.Span(f" · {r['device']}", className="nt-src-note")]
                                                     if r["device"] else []),
                               html.Pre("\n".join(r["lines"]), className="nt-pre nt-report-lines")])
            for i, r in enumerate(rows)]


def compile_pending() -> list[Any]:
    """The Compile tab before the analysis is done (app/compile_panel.py fills it)."""
    return [html.Div("The compile summary appears when the analysis is done.", className="nt-empty")]


def report_pending(error: str | None) -> list[Any]:
    """The Report tab while the analysis runs, or its failure in one line."""
    return [html.Div(error or "The report fills in when the analysis is done.", className="nt-empty")]


# -- details and source ------------------------------------------------------------------------


def _fmt_ns(ns: int | None) -> str:
    if ns is None:
        return "—"
    if abs(ns) >= 1_000_000:
        return f"{ns / 1e6:,.4f} ms"
    if abs(ns) >= 1_000:
        return f"{ns / 1e3:,.3f} µs"
    return f"{ns} ns"


def details(event: dict[str, Any], links: list[tuple[str, str, dict[str, Any] | None]], origin: int = 0,
            origin_name: str = "trace start") -> list[Any]:
    """The event's fields; its start from the page's time origin (``origin`` ns after the trace's first
    event, called ``origin_name``), as the x axis reads, and its timestamp on the trace's own clock."""
    where = (f"{event.get('device')} · {event.get('track')}" if event["side"] == "device"
             else f"{event.get('host') or '?'} · pid {event.get('pid')} · {event.get('track')}")
    kv: list[tuple[str, Any]] = [
        ("category", f"{event['category']} ({event.get('raw_category') or '—'})"),
        ("where", where),
        ("start", f"{_fmt_ns(event['rel_ns'] - origin)} from {origin_name}"),
        ("duration", _fmt_ns(event["dur_ns"])),
        ("timestamp", f"{event['ts_ns']} ns"),
        ("event id", str(event["event_id"])),
    ]
    for key, label in (("correlation", "correlation"), ("external_id", "external id"), ("bytes", "bytes"),
                       ("direction", "direction"), ("rank", "rank")):
        if event.get(key) is not None:
            kv.append((label, f"{event[key]:,}" if key == "bytes" else str(event[key])))
    args = event.get("args")
    args_text = json.dumps(args, indent=1, default=str) if args else ""
    if len(args_text) > 4000:
        args_text = args_text[:4000] + "\n…"
    flows = [html.Button(
        f"{'→' if direction == 'out' else '←'} {kind}: {other['name'] if other else '?'}"
        + (f" ({_fmt_ns(other['dur_ns'])})" if other else ""),
        id={"type": "nt-flow", "event": other["event_id"] if other else -1}, className="nt-flow", n_clicks=0)
        for direction, kind, other in links]
    return [
        html.Div(event["name"], className="nt-event-name", id="nt-event-name"),
        html.Div(className="nt-kv", children=[c for k, v in kv for c in (html.Div(k), html.Div(v))]),
        *([html.H3("Flows", style={"marginTop": "8px"}), *flows] if flows else []),
        *([html.Pre(args_text, className="nt-pre")] if args_text else []),
    ]


def source_panel(frames: list[tuple[int, str, bool]], selected: int | None, snippet: list[Any]) -> list[Any]:
    """The call stack (innermost first; ``frames`` are (frame id, label, is user code)) and the lines."""
    if not frames:
        return [html.Div("No source location recorded for this event (record with with_stack=True).",
                         className="nt-empty"), html.Div(id="nt-snippet")]
    return [
        html.Div("Call stack, innermost first (user code in bold); click a frame to show its lines:",
                 className="nt-src-note"),
        html.Div(id="nt-stack", className="nt-stack", children=[
            html.Button(label, title=label, id={"type": "nt-frame", "frame": fid}, n_clicks=0,
                        className=frame_class(fid == selected, user))
            for fid, label, user in frames]),
        html.Div(id="nt-snippet", children=snippet),
    ]


def frame_class(selected: bool, user: bool) -> str:
    return "nt-frame" + (" nt-frame-sel" if selected else "") + ("" if user else " nt-nonuser")


def snippet(s: Snippet, frame_text: str) -> list[Any]:
    head = html.Div(frame_text, className="nt-src-path", id="nt-src-location")
    if s.status == OK:
        lines = []
        for i, text in enumerate(s.lines):
            content: list[Any] = [html.Span(str(s.first_line + i), className="nt-ln"), text or " "]
            if s.first_line + i == s.line:
                lines.append(html.Div(content, className="nt-code-line nt-hl", id="nt-src-hl"))
            else:
                lines.append(html.Div(content, className="nt-code-line"))
        return [head, html.Div(s.message, className="nt-src-note"), html.Div(lines, className="nt-code")]
    css = "nt-refused" if s.status == REFUSED else "nt-src-note"
    return [head, html.Div(s.message, className=css, id="nt-src-status")]
