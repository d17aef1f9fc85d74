"""The notebooks run top to bottom on the shipped samples, and are committed without outputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXPECTED = {"01_quickstart.ipynb", "02_neuron_device_profile.ipynb", "03_compare_runs.ipynb"}


def test_the_notebooks_are_there() -> None:
    assert {p.name for p in NOTEBOOKS} >= EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_notebooks_have_no_outputs(path: Path) -> None:
    doc = json.loads(path.read_text())
    for i, cell in enumerate(doc["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name} cell {i} has outputs: strip them"
            assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.slow
@pytest.mark.parametrize("cwd", ["notebooks", "root"])
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_without_errors(path: Path, cwd: str) -> None:
    """From notebooks/ (where Jupyter starts a notebook's kernel) and from the repository root."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("plotly")
    notebook = nbformat.read(path, as_version=4)
    where = path.parent if cwd == "notebooks" else ROOT
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(where)}})  # the kernel's cwd
    client.execute()  # raises CellExecutionError, naming the cell, on the first error
    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    # What a notebook prints or shows is read by people: times in their units (units.py), never a raw
    # "123456789 ns" or a bare None / NaN (#27 item 8). Raw columns of the event tables are data, not text.
    for i, cell in enumerate(notebook.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            text = out.get("text") or (out.get("data") or {}).get("text/plain") or ""
            assert not re.search(r"\bNone\b|\bNaN\b|\d{6,} ?ns\b", text), f"{path.name} cell {i}: {text[:300]}"
    if "neuron" in path.stem:  # the synthetic sample is labelled as such in what the notebook shows
        text = json.dumps([c.outputs for c in notebook.cells if c.cell_type == "code"])
        assert "SYNTHETIC" in text
