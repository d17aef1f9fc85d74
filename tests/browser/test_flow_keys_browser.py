"""Keys ] and [ on the one-trace page, on a real H100 trace of the corpus: with a kernel launch selected,
] selects the kernel it enqueued (its launch flow) and brings it on screen; [ goes back to the launch.
(The two-run page's keys are tested in ``test_compare_browser.py``.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import wait_for
from tests.browser.test_viewer_browser import PLOT, X_RANGE

pytestmark = pytest.mark.browser

BERT_H100 = Path("TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz")
SELECTED = "return new URLSearchParams(window.location.search).get('event');"


def _selected_after(browser: Any, before: str | None) -> int:
    """The event the page selected (the URL names it) once it is no longer ``before``."""
    return int(wait_for(browser, "const e = new URLSearchParams(window.location.search).get('event');"
                                 "return e && e !== arguments[0] ? e : null;", before))


@pytest.mark.corpus
def test_brackets_follow_a_launch_to_its_kernel_and_back(browser: Any, serve: Callable[..., Any],
                                                          corpus: Path, tmp_path: Path) -> None:
    path = corpus / BERT_H100
    if not path.exists():
        pytest.skip(f"{BERT_H100} is not in the corpus")
    server, state = serve(path, source_roots=[tmp_path])
    browser.get(server.url)
    wait_for(browser, f"const g = {PLOT}; return g && g.data && g.data.length > 0;", timeout=30)
    model = state.model
    box = browser.find_element("id", "nt-search")
    box.send_keys("/^cudaLaunchKernel$/\n")  # Enter: the first launch in the view is selected
    launch = _selected_after(browser, None)
    assert model.event(launch)["name"] == "cudaLaunchKernel"
    body = browser.find_element("css selector", "body")
    body.send_keys("]")
    kernel = _selected_after(browser, str(launch))
    event = model.event(kernel)
    assert event["side"] == "device" and event["category"] == "compute"
    flow = state.model.trace.flows.to_pylist()
    assert {"src_event_id": launch, "dst_event_id": kernel} in [
        {k: f[k] for k in ("src_event_id", "dst_event_id")} for f in flow if f["kind"] == "launch"]
    wait_for(browser, "const e = document.querySelector('#nt-event-name'); return e && e.innerText === arguments[0];",
             event["name"])
    x = wait_for(browser, X_RANGE)
    start_ms = (event["rel_ns"] - model.time_origin) / 1e6
    assert x[0] <= start_ms <= x[1]  # brought on screen
    body.send_keys("]")  # nothing flows out of a kernel: the selection stays
    body.send_keys("[")
    assert _selected_after(browser, str(kernel)) == launch
