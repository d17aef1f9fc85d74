"""The two-run page's logic without a browser (``neurontrace/app/compare/``), on the shipped comparison pair: each side
is aligned at its first analysed step, a zoom of either side draws the same aligned window in both, and
a diff row outlines exactly that op's events."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from dash import no_update

from neurontrace import errors
from neurontrace.app.callbacks import focus_view
from neurontrace.app.compare import layout as compare_layout
from neurontrace.app.compare.callbacks import on_compare, on_progress, on_search_pair, row_pick
from neurontrace.app.compare.model import CompareState, align_point, op_positions, provisional_point
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
    fa, fb, *_rest, view, _op = on_compare(pair, None, None, None, VIEWPORT)
    assert _x(fa) == pytest.approx(_x(fb))
    for side in ("a", "b"):
        relayout = {"xaxis.range[0]": 2.0, "xaxis.range[1]": 7.5}
        fa, fb, *_rest, new_view, _op = on_compare(pair, "nt-cmp-zoom", view, None, VIEWPORT,
                                                   zoom={"side": side, "relayout": relayout, "at": side})
        assert _x(fa) == pytest.approx([2.0, 7.5]) and _x(fb) == pytest.approx([2.0, 7.5])
        assert (new_view["t0"], new_view["t1"]) == (2_000_000, 7_500_000) and new_view["analysed"]
        assert new_view["origins"] == {k: align_point(m) for k, m in zip(("a", "b"), pair.models(), strict=True)}
    # A redraw that fired with the view from before a zoom (its answer would replace the zoom's): the zoom wins.
    zoom = {"side": "b", "relayout": {"xaxis.range[0]": 3.0, "xaxis.range[1]": 4.0}, "at": 7}
    *_figs, redrawn, _op = on_compare(pair, "nt-viewport", view, None, VIEWPORT, zoom=zoom)
    assert (redrawn["t0"], redrawn["t1"]) == (3_000_000, 4_000_000) and redrawn["zoom"] == 7
    *_figs, again, _op = on_compare(pair, "nt-viewport", redrawn | {"t0": 0}, None, VIEWPORT, zoom=zoom)
    assert again["t0"] == 0  # drawn once: a later redraw keeps the view it is given
    # Something that is not a zoom of the x axis changes nothing.
    unchanged = on_compare(pair, "nt-cmp-zoom", view, None, VIEWPORT,
                           zoom={"side": "a", "relayout": {"dragmode": "pan"}, "at": 3})
    assert all(o is no_update for o in unchanged)


def test_a_diff_row_outlines_that_op_in_both_timelines(pair: CompareState) -> None:
    rows = pair.rows()
    assert rows[0]["name"] == "augment" and rows[0]["status"] == "slower"  # make_compare_samples.py slows it
    assert {r["status"] for r in rows} <= {"added", "removed", "slower", "faster"}
    out = on_compare(pair, "nt-cmp-pick", None, None, VIEWPORT, pick=row_pick({"type": "nt-cmp-row", "index": 0}))
    assert out[5] == "augment"
    for model, fig, status in zip(pair.models(), out[:2], out[2:4], strict=True):
        (mark,) = [t for t in fig["data"] if t["name"] == "diff:augment"]
        n = sum(1 for v in mark["x"] if v is None)
        everywhere = op_positions(model, "augment", -2**60, 2**60)
        assert 0 < n <= len(everywhere) == 3  # one augment range per profiled step
        assert f"{n} augment events outlined" in status
    # The same row again clears the outline.
    again = on_compare(pair, "nt-cmp-pick", out[4], "augment", VIEWPORT,
                       pick=row_pick({"type": "nt-cmp-row", "index": 0}))
    assert again[5] is None and not any(t["name"].startswith("diff:") for t in again[0]["data"])
    assert row_pick({"type": "nt-cmp-row", "index": "x"}) is no_update


def test_a_diff_row_click_survives_a_redraw_that_fired_with_it(pair: CompareState) -> None:
    """Dash keeps the newest call's answer only: a redraw (resize, analysis stage, selection) that fired
    while the click's own call was in flight read the view and op from before the click, and its answer
    replaces the click's. It applies the click still, and only once."""
    *_figs, view, _op = on_compare(pair, None, None, None, VIEWPORT)
    pick = row_pick({"type": "nt-cmp-row", "index": 0})
    for trigger in ("nt-viewport", "nt-cmp-stage", "nt-cmp-selected"):
        raced = on_compare(pair, trigger, view, None, VIEWPORT, pick=pick)
        assert raced[5] == "augment" and raced[4]["pick"] == pick["nonce"]
        assert any(t["name"] == "diff:augment" for t in raced[0]["data"])
        # Drawn once: the next redraw keeps the op as it is (a second toggle would clear it).
        later = on_compare(pair, trigger, raced[4], "augment", VIEWPORT, pick=pick)
        assert later[5] is no_update and any(t["name"] == "diff:augment" for t in later[0]["data"])
    # A zoom racing the click, and a zoom store left with nothing to apply: both still outline the op.
    zoom = {"side": "a", "relayout": {"xaxis.range[0]": 2.0, "xaxis.range[1]": 7.5}, "at": 11}
    both = on_compare(pair, "nt-cmp-zoom", view, None, VIEWPORT, zoom=zoom, pick=pick)
    assert both[5] == "augment" and (both[4]["t0"], both[4]["t1"]) == (2_000_000, 7_500_000)
    idle = on_compare(pair, "nt-cmp-zoom", view, None, VIEWPORT, zoom=zoom | {"relayout": {"dragmode": "pan"}},
                      pick=pick)
    assert idle[5] == "augment"


