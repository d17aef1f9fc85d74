"""The Dash viewer (``neurontrace view``): linked host and device timelines, stall attribution on
top, every event one click from its source line. See docs/viewer.md.

Importing this package stays cheap and never imports Dash: the pure parts (``tracks``, ``lod``,
``source``, ``model``, ``tables``) use numpy and Arrow only, and the Dash parts
(``server``, ``layout``, ``callbacks``, ``figures``) are imported on first use::

    from neurontrace.app import serve_trace
    server, state = serve_trace("trace.json.gz")   # needs pip install 'neurontrace[viewer]'
    print(server.url)
"""

from __future__ import annotations

from typing import Any

__all__ = ["Server", "ViewerState", "create_app", "serve_trace"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from neurontrace._optional import require

        require("dash", extra="viewer")
        from neurontrace.app import server

        return getattr(server, name)
    raise AttributeError(f"module 'neurontrace.app' has no attribute {name!r}")
