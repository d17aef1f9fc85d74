"""The viewer in a real browser: the real server on a free loopback port, headless Chromium clicking.

Each test loads a trace, waits for the page, acts like a user (click a stall, an event, a table row,
a cause) and checks what the page then shows. A screenshot of the main view is saved under the
test's ``tmp_path``; with ``NEURONTRACE_UPDATE_SCREENSHOT=1`` the real H100 trace's default view also replaces
``docs/viewer.png`` (the README's picture).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.app_support import load_quiet, source_root, synthetic_neuron, tiny_trace
from tests.browser.conftest import wait_for
from tests.conftest import ROOT, SAMPLES

pytestmark = pytest.mark.browser

SAMPLE = SAMPLES / "cpu_train_loop.pt.trace.json.gz"
PLOT = "document.querySelector('#nt-timeline .js-plotly-plot')"
X_RANGE = f"const g = {PLOT}; return g && g._fullLayout && g._fullLayout.xaxis ? g._fullLayout.xaxis.range.slice() : null;"
TRACE_NAMES = f"const g = {PLOT}; return g && g.data ? g.data.map(t => t.name) : null;"
FIND_BAR = f"""
const g = {PLOT};
if (!g) return null;
let best = null, width = 0;
for (const p of g.querySelectorAll('.bars .point')) {{
  const t = p.querySelector('text');
  if (!t || !t.textContent.includes(arguments[0])) continue;
  const r = p.querySelector('path').getBoundingClientRect();
  if (r.width > width) {{ best = p.querySelector('path'); width = r.width; }}
}}
if (best) best.scrollIntoView({{block: 'center'}});
return best;
"""
ROWS = """
return Array.from(document.querySelectorAll('tr.nt-tr')).filter(
  tr => JSON.parse(tr.id).table === arguments[0]).map(tr => tr);
