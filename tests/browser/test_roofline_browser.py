"""The ops panel in a real browser, on a real H100 trace of the corpus: the roofline under the H100's roofs,
the GEMM point where ``neurontrace ops --json`` (run as its own process, for the same window) puts it, and a
click on a point or a table row outlining that op's kernels on the timeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import wait_for
from tests.browser.test_viewer_browser import PLOT, _click, _h100, _open
from tests.conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.corpus]

ROOF = "document.querySelector('#nt-roof-graph .js-plotly-plot')"
ROOF_TRACES = f"const g = {ROOF}; return g && g.data && g.data.length ? g.data.map(t => t.name) : null;"
MARKED = f"""const g = {PLOT};
const t = g && g.data ? g.data.find(t => t.name === 'marked') : null;
return t ? t.x.filter(v => v === null).length : (arguments[0] ? 0 : null);"""
# The on-screen point of a roofline trace nearest (x, y) in data units: its SVG path, for a real click.
POINT = f"""
const g = {ROOF};
if (!g || !g.data) return null;
const k = g.data.findIndex(t => t.name === arguments[0]);
if (k < 0) return null;
const t = g.data[k];
let best = 0;
for (let i = 0; i < t.x.length; i++)
  if (Math.abs(t.y[i] - arguments[1]) < Math.abs(t.y[best] - arguments[1])) best = i;
const paths = g.querySelectorAll('.scatterlayer .trace')[k].querySelectorAll('.points path');
return paths.length > best ? [paths[best], t.x[best], t.y[best], t.customdata[best]] : null;
"""


# The ops table's row of (op, kernel class), and its cells' text.
ROW_OF = """
for (const tr of document.querySelectorAll('tr.nt-tr')) {
  const cells = Array.from(tr.querySelectorAll('td')).map(td => td.innerText);
  if (JSON.parse(tr.id).table === 'roofline' && cells[0] === arguments[0] && cells[2] === arguments[1])
    return [tr, cells];
}
return null;
"""


def _picture(browser: Any, tmp_path: Path) -> None:
    """The tab on screen, saved under tmp_path; with NEURONTRACE_UPDATE_SCREENSHOT=1 also as docs/viewer_roofline.png."""
    import shutil
    import time

    browser.execute_script("document.getElementById('nt-roof-graph').scrollIntoView({block: 'start'});"
                           "window.scrollBy(0, -60);")
    time.sleep(0.5)  # the hover label fades
    shot = tmp_path / "viewer-roofline.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    if os.environ.get("NEURONTRACE_UPDATE_SCREENSHOT"):
        shutil.copyfile(shot, ROOT / "docs" / "viewer_roofline.png")


def _cli(*args: str) -> Any:
    out = subprocess.run([sys.executable, "-m", "neurontrace", *args], capture_output=True, text=True, check=True,
                         env={**os.environ, "NO_COLOR": "1"})
    return json.loads(out.stdout)


def test_the_roofline_of_a_real_h100_trace_and_a_click_outlines_the_ops_kernels(
        browser: Any, serve: Callable[..., Any], corpus: Path, tmp_path: Path) -> None:
    path = Path(os.path.relpath(_h100(corpus)))  # relative: the page's title (and a picture) names no machine path
    server, _state = serve(path, source_roots=[tmp_path])
    _open(browser, server.url)
    # The independent figures: diagnose's analysis window, then neurontrace ops over it, each its own process.
    (device,) = _cli("diagnose", str(path), "--json")["devices"]
    window = device["window"]
    doc = _cli("ops", str(path), "--json", "--device", "cuda:0",
               "--window", f"abs:{window['start_ns']}:{window['end_ns']}")
    gemm = max((r for r in doc["rows"] if r["op_class"] == "gemm" and r["tflops_per_s"]), key=lambda r: r["device_ns"])

    tab = wait_for(browser, "return Array.from(document.querySelectorAll('.tab')).find("
                            "t => t.innerText.includes('roofline'));")
    _click(browser, tab)
    names = wait_for(browser, ROOF_TRACES)
    # The H100's roofs from the peak table: HBM bandwidth, one compute roof per dtype peak, the ridge points.
    assert "HBM 3.35 TB/s (memory roof)" in names and "bf16/fp16 roof 989.5 TFLOP/s" in names
    assert "fp32 roof 67 TFLOP/s" in names and "ridge points" in names and "gemm" in names
    status = wait_for(browser, "const e = document.getElementById('nt-roof-status'); return e && e.innerText;")
    assert "NVIDIA H100 SXM" in status and "analysis window" in status
    # The GEMM point sits at the TFLOP/s and intensity neurontrace ops measured for the window.
    point, x, y, row = wait_for(browser, POINT, "gemm", gemm["tflops_per_s"])
    assert y == pytest.approx(gemm["tflops_per_s"], rel=1e-3) and x == pytest.approx(gemm["intensity"], rel=1e-3)
    assert gemm["tflops_per_s"] > 100  # a real GEMM rate, not a unit slip
    assert doc["rows"][row] == gemm  # the point names the row: the viewer's table is the CLI's, row for row
    # The table holds the same row: kernels, TFLOP/s, % of peak and bound.
    _tr, cells = wait_for(browser, ROW_OF, gemm["op"], gemm["kernel_class"])
    assert cells[3] == f"{gemm['kernels']:,}" and cells[-1] == gemm["bound"]
    assert float(cells[7].replace(",", "")) == pytest.approx(gemm["tflops_per_s"], rel=1e-3)
    assert float(cells[10]) == pytest.approx(gemm["pct_of_peak"], abs=0.01)

    # Click the point: the timeline outlines the op's kernels, every one of them (all in the window).
    outlined = None
    for _attempt in range(3):  # a click can land while the graph redraws on a loaded machine
        _click(browser, point)
        try:
            outlined = wait_for(browser, MARKED, False, timeout=10)
            break
        except AssertionError:
            point = wait_for(browser, POINT, "gemm", gemm["tflops_per_s"])[0]
    assert outlined == gemm["kernels"]
    wait_for(browser, f"const g = {ROOF}; return g && g.data.some(t => t.name === 'picked');")  # ringed
    _picture(browser, tmp_path)
    # A table row does the same for its op; the same row again clears it.
    attention = max((r for r in doc["rows"] if r["op_class"] == "attention"), key=lambda r: r["device_ns"])
    _click(browser, wait_for(browser, ROW_OF, attention["op"], attention["kernel_class"])[0])
    wait_for(browser, MARKED.replace("return t ?", "return t && t.x.filter(v => v === null).length === arguments[1] ?"),
             False, attention["kernels"], timeout=15)
    _click(browser, wait_for(browser, ROW_OF, attention["op"], attention["kernel_class"])[0])
    wait_for(browser, f"const g = {PLOT}; return g && g.data && !g.data.some(t => t.name === 'marked');", timeout=15)
