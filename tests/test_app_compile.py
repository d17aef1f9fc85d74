"""The viewer's Compile tab (app/compile_panel.py) on the real compile run of tests/compile_scenarios.py: its
recompiling trace served with the compile logs beside it, as ``neurontrace view`` finds them. Every compile
attempt is listed with its reason, the ones the trace recorded select their range on the timeline, and the source
links show the lines through the source panel's reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dash import no_update

import neurontrace
from neurontrace.analysis.compile import kineto_rows
from neurontrace.app import compile_panel
from neurontrace.app.model import ViewModel
from neurontrace.app.server import _compile_logs_beside
from neurontrace.app.source import OK, SourceReader
from tests.app_support import layout_text
from tests.conftest import ROOT

pytestmark = pytest.mark.torch
SCRIPT = ROOT / "tests" / "compile_scenarios.py"


@pytest.fixture(scope="module")
def model(compile_run: Path) -> ViewModel:
    path = compile_run / "recompile.pt.trace.json"
    m = ViewModel.build(neurontrace.load(path), title=str(path))
    m.compiles, m.compile_warnings = _compile_logs_beside(str(path))
    assert m.compiles is not None  # compile/ beside the trace
    m.analyse()
    return m


def _ids(node: Any, kind: str) -> list[dict[str, Any]]:
    if isinstance(node, list | tuple):
        return [i for n in node for i in _ids(n, kind)]
    found = []
    ident = getattr(node, "id", None)
    if isinstance(ident, dict) and ident.get("type") == kind:
        found.append(ident)
    children = getattr(node, "children", None)
    for child in children if isinstance(children, list) else [children] if children is not None else []:
        found += _ids(child, kind)
    return found


def test_the_panel_lists_every_compile_with_its_reason_and_the_graph_breaks(model: ViewModel) -> None:
    rows = compile_panel.attempts(model)
    rep = compile_panel.report_of(model)
    assert rep is not None and len(rows) == sum(len(f.compiles) for f in rep.frames)
    mlp = [r for r in rows if r["function"] == "mlp"]
    assert [r["compile_id"] for r in mlp] == ["0/0", "0/1", "0/2"]
    assert "size mismatch at index 0. expected 8, actual 16" in mlp[1]["why"]
    page = compile_panel.content(model)
    text = layout_text(page)
    assert "expected 8, actual 16" in text and "Tensor.item()" in text and "runs eagerly" in text
    # the frames' and the graph breaks' file:line, each a link
    links = compile_panel.sources(model)
    assert f"{SCRIPT}:{_line_of('.item() > 0')}" in links
    assert len(_ids(page, "nt-compile-src")) >= len(links)


def test_a_compile_row_selects_its_range_on_the_timeline(model: ViewModel) -> None:
    rows = compile_panel.attempts(model)
    ranges = {r["compile_id"]: r["event_id"] for r in kineto_rows(model.trace)}
    clickable = [i for i, r in enumerate(rows) if r["event_id"] is not None]
    # exactly the compiles made while the profiler recorded: mlp's three
    assert [rows[i]["compile_id"] for i in clickable] == ["0/0", "0/1", "0/2"] == list(ranges)
    for i in clickable:
        selected, goto = compile_panel.on_compile(model, {"type": "nt-compile-row", "index": i}, [1] * len(rows), None)
        assert selected == ranges[rows[i]["compile_id"]]
        event = model.event(selected)
        assert event is not None and event["name"] == "dynamo"
        assert goto["t0"] <= event["ts_ns"] - model.index.origin_ns and goto["t1"] >= event["ts_ns"] - \
            model.index.origin_ns + event["dur_ns"]
    # no click (Dash fires on creation), an index out of range, a hostile trigger: nothing changes
    for trigger, clicks in (({"index": 0}, [0] * len(rows)), ({"index": 10**9}, [1]), ({"index": float("nan")}, [1]),
                            ("x", [1])):
        assert compile_panel.on_compile(model, trigger, clicks, None) == (no_update,) * 2


def test_a_source_link_shows_its_lines(model: ViewModel) -> None:
    links = compile_panel.sources(model)
    i = links.index(f"{SCRIPT}:{_line_of('.item() > 0')}")
    panel = compile_panel.on_source(model, SourceReader([ROOT]), {"index": i}, [1])
    text = layout_text(panel)
    assert "if y.sum().item() > 0" in text
    assert SourceReader([ROOT]).read(str(SCRIPT), _line_of(".item() > 0")).status == OK
    assert compile_panel.on_source(model, SourceReader([ROOT]), {"index": -1}, [1]) is no_update


def _line_of(text: str) -> int:
    return next(i for i, ln in enumerate(SCRIPT.read_text().splitlines(), 1) if text in ln)
