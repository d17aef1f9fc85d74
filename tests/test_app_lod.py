"""The viewer's track index and level of detail, against brute force (no Dash needed)."""

from __future__ import annotations

import numpy as np
import pytest

from neurontrace.app import lod, tracks
from neurontrace.app.palette import LEVELS, binned_colorscale
from tests.app_support import T0, US, tiny_trace


def _reference(start: np.ndarray, end: np.ndarray, cat: np.ndarray, w: lod.Window, n_cat: int) -> np.ndarray:
    """Busy fraction per category and bin, one event and one bin at a time."""
    edges = w.t0 + np.arange(w.n_bins + 1) * w.bin_ns
    out = np.zeros((n_cat, w.n_bins))
    for s, e, c in zip(start.tolist(), end.tolist(), cat.tolist(), strict=True):
        for i in range(w.n_bins):
            overlap = min(e, edges[i + 1]) - max(s, edges[i])
            if overlap > 0:
                out[c, i] += overlap / w.bin_ns
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_busy_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    start = np.sort(rng.integers(-2_000, 50_000, n))
    end = start + rng.choice([0, 1, 7, 300, 5_000, 40_000], n)
    cat = rng.integers(0, 4, n)
    w = lod.window(1_234, 41_234 + seed * 977, 97 + seed)
    got, touched = lod.busy(start, end, cat, w, 4)
    np.testing.assert_allclose(got, _reference(start, end, cat, w, 4), atol=1e-9)
    # Every bin holding the start of an event in the window (instants too) is marked as touched.
    inside = (start >= w.t0) & (start < w.t1)
    first_bins = np.unique(((start[inside] - w.t0) // w.bin_ns).astype(int))
    assert touched[first_bins].all()


def test_busy_conserves_time_inside_the_window() -> None:
    start = np.array([0, 100, 250, 990], dtype=np.int64)
    end = np.array([50, 240, 900, 1_500], dtype=np.int64)
    w = lod.window(0, 1_000, 7)
    got, _ = lod.busy(start, end, np.zeros(4, np.int64), w, 1)
    assert got.sum() * w.bin_ns == pytest.approx(50 + 140 + 650 + 10)


def test_encode_levels_and_empty_cells() -> None:
    matrix = np.array([[0.0, 0.05, 0.5, 1.0, 0.0], [0.0, 0.0, 0.6, 0.3, 0.0]])
    touched = np.array([False, True, True, True, True])
    code, pct = lod.encode(matrix, touched)
    assert code[0] == 0 and pct[0] == 0  # nothing there
    assert code[1] == 1  # category 0, lowest level: a sliver of work stays visible
    assert code[2] == 1 + 1 * LEVELS + (LEVELS - 1)  # category 1 dominates, busy capped at 100%
    assert pct.tolist() == [0, 5, 100, 100, 0]
    assert code[4] == 1  # touched by an instant only
    scale = binned_colorscale(["#2e7d32", "#1565c0"])
    assert scale[0][0] == 0.0 and scale[-1][0] == 1.0
    assert [p for p, _ in scale] == sorted(p for p, _ in scale)


def test_track_index_lanes_depth_and_groups() -> None:
    ix = tracks.build(tiny_trace())
    assert ix.origin_ns == T0
    assert [g.label for g in ix.groups] == ["box · process 1", "cuda:0"]  # host above device
    # Thread 1 in three layers: its step, its Python frame, then its op ⊃ launch.
    steps, frames, work = (ix.tracks[t] for t in ix.groups[0].tracks[:3])
    assert [t.label for t in (steps, frames, work)] == ["thread 1 · steps", "thread 1 · Python", "thread 1"]
    assert [t.layer for t in (steps, frames, work)] == [tracks.MARKERS, tracks.PYTHON, tracks.WORK]
    assert (steps.depth, frames.depth, work.depth) == (1, 1, 2)
    by_id = {int(e): i for i, e in enumerate(ix.event_id)}
    depth = {eid: int(ix.lane_depth[ix.lane_of(pos)]) for eid, pos in by_id.items()}
    track = {eid: int(ix.lane_track[ix.lane_of(pos)]) for eid, pos in by_id.items()}
    assert depth[0] == 0 and depth[1] == 0 and depth[2] == 0 and depth[3] == 1 and depth[10] == 0
    assert track[0] == steps.index and track[1] == frames.index and track[2] == track[3] == work.index
    for lane in range(ix.n_lanes):  # sorted by start within each lane
        a, b = ix.lane_offsets[lane], ix.lane_offsets[lane + 1]
        assert np.all(np.diff(ix.start[a:b]) >= 0)
    assert ix.position(10) == by_id[10] and ix.position(99) is None


def test_lane_slice_is_exact_even_with_overlapping_events() -> None:
    import pyarrow as pa

    from neurontrace import Trace

    rng = np.random.default_rng(7)
    n = 3_000
    ts = np.sort(rng.integers(0, 10_000_000, n))
    dur = rng.integers(0, 400_000, n)  # plenty of partial overlaps on one stream
    dev = pa.table({"event_id": np.arange(n), "ts_ns": ts, "dur_ns": dur, "name": ["k"] * n,
                    "category": ["compute"] * n, "device": ["cuda:0"] * n, "track": ["stream 1"] * n})
    ix = tracks.build(Trace(device_events=dev))
    for t0, t1 in [(0, 100), (2_500_000, 2_600_000), (9_000_000, 12_000_000), (5_000_000, 5_000_001)]:
        shown = set()
        for lane in range(ix.n_lanes):
            lo, hi = ix.lane_slice(lane, t0, t1)
            part = np.arange(lo, hi)
            shown |= {int(i) for i in ix.event_id[part[(ix.end[part] > t0) & (ix.start[part] < t1)]]}
        rel = ts - ts.min()
        expected = {int(i) for i in np.flatnonzero((rel + dur > t0) & (rel < t1))}
        assert shown == expected


def test_query_sends_few_events_and_bins_the_rest() -> None:
    import pyarrow as pa

    from neurontrace import Trace

    n = 20_000
    ts = np.arange(n, dtype=np.int64) * 1_000
    sparse = np.arange(0, n * 1_000, 400_000, dtype=np.int64)
    dev = pa.table({
        "event_id": np.arange(n + len(sparse)), "ts_ns": np.r_[ts, sparse],
        "dur_ns": np.r_[np.full(n, 600), np.full(len(sparse), 50_000)],
        "name": ["dense"] * n + ["sparse"] * len(sparse), "category": ["compute"] * (n + len(sparse)),
        "device": ["cuda:0"] * (n + len(sparse)), "track": ["stream 1"] * n + ["stream 2"] * len(sparse),
    })
    ix = tracks.build(Trace(device_events=dev))
    lanes = list(range(ix.n_lanes))
    w = lod.window(0, n * 1_000, 500)
    view = lod.query(ix, lanes, w)
    dense_lane = next(la for la in lanes if ix.tracks[ix.lane_track[la]].label == "stream 1")
    sparse_lane = next(la for la in lanes if ix.tracks[ix.lane_track[la]].label == "stream 2")
    assert view.event_lanes == [sparse_lane] and len(view.event_pos) == len(sparse)
    assert dense_lane in view.binned
    busy = view.binned[dense_lane].sum(axis=0)
    assert busy.mean() == pytest.approx(0.6, abs=0.01)  # 600 ns busy per 1000 ns
    zoomed = lod.query(ix, lanes, lod.window(5_000_000, 5_100_000, 500))
    assert dense_lane in zoomed.event_lanes and zoomed.counts[dense_lane] == 100


def test_window_is_ordered_and_never_empty() -> None:
    w = lod.window(500, 100, 0)
    assert (w.t0, w.t1) == (100, 500) and w.n_bins == 1
    tiny = lod.window(1_000, 1_001, 10)
    assert tiny.t1 - tiny.t0 == lod.MIN_WIDTH_NS


def test_runs_busy_slices_sorted_runs() -> None:
    starts = np.array([0, 10, 20, 30], dtype=np.int64) * US
    ends = np.array([10, 20, 30, 40], dtype=np.int64) * US
    labels = np.array([0, 1, 0, 2])
    matrix, _, (lo, hi) = lod.runs_busy(starts, ends, labels, lod.window(15 * US, 25 * US, 2), 3)
    assert (lo, hi) == (1, 3)
    np.testing.assert_allclose(matrix, [[0, 1], [1, 0], [0, 0]])


def test_coarse_coverage_matches_exact_binning_when_zoomed_out() -> None:
    rng = np.random.default_rng(11)
    n = 50_000
    start = np.sort(rng.integers(0, 100_000_000, n))
    end = start + rng.integers(0, 3_000, n)
    cat = rng.integers(0, 3, n)
    pre = lod.coarse(start, end, cat, 0, 100_000_000, 3, n=4096)
    for t0, t1, bins in [(0, 100_000_000, 300), (10_000_000, 60_000_000, 97), (-5_000_000, 20_000_000, 50)]:
        w = lod.window(t0, t1, bins)
        assert pre.usable(w)
        exact, touched = lod.busy(start, end, cat, w, 3)
        approx, approx_touched = pre.query(w)
        # Off by at most a coarse bin's worth at each pixel edge.
        assert np.abs(approx - exact).max() <= 2 * pre.bin_ns / w.bin_ns + 1e-9
        assert approx.sum() * w.bin_ns == pytest.approx(exact.sum() * w.bin_ns, rel=0.01)
        assert (approx_touched | ~touched).all()  # never loses a pixel with an event
    assert not pre.usable(lod.window(0, 1_000_000, 300))


def test_prepared_lanes_answer_zoomed_out_queries_like_the_events_do() -> None:
    import pyarrow as pa

    from neurontrace import Trace

    n = lod.COARSE_MIN_EVENTS + 5_000
    ts = np.arange(n, dtype=np.int64) * 1_000
    dev = pa.table({"event_id": np.arange(n), "ts_ns": ts, "dur_ns": np.full(n, 400), "name": ["k"] * n,
                    "category": ["compute"] * n, "device": ["cuda:0"] * n, "track": ["stream 1"] * n})
    ix = tracks.build(Trace(device_events=dev))
    w = lod.window(0, n * 1_000, 200)
    exact = lod.query(ix, [0], w).binned[0]
    lod.prepare(ix)
    assert 0 in ix.coarse
    fast = lod.query(ix, [0], w).binned[0]
    np.testing.assert_allclose(fast, exact, atol=0.02)
