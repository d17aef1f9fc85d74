"""The two-run page's logic without a browser (``app/compare.py``), on the shipped comparison pair: each side
is aligned at its first analysed step, a zoom of either side draws the same aligned window in both, and
a diff row outlines exactly that op's events."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from dash import no_update

from neurontrace import errors
from neurontrace.app.compare import CompareState, align_point, on_compare, op_positions
from neurontrace.app.server import ViewerState
from tests.conftest import SAMPLES

VIEWPORT = {"w": 1600, "h": 1000}


@pytest.fixture(scope="module")
def pair() -> CompareState:
    state = CompareState(ViewerState(str(SAMPLES / "compare" / "baseline.pt.trace.json.gz")),
                         ViewerState(str(SAMPLES / "compare" / "slowed.pt.trace.json.gz")))
    state.load()
    assert state.status == "ready", state.error
    return state


def test_each_side_is_aligned_at_its_first_analysed_step(pair: CompareState) -> None:
    for model in pair.models():
        focus = model.focus()
        assert focus is not None
        w0, w1 = focus[1]
        starts = model.steps[0]
        point = align_point(model)
        assert point in starts.tolist() and w0 <= point < w1
        assert not np.any((starts >= w0) & (starts < point))  # the first step in the window, not a later one


def _x(fig: dict[str, Any]) -> list[float]:
    return [float(v) for v in fig["layout"]["xaxis"]["range"]]


def test_a_zoom_of_either_side_draws_the_same_aligned_window_in_both(pair: CompareState) -> None:
    fa, fb, *_rest, view, _op = on_compare(pair, None, {"a": None, "b": None}, None, None, VIEWPORT)
    assert _x(fa) == pytest.approx(_x(fb))
    for side in ("a", "b"):
        relayout = {"xaxis.range[0]": 2.0, "xaxis.range[1]": 7.5}
        fa, fb, *_rest, new_view, _op = on_compare(pair, f"nt-cmp-timeline-{side}", {"a": None, "b": None}
                                                   | {side: relayout}, view, None, VIEWPORT)
        assert _x(fa) == pytest.approx([2.0, 7.5]) and _x(fb) == pytest.approx([2.0, 7.5])
        assert (new_view["t0"], new_view["t1"]) == (2_000_000, 7_500_000) and new_view["analysed"]
        assert new_view["origins"] == {k: align_point(m) for k, m in zip(("a", "b"), pair.models(), strict=True)}
    # Something that is not a zoom of the x axis changes nothing.
    unchanged = on_compare(pair, "nt-cmp-timeline-a", {"a": {"dragmode": "pan"}, "b": None}, view, None, VIEWPORT)
    assert all(o is no_update for o in unchanged)


def test_a_diff_row_outlines_that_op_in_both_timelines(pair: CompareState) -> None:
    rows = pair.rows()
    assert rows[0]["name"] == "augment" and rows[0]["status"] == "slower"  # make_compare_samples.py slows it
    assert {r["status"] for r in rows} <= {"added", "removed", "slower", "faster"}
    out = on_compare(pair, {"type": "nt-cmp-row", "index": 0}, {"a": None, "b": None}, None, None, VIEWPORT)
    assert out[5] == "augment"
    for model, fig, status in zip(pair.models(), out[:2], out[2:4], strict=True):
        (mark,) = [t for t in fig["data"] if t["name"] == "diff:augment"]
        n = sum(1 for v in mark["x"] if v is None)
        everywhere = op_positions(model, "augment", -2**60, 2**60)
        assert 0 < n <= len(everywhere) == 3  # one augment range per profiled step
        assert f"{n} augment events outlined" in status
    # The same row again clears the outline.
    again = on_compare(pair, {"type": "nt-cmp-row", "index": 0}, {"a": None, "b": None}, out[4], "augment", VIEWPORT)
    assert again[5] is None and not any(t["name"].startswith("diff:") for t in again[0]["data"])


def test_a_side_that_fails_to_load_shows_its_parsers_message(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    state = CompareState(ViewerState(str(SAMPLES / "compare" / "baseline.pt.trace.json.gz")), ViewerState(str(empty)))
    state.load()
    assert state.status == "error" and state.diff is None
    page = json.dumps(state.page().to_plotly_json(), default=lambda o: o.to_plotly_json())
    assert "empty (0 bytes)" in page and "empty.json" in page


def test_view_with_a_missing_second_trace_says_so() -> None:
    res = subprocess.run([sys.executable, "-m", "neurontrace", "view", str(SAMPLES / "compare" / "baseline.pt.trace.json.gz"),
                          "missing.pt.trace.json", "--no-browser", "--port", "0"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == errors.EXIT_NOT_FOUND
    assert "missing.pt.trace.json: no such file or directory" in res.stderr and "Traceback" not in res.stderr
