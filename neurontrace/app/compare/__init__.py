"""Two runs side by side (``neurontrace view A B``): both timelines stacked with one shared zoom, both
cause summary strips, and the ``diff`` op table beside them; a click on a diff row outlines that op
in both timelines.

Built from the single-trace viewer's parts (its state, figures, window requests, search, details, fit
and flow-follow functions), applied to the side an event belongs to. It is a second app, so it is
split as the one-trace page is, one room per subject, each readable on its own:

- ``model.py``: :class:`CompareState` (the two sides, the stage of their analyses and the diff), the
  alignment of the two x axes, the view store; no Dash components;
- ``layout.py``: the page's components;
- ``callbacks.py``: what the page does: plain functions of the state, and the Dash callbacks around them;
- ``server.py``: the Dash app (:func:`create_compare_app`) and :func:`serve_pair`.

The page is progressive: it is drawn as soon as both traces are indexed, aligned provisionally at each
run's first step marker (the trace start without one); the analyses and the diff run after it, and the
page polls their progress (:meth:`CompareState.stage`): each cause strip fills in when its side is
analysed, the alignment switches to the analysed one once both are (keeping what A shows when the
user has zoomed), and the diff table fills in last.
"""

from __future__ import annotations

from neurontrace.app.compare.model import CompareState
from neurontrace.app.compare.server import create_compare_app, serve_pair

__all__ = ["CompareState", "create_compare_app", "serve_pair"]
