"""A big trace's first page in a real browser: the preview (app/preview.py) draws, then the lanes replace it.

The corpus trace is small, so the preview bound is lowered for the test, and the full index build is held
until the page has shown the preview (a gate), as a 10 M-event build holds it for tens of seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.browser.conftest import wait_for
from tests.conftest import corpus_root

pytestmark = pytest.mark.browser

REAL = "HolisticTraceAnalysis/tests/data/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
PLOT = "document.querySelector('#nt-timeline .js-plotly-plot')"
STATUS = "const e = document.querySelector('#nt-timeline-status'); return e ? e.innerText : '';"
ROW_LABELS = f"const g = {PLOT}; return g && g.layout && g.layout.yaxis ? g.layout.yaxis.ticktext : null;"


def test_the_preview_shows_then_the_lanes(browser: Any, serve: Callable[..., Any],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from neurontrace.app import server, tracks

    root = corpus_root()
    if root is None or not (root / REAL).exists():
        pytest.skip("the real-trace corpus is not beside the checkout")
    monkeypatch.setattr(server, "PREVIEW_MIN_EVENTS", 1)
    gate = threading.Event()
    built = tracks.build

    def held(trace: Any) -> Any:
        gate.wait(60)
        return built(trace)

    monkeypatch.setattr(tracks, "build", held)
    srv, state = serve(root / REAL, source_roots=[root], wait=False)
    try:
        browser.get(srv.url)
        status = wait_for(browser, f"const s = (() => {{ {STATUS} }})(); return s.includes('indexing') ? s : null;",
                          timeout=60)
        assert "header row until its lanes are ready" in status
        preview_rows = wait_for(browser, ROW_LABELS)
        assert state.status == server.PREVIEW and 2 <= len(preview_rows) <= len(state.model.index.groups)
    finally:
        gate.set()
    wait_for(browser, f"const s = (() => {{ {STATUS} }})(); return s && !s.includes('indexing');", timeout=60)
    rows = wait_for(browser, f"const r = (() => {{ {ROW_LABELS} }})(); return r && r.length > {len(preview_rows)} ? r : null;",
                    timeout=30)
    assert state.status == server.READY and len(rows) > len(preview_rows)  # every lane of the opened groups