def test_a_side_that_fails_to_load_shows_its_parsers_message(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    state = CompareState(ViewerState(str(SAMPLES / "compare" / "baseline.pt.trace.json.gz")), ViewerState(str(empty)))
    state.load()
    assert state.status == "error" and state.diff is None
    page = json.dumps(compare_layout.page(state).to_plotly_json(), default=lambda o: o.to_plotly_json())
    assert "empty (0 bytes)" in page and "empty.json" in page


def test_view_with_a_missing_second_trace_says_so() -> None:
    res = subprocess.run([sys.executable, "-m", "neurontrace", "view", str(SAMPLES / "compare" / "baseline.pt.trace.json.gz"),
                          "missing.pt.trace.json", "--no-browser", "--port", "0"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == errors.EXIT_NOT_FOUND
    assert "missing.pt.trace.json: no such file or directory" in res.stderr and "Traceback" not in res.stderr


# -- the page shows before the analyses: provisional alignment, then the analysed one once -----------

HTA_PAIR = ("HolisticTraceAnalysis/tests/data/trace_compare/base/base.json.gz",
            "HolisticTraceAnalysis/tests/data/trace_compare/test/test.json.gz")


def indexed_pair(corpus: Path) -> CompareState:
    """The HTA corpus's trace_compare pair (a V100 excerpt before and after a change), indexed, not analysed."""
    paths = [corpus / p for p in HTA_PAIR]
    if not all(p.exists() for p in paths):
        pytest.skip("the trace_compare pair is not in the corpus")
    state = CompareState(ViewerState(str(paths[0])), ViewerState(str(paths[1])))
    for side in state.sides.values():
        side.load(analyse=False)
    assert state.status == "ready" and state.stage()[0] == "analysing-a"
    return state


def _window(view: dict[str, Any], side: str) -> tuple[int, int]:
    """The window a side shows, in ns after its first event."""
    o = view["origins"][side]
    return view["t0"] + o, view["t1"] + o


@pytest.mark.corpus
def test_a_zoom_made_before_the_analysis_stays_on_the_same_events_of_a(corpus: Path) -> None:
    state = indexed_pair(corpus)
    a, _b = state.models()
    provisional = provisional_point(a)
    fa, fb, *_rest, view, _op = on_compare(state, None, None, None, VIEWPORT)
    assert view["origins"]["a"] == provisional and not view["analysed"]
    assert _x(fa) == pytest.approx(_x(fb)) and _window(view, "a") == (0, a.index.span_ns)  # the whole of A
    relayout = {"xaxis.range[0]": 1.0, "xaxis.range[1]": 4.0}  # the user zooms B
    *_figs, zoomed, _op = on_compare(state, "nt-cmp-zoom", view, None, VIEWPORT,
                                         zoom={"side": "b", "relayout": relayout, "at": 1})
    before = _window(zoomed, "a")
    state.analyse()
    assert state.stage()[0] == "ready" and state.diff is not None
    assert align_point(a) != provisional  # this pair's analysed alignment does move A's x = 0
    fa, fb, *_rest, after, _op = on_compare(state, "nt-cmp-stage", zoomed, None, VIEWPORT)
    assert after["analysed"] and after["origins"]["a"] == align_point(a)
    assert _window(after, "a") == before  # the same events of A on screen ...
    assert _x(fa) == pytest.approx(_x(fb))  # ... and B lined up with them at the analysed alignment


@pytest.mark.corpus
def test_a_view_nobody_moved_opens_on_a_s_analysis_window_once_analysed(corpus: Path) -> None:
    state = indexed_pair(corpus)
    *_figs, view, _op = on_compare(state, None, None, None, VIEWPORT)
    assert on_progress(state, "analysing-a", None)[0] is no_update  # nothing changed: nothing sent
    state.analyse()
    stage, _text, note, *_rest, disabled = on_progress(state, "analysing-a", None)
    assert stage == "ready" and "first analysed step" in note and disabled
    *_figs, after, _op = on_compare(state, "nt-cmp-stage", view, None, VIEWPORT)
    a = state.models()[0]
    assert _window(after, "a") == focus_view(a) and after["auto"]


def test_search_steps_through_both_runs_in_aligned_time(pair: CompareState) -> None:
    *_figs, view, _op = on_compare(pair, None, None, None, VIEWPORT)
    origins, _analysed = pair.alignment()
    models = dict(zip(("a", "b"), pair.models(), strict=True))
    selected: Any = None
    seen = []
    for _ in range(4):
        _results, picked, goto = on_search_pair(pair, "/^augment$/", True, selected, view, "both")
        side, event = picked["side"], picked["event"]
        ix = models[side].index
        assert str(ix.names[ix.name[ix.position(event)]]) == "augment" and goto["side"] == side
        seen.append((int(ix.start[ix.position(event)]) - origins[side], side))
        selected = picked
    assert {s for _t, s in seen} == {"a", "b"}  # the matches of both runs, one after the other ...
    assert seen == sorted(seen)  # ... in aligned time, A first at a tie
    results, picked, _goto = on_search_pair(pair, "augment", True, None, view, "b")
    assert picked["side"] == "b" and "B: " in json.dumps(results[0].to_plotly_json(), default=str)


def test_every_callback_of_the_two_run_page_survives_hostile_values() -> None:
    from neurontrace.app.compare import serve_pair
    from tests.test_app_server import every_callback_survives_hostile_values

    server, state = serve_pair(SAMPLES / "compare" / "baseline.pt.trace.json.gz",
                               SAMPLES / "compare" / "slowed.pt.trace.json.gz")
    try:
        deadline = time.monotonic() + 60
        while state.stage()[0] not in ("ready", "failed") and state.status != "error" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state.stage()[0] == "ready"
        every_callback_survives_hostile_values(server.url, callbacks_at_least=8, covers=("nt-cmp-memory.children",))
    finally:
        server.stop()


def test_the_header_gives_each_runs_headline_as_diagnose_prints_it(pair: CompareState) -> None:
    """The two-run page's header carries each side's one-line verdict, the very line `diagnose` prints first
    (run here as a separate process, as a user would)."""
    for side, name in (("a", "baseline"), ("b", "slowed")):
        res = subprocess.run([sys.executable, "-m", "neurontrace", "diagnose", "--json",
                              str(SAMPLES / "compare" / f"{name}.pt.trace.json.gz")],
                             capture_output=True, text=True, timeout=120, check=True)
        headline = json.loads(res.stdout)["headline"]
        assert headline and pair.headlines()[side] == headline
        assert headline in pair.counts()
