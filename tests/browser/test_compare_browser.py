"""Two runs side by side (``neurontrace view A B``) in headless Chromium, on the shipped comparison pair:
both timelines and summary strips render, a zoom of one moves both, the diff table lists the op the
change slowed, and clicking its row outlines it in both timelines.

With ``NEURONTRACE_UPDATE_SCREENSHOT=1`` the page also replaces ``docs/viewer_compare.png`` (the README's picture).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
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
    # Click the slowed augment range on B's timeline: the details panel shows it, on B, with its source line.
    from tests.browser.test_viewer_browser import FIND_BAR

    for _attempt in range(3):  # a click can land while the timeline is redrawn
        bar = wait_for(browser, FIND_BAR.replace("#nt-timeline", "#nt-cmp-timeline-b"), "augment")
        ActionChains(browser).move_to_element(bar).pause(0.1).click().perform()
        try:
            wait_for(browser, "const e = document.querySelector('#nt-event-name'); return e && e.innerText;", timeout=8)
            break
        except AssertionError:
            continue
    assert "augment" in wait_for(browser, "const e = document.querySelector('#nt-event-name'); return e && e.innerText;")
    assert browser.find_element("id", "nt-cmp-details-side").text == "in B (change)"
    browser.execute_script("window.scrollTo(0, 0);")
    ActionChains(browser).move_to_element(browser.find_element("css selector", ".nt-logo")).perform()
    time.sleep(0.5)  # let the hover label fade
    shot = tmp_path / "viewer-compare.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    if os.environ.get("NEURONTRACE_UPDATE_SCREENSHOT"):
        shutil.copyfile(shot, ROOT / "docs" / "viewer_compare.png")


# -- the page shows before the analyses; search, details, keys and flow follow on both runs ----------

HTA_PAIR = ("HolisticTraceAnalysis/tests/data/trace_compare/base/base.json.gz",
            "HolisticTraceAnalysis/tests/data/trace_compare/test/test.json.gz")
GPU_PAIR = ("TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",
            "TraceLens/tests/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz")


def _serve_indexed(paths: list[Path]) -> tuple[Any, Any]:
    """The pair loaded and indexed, not analysed (the test runs the analyses when it wants), and served."""
    from neurontrace.app.compare import CompareState, create_compare_app
    from neurontrace.app.server import Server, ViewerState

    if not all(p.exists() for p in paths):
        pytest.skip(f"{[p.name for p in paths]} are not in the corpus")
    state = CompareState(ViewerState(os.path.relpath(paths[0])), ViewerState(os.path.relpath(paths[1])))
    for side in state.sides.values():
        side.load(analyse=False)
    return Server(create_compare_app(state), "127.0.0.1", 0).start(), state


def _text(browser: Any, css: str) -> str:
    return str(browser.execute_script(f"const e = document.querySelector({css!r}); return e ? e.innerText : '';"))


@pytest.mark.parametrize("which", ["shipped", pytest.param("trace_compare", marks=pytest.mark.corpus)])
def test_both_timelines_show_before_the_analyses_and_a_zoom_survives_the_alignment(
        browser: Any, which: str, request: pytest.FixtureRequest) -> None:
    from neurontrace.app.compare.model import align_point, provisional_point

    if which == "shipped":  # the analysed alignment is the first step marker already: x = 0 stays
        paths, moves = [BASELINE, SLOWED], False
    else:  # HTA's trace_compare pair: A's first analysed step is 100 ms after its first step marker
        corpus = request.getfixturevalue("corpus")
        paths, moves = [corpus / n for n in HTA_PAIR], True
    server, state = _serve_indexed(paths)
    try:
        browser.get(server.url)
        xa, xb = wait_for(browser, x_range("a"), timeout=30), wait_for(browser, x_range("b"), timeout=30)
        a, _b = state.models()
        assert a.analysis is None and state.diff is None  # drawn before any analysis ran
        assert _close(xa, xb)  # one shared window, aligned provisionally at each run's first step marker
        assert xa[0] == pytest.approx(-provisional_point(a) / 1e6, abs=1e-3)  # the whole of A
        assert "provisional" in _text(browser, "#nt-cmp-align")
        assert "Analysing A" in _text(browser, "#nt-cmp-progress")
        assert "fills in" in _text(browser, "#nt-cmp-diff-pending")
        # The shared zoom works already: zoom B, A follows.
        lo, hi = xb[0] + 0.1 * (xb[1] - xb[0]), xb[0] + 0.6 * (xb[1] - xb[0])
        browser.execute_script(f"Plotly.relayout({plot('b')}, {{'xaxis.range[0]': {lo}, 'xaxis.range[1]': {hi}}});")
        zoomed = wait_for(browser, moved_from("a", xa[0]))
        assert _close(zoomed, [lo, hi])
        shown_ns = [v * 1e6 + provisional_point(a) for v in zoomed]  # what A shows, ns after its first event
        # Now the analyses and the diff: the strips, the analysed alignment and the table fill in.
        threading.Thread(target=state.analyse, daemon=True).start()
        wait_for(browser, "return document.querySelector('#nt-cmp-diff-pending') === null;", timeout=30)
        # state.diff was None above; the analysing thread sets it (read into a name: mypy narrowed the attribute).
        diffed = state.diff is not None
        assert diffed and (align_point(a) != provisional_point(a)) == moves
        wait_for(browser, "const e = document.querySelector('#nt-cmp-align');"
                          "return e && e.innerText.includes('first analysed step');")
        # B's stall-cause row is drawn once B is analysed, by the redraw that switches the alignment.
        wait_for(browser, f"return Array.from({plot('b')}.querySelectorAll('.ytick text'))"
                          ".some(t => t.textContent.includes('stall causes'));")
        after = browser.execute_script(f"return {plot('a')}._fullLayout.xaxis.range.slice();")
        assert _close(after, [(t - align_point(a)) / 1e6 for t in shown_ns])  # the same events of A ...
        assert _close(browser.execute_script(f"return {plot('b')}._fullLayout.xaxis.range.slice();"), after)  # ... and B
        for side in ("a", "b"):
            wait_for(browser, f"const g = document.querySelector('#nt-cmp-summary-{side} .js-plotly-plot');"
                              "return g && g.data && g.data.length === 6;")
        assert _text(browser, "#nt-cmp-progress") == ""
    finally:
        server.stop()


SAME_WINDOW = f"""const a = {plot('a')}, b = {plot('b')};
const ra = a && a._fullLayout && a._fullLayout.xaxis && a._fullLayout.xaxis.range;
const rb = b && b._fullLayout && b._fullLayout.xaxis && b._fullLayout.xaxis.range;
if (!ra || !rb) return null;
const tol = 1e-3 * Math.max(1, ra[1] - ra[0]);
return Math.abs(ra[0] - rb[0]) < tol && Math.abs(ra[1] - rb[1]) < tol ? ra.slice() : null;"""


def _details_event(browser: Any) -> tuple[str, str, int]:
    """(side label, event name, event id) of the details panel."""
    text = _text(browser, "#nt-details")
    event_id = int(next(line for line in text.splitlines() if line.strip().isdigit() and len(line.strip()) < 12))
    return _text(browser, "#nt-cmp-details-side"), _text(browser, "#nt-event-name"), event_id


def _details_change(browser: Any, before: int | None) -> tuple[str, str, int]:
    deadline = time.monotonic() + 15
    while True:
        try:
            got = _details_event(browser)
            if got[2] != before:
                return got
        except StopIteration:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"the details panel still shows event {before}")
        time.sleep(0.1)


@pytest.mark.corpus
def test_search_details_keys_and_flow_follow_on_a_gpu_pair(browser: Any, corpus: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    from tests.browser.test_viewer_browser import FIND_BAR

    server, state = _serve_indexed([corpus / n for n in GPU_PAIR])  # the same model on an H100 and an MI300
    try:
        state.analyse()
        browser.get(server.url)
        before = wait_for(browser, x_range("a"), timeout=30)
        models = dict(zip(("a", "b"), state.models(), strict=True))
        origins, analysed = state.alignment()
        assert analysed
        # Search both runs: hits of A and B listed; Enter selects the first after the view's start.
        box = browser.find_element("id", "nt-search")
        box.send_keys("LaunchKernel")
        note = wait_for(browser, "const e = document.querySelector('#nt-search-note'); return e && e.innerText;")
        assert note.startswith("A: ") and " · B: " in note
        hits = [h.text for h in browser.find_elements("css selector", ".nt-hit")]
        assert {h[:1] for h in hits} == {"A", "B"} and all("LaunchKernel" in h for h in hits)
        box.send_keys("\n")
        side, name, launch = _details_change(browser, None)
        assert "LaunchKernel" in name and side in ("in A (baseline)", "in B (change)")
        s = "a" if "A (" in side else "b"
        model = models[s]
        # ]: the kernel the launch enqueued, selected and on screen; [: back to the launch.
        body = browser.find_element("css selector", "body")
        body.send_keys("]")
        side2, kernel_name, kernel = _details_change(browser, launch)
        assert side2 == side and kernel_name != name
        assert any(link.direction == "out" and link.event_id == kernel for link in model.links(launch))
        assert model.event(kernel)["side"] == "device"
        p = model.index.position(kernel)
        x = wait_for(browser, x_range(s))
        start_ms = (int(model.index.start[p]) - origins[s]) / 1e6
        assert x[0] <= start_ms <= x[1]
        body.send_keys("[")
        assert _details_change(browser, kernel)[2] == launch
        # F fits the launch, in both timelines; W zooms both in, D pans both, S zooms out.
        body.send_keys("f")
        p = model.index.position(launch)
        dur_ms = int(model.index.end[p] - model.index.start[p]) / 1e6
        fit_ms = 1.2 * dur_ms  # the event and a tenth of it each side
        fitted = wait_for(browser, SAME_WINDOW.replace("? ra.slice()", f"&& Math.abs(ra[1] - ra[0] - {fit_ms}) < "
                                                       f"{0.01 * fit_ms} ? ra.slice()"))  # in both timelines
        assert fitted[0] < (int(model.index.start[p]) - origins[s]) / 1e6 < fitted[1]
        assert fit_ms < before[1] - before[0]
        checks: tuple[tuple[str, Callable[[list[float], list[float]], bool]], ...] = (("s", lambda old, new: new[1] - new[0] > 1.5 * (old[1] - old[0])),
                           ("w", lambda old, new: new[1] - new[0] < 0.7 * (old[1] - old[0])),
                           ("d", lambda old, new: new[0] > old[0]))
        for key, check in checks:
            old = browser.execute_script(x_range("a"))
            body.send_keys(key)
            wait_for(browser, moved_from("a", old[0]))
            new = wait_for(browser, SAME_WINDOW)  # B follows
            assert check(old, new), (key, old, new)
        # Click an event on B's timeline (zoomed to B's longest aten:: op): the details panel shows it, on B.
        ix = models["b"].index
        ops = [p for p in range(ix.n_events) if str(ix.names[ix.name[p]]).startswith("aten::")]
        p = max(ops, key=lambda p: int(ix.end[p] - ix.start[p]))
        t0, t1 = (int(ix.start[p]) - origins["b"]) / 1e6, (int(ix.end[p]) - origins["b"]) / 1e6
        browser.execute_script(f"Plotly.relayout({plot('b')}, {{'xaxis.range[0]': {t0 - 0.1 * (t1 - t0)}, "
                               f"'xaxis.range[1]': {t1 + 0.1 * (t1 - t0)}}});")
        bar = None
        for _attempt in range(3):  # the timeline redraws after the zoom
            time.sleep(0.5)
            bar = wait_for(browser, FIND_BAR.replace("#nt-timeline", "#nt-cmp-timeline-b"), "aten::")
            ActionChains(browser).move_to_element(bar).pause(0.1).click().perform()
            try:
                side3, clicked, _eid = _details_change(browser, launch)
                break
            except AssertionError:
                continue
        assert side3 == "in B (change)" and clicked.startswith("aten::")
    finally:
        server.stop()
