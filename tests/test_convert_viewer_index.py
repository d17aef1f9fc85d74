"""``neurontrace convert`` stores the viewer's index beside the dataset it writes (app/index_store.store_dataset),
on real corpus traces.

The promise: after ``convert TRACE -o DATASET --dataset`` (streamed, in time parts) or ``convert DIR -o DATASET``,
the FIRST ``neurontrace view DATASET`` opens on the stored index (memory-mapped, not built) and draws exactly the
page a fresh build draws; a rank above the memory bound is skipped with one note on stderr saying why and that
the first view builds it; ``--no-viewer-index`` stores none; a dataset of several ranks (the viewer shows them as
one trace) stores none and says so.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("dash")

from plotly.io.json import to_json_plotly

import neurontrace
from neurontrace.app import index_store
from neurontrace.app.model import ViewModel
from neurontrace.app.server import READY, ViewerState, main_page
from neurontrace.cli import main
from tests.conftest import corpus_root
from tests.test_app_index_store import REAL, _mapped, _same_index, _views

OTHER_RANK = "HolisticTraceAnalysis/tests/data/trace_file_list/inference_rank_1.json.gz"  # a real rank-1 trace


def _real(name: str) -> Path:
    root = corpus_root()
    if root is None or not (root / name).is_file():
        pytest.skip("the real-trace corpus (../shared/corpus/kineto) is not beside this checkout")
    return root / name


@pytest.fixture(scope="module")
def streamed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real 45 k-event trace streamed by the CLI into small time parts (--part-mb 1: 18 parts)."""
    ds = tmp_path_factory.mktemp("convert-index") / "ds"
    assert main(["convert", str(_real(REAL)), "-o", str(ds), "--dataset", "--part-mb", "1"]) == 0
    return ds


def _opened(ds: Path) -> ViewModel:
    state = ViewerState(str(ds))
    state.load(analyse=False)  # what `neurontrace view DATASET` does: read the dataset, open (or build) its index
    assert state.status == READY and state.model is not None
    return state.model


def test_the_first_view_of_a_streamed_dataset_opens_on_the_index_convert_stored(streamed: Path) -> None:
    marker = neurontrace.open_dataset(streamed)
    assert len(marker.ranks) > 3 and {e["partition"] for e in marker.ranks} == {"rank=0"}  # many time parts
    assert (index_store.location(streamed, "rank=0") / index_store.META).is_file()
    model = _opened(streamed)
    assert _mapped(model.index)  # the stored index, memory-mapped: nothing built on open
    fresh = ViewModel.build(neurontrace.load(streamed), title=str(streamed))  # the index built from every column
    assert not _mapped(fresh.index)
    _same_index(model.index, fresh.index)
    assert _views(model) == _views(fresh)  # the same page and the same figure at every zoom
    device = fresh.index.event_id[fresh.index.table == 1].tolist()
    assert model.event(int(device[0])) == fresh.event(int(device[0]))


def test_convert_of_a_directory_of_one_rank_stores_its_index(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds"
    assert main(["convert", str(_real(REAL).parent), "-o", str(ds)]) == 0
    assert "stored the viewer's index of rank=0 (45,422 events)" in capsys.readouterr().err
    model = _opened(ds)
    assert _mapped(model.index)
    assert to_json_plotly(main_page(model, ["."])) == \
        to_json_plotly(main_page(ViewModel.build(neurontrace.load(ds), title=str(ds)), ["."]))


def test_a_rank_above_the_bound_is_left_to_the_first_view_with_a_note(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds"  # the real trace has 45,422 events
    assert main(["convert", str(_real(REAL)), "-o", str(ds), "--dataset", "--part-mb", "4",
                 "--viewer-index-max-events", "45000"]) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "viewer index not stored" in line]
    assert len(notes) == 1, err
    assert "rank=0 has 45,422 events, above the 45,000" in notes[0] and "the first view builds" in notes[0]
    assert not (ds / index_store.DIRECTORY).exists()
    model = _opened(ds)  # built on open, then stored by the server in the background
    assert not _mapped(model.index)


def test_no_viewer_index_stores_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds"
    assert main(["convert", str(_real(REAL)), "-o", str(ds), "--dataset", "--no-viewer-index"]) == 0
    assert "viewer" not in capsys.readouterr().err
    assert not (ds / index_store.DIRECTORY).exists()


def test_a_dataset_of_several_ranks_stores_no_index_and_says_so(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for name in (REAL, OTHER_RANK):
        shutil.copy(_real(name), ranks / Path(name).name)
    ds = tmp_path / "ds"
    assert main(["convert", str(ranks), "-o", str(ds)]) == 0
    assert len({e["partition"] for e in neurontrace.open_dataset(ds).ranks}) == 2
    err = capsys.readouterr().err
    assert "viewer index not stored: 2 partitions" in err and "the first view builds it" in err
    assert not (ds / index_store.DIRECTORY).exists()
