"""The viewer's server: load the trace in the background, serve the Dash app on the loopback.

:class:`ViewerState` holds what the page shows at any moment: loading progress, the parser's error
(one line, never a traceback), or the model. :func:`create_app` builds the Dash app around a state;
:class:`Server` binds it to a socket (production WSGI settings: threaded, no reloader, no request
log) and runs it; ``neurontrace view`` (``neurontrace/cli/view.py``) is a thin adapter over these.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import dash
import flask
import pandas as pd  # noqa: F401  (see below)
from dash import dcc, html
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from neurontrace import dataset, load
from neurontrace.app import (
    callbacks,
    compile_panel,
    critical_path,
    figures,
    index_store,
    layout,
    lod,
    roofline,
    tracks,
)
from neurontrace.app.model import MARKER_CATEGORIES, ViewModel
from neurontrace.app.preview import build as preview_index
from neurontrace.app.source import SourceReader
from neurontrace.errors import NeurontraceError, PortInUseError
from neurontrace.trace import Trace

LOADING, READY, FAILED = "loading", "ready", "error"
PREVIEW = "preview"  # the page shows the preview (app/preview.py) while the full index is built
PREVIEW_MIN_EVENTS = 1_000_000  # a smaller trace is indexed before its first page (a second or less)
# pandas is imported above on purpose: plotly's JSON encoder (Dash's response serializer) looks pandas
# up in sys.modules without importing it, so a request served while the loading thread is still
# importing pandas would see a half-initialized module. Importing it before any thread starts avoids that.


class ViewerState:
    """The trace being viewed and where its loading stands; shared by every callback."""

    def __init__(self, path: str, *, source_roots: Sequence[str | Path] = (".",), fallback_ops: Sequence[str] = (),
                 log: Callable[[str], None] | None = None) -> None:
        self.path = str(path)
        self.reader = SourceReader(source_roots)
        self.source_roots = [str(r) for r in self.reader.roots]
        self.fallback_ops = tuple(fallback_ops)
        self.status = LOADING
        self.stage = "starting"
        self.fraction: float | None = None
        self.error: str | None = None
        self.analysis_error: str | None = None
        self.model: ViewModel | None = None
        self.first_render_s: float | None = None
        self._log = log or (lambda _msg: None)
        self._lock = threading.Lock()
        self._page_cache: tuple[float, Any] | None = None

    # -- loading --------------------------------------------------------------------------------

    def progress(self, stage: str, done: int, total: int | None) -> None:
        self.stage = f"{stage}: {done:,} of {total:,}" if total else f"{stage}: {done:,}"
        self.fraction = min(1.0, done / total) if total else None

    def load(self, loader: Callable[..., Trace] = load, *, progress: Callable[[str, int, int | None], None]
             | None = None, analyse: bool = True) -> None:
        """Load, index and (unless ``analyse`` is false: the caller runs :meth:`analyse` later) analyse;
        every failure ends as a one-line message on the page."""
        t0 = time.perf_counter()

        def report(stage: str, done: int, total: int | None) -> None:
            self.progress(stage, done, total)
            if progress is not None:
                progress(stage, done, total)

        try:
            trace = loader(self.path, progress=report)
            self.stage, self.fraction = "indexing events", 1.0
            self._log(f"loaded {trace.num_events:,} events in {time.perf_counter() - t0:.1f} s; indexing")
            self.use(trace, preview=True)
        except NeurontraceError as exc:
            self.fail(str(exc))
            return
        except Exception as exc:  # a bug: the page says so in one line, the terminal gets the traceback
            traceback.print_exc(file=sys.stderr)
            self.fail(f"internal error while loading ({type(exc).__name__}: {exc}); please report it")
            return
        if analyse:
            self.analyse()

    def use(self, trace: Trace, *, preview: bool = False) -> ViewModel:
        """Serve ``trace`` (already loaded); the analysis is still to run (:meth:`analyse`). A dataset of one
        partition opens on the index stored beside its parts (``app/index_store.py``) when it indexes these
        tables; without one (a dataset written before, or streamed) the index built here is stored for next time.
        With ``preview``, a trace of ``PREVIEW_MIN_EVENTS`` or more first shows its preview (``app/preview.py``:
        every process and device as its header row, exactly as the full index draws them) while the full index
        is built; the page then redraws on it."""
        stored = _stored_index(self.path)
        index = None if stored is None else index_store.load(stored, index_store.key(trace))
        first = index
        if index is None and preview and trace.num_events >= PREVIEW_MIN_EVENTS:
            first = preview_index(trace, markers=MARKER_CATEGORIES)
        model = ViewModel.build(trace, title=self.path, fallback_ops=self.fallback_ops, index=first)
        model.compiles, model.compile_warnings = _compile_logs_beside(self.path)
        if first is not None and first is not index:  # the page draws the preview while the index is built
            with self._lock:
                self.model, self.status, self._page_cache = model, PREVIEW, None
            self._log(f"preview of {trace.num_events:,} events on {len(first.groups)} rows in "
                      f"{model.build_seconds:.2f} s; indexing")
            t0 = time.perf_counter()
            full = tracks.build(trace)
            lod.prepare(full, markers=MARKER_CATEGORIES)
            model.index = full
            model.build_seconds += time.perf_counter() - t0
        if stored is not None and index is None:
            threading.Thread(target=self._store, args=(model, stored), daemon=True).start()
        with self._lock:
            self.model = model
            self.status = READY
            self._page_cache = None
        how = "its stored index opened" if index is not None else "indexed"
        self._log(f"ready: {model.index.n_events:,} events on {len(model.index.tracks)} tracks "
                  f"({how} in {model.build_seconds:.2f} s)")
        return model

    def _store(self, model: ViewModel, where: Path) -> None:
        try:
            index_store.save(model.index, where, index_store.key(model.trace))
            self._log(f"stored the index in {where} (the next view of this dataset opens without building it)")
        except OSError as exc:  # a read-only dataset: the next view builds the index again
            self._log(f"index not stored in {where} ({exc.strerror or exc})")

    def analyse(self) -> None:
        model = self.model
        if model is None:
            return
        try:
            analysis = model.analyse()
            self._log(f"analysis done in {analysis.seconds:.1f} s")
        except NeurontraceError as exc:
            self.analysis_error = f"analysis failed: {exc}"
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            self.analysis_error = f"analysis failed (internal error {type(exc).__name__}: {exc}); please report it"
        with self._lock:
            self._page_cache = None

    def fail(self, message: str) -> None:
        self.error = message
        self.status = FAILED
        self._log(f"error: {message}" if message.startswith(self.path) else f"error: {self.path}: {message}")

    # -- what the page shows --------------------------------------------------------------------

    def require(self) -> ViewModel:
        if self.model is None:
            raise dash.exceptions.PreventUpdate
        return self.model

    def page(self, url_query: str = "", carry: Any = None) -> Any:
        """The page body for the current status (the main view is built once per analysis stage; a
        page URL naming a window, ``?start_ns=…&end_ns=…``, is drawn at that window instead, and the page
        replacing the preview where the user was on it: ``carry``, the page's ``nt-carry`` store)."""
        if self.status == FAILED:
            return layout.error(self.path, self.error or "unknown error")
        if self.status == LOADING or self.model is None:
            return layout.loading(self.path, self.stage, self.fraction)
        if self.status == PREVIEW:
            return main_page(self.model, self.source_roots, url_query, preview=True)
        if "start_ns=" in url_query or carry is not None:
            return main_page(self.model, self.source_roots, url_query, carry=carry)
        with self._lock:
            if self._page_cache is None:
                self._page_cache = (time.perf_counter(), main_page(self.model, self.source_roots))
            return self._page_cache[1]


def main_page(model: ViewModel, source_roots: list[str], url_query: str = "", *, preview: bool = False,
              carry: Any = None) -> Any:
    """Layout and first figure of the main view: what "first render" measures. The ``preview`` page (the
    index not built yet: app/preview.py) opens with every group folded to its header row; the page replacing
    it opens on what the user chose there (``carry``: ``callbacks.chosen``)."""
    kept = callbacks.chosen(model, carry)
    expanded = kept.expanded if kept.expanded is not None else [] if preview else layout.default_expanded(model)
    focus = callbacks.focus_view(model)  # the analysis window once known, else the whole trace
    window = focus or (0, model.index.span_ns)
    selected, goto = callbacks.on_url(model, url_query)
    selected = selected if isinstance(selected, int) else kept.selected
    auto = focus is None  # jump to the analysis window when it is known
    if isinstance(goto, dict):  # the page URL names a window: open there, and stay
        window, auto = callbacks.clamp(model, goto["t0"], goto["t1"]), False
    elif kept.window is not None:  # zoomed or panned on the preview: the same window, and stay
        window, auto = kept.window, False
    req = callbacks.request(model, window, expanded=expanded, selected=selected, depth=kept.depth,
                            python=["python"] if kept.python else [])
    first = figures.timeline(model, req)
    if preview:
        first = dataclasses.replace(first, status=f"indexing {model.trace.num_events:,} events: each process and "
                                    "device as its header row until its lanes are ready")
    view = {"t0": window[0], "t1": window[1], "origin": req.origin, "auto": auto,
            "query": callbacks.url_query(model, window, selected)}
    return layout.main(model, first, expanded, source_roots, view, selected, python=kept.python, depth=kept.depth)


def create_app(state: ViewerState, *, debug: bool = False) -> dash.Dash:
    """The Dash app showing ``state``; Dash is imported only here (``neurontrace`` never pulls it in)."""
    app = dash.Dash(
        # update_title=None turns the "Updating..." tab title off (documented; the stub says str only).
        __name__, title="neurontrace", update_title=cast(str, None), suppress_callback_exceptions=True,
        serve_locally=True, assets_folder=str(layout.ASSETS),
    )
    app.index_string = layout.INDEX

    def root() -> Any:
        ready = state.status not in (LOADING, PREVIEW)
        # Dash fetches the layout with a request of its own (/_dash-layout): the page's URL is its referrer.
        query = urllib.parse.urlsplit(flask.request.referrer or "").query if flask.has_request_context() else ""
        return html.Div([
            html.Div(state.page(query[:2000]), id="nt-page"),
            dcc.Interval(id="nt-load-poll", interval=300, disabled=ready),
            dcc.Store(id="nt-page-stage", data=state.status),  # what nt-page shows: redrawn when it changes
            dcc.Store(id="nt-carry", data=None),  # what the user chose on the preview (callbacks.CARRY_JS)
        ])

    app.layout = root
    callbacks.register(app, state)
    roofline.register(app, state)
    critical_path.register(app, state)
    compile_panel.register(app, state)
    if debug:
        app.enable_dev_tools(debug=True)
    return app


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """No line per request (the page polls while loading)."""


class Server:
    """The app bound to ``host:port`` (port 0 picks a free one); ``url`` is known once constructed."""

    def __init__(self, app: dash.Dash, host: str = "127.0.0.1", port: int = 8050) -> None:
        said = io.StringIO()
        try:  # Werkzeug prints its own text and exits when it cannot bind: one named error instead
            with contextlib.redirect_stderr(said):
                self.httpd: BaseWSGIServer = make_server(host, port, app.server, threaded=True,
                                                         request_handler=_QuietHandler)
        except (OSError, SystemExit) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else \
                (said.getvalue().strip().splitlines() or ["cannot bind"])[0]
            raise PortInUseError(f"cannot listen on {host}:{port} ({why}); pick another port with --port N, "
                                 "or --port 0 for a free one") from None
        self.host = host
        self.port = int(self.httpd.server_port)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def start(self) -> Server:
        """Serve from a daemon thread (tests, notebooks)."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="neurontrace-view", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _stored_index(path: str) -> Path | None:
    """Where the index of the dataset at ``path`` is stored, when it is a dataset of one partition."""
    p = Path(path)
    try:
        doc = json.loads((p / dataset.MARKER).read_text()) if (p / dataset.MARKER).is_file() else None
    except (OSError, ValueError):
        return None
    partition = index_store.single_partition(doc.get("ranks")) if isinstance(doc, dict) else None
    return None if partition is None else index_store.location(p, partition)


def _compile_logs_beside(path: str) -> tuple[Any, tuple[str, ...]]:
    """The compile logs beside the trace (compile/, torch_trace/, neff_cache/: docs/compile.md), as diagnose
    reads them; none for a Trace served from Python."""
    from neurontrace.parsers.compile_logs import beside, read

    p = Path(path)
    found = beside([p]) if p.exists() else []
    if not found:
        return None, ()
    log = read(found, strict=False)
    return log.table(), tuple(log.warnings())


def serve_trace(trace_or_path: Trace | str | Path, *, host: str = "127.0.0.1", port: int = 0,
                source_roots: Sequence[str | Path] = (".",), background: bool = True) -> tuple[Server, ViewerState]:
    """Serve a Trace (or a path to load) from Python, e.g. a notebook: ``server.url`` is the page."""
    path = str(trace_or_path) if not isinstance(trace_or_path, Trace) else "trace"
    state = ViewerState(path, source_roots=source_roots)
    if isinstance(trace_or_path, Trace):
        state.use(trace_or_path)
        threading.Thread(target=state.analyse, daemon=True).start()
    else:
        threading.Thread(target=state.load, daemon=True).start()
    server = Server(create_app(state), host, port)
    if background:
        server.start()
    return server, state
