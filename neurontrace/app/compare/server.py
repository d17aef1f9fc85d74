"""The two-run page's Dash app (as :mod:`neurontrace.app.server` is the one-trace page's): the app
around a :class:`CompareState`, and :func:`serve_pair` for Python callers."""

from __future__ import annotations

import threading
from typing import Any, cast

import dash
from dash import dcc, html

from neurontrace.app import layout
from neurontrace.app.compare import callbacks, memory
from neurontrace.app.compare.layout import page
from neurontrace.app.compare.model import CompareState
from neurontrace.app.server import LOADING, Server, ViewerState


def create_compare_app(state: CompareState) -> dash.Dash:
    """The Dash app comparing ``state``'s two runs (as :func:`neurontrace.app.server.create_app` for one)."""
    app = dash.Dash(__name__, title="neurontrace compare", update_title=cast(str, None),
                    suppress_callback_exceptions=True, serve_locally=True,
                    assets_folder=str(layout.ASSETS))
    app.index_string = layout.INDEX

    def root() -> Any:
        ready = state.status != LOADING
        return html.Div([html.Div(page(state), id="nt-page"),
                         dcc.Interval(id="nt-load-poll", interval=300, disabled=ready)])

    app.layout = root
    callbacks.register(app, state)
    memory.register(app, state)
    return app


def serve_pair(a: Any, b: Any, *, host: str = "127.0.0.1", port: int = 0,
               background: bool = True) -> tuple[Any, CompareState]:
    """Serve two traces (paths) side by side from Python; ``server.url`` is the page."""
    state = CompareState(ViewerState(str(a)), ViewerState(str(b)))
    threading.Thread(target=state.load, daemon=True).start()
    server = Server(create_compare_app(state), host, port)
    if background:
        server.start()
    return server, state
