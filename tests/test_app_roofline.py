"""The viewer's ops panel as plain functions: the range it follows, its figures against ``op_table``'s, the
pick that outlines an op's kernels, and the index behind it (one window at a time, the same answers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("dash")

from dash import no_update

import neurontrace
from neurontrace.analysis.ops import OpsIndex, op_table
from neurontrace.app import callbacks, layout, roofline
from neurontrace.app.model import ViewModel
from tests.conftest import SAMPLES
from tests.micro import load, x

H100 = "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
BF16 = "c10::BFloat16"


def _model(trace: neurontrace.Trace) -> ViewModel:
    model = ViewModel.build(trace)
    model.analyse()
    return model


@pytest.fixture(scope="module")
def h100() -> ViewModel:
    from tests.conftest import corpus_root

    root = corpus_root()
    if root is None or not (root / H100).exists():
        pytest.skip(f"{H100} is not in the corpus beside this checkout")
    return _model(neurontrace.load(root / H100))


def _rows(rep: Any) -> list[dict[str, Any]]:
    return [r.as_dict() for r in rep.rows]


def _cells(table: list[Any]) -> list[list[str]]:
    return [[td.children for td in tr.children] for tr in table]


@pytest.mark.corpus
def test_a_window_of_the_index_is_the_table_of_that_window_alone(h100: ViewModel) -> None:
    """Kernels linked once (every kernel of this trace has its own launch flow) give, for any window, the
    table op_table gives when it links only that window's kernels."""
    trace = h100.trace
    index = OpsIndex(trace, device="cuda:0")
    assert index._linked is not None
    alone = OpsIndex(trace, device="cuda:0")
    alone._linked = None  # link the window's kernels only, as before the index existed
    ts = trace.device_events["ts_ns"].to_numpy()
    lo, hi = int(ts.min()), int(ts.max())
    from neurontrace.analysis.ops import _own_flows

    flowed = _own_flows(index.host, trace.flows, index.dev)
    assert flowed.any() and not flowed.all()  # both kinds: the two links per kernel are both used
    dev_ts = index.dev["ts_ns"].to_numpy()
    alone_kernels = [(int(t), int(t) + 1) for t in dev_ts[~flowed][::97]]  # windows of kernels without a flow
    spans = [(lo + int((hi - lo) * a), lo + int((hi - lo) * b) + 1)
             for a, b in ((0.0, 1.0), (0.1, 0.4), (0.5, 0.52), (0.9, 1.0))]
    for w in spans + alone_kernels:
        got = index.view(w)
        assert got.report.as_dict() == alone.view(w).report.as_dict()
        assert len(got.event_ids) == sum(r.kernels for r in got.report.rows)  # each kernel in exactly one row
        assert all(len(got.event_ids_of(i)) == r.kernels for i, r in enumerate(got.report.rows))


