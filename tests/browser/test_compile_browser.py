"""The viewer's Compile tab in headless Chromium, on the real compile run of tests/compile_scenarios.py (its
recompiling trace, with the compile logs beside it): a click on a compile id selects that compile's range on the
timeline, a click on a graph break's file:line shows its line in the source panel."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import wait_for
from tests.conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.torch]
SCRIPT = ROOT / "tests" / "compile_scenarios.py"


def _click(browser: Any, element: Any) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
    ActionChains(browser).move_to_element(element).pause(0.1).click().perform()


def test_a_compile_id_selects_its_range_and_a_break_shows_its_line(browser: Any, serve: Callable[..., Any],
                                                                   compile_run: Path) -> None:
    server, state = serve(compile_run / "recompile.pt.trace.json", source_roots=[ROOT])
    browser.get(server.url)
    wait_for(browser, "return document.querySelector('#nt-analysis-status') && "
                      "document.querySelector('#nt-analysis-status').innerText.includes('analysed in');", timeout=60)
    _click(browser, browser.find_element("xpath", "//div[contains(@class, 'tab') and normalize-space()='Compile']"))
    button = wait_for(browser, "return Array.from(document.querySelectorAll('#nt-compile-table button.nt-hit'))"
                               ".find(b => b.innerText === '0/1');")
    _click(browser, button)
    wait_for(browser, "const e = document.querySelector('#nt-event-name'); return e && e.innerText === 'dynamo';")
    line = next(i for i, ln in enumerate(SCRIPT.read_text().splitlines(), 1) if ".item() > 0" in ln)
    link = wait_for(browser, "return Array.from(document.querySelectorAll('#nt-compile-breaks button'))"
                             ".find(b => b.innerText.endsWith(arguments[0]));", f"compile_scenarios.py:{line}")
    _click(browser, link)
    shown = wait_for(browser, "const e = document.querySelector('#nt-src-hl'); return e ? e.innerText : null;")
    assert str(line) in shown and "y.sum().item() > 0" in shown
    assert state.model is not None and state.model.compiles is not None  # the logs beside the trace were read
