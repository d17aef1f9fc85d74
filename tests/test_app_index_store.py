"""The viewer's index stored beside a dataset's parts (neurontrace/app/index_store.py), on a real trace.

The promise: ``neurontrace view DATASET`` opens on the stored index (memory-mapped, nothing per event
rebuilt) and shows exactly what a fresh build shows, at every zoom; a stored index that does not index
the tables loaded (another trace, a truncated file) is never used: the server builds the index again and
stores it for the next view.
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("dash")

from plotly.io.json import to_json_plotly

import neurontrace
from neurontrace.app import callbacks, index_store, lod
from neurontrace.app.model import MARKER_CATEGORIES, ViewModel
from neurontrace.app.server import READY, ViewerState, main_page
from neurontrace.app.tracks import TrackIndex, build
from neurontrace.dataset import write_dataset
from neurontrace.errors import TraceWarning
from neurontrace.trace import Trace
from tests.conftest import corpus_root

# A real GPU training trace of the corpus (45 k events, rank 0) whose kernel lanes and groups are big enough
# to carry level-of-detail sums (lod.COARSE_MIN_EVENTS), so the stored sums are exercised too.
REAL = "HolisticTraceAnalysis/tests/data/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


@pytest.fixture(scope="module")
def real() -> Trace:
    root = corpus_root()
    if root is None or not (root / REAL).is_file():
        pytest.skip("the real-trace corpus (../shared/corpus/kineto) is not beside this checkout")
    return neurontrace.load(root / REAL)


@pytest.fixture(scope="module")
def converted(real: Trace, tmp_path_factory: pytest.TempPathFactory) -> Path:
    ds = tmp_path_factory.mktemp("index-store") / "ds"
    write_dataset([real], ds)
    return ds


def _same_index(a: TrackIndex, b: TrackIndex) -> None:
    for name in index_store.ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert (a.origin_ns, a.span_ns, a.tracks, a.groups, a.categories) == \
        (b.origin_ns, b.span_ns, b.tracks, b.groups, b.categories)
    assert a.names.tolist() == b.names.tolist()
    for mine, theirs in ((a.coarse, b.coarse), (a.group_coarse, b.group_coarse)):
        assert sorted(mine) == sorted(theirs)
        for k, c in mine.items():
            d = theirs[k]
            assert (c.t0, c.bin_ns, c.n_cat) == (d.t0, d.bin_ns, d.n_cat)
            for field in ("cats", "cum", "count"):
                assert np.array_equal(getattr(c, field), getattr(d, field)), (k, field)


def _mapped(index: TrackIndex) -> bool:
    """Whether the per-event arrays are the stored files mapped (read-only views), not arrays built here."""
    return not index.start.flags.writeable and not index.start.flags.owndata


def _views(model: ViewModel) -> list[str]:
    """What the page sends for the first render and zooms from the whole trace down to microseconds."""
    out = [to_json_plotly(main_page(model, ["."]))]
    span = model.index.span_ns
    width = float(span)
    while width >= 5_000:
        for lo in (span * 0.3, span * 0.6):
            relayout = {"xaxis.range[0]": lo / 1e6, "xaxis.range[1]": (lo + width) / 1e6}
            out.append(to_json_plotly(list(callbacks.on_timeline(model, "nt-timeline", relayout, None,
                                                                 {"t0": 0, "t1": span}))))
        width /= 10
    return out


def test_a_stored_index_reads_back_as_the_built_one(real: Trace, tmp_path: Path) -> None:
    built = build(real)
    lod.prepare(built, markers=MARKER_CATEGORIES)
    assert built.coarse and built.group_coarse  # the real trace has lanes big enough for level-of-detail sums
    key = index_store.key(real)
    index_store.save(built, tmp_path / "ix", key)
    stored = index_store.load(tmp_path / "ix", key)
    assert stored is not None and _mapped(stored)
    _same_index(stored, built)


def test_view_of_a_converted_dataset_opens_on_its_stored_index(converted: Path) -> None:
    meta = converted / index_store.DIRECTORY / "rank=0" / index_store.META
    assert meta.is_file()  # written by convert (write_dataset) beside the parts
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceWarning)  # not taken for a table's part file left out
        loaded = neurontrace.load(converted)
    state = ViewerState(str(converted))
    state.load(analyse=False)  # what `neurontrace view DATASET` does: read the dataset, open its index
    assert state.status == READY and state.model is not None
    model = state.model
    assert _mapped(model.index)
    fresh = ViewModel.build(loaded, title=str(converted))
    assert not _mapped(fresh.index)
    _same_index(model.index, fresh.index)
    assert _views(model) == _views(fresh)  # the same page, and the same figure at every zoom
    device = fresh.index.event_id[fresh.index.table == 1].tolist()
    linked = next(int(e) for e in device if fresh.links(int(e)))  # a kernel of the real trace, linked to its launch
    for event in (linked, int(device[0])):
        assert model.event(event) == fresh.event(event) and model.links(event) == fresh.links(event)


def _wait_for(where: Path, key: dict[str, Any]) -> TrackIndex:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = index_store.load(where, key)
        if found is not None:
            return found
        time.sleep(0.1)
    raise AssertionError(f"no index stored in {where}")


def test_a_stale_or_broken_stored_index_is_built_again_and_stored(converted: Path, real: Trace,
                                                                 tmp_path: Path) -> None:
    loaded = neurontrace.load(converted)
    where = converted / index_store.DIRECTORY / "rank=0"
    key = index_store.key(loaded)
    assert index_store.load(where, key) is not None
    other = Trace(system_events=real.system_events.slice(0, real.system_events.num_rows - 1),
                  device_events=real.device_events)
    assert index_store.load(where, index_store.key(other)) is None  # indexes other tables: not used
    # A foreign version, then a truncated array file (a writer killed outside the atomic rename, a full disk).
    meta = json.loads((where / index_store.META).read_text())
    (where / index_store.META).write_text(json.dumps({**meta, "key": {**meta["key"], "version": 0}}))
    assert index_store.load(where, key) is None
    (where / index_store.META).write_text(json.dumps(meta))
    start = (where / "start.npy").read_bytes()
    (where / "start.npy").write_bytes(start[: len(start) // 2])
    assert index_store.load(where, key) is None
    state = ViewerState(str(converted))
    model = state.use(loaded)  # builds the index (never a traceback), then stores it in the background
    assert not _mapped(model.index)
    _same_index(_wait_for(where, key), model.index)


def test_only_a_dataset_of_one_partition_has_one_index() -> None:
    assert index_store.single_partition([{"partition": "rank=0", "part": 0}, {"partition": "rank=0", "part": 1}]) \
        == "rank=0"  # the time parts of one streamed trace: one Trace, one index
    assert index_store.single_partition([{"partition": "rank=0"}, {"partition": "rank=1"}]) is None
    assert index_store.single_partition("rank=0") is None


def test_binning_in_chunks_draws_what_one_pass_draws(real: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    """lod.busy bins CHUNK events at a time (and group rows bin each lane's slice so): on the real trace, with
    chunks of 500 events (its biggest lane split into 19), the page and every zoom are byte-identical to one
    pass over all the events, the level-of-detail sums included."""
    offsets = build(real).lane_offsets
    assert int(np.diff(offsets).max()) > 15 * 500
    monkeypatch.setattr(lod, "CHUNK", 1 << 62)
    whole = _views(ViewModel.build(real))
    monkeypatch.setattr(lod, "CHUNK", 500)
    assert _views(ViewModel.build(real)) == whole
