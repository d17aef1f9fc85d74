"""Two runs side by side (``neurontrace view A B``) in headless Chromium, on the shipped comparison pair:
both timelines and summary strips render, a zoom of one moves both, the diff table lists the op the
change slowed, and clicking its row outlines it in both timelines.

With ``NEURONTRACE_UPDATE_SCREENSHOT=1`` the page also replaces ``docs/viewer_compare.png`` (the README's picture).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import wait_for
from tests.conftest import ROOT, SAMPLES

pytestmark = pytest.mark.browser

BASELINE = SAMPLES / "compare" / "baseline.pt.trace.json.gz"
SLOWED = SAMPLES / "compare" / "slowed.pt.trace.json.gz"


def plot(side: str) -> str:
    return f"document.querySelector('#nt-cmp-timeline-{side} .js-plotly-plot')"


def x_range(side: str) -> str:
    return (f"const g = {plot(side)}; return g && g._fullLayout && g._fullLayout.xaxis && g.data && g.data.length"
            " ? g._fullLayout.xaxis.range.slice() : null;")


def trace_names(side: str) -> str:
    return f"const g = {plot(side)}; return g && g.data ? g.data.map(t => t.name) : null;"


def moved_from(side: str, start: float) -> str:
    """JS: the side's x range once its start is no longer ``start``."""
    return (f"const g = {plot(side)}; const r = g && g._fullLayout && g._fullLayout.xaxis && g._fullLayout.xaxis.range;"
            f" return r && Math.abs(r[0] - ({start})) > 1e-9 ? r.slice() : null;")


DIFF_ROWS = "return Array.from(document.querySelectorAll('#nt-cmp-diff tr.nt-tr'));"


@pytest.fixture
def pair() -> Iterator[Any]:
    pytest.importorskip("dash", reason="Dash is not installed (pip install -e '.[viewer]')")
    from neurontrace.app.compare import serve_pair

    # Relative paths, as a user types them (and as the page title, and the README's picture, show them).
    server, state = serve_pair(Path(os.path.relpath(BASELINE)), Path(os.path.relpath(SLOWED)))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and state.status == "loading":
        time.sleep(0.05)
    assert state.status == "ready", state.error
    yield server, state
    server.stop()


def _close(a: list[float], b: list[float]) -> bool:
    return all(abs(x - y) < 1e-3 * max(1.0, abs(b[1] - b[0])) for x, y in zip(a, b, strict=True))


def test_two_runs_side_by_side(browser: Any, pair: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    server, state = pair
    browser.get(server.url)
    before_a, before_b = wait_for(browser, x_range("a"), timeout=30), wait_for(browser, x_range("b"), timeout=30)
    assert _close(before_a, before_b)  # one aligned window for both
    for side in ("a", "b"):  # each side's cause strip: the six causes
        names = wait_for(browser, f"const g = document.querySelector('#nt-cmp-summary-{side} .js-plotly-plot');"
                                  "return g && g.data && g.data.length ? g.data.map(t => t.name) : null;")
        assert len(names) == 6 and names[0].startswith("compute")
        assert "framework_op" in wait_for(browser, trace_names(side))
    # A zoom on B's timeline (as a drag or the wheel would do) moves A to the same aligned window.
    lo, hi = before_b[0] + 0.1 * (before_b[1] - before_b[0]), before_b[0] + 0.3 * (before_b[1] - before_b[0])
    browser.execute_script(f"Plotly.relayout({plot('b')}, {{'xaxis.range[0]': {lo}, 'xaxis.range[1]': {hi}}});")
    after_a = wait_for(browser, moved_from("a", before_a[0]))
    after_b = wait_for(browser, x_range("b"))
    assert _close(after_a, [lo, hi]) and _close(after_b, [lo, hi]), (after_a, after_b, lo, hi)
    # The diff table: the change slowed the "augment" annotation most (sample_traces/make_compare_samples.py).
    first = wait_for(browser, "const r = document.querySelector('#nt-cmp-diff tr.nt-tr'); return r && r.innerText;")
    assert "augment" in first and "slower" in first, first
    assert state.rows()[0]["name"] == "augment"
    # Back to the whole window, then click the row: the op is outlined in both timelines.
    browser.execute_script(f"Plotly.relayout({plot('a')}, {{'xaxis.range[0]': {before_a[0]}, "
                           f"'xaxis.range[1]': {before_a[1]}}});")
    wait_for(browser, moved_from("b", lo))
    for _attempt in range(3):  # a click can land while the table is redrawn
        ActionChains(browser).move_to_element(wait_for(browser, DIFF_ROWS)[0]).pause(0.1).click().perform()
        try:
            wait_for(browser, f"const g = {plot('a')}; return g && g.data && g.data.some(t => t.name === 'diff:augment');",
                     timeout=8)
            break
        except AssertionError:
            continue
    for side in ("a", "b"):
        outlined = wait_for(browser, f"const g = {plot(side)}; const t = g && g.data.find(t => t.name === "
                                     "'diff:augment'); return t ? t.x.filter(v => v !== null).length : null;")
        assert outlined >= 5  # at least one event outlined (5 points per outline)
        assert "augment events outlined" in browser.find_element("id", f"nt-cmp-status-{side}").text
    assert "augment" in wait_for(browser, "const r = document.querySelector('#nt-cmp-diff tr.nt-cmp-picked'); return r && r.innerText;")
    browser.execute_script("window.scrollTo(0, 0);")
    time.sleep(0.3)
    shot = tmp_path / "viewer-compare.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    if os.environ.get("NEURONTRACE_UPDATE_SCREENSHOT"):
        shutil.copyfile(shot, ROOT / "docs" / "viewer_compare.png")
