"""A dataset's own warning (part files beside the marker's, left out) reaches every report, text and --json:
it is an entry of the loaded trace's accounting (the dataset's own, which read no events), not only a Python
TraceWarning, which the CLI does not show. Real input: the real CPU training-loop trace (it holds [memory]
events) converted as two ranks, then a third rank's partition copied in beside the marker's."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import warnings
from pathlib import Path

import pytest

import neurontrace
from neurontrace.cli import main
from neurontrace.dataset import open_dataset
from neurontrace.errors import TraceWarning
from tests.conftest import SAMPLES


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("ds")
    ranks = tmp / "ranks"
    ranks.mkdir()
    for r in (0, 1):
        shutil.copy(SAMPLES / "cpu_train_loop.pt.trace.json.gz", ranks / f"rank-{r}.pt.trace.json.gz")
    ds = tmp / "ds"
    assert _cli("convert", str(ranks), "-o", str(ds))[0] == 0
    for table in ds.iterdir():
        if (table / "rank=1").is_dir():
            shutil.copytree(table / "rank=1", table / "rank=7")
    with pytest.warns(TraceWarning, match="not in its marker"):
        (message,) = open_dataset(ds).warnings
    return ds, message


def _cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        code = main(list(argv))
    return code, out.getvalue() + err.getvalue()


@pytest.mark.parametrize("command", ["diagnose", "info", "ops", "memory"])
def test_the_extra_partition_warning_reaches_the_text_report(dataset: tuple[Path, str], command: str) -> None:
    ds, message = dataset
    code, text = _cli(command, str(ds))
    assert code == 0, text
    flat = " ".join(text.split())  # rich may wrap the line
    assert flat.count(" ".join(message.split())) == 1, text[-3000:]


@pytest.mark.parametrize("command", ["diagnose", "ops", "memory"])
def test_the_extra_partition_warning_reaches_the_json_report(dataset: tuple[Path, str], command: str) -> None:
    ds, message = dataset
    code, text = _cli(command, str(ds), "--json")
    assert code == 0, text
    found = json.loads(text)["load_warnings" if command == "ops" else "warnings"]  # ops: its own warnings
    messages = [w["message"] if isinstance(w, dict) else w for w in found]
    assert messages.count(message) == 1, found


def test_the_warning_is_in_the_accounting_of_every_way_in(dataset: tuple[Path, str]) -> None:
    ds, message = dataset
    with pytest.warns(TraceWarning):
        whole = neurontrace.load(ds)
    assert [w for a in whole.accounting for w in a.warnings].count(message) == 1
    (own,) = [a for a in whole.accounting if a.format == "neurontrace-dataset"]
    assert own.events_read == 0 and own.source == str(ds)  # reads nothing: the accounting invariant holds
    with pytest.warns(TraceWarning):
        part = open_dataset(ds).load_part("rank=1")  # what a map task of a job reads
    assert message in [w for a in part.accounting for w in a.warnings]
    # the job's report, split by rank, says it once; the viewer's note lists it
    assert sum(message in w for t in whole.split_ranks() for a in t.accounting for w in a.warnings) == 1
    from neurontrace.app.callbacks import analysis_note
    from neurontrace.app.model import ViewModel

    model = ViewModel.build(whole, title="ds")
    model.analyse()
    assert message in analysis_note(model)