@pytest.mark.corpus
def test_the_panel_shows_the_analysis_window_then_the_zoomed_range(h100: ViewModel) -> None:
    assert h100.analysis is not None
    (d,) = h100.analysis.diagnosis.devices
    opened = {"t0": 0, "t1": 1, "origin": 0, "auto": True}
    fig, table, _sort, status, _drawn = roofline.on_ops(h100, "roofline", opened, None, "view", None, None, None, None)
    expected = op_table(h100.trace, window=d.window, device="cuda:0")
    gemm = max((r for r in expected.rows if r.op_class == "gemm" and r.tflops_per_s), key=lambda r: r.device_ns)
    assert gemm.intensity is not None and gemm.tflops_per_s is not None
    intensity = round(gemm.intensity, 3)  # as the JSON of `neurontrace ops` rounds it
    (points,) = [t for t in fig["data"] if t["name"] == "gemm" and intensity in t["x"]]
    i = list(points["x"]).index(intensity)
    assert points["y"][i] == round(gemm.tflops_per_s, 4) and gemm.tflops_per_s > 100
    assert expected.rows[points["customdata"][i]].op == gemm.op  # a click names the row
    assert "NVIDIA H100 SXM" in status and "analysis window +0.000 to" in status
    names = [t["name"] for t in fig["data"]]
    assert "HBM 3.35 TB/s (memory roof)" in names and "bf16/fp16 roof 989.5 TFLOP/s" in names
    assert len(table) == len(expected.rows) and _cells(table)[0][0] == expected.rows[0].op
    # Zoomed in: the visible range, the same table `neurontrace ops --window` gives for it.
    origin = h100.index.origin_ns
    zoomed = {"t0": d.window[0] - origin + 5_000_000, "t1": d.window[0] - origin + 9_000_000, "origin": 0,
              "auto": False}
    _fig, table, _sort, status, _drawn = roofline.on_ops(h100, "roofline", zoomed, 0, "view", None, None, None, None)
    part = op_table(h100.trace, window=(d.window[0] + 5_000_000, d.window[0] + 9_000_000), device="cuda:0")
    assert "visible range" in status and len(table) == len(part.rows)
    assert sum(r.kernels for r in part.rows) < sum(r.kernels for r in expected.rows)
    assert f"{sum(r.kernels for r in part.rows):,} kernels" in status
    # "the analysis window" holds it whatever the zoom.
    _fig, _table, _sort, status, _drawn = roofline.on_ops(h100, "roofline", zoomed, 0, "window", None, None, None,
                                                          None)
    assert "analysis window" in status
    # Not shown: nothing computed.
    assert roofline.on_ops(h100, "stalls", opened, None, "view", None, None, None, None) == (no_update,) * 5


@pytest.mark.corpus
def test_a_pick_outlines_the_ops_kernels_and_a_second_click_clears_it(h100: ViewModel) -> None:
    opened = {"t0": 0, "t1": 1, "auto": True}
    assert h100.analysis is not None
    view = h100.ops_view(("cuda:0", None), h100.analysis.diagnosis.devices[0].window)
    gemm = next(i for i, r in enumerate(view.report.rows) if r.op_class == "gemm")
    pick = roofline.on_pick(h100, "nt-roof-graph", {"points": [{"customdata": gemm}]}, opened, 0, "view", None)
    assert pick["op"] == view.report.rows[gemm].op and pick["kernel_class"] == "gemm"
    marked = callbacks.marked(h100, pick)
    ix = h100.index
    assert sorted(ix.event_id[list(marked)].tolist()) == sorted(view.event_ids_of(gemm).tolist())
    # The timeline outlines them (all in the window: as many outlines as kernels).
    focus = callbacks.focus_view(h100)
    assert focus is not None
    fig, _view, _status = callbacks.on_timeline(h100, "nt-highlight", None, None, {**opened, "t0": focus[0],
                                                                                     "t1": focus[1]},
                                                highlight=pick)
    (outline,) = [t for t in fig["data"] if t["name"] == "marked"]
    assert outline["x"].count(None) == view.report.rows[gemm].kernels
    # The same op again (its table row): cleared. The ring on the plot follows the pick.
    row = {"type": "nt-roof-row", "table": "roofline", "index": gemm}
    assert roofline.on_pick(h100, row, None, opened, 0, "view", pick) is None
    fig, *_ = roofline.on_ops(h100, "roofline", opened, 0, "view", None, None, pick, "nt-highlight")
    assert any(t["name"] == "picked" for t in fig["data"])
    # Hostile values are ignored.
    bad: object
    for bad in ({"points": [{"customdata": float("nan")}]}, {"points": [{"customdata": 10**9}]}, {"points": []}, "x"):
        assert roofline.on_pick(h100, "nt-roof-graph", bad, opened, 0, "view", None) is no_update
    assert callbacks.marked(h100, {**pick, "window": [float("inf"), 1]}) == ()
    assert callbacks.marked(h100, {**pick, "device": "cuda:9"}) == ()


