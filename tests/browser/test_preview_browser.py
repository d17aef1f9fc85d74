"""A big trace's first page in a real browser: the preview (app/preview.py) draws, then the lanes replace it,
opening where the user zoomed and which groups they opened meanwhile.

The corpus trace is small, so the preview bound is lowered for the test, and the full index build is held
until the page has shown the preview (a gate), as a 10 M-event build holds it for tens of seconds.
"""

from __future__ import annotations

import threading
import urllib.parse
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
X_RANGE = f"const g = {PLOT}; return g && g._fullLayout && g._fullLayout.xaxis ? g._fullLayout.xaxis.range.slice() : null;"
OPENED = "return Array.from(document.querySelectorAll('#nt-groups input')).map(i => i.checked);"


def _window(url: str) -> tuple[str, str]:
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    return query["start_ns"][0], query["end_ns"][0]


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
        whole = _window(browser.current_url)
        lo, hi = wait_for(browser, X_RANGE)
        browser.execute_script(f"Plotly.relayout({PLOT}, {{'xaxis.range[0]': {lo + 0.3 * (hi - lo)}, "
                               f"'xaxis.range[1]': {lo + 0.4 * (hi - lo)}}});")  # a zoom on the preview
        zoomed = wait_for(browser, "return window.location.search.includes('start_ns') && "
                          f"!window.location.search.includes('start_ns={whole[0]}') ? window.location.href : null;")
        browser.execute_script("document.querySelectorAll('#nt-groups input')[1].click();")  # a group opened
        opened = wait_for(browser, f"const o = (() => {{ {OPENED} }})(); return o.filter(x => x).length === 1 ? o : null;")
    finally:
        gate.set()
    # the lanes of the opened group, where the preview drew its placeholder lane ("indexing…")
    rows = wait_for(browser, f"const r = (() => {{ {ROW_LABELS} }})(); return r && r.length > {len(preview_rows)} "
                    "&& !r.some(t => t.includes('indexing')) ? r : null;", timeout=60)
    assert state.status == server.READY and len(rows) > len(preview_rows)  # every lane of the opened group
    assert _window(browser.current_url) == _window(zoomed)  # the same window (in the trace's ns: the axis may move
    assert browser.execute_script(OPENED) == opened  # its origin once the analysis is done), the same groups
