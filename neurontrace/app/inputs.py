"""Checks of the values the page sends: every one is untrusted (NaN, Infinity, text, huge numbers,
the wrong shape), since any local page may post to the viewer's callbacks. Each check returns the
value in the shape the callbacks use, or None, which they answer with "nothing to update".

Shared by every callback of both pages (``callbacks.py``, ``roofline.py``, ``compare/``);
``tests/test_app_server.py`` posts hostile values to each callback over HTTP.
"""

from __future__ import annotations

import math
from typing import Any

from neurontrace.causes import CAUSES

MAX_NS = 2**62  # no time the page sends is trusted beyond this (JSON allows NaN, Infinity, 1e400)



def as_int(value: Any, lo: int = -MAX_NS, hi: int = MAX_NS) -> int | None:
    """``value`` as an int when it is a finite number within [lo, hi] (not a bool, not text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or not lo <= value <= hi:
        return None
    return int(value)


def view_of(view: Any) -> tuple[int, int, int] | None:
    """(t0, t1, origin) of the page's view store, or None when it is not a valid one."""
    if not isinstance(view, dict):
        return None
    t0, t1, origin = (as_int(view.get(k, 0 if k == "origin" else None)) for k in ("t0", "t1", "origin"))
    if t0 is None or t1 is None or origin is None:
        return None
    return t0, t1, origin


def highlight_of(value: Any) -> tuple[str, int | None, str] | None:
    """(device, rank, cause) of the page's highlight store, or None when it is not a valid one."""
    if not isinstance(value, dict) or not isinstance(value.get("device"), str) or value.get("cause") not in CAUSES:
        return None
    rank = value.get("rank")
    if rank is not None and as_int(rank) is None:
        return None
    return value["device"], as_int(rank), str(value["cause"])


def op_pick_of(value: Any) -> tuple[tuple[str, int | None], tuple[int, int] | None, str, str] | None:
    """((device, rank), window or None, op, kernel class) of an op picked in the ops panel (the highlight
    store; the window in ns after the trace's first event), or None when it is not a valid one."""
    if not isinstance(value, dict) or not all(isinstance(value.get(k), str) and len(value[k]) <= 2000
                                              for k in ("device", "op", "kernel_class")):
        return None
    rank, window = value.get("rank"), value.get("window")
    if rank is not None and as_int(rank) is None:
        return None
    bounds: tuple[int, int] | None = None
    if window is not None:
        lo, hi = (as_int(v) for v in window) if isinstance(window, list) and len(window) == 2 else (None, None)
        if lo is None or hi is None:
            return None
        bounds = (lo, hi)
    return (str(value["device"]), as_int(rank)), bounds, str(value["op"]), str(value["kernel_class"])