"""


def _open(browser: Any, url: str) -> None:
    browser.get(url)
    wait_for(browser, f"const g = {PLOT}; return g && g.data && g.data.length > 0;", timeout=30)


def _click(browser: Any, element: Any) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(browser).move_to_element(element).pause(0.1).click().perform()


def _text(browser: Any, css: str) -> str:
    return str(browser.execute_script(f"const e = document.querySelector({css!r}); return e ? e.innerText : '';"))


def _screenshot(browser: Any, tmp_path: Path, name: str, *, docs: bool = False) -> Path:
    from selenium.webdriver.common.action_chains import ActionChains

    browser.execute_script("window.scrollTo(0, 0);")
    ActionChains(browser).move_to_element(browser.find_element("css selector", ".nt-logo")).perform()
    time.sleep(0.3)  # let the hover label fade
    path = tmp_path / name
    browser.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    if docs and os.environ.get("NEURONTRACE_UPDATE_SCREENSHOT"):
        shutil.copyfile(path, ROOT / "docs" / "viewer.png")
    return path


def test_timeline_and_summary_strip_render(browser: Any, serve: Callable[..., Any], tmp_path: Path) -> None:
    server, _state = serve(SAMPLE, source_roots=[SAMPLES, ROOT])
    _open(browser, server.url)
    names = wait_for(browser, TRACE_NAMES)
    # Ops and runtime calls by default; Python frames are a layer shown on request.
    assert "framework_op" in names and "python" not in names
    ticks = browser.execute_script(f"return Array.from({PLOT}.querySelectorAll('.ytick text')).map(t => t.textContent);")
    import neurontrace

    pid = neurontrace.load(SAMPLE).system_events["pid"][0].as_py()  # the sample's main thread
    assert f"thread {pid} (python)" in ticks and any("stall causes" in t for t in ticks)
    steps = browser.execute_script(f"return Array.from({PLOT}.querySelectorAll('.annotation-text')).map(t => t.textContent);")
    assert {"step 2", "step 3", "step 4"} <= set(steps)
    causes = wait_for(browser, "const g = document.querySelector('#nt-summary .js-plotly-plot');"
                               "return g && g.data && g.data.length ? g.data.map(t => t.name) : null;")
    assert [c.rsplit(" ", 1)[0] for c in causes] == ["compute", "collectives", "data movement", "host fallback",
                                                      "host overhead", "idle"]
    from neurontrace.analysis.diagnose import diagnose

    (dev,) = diagnose(neurontrace.load(SAMPLE)).devices
    compute = f"compute {100 * dev.fraction('compute'):.1f}%"  # the strip shows diagnose's own figure
    assert causes[0] == compute
    assert compute in _text(browser, "#nt-summary")
    # Everything the page loaded came from the viewer itself: no CDN, no upload button, works offline.
    sources = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
    assert sources and all(s.startswith(server.url) for s in sources), sources
    buttons = browser.execute_script(f"return Array.from({PLOT}.querySelectorAll('.modebar-btn'))"
                                     ".map(b => b.getAttribute('data-title'));")
    assert not any("Share" in (b or "") or "Cloud" in (b or "") for b in buttons), buttons
    _screenshot(browser, tmp_path, "viewer-main.png")


def test_clicking_a_top_stall_zooms_the_timeline_to_it(browser: Any, serve: Callable[..., Any]) -> None:
    server, state = serve(SAMPLE, source_roots=[SAMPLES])
    _open(browser, server.url)
    before = wait_for(browser, X_RANGE)
    rows = wait_for(browser, ROWS, "stalls")
    stall = state.model.analysis.stalls[0]
    cells = rows[0].text.split("\n") if "\n" in rows[0].text else rows[0].text.split()
    assert stall["device"] in cells[0]
    after = before
    for _attempt in range(3):  # on a loaded machine a click can land while the table is redrawn
        _click(browser, wait_for(browser, ROWS, "stalls")[0])
        after = _range_after(browser, before, timeout=10)
        if after != before:
            break
    origin = state.model.time_origin  # the axis counts from the analysis window start
    start_ms, end_ms = (stall["t0_ns"] - origin) / 1e6, (stall["t1_ns"] - origin) / 1e6
    assert after != before
    assert after[0] <= start_ms and after[1] >= end_ms  # the stall is on screen ...
    assert after[1] - after[0] < 0.2 * (before[1] - before[0])  # ... and the view zoomed in on it
    assert after[1] - after[0] <= 2 * (end_ms - start_ms)


def test_clicking_an_event_fills_the_details_and_shows_its_source_line(
        browser: Any, serve: Callable[..., Any], tmp_path: Path) -> None:
    # The frames name make_samples.py (relative to sample_traces/): both roots are tried in turn.
    server, state = serve(Path(os.path.relpath(SAMPLE)), source_roots=[ROOT, SAMPLES])
    _open(browser, server.url)
    _click(browser, browser.find_element("css selector", "#nt-python input"))  # show the Python layer
    # train_step is an outer frame (the layer starts at the innermost levels): find it by search.
    browser.find_element("id", "nt-search").send_keys("make_samples.py(49): train_step\n")
    wait_for(browser, "return document.querySelector('#nt-src-hl') !== null;")
    assert "train_step" in _text(browser, "#nt-event-name")
    event_id = int(next(line for line in _text(browser, "#nt-details").splitlines()
                        if line.strip().isdigit() and len(line.strip()) < 12))
    model = state.model
    event = model.event(event_id)
    frame = next(f for f in model.stack(event["frame_id"]) if f.is_user and f.file)
    assert _text(browser, "#nt-src-location").startswith(f"{frame.file}:{frame.line} {frame.function}")
    expected = (SAMPLES / frame.file).read_text().splitlines()[frame.line - 1]
    assert _text(browser, "#nt-src-hl .nt-ln") == str(frame.line)
    assert expected.strip() in _text(browser, "#nt-src-hl") and expected.lstrip().startswith("def train_step")
    wait_for(browser, TRACE_NAMES.replace("t.name)", "t.name).includes('python')"))
    _screenshot(browser, tmp_path, "viewer-selected.png")


def test_a_path_traversal_source_location_is_refused(browser: Any, serve: Callable[..., Any],
                                                    tmp_path: Path) -> None:
    root = source_root(tmp_path)
    server, _state = serve(tiny_trace(), source_roots=[root])
    _open(browser, server.url)
    for name, path in (("evil_rel", "../../etc/passwd"), ("evil_abs", "/etc/passwd")):
        _click(browser, wait_for(browser, FIND_BAR, name))
        wait_for(browser, "const e = document.querySelector('#nt-event-name'); return e && e.innerText === arguments[0];",
                 name)
        status = wait_for(browser, "const e = document.querySelector('#nt-src-status');"
                                   "return e && e.className.includes('nt-refused') ? e.innerText : null;")
        assert "refused" in status and "outside the source roots" in status
        assert path in _text(browser, "#nt-src-location")
        page = browser.execute_script("return document.body.innerText;")
        assert "root:x:" not in page and "root:" not in page.split("Source", 1)[-1]
    # The same panel does show a file that is under the root.
    _click(browser, wait_for(browser, FIND_BAR, "aten::mm"))
    assert "def forward(x):" in wait_for(browser, "const e = document.querySelector('#nt-src-hl'); return e && e.innerText;")


SEGMENT = """
    const g = document.querySelector('#nt-summary .js-plotly-plot');
    if (!g) return null;
    const traces = g.querySelectorAll('.trace.bars');
    const p = traces.length > 4 ? traces[4].querySelector('.point path') : null;  // host overhead
    return p && p.getBoundingClientRect().width > 4 ? p : null;"""


def test_clicking_a_cause_highlights_its_intervals(browser: Any, serve: Callable[..., Any]) -> None:
    server, _state = serve(SAMPLE, source_roots=[SAMPLES])
    _open(browser, server.url)
    segment = wait_for(browser, SEGMENT)
    script = (TRACE_NAMES.replace("t.name)", "t.name).filter(n => n.startsWith('highlight:'))")
              .replace("? g.data", "&& g.data.some(t => t.name.startsWith('highlight:')) ? g.data"))
    names = None
    for _attempt in range(3):  # on a loaded machine a click can land while the strip is redrawn
        _click(browser, segment)
        try:
            names = wait_for(browser, script, timeout=10)
            break
        except AssertionError:
            segment = wait_for(browser, SEGMENT)
    assert names == ["highlight:host_overhead"]


def test_a_synthetic_neuron_profile_links_instructions_to_nki_source(
        browser: Any, serve: Callable[..., Any], tmp_path: Path) -> None:
    path = synthetic_neuron(tmp_path)
    root = tmp_path / "neuron_src"
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "mlp_kernel.py").write_text("".join(
        "    nl.matmul(a, b)  # line 42\n" if i == 42 else f"# kernel line {i}\n" for i in range(1, 61)))
    trace = load_quiet(path)  # synthetic profiles carry an Explorer warning row
    server, state = serve(trace, source_roots=[root])
    _open(browser, server.url)
    assert "SYNTHETIC" in _text(browser, ".nt-header")
    ticks = browser.execute_script(f"return Array.from({PLOT}.querySelectorAll('.ytick text')).map(t => t.textContent);")
    assert any("neuron:nc0" in t and "stall causes" in t for t in ticks) and "tensor" in ticks
    tab = wait_for(browser, "return Array.from(document.querySelectorAll('.tab')).find(t => t.innerText.includes('ops'));")
    _click(browser, tab)
    rows = wait_for(browser, ROWS, "ops")
    matmul = next(r for r in rows if r.text.startswith("MATMUL"))
    _click(browser, matmul)
    wait_for(browser, "return document.querySelector('#nt-src-hl') !== null;")
    assert _text(browser, "#nt-event-name") == "MATMUL"
    assert _text(browser, "#nt-src-location").startswith("kernels/mlp_kernel.py:42")
    assert "nl.matmul(a, b)" in _text(browser, "#nt-src-hl")
    stack = _text(browser, "#nt-stack")
    assert "dot.1" in stack and "mlp/fc1" in stack  # HLO op and layer names on the way to the Python stack
    hlo = wait_for(browser, "return Array.from(document.querySelectorAll('.nt-frame')).find("
                            "b => b.innerText.startsWith('dot.1'));")
    _click(browser, hlo)
    wait_for(browser, "const e = document.querySelector('#nt-src-location'); return e && e.innerText.startsWith('dot.1');")
    assert "no source file recorded" in _text(browser, "#nt-src-status")
    assert "nt-frame-sel" in hlo.get_attribute("class")
    assert json.dumps(state.model.analysis.diagnosis.as_dict()["synthetic"]) == "true"


def test_a_trace_that_fails_to_load_shows_the_error_not_a_traceback(
        browser: Any, serve: Callable[..., Any], tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text("definitely not a trace")
    server, _state = serve(bad, source_roots=[tmp_path])
    browser.get(server.url)
    message = wait_for(browser, "const e = document.querySelector('#nt-load-error'); return e && e.innerText;")
    assert "could not be loaded" in message and "expected one of" in message
    assert "Traceback" not in browser.execute_script("return document.body.innerText;")


# -- issue #18: where the page opens, how much of the screen it fills, search, keys, shareable URLs --

H100 = Path("TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
VIEWPORT = "return [window.innerWidth, window.innerHeight];"
PLOT_BOX = f"const r = {PLOT}.getBoundingClientRect(); return [r.width, r.height];"


def _inner_1600x1000(browser: Any) -> None:
    """Make the page itself 1600 x 1000 (the window's frame takes some of the window size)."""
    for _ in range(5):
        inner = browser.execute_script(VIEWPORT)
        if inner == [1600, 1000]:
            return
        outer = browser.get_window_size()
        browser.set_window_size(outer["width"] + 1600 - inner[0], outer["height"] + 1000 - inner[1])
        time.sleep(0.3)


def _range_after(browser: Any, before: Any, timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    after = browser.execute_script(X_RANGE)
    while after == before and time.monotonic() < deadline:
        time.sleep(0.1)
        after = browser.execute_script(X_RANGE)
    return after


def _h100(corpus: Path) -> Path:
    path = corpus / H100
    if not path.exists():
        pytest.skip(f"{H100} is not in the corpus")
    return path


@pytest.mark.corpus
def test_a_real_gpu_trace_opens_on_its_analysis_window_filling_the_screen(
        browser: Any, serve: Callable[..., Any], corpus: Path, tmp_path: Path) -> None:
    # A relative path: the page's title shows it (and the README's picture must not name this machine).
    server, state = serve(Path(os.path.relpath(_h100(corpus))), source_roots=[tmp_path])
    try:
        _inner_1600x1000(browser)
        _open(browser, server.url)
        model = state.model
        (device, _rank), (w0, w1) = model.focus()
        assert device == "cuda:0" and model.time_origin == w0
        # Opens on the analysis window (x is ms from its start), not the whole trace.
        x = wait_for(browser, X_RANGE)
        width_ms = (w1 - w0) / 1e6
        assert x[0] == pytest.approx(-0.01 * width_ms, abs=0.02 * width_ms)
        assert x[1] == pytest.approx(1.01 * width_ms, abs=0.02 * width_ms)
        # Ops and launches are on screen by default; no Python frame is; the GPU-side step is a thin marker.
        names = wait_for(browser, TRACE_NAMES)
        assert "python" not in names and {"framework_op", "runtime", "compute"} & set(names)
        ticks = browser.execute_script(f"return Array.from({PLOT}.querySelectorAll('.ytick text')).map(t => t.textContent);")
        assert "steps & annotations" in ticks and "stream 7" in ticks
        assert not any(t.startswith("thread ") and t.endswith("Python") for t in ticks)
        assert "process ?" not in " ".join(ticks)  # a group holding one instant is not drawn
        # Fills the screen: the timeline is at least 60% of a 1600 x 1000 page.
        _inner_1600x1000(browser)
        assert browser.execute_script(VIEWPORT) == [1600, 1000]
        browser.execute_script("window.dispatchEvent(new Event('resize'));")
        _w, h = wait_for(browser, PLOT_BOX.replace("return [", "const b = [").replace(
            "];", "]; return b[1] >= 600 ? b : null;"), timeout=30)
        assert h >= 600
        # x labels carry their unit; step labels are inside the plot, never on the tick labels.
        xticks = browser.execute_script(f"return Array.from({PLOT}.querySelectorAll('.xtick text')).map(t => t.textContent);")
        assert xticks[0] == "0" and all(t.endswith(" ms") for t in xticks[1:])
        # The legend lists each colour once (the compute category and the compute cause are one entry).
        legend = [t.strip() for t in _text(browser, "#nt-legend").split("\n") if t.strip()]
        assert len(legend) == len(set(legend)) and sum(t == "compute" for t in legend) == 1
        # The Python layer on request, innermost levels.
        _click(browser, browser.find_element("css selector", "#nt-python input"))
        wait_for(browser, TRACE_NAMES.replace("t.name)", "t.name).includes('python')"))
        _screenshot(browser, tmp_path, "viewer-h100.png")
        if os.environ.get("NEURONTRACE_UPDATE_SCREENSHOT"):
            _click(browser, browser.find_element("css selector", "#nt-python input"))
            wait_for(browser, f"const g = {PLOT}; return g && g.data && !g.data.some(t => t.name === 'python');")
            _click(browser, browser.find_element("id", "nt-panels"))  # the timeline at full width
            wait_for(browser, "return document.getElementById('nt-side').className.includes('nt-hidden');")
            time.sleep(1.5)  # the resize redraw
            shutil.copyfile(_screenshot(browser, tmp_path, "viewer-h100-default.png"), ROOT / "docs" / "viewer.png")
        # "Whole trace" shows everything.
        before = browser.execute_script(X_RANGE)
        _click(browser, browser.find_element("id", "nt-reset"))
        after = _range_after(browser, before)
        assert after[1] - after[0] > x[1] - x[0]
    finally:
        browser.set_window_size(1600, 1000)


def test_search_lists_matches_and_enter_zooms_to_the_next(browser: Any, serve: Callable[..., Any]) -> None:
    server, state = serve(SAMPLE, source_roots=[SAMPLES])
    _open(browser, server.url)
    box = browser.find_element("id", "nt-search")
    box.send_keys("aten::add_")
    note = wait_for(browser, "const e = document.querySelector('#nt-search-note'); return e && e.innerText;")
    count = int(note.split()[0].replace(",", ""))
    ix = state.model.index
    expected = sum(1 for p in range(ix.n_events) if "aten::add_" in str(ix.names[ix.name[p]]).lower())
    assert count == expected > 1
    hits = browser.find_elements("css selector", ".nt-hit")
    assert hits and all("aten::add_" in h.text for h in hits)
    box.send_keys("\n")  # Enter: the first match after the view's start is selected and shown
    first = wait_for(browser, "const e = document.querySelector('#nt-event-name'); return e && e.innerText;")
    assert "aten::add_" in first
    id1 = wait_for(browser, "return new URLSearchParams(window.location.search).get('event');")
    box.send_keys("\n")  # Enter again: the next one
    id2 = wait_for(browser, "const e = new URLSearchParams(window.location.search).get('event');"
                            "return e !== arguments[0] ? e : null;", id1)
    p1, p2 = ix.position(int(id1)), ix.position(int(id2))
    assert ix.start[p2] >= ix.start[p1]
    # A regular expression, written /like this/.
    from selenium.webdriver.common.keys import Keys

    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)  # (clear() does not reach React's onChange)
    box.send_keys("/^aten::(add_|view)$/")
    note = wait_for(browser, "const e = document.querySelector('#nt-search-note');"
                             "return e && !e.innerText.startsWith(arguments[0]) && !e.innerText.startsWith('0 ')"
                             " ? e.innerText : null;", note)
    assert int(note.split()[0].replace(",", "")) >= count


def test_keys_zoom_and_pan_and_f_fits_the_selection(browser: Any, serve: Callable[..., Any]) -> None:
    server, _state = serve(SAMPLE, source_roots=[SAMPLES])
    _open(browser, server.url)
    body = browser.find_element("css selector", "body")
    before = wait_for(browser, X_RANGE)
    body.send_keys("w")  # zoom in
    zoomed = _range_after(browser, before)
    assert zoomed[1] - zoomed[0] < 0.7 * (before[1] - before[0])
    body.send_keys("d")  # pan right
    panned = _range_after(browser, zoomed)
    assert panned[0] > zoomed[0] and panned[1] - panned[0] == pytest.approx(zoomed[1] - zoomed[0], rel=0.01)
    body.send_keys("s")  # zoom out
    out = _range_after(browser, panned)
    assert out[1] - out[0] > panned[1] - panned[0]
    # F: fit the selected event (selected through the search box).
    box = browser.find_element("id", "nt-search")
    box.send_keys("aten::add_\n")
    wait_for(browser, "const e = document.querySelector('#nt-event-name'); return e && e.innerText;")
    time.sleep(0.5)
    before = browser.execute_script(X_RANGE)
    body.send_keys("f")
    fitted = _range_after(browser, before)
    assert fitted[1] - fitted[0] < before[1] - before[0]


def test_the_url_follows_the_view_and_restores_it(browser: Any, serve: Callable[..., Any]) -> None:
    server, state = serve(SAMPLE, source_roots=[SAMPLES])
    _open(browser, server.url)
    ix = state.model.index
    p = next(i for i in range(ix.n_events) if str(ix.names[ix.name[i]]) == "aten::add_")
    event = int(ix.event_id[p])
    start, end = ix.origin_ns + int(ix.start[p]) - 50_000, ix.origin_ns + int(ix.end[p]) + 50_000
    browser.get(f"{server.url}?start_ns={start}&end_ns={end}&event={event}")
    wait_for(browser, "const e = document.querySelector('#nt-event-name'); return e && e.innerText === 'aten::add_';")
    origin = state.model.time_origin
    x = wait_for(browser, X_RANGE + "", timeout=15)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and abs(x[0] - (start - ix.origin_ns - origin) / 1e6) > 1e-3:
        time.sleep(0.1)
        x = browser.execute_script(X_RANGE)
    assert x[0] == pytest.approx((start - ix.origin_ns - origin) / 1e6, abs=1e-3)
    assert x[1] == pytest.approx((end - ix.origin_ns - origin) / 1e6, abs=1e-3)
    query = wait_for(browser, "const q = window.location.search; return q.includes('event=') ? q : null;")
    assert f"start_ns={start}" in query and f"end_ns={end}" in query and f"event={event}" in query
    # A new view rewrites the URL; "Copy link" hands out that URL.
    _click(browser, browser.find_element("id", "nt-reset"))
    changed = wait_for(browser, "return window.location.search !== arguments[0] ? window.location.search : null;",
                       query)
    assert "start_ns=" in changed and changed != query and f"event={event}" in changed
    _click(browser, browser.find_element("id", "nt-copy"))
    link = wait_for(browser, "const e = document.getElementById('nt-link'); return e && e.value;")
    assert link.endswith(changed)
    # Garbage in the URL is ignored, not an error.
    browser.get(f"{server.url}?start_ns=NaN&end_ns=1e400&event=x")
    _open(browser, server.url + "?start_ns=NaN&end_ns=1e400&event=x")
    assert "Traceback" not in browser.execute_script("return document.body.innerText;")


def test_the_details_panel_collapses_and_the_timeline_widens(browser: Any, serve: Callable[..., Any]) -> None:
    server, _state = serve(SAMPLE, source_roots=[SAMPLES])
    _open(browser, server.url)
    w0, _h = wait_for(browser, PLOT_BOX)
    _click(browser, browser.find_element("id", "nt-panels"))
    wait_for(browser, "return document.getElementById('nt-side').className.includes('nt-hidden');")
    w1 = wait_for(browser, PLOT_BOX.replace("return [", "const w = [").replace("];", "]; return w[0] > arguments[0] + 200 ? w : null;"), w0)
    assert w1[0] > w0 + 200


def test_the_assets_style_the_page_and_the_report_tab_shows_every_section(
        browser: Any, serve: Callable[..., Any]) -> None:
    """The styles and the key handler are files of neurontrace/app/assets that the page loads; the Report
    tab shows each registered section's lines, as `diagnose` prints them."""
    server, state = serve(SAMPLE, source_roots=[SAMPLES])
    _open(browser, server.url)
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
    assert any("/assets/neurontrace.css" in s for s in loaded) and any("/assets/keys.js" in s for s in loaded)
    header = browser.execute_script("return getComputedStyle(document.querySelector('.nt-header')).backgroundColor;")
    assert header == "rgb(21, 32, 43)"  # .nt-header's #15202b, from neurontrace.css
    assert browser.execute_script("return typeof ntKey;") == "function"
    wait_for(browser, "return document.querySelector('#nt-analysis-status') && "
                      "document.querySelector('#nt-analysis-status').innerText.includes('analysed in');", timeout=30)
    tab = browser.find_element("xpath", "//div[contains(@class, 'tab') and normalize-space()='Report']")
    _click(browser, tab)
    rows = state.model.analysis.report
    assert rows
    shown = wait_for(browser, "const e = document.querySelector('#nt-report'); "
                              "return e && e.innerText.includes(arguments[0]) ? e.innerText : null;", rows[-1]["lines"][0])
    for r in rows:
        assert r["title"] in shown and all(line in shown for line in r["lines"]), r["key"]
