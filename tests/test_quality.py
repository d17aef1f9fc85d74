"""Strict from day one: the linter and the type checker are part of the test suite."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize("tool", [["ruff", "check", "."], [sys.executable, "-m", "mypy"]], ids=["ruff", "mypy"])
def test_tool_is_clean(tool: list[str]) -> None:
    if tool[0] == "ruff" and shutil.which("ruff") is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    if tool[0] == sys.executable:
        pytest.importorskip("mypy")
    res = subprocess.run(tool, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def test_schema_page_check_script_agrees() -> None:
    res = subprocess.run([sys.executable, "scripts/gen_schema_doc.py", "--check"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