def test_an_unknown_device_says_so_and_still_draws_its_points(tmp_path: Path) -> None:
    """A GEMM with known shapes on a device the trace does not name: achieved points, no roofs, no guess."""
    ev = [x("cpu_op", "aten::mm", 0, 100, **{"External id": 1, "Input Dims": [[512, 512], [512, 512]],
                                          "Input type": [BF16] * 2}),
          x("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=11, **{"External id": 1}),
          x("kernel", "sm90_gemm", 30, 30, pid=0, tid=7, device=0, correlation=11)]
    model = _model(load(tmp_path, ev))
    fig, table, _sort, status, _drawn = roofline.on_ops(model, "roofline", None, None, "view", None, None, None, None)
    assert "no peak" in status and "achieved points only" in status
    names = [t["name"] for t in fig["data"]]
    assert names == ["gemm"] and "no peak, no roofs" in fig["layout"]["title"]["text"]
    assert fig["data"][0]["y"][0] == pytest.approx(2 * 512**3 / 30e-6 / 1e12, rel=1e-3)
    cells = _cells(table)[0]
    assert cells[0] == "aten::mm" and cells[10] == "" and cells[11] == ""  # no % of peak, no bound: unknown


def test_a_cpu_trace_shows_its_ops_and_outlines_them_on_the_host() -> None:
    model = _model(neurontrace.load(SAMPLES / "cpu_train_loop.pt.trace.json.gz"))
    opened = {"t0": 0, "t1": 1, "auto": True}
    options, first = roofline.device_options(model)
    assert options[first]["label"] == "cpu"
    _fig, table, _sort, status, _drawn = roofline.on_ops(model, "roofline", opened, first, "view", None, None, None,
                                                         None)
    assert model.analysis is not None
    (d,) = model.analysis.diagnosis.devices
    rep = op_table(model.trace, window=d.window, device="cpu", rank=d.rank)
    assert rep.rows and len(table) == len(rep.rows) and "cpu" in status
    pick = roofline.on_pick(model, {"type": "nt-roof-row", "table": "roofline", "index": 0}, None, opened, first,
                            "view", None)
    marked = callbacks.marked(model, pick)
    assert len(marked) == rep.rows[0].kernels
    assert {str(model.index.names[model.index.name[p]]) for p in marked} == {rep.rows[0].op}  # the ops themselves


def test_sorting_puts_unknown_values_last_both_ways() -> None:
    rows: list[dict[str, Any]] = [{"op": "a", "tflops_per_s": 2.0}, {"op": "b", "tflops_per_s": None}, {"op": "c", "tflops_per_s": 10.0}]
    for desc, order in ((False, ["a", "c", "b"]), (True, ["c", "a", "b"])):
        out = layout.table_rows("roofline", rows, sort={"column": "tflops_per_s", "desc": desc}, kind="nt-roof")
        assert [tr.children[0].children for tr in out] == order
        assert all(tr.id["type"] == "nt-roof-row" for tr in out)


def test_the_index_evaluates_each_op_once_across_windows(tmp_path: Path) -> None:
    ev = [x("cpu_op", "aten::mm", 0, 100, **{"External id": 1, "Input Dims": [[64, 64], [64, 64]],
                                          "Input type": [BF16] * 2}),
          x("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=11, **{"External id": 1}),
          x("kernel", "sm90_gemm", 30, 30, pid=0, tid=7, device=0, correlation=11)]
    trace = load(tmp_path, ev)
    index = OpsIndex(trace, device="cuda:0")
    start = int(trace.device_events["ts_ns"][0].as_py())
    empty = index.view((start + 1, start + 2))
    assert empty.report.rows == [] and not index._done.any()  # nothing asked, nothing evaluated
    (row,) = index.view(None).report.rows
    assert row.flops == 2 * 64**3 and int(index._done.sum()) == 1
    assert np.array_equal(index.view((start, start + 1)).event_ids, trace.device_events["event_id"].to_numpy())


def test_row_codes_are_the_lexicographic_ranks_numpy_gives() -> None:
    """columns.row_codes replaces np.unique(np.stack(cols, 1), axis=0, return_inverse=True) in the linking."""
    from neurontrace.columns import row_codes

    rng = np.random.default_rng(0)
    for n in (1, 7, 5_000):
        cols = [rng.integers(-1, k, n) for k in (3, 50, 2**40)]
        expected = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)[1].ravel()
        assert np.array_equal(row_codes(*cols), expected)
    assert len(row_codes(np.zeros(0, np.int64), np.zeros(0, np.int64))) == 0
