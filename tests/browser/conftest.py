"""A real browser for the viewer's tests: headless Chromium from the Debian packages, driven by Selenium.

Skipped with the reason when Selenium, Chromium or its driver is missing (``.ci/run`` installs them:
``apt-get install chromium chromium-driver``; ``pip install -e '.[dev]'`` brings Selenium).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--no-first-run", "--window-size=1600,1000", "--force-device-scale-factor=1")


def _find(name: str, default: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    return default if Path(default).exists() else None


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    pytest.importorskip("selenium", reason="Selenium is not installed (pip install -e '.[dev]')")
    pytest.importorskip("dash", reason="Dash is not installed (pip install -e '.[viewer]')")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium = _find("chromium", "/usr/bin/chromium")
    driver_path = _find("chromedriver", "/usr/bin/chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip("headless Chromium is not installed (apt-get install chromium chromium-driver)")
    options = Options()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_window_size(1600, 1000)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def serve() -> Iterator[Callable[..., Any]]:
    """serve(trace_or_path, source_roots=[...]) -> (server, state); every server stops after the test."""
    from neurontrace.app.server import serve_trace

    servers = []

    def start(target: Any, *, source_roots: list[Path], wait: bool = True) -> Any:
        server, state = serve_trace(target, host="127.0.0.1", port=0, source_roots=source_roots)
        servers.append(server)
        deadline = time.monotonic() + 60
        while wait and time.monotonic() < deadline and state.status != "error" and (
                state.model is None or state.model.analysis is None):
            time.sleep(0.05)  # the loading page has tests of its own; these start from the loaded page
        return server, state

    yield start
    for server in servers:
        server.stop()


def wait_for(driver: Any, script: str, *args: Any, timeout: float = 20.0) -> Any:
    """Poll a JavaScript expression (``return ...``) until it gives something truthy."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = driver.execute_script(script, *args)
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for: {script.strip()[:200]} (last: {last!r})")
