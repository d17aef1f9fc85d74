"""The track index against the straightforward computation of what it promises, on real traces.

``tracks.build`` orders by packed integer keys and counts depths in one pass over all tracks; here the
same promises are checked the obvious way, track by track: every row once, one key per track, events
of a track in (start, longer first, row) order, depth = events begun before and not yet ended, a lane
per depth in that order, and the running maximum of ends per lane.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from neurontrace import Trace, load
from neurontrace.app import tracks
from neurontrace.columns import dense_ranks
from tests.conftest import SAMPLES, corpus_files

SAMPLE_TRACES = [SAMPLES / "cpu_train_loop.pt.trace.json.gz", SAMPLES / "compare", SAMPLES / "gloo_8rank",
                 SAMPLES / "synthetic_neuron" / "synthetic_mlp_system.json",
                 SAMPLES / "synthetic_neuron" / "synthetic_mlp_parquet"]


def _load(path: Path) -> Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what a corpus file warns about is tested in test_corpus.py
        return load(path)


def _moved(trace: Trace, how: str) -> Trace:
    """The trace with its times changed: "ties" rounds them (many events start together, many with
    one length); "far" moves one event of each table 2**61 ns back, a span too long to pack beside a
    track number (the index then packs the times' ranks)."""
    def change(t: pa.Table) -> pa.Table:
        ts, dur = t["ts_ns"].to_numpy().copy(), t["dur_ns"].to_numpy().copy()
        if how == "ties":
            ts, dur = ts - ts % 50_000, dur - dur % 20_000
        elif len(ts):
            ts[0] -= 2**61
        t = t.set_column(t.schema.get_field_index("ts_ns"), "ts_ns", pa.array(ts, pa.int64()))
        return t.set_column(t.schema.get_field_index("dur_ns"), "dur_ns", pa.array(dur, pa.int64()))

    return Trace(system_events=change(trace.system_events), device_events=change(trace.device_events))


def _track_keys(trace: Trace, ix: tracks.TrackIndex) -> list[tuple[object, ...]]:
    """Per position in the index, its row's track key read from its table: where it ran, and its layer."""
    keys = {}
    for which, table, columns, layer_of in (
            (tracks.SYSTEM_TABLE, trace.system_events, ("host", "pid", "tid", "track"),
             {"python": "python", "step": "markers"}),
            (tracks.DEVICE_TABLE, trace.device_events, ("rank", "device", "track"),
             dict.fromkeys(tracks.MARKER_LAYER_CATEGORIES, "markers"))):
        values = [table[c].cast(pa.string()).to_pylist() for c in (*columns, "category")]
        keys[which] = [(*row[:-1], layer_of.get(str(row[-1]))) for row in zip(*values, strict=True)]
    return [(w, *keys[w][r]) for w, r in zip(ix.table.tolist(), ix.row.tolist(), strict=True)]


def _check(trace: Trace) -> None:
    ix = tracks.build(trace)
    sizes = (trace.system_events.num_rows, trace.device_events.num_rows)
    assert sorted(zip(ix.table.tolist(), ix.row.tolist(), strict=True)) == [
        (w, r) for w, n in enumerate(sizes) for r in range(n)]  # every row of both tables, once
    lane = np.repeat(np.arange(ix.n_lanes), np.diff(ix.lane_offsets))
    assert len(lane) == ix.n_events
    track, depth, length = ix.lane_track[lane], ix.lane_depth[lane], ix.end - ix.start
    keys = _track_keys(trace, ix)
    pairs = set(zip(track.tolist(), keys, strict=True))
    assert len(pairs) == len({t for t, _ in pairs}) == len({k for _, k in pairs})  # a track is one key
    for t in ix.tracks:
        assert np.array_equal(ix.lane_track[t.first_lane:t.first_lane + t.depth], np.full(t.depth, t.index))
        assert np.array_equal(ix.lane_depth[t.first_lane:t.first_lane + t.depth], np.arange(t.depth))
        pos = np.flatnonzero(track == t.index)
        p = pos[np.lexsort((ix.row[pos], -length[pos], ix.start[pos]))]  # by start, longer first, then row
        s, e = ix.start[p], ix.end[p]
        expected = np.maximum(np.arange(len(p)) - np.searchsorted(np.sort(e), s, side="right"), 0)
        assert np.array_equal(depth[p], expected)
        for d in range(t.depth):  # each lane keeps the track's order
            assert np.all(np.diff(p[expected == d]) > 0)
        assert (t.n_events, t.depth, t.empty) == (len(p), int(expected.max()) + 1, bool(length[p].max() <= 0))
    for a, b in zip(ix.lane_offsets[:-1].tolist(), ix.lane_offsets[1:].tolist(), strict=True):
        assert np.array_equal(ix.cummax_end[a:b], np.maximum.accumulate(ix.end[a:b]))
    ids = np.unique(ix.event_id)
    assert np.array_equal(ix.event_id[ix.positions(ids)], ids)


@pytest.mark.parametrize("path", corpus_files() + SAMPLE_TRACES, ids=lambda p: p.name)
def test_index_is_the_straightforward_one_on_real_traces(path: Path) -> None:
    _check(_load(path))


@pytest.mark.parametrize("how", ["ties", "far"])
def test_index_with_tied_times_and_a_span_too_long_to_pack(how: str) -> None:
    for path in [SAMPLES / "cpu_train_loop.pt.trace.json.gz", *sorted(corpus_files(), key=lambda p: p.stat().st_size)[-3:]]:
        _check(_moved(_load(path), how))


def test_dense_ranks_are_the_inverse_numpy_unique_gives() -> None:
    rng = np.random.default_rng(3)
    for values in (rng.integers(-1, 5, 1_000), rng.integers(0, 2**40, 1_000), np.array([7]),
                   rng.integers(-(2**62), 2**62, 50)):
        uniq, inverse = np.unique(values, return_inverse=True)
        assert dense_ranks(values)[0].tolist() == inverse.tolist() and dense_ranks(values)[1] == len(uniq)
    assert dense_ranks(np.zeros(0, np.int64))[1] == 0
