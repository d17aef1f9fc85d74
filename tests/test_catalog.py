"""The run catalog round trip in the real SQLite file: save, list with filters, show, compare, delete."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import neurontrace
from neurontrace import Trace, errors
from neurontrace.analysis.diagnose import Diagnosis, diagnose
from neurontrace.catalog import (
    FILE_NAME,
    CatalogDamagedError,
    CatalogUsageError,
    CatalogWarning,
    RunCatalog,
    parse_time,
    run_facts,
)
from neurontrace.cli.runs import add_save_run_arguments, save_run
from neurontrace.parsers._normalized_meta import with_normalized
from neurontrace.schema import NORMALIZED_KEYS
from neurontrace.trace import metadata_table
from tests.diff_pairs import write_pair

RUN_JSON = {
    "schema": "neurontrace.run/1", "start_time": "2026-01-15T10:00:00.000Z", "python": "3.11.7", "backend": "neuron",
    "versions": {"torch": "2.13.0", "cuda": "12.8", "neuron_packages": {"neuronx-cc": "2.21.1"}},
    "devices": [{"device": "cuda:0", "name": "NVIDIA H100 80GB HBM3"}],
    "tags": ["from-capture"], "notes": "captured by neurontrace record", "failures": [],
}
NEURON_META = {"instance_type": "trn2.48xlarge", "runtime_version": "2.29.1", "compiler_version": "2.21.1",
               "profile_schema_version": "7.4.0"}


def _with_meta(trace: Trace, facts: dict[str, Any]) -> Trace:
    """``trace`` as if its file had also said ``facts``: added to the input's own facts, and the normalized keys
    derived again from them as the parser derives them (parsers/_normalized_meta.py)."""
    meta = trace.metadata
    source, rank = meta["source"][0].as_py(), meta["rank"][0].as_py()
    normalized = pc.is_in(meta["key"], pa.array([k.key for k in NORMALIZED_KEYS]))
    meta = pa.concat_tables([meta.filter(pc.invert(normalized)), metadata_table(facts, source=source, rank=rank)])
    return with_normalized(Trace(**{**trace.tables, "metadata": meta}))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_pair(tmp_path_factory.mktemp("pair"))


@pytest.fixture
def catalog(tmp_path: Path, pair: tuple[Path, Path]) -> Iterator[RunCatalog]:
    a, b = pair
    cat = RunCatalog(tmp_path / "runs", create=True)
    ta = _with_meta(neurontrace.load(a), {"run": RUN_JSON})
    cat.save(ta, diagnose(ta), paths=[a], tags=["baseline", "nightly"], model="mlp", note="before")
    tb = _with_meta(neurontrace.load(b), {"neuron.metadata": NEURON_META, "kineto.cupti_version": 24})
    cat.save(tb, diagnose(tb, fallback_ops=["aten::nonzero"]), paths=[b], tags=["change"], model="mlp")
    tc = neurontrace.load(a)
    cat.save(tc, diagnose(tc).as_dict(), paths=[a], model="other")
    yield cat
    cat.close()


def test_save_keeps_diagnosis_versions_and_setup(catalog: RunCatalog, pair: tuple[Path, Path]) -> None:
    first = catalog.get(1)
    assert first.tags == ["baseline", "from-capture", "nightly"]  # run.json's tags join the user's
    assert (first.model, first.note, first.formats, first.synthetic) == ("mlp", "before", ["kineto"], False)
    assert first.versions == {"cuda": "12.8", "kineto_schema": "1", "neuron_packages.neuronx-cc": "2.21.1",
                              "python": "3.11.7", "torch": "2.13.0"}
    assert first.device_type == "NVIDIA H100 80GB HBM3"
    assert (first.backend, catalog.get(3).backend) == ("neuron", "cuda")  # run.json's word first, then the trace's
    assert first.run_time == "2026-01-15T10:00:00Z"  # when the run happened (run.json), not when saved
    assert first.paths == [str(pair[0].resolve())] and first.traces_present()
    assert first.diagnosis["schema"] == "neurontrace.diagnose/1"
    assert first.facts["run"]["notes"] == "captured by neurontrace record"
    second = catalog.get(2)
    assert second.note is None and second.device_type == "trn2.48xlarge"
    assert second.versions == {"cupti": "24", "kineto_schema": "1", "neuron_compiler": "2.21.1",
                               "neuron_profile_schema": "7.4.0", "neuron_runtime": "2.29.1"}
    assert second.run_time == second.saved_at  # the micro trace's clock starts at 0: no wall-clock time
    assert [op["name"] for op in second.diagnosis["fallback_ops"]] == ["aten::nonzero"]
    assert json.loads(json.dumps(second.as_dict()))["summary"]["fallback_ops"] == 1


def test_list_filters_by_tag_model_date_and_version(catalog: RunCatalog) -> None:
    def ids(**kw: object) -> list[int]:
        return [r.run_id for r in catalog.runs(**kw)]  # type: ignore[arg-type]

    # Newest run first: run 1 ran on 2026-01-15 (its run.json); runs 2 and 3 have no wall-clock time of
    # their own (the micro traces' clock starts at 0), so their run time is when they were saved.
    assert ids() == [3, 2, 1]
    assert ids(tags=["baseline"]) == [1] and ids(tags=["baseline", "change"]) == []
    assert ids(model="mlp", tags=["nightly"]) == [1] and ids(model="mlp") == [2, 1]
    assert ids(version="2.21") == [2, 1]  # any version equal to or starting with 2.21
    assert ids(version="torch=2.13") == [1] and ids(version="torch=2.12") == []
    assert ids(version="neuron_runtime=2.29.1") == [2] and ids(version="2.2_") == []  # LIKE wildcards escaped
    assert ids(since="2026-01-15", until="2026-01-15") == [1]  # a bare --until date includes the day
    assert ids(until="2026-01-14") == [] and ids(since="2026-01-15T10:00:01", model="mlp") == [2]
    assert ids(limit=2) == [3, 2]
    with pytest.raises(CatalogUsageError, match="bad date"):
        catalog.runs(since="yesterday")


def test_references_and_delete(catalog: RunCatalog) -> None:
    assert catalog.get("latest").run_id == 3 and catalog.get("latest~2").run_id == 1
    assert catalog.get("tag:change").run_id == 2
    assert catalog.previous(catalog.get(2)).run_id == 1  # type: ignore[union-attr]
    assert catalog.previous(catalog.get(3)) is None  # no earlier run of model "other"
    with pytest.raises(errors.InputNotFoundError, match="no run '9'"):
        catalog.get(9)
    with pytest.raises(CatalogUsageError, match="bad run reference"):
        catalog.get("yesterday")
    assert catalog.delete(3) == 3
    assert [r.run_id for r in catalog.runs(model="other")] == []
    db = sqlite3.connect(catalog.path)
    assert db.execute("SELECT count(*) FROM tags WHERE run_id = 3").fetchone()[0] == 0
    db.close()


def test_compare_reloads_traces_or_falls_back_to_diagnoses(catalog: RunCatalog, tmp_path: Path,
                                                           pair: tuple[Path, Path]) -> None:
    full = catalog.compare("tag:baseline", "tag:change")
    assert full.ops is not None and full.ops_summary()["added"] == 1
    assert full.baseline["label"] == "run 1 mlp [baseline, from-capture, nightly]"
    # The stored diagnoses are reused: the change's explicit fallback op is there without naming it again.
    assert [op["name"] for op in full.fallback["appeared"]] == ["aten::nonzero"]
    assert full.devices[0].regression_pct == pytest.approx(50.0)
    only = catalog.compare(1, 2, reload=False)
    assert only.ops is None and only.devices[0].regression_pct == pytest.approx(50.0)
    # Move a trace away: the comparison still works from the stored diagnoses, and says why.
    moved = tmp_path / "moved.json"
    pair[1].rename(moved)
    try:
        gone = catalog.compare(1, 2)
    finally:
        moved.rename(pair[1])
    assert gone.ops is None and any("trace files not found" in n for n in gone.notes)


def test_catalog_file_errors(tmp_path: Path) -> None:
    with pytest.raises(errors.InputNotFoundError, match="no run catalog here"):
        RunCatalog(tmp_path / "none")
    other = tmp_path / "other"
    other.mkdir()
    db = sqlite3.connect(other / FILE_NAME)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    with pytest.raises(errors.MalformedTraceError, match="not a neurontrace run catalog"):
        RunCatalog(other)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / FILE_NAME).write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(errors.MalformedTraceError, match="not a readable run catalog"):
        RunCatalog(tmp_path / "junk")
    newer = RunCatalog(tmp_path / "newer", create=True)
    newer.close()
    db = sqlite3.connect(tmp_path / "newer" / FILE_NAME)
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(errors.MalformedTraceError, match="catalog version 99"):
        RunCatalog(tmp_path / "newer")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(CatalogUsageError, match="not a directory"):
        RunCatalog(tmp_path / "afile", create=True)


def test_save_run_from_diagnose_arguments(tmp_path: Path, pair: tuple[Path, Path],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path", nargs="+")
    add_save_run_arguments(parser)
    a, b = pair
    trace = neurontrace.load(a)
    diag = diagnose(trace)
    assert save_run(parser.parse_args([str(a)]), trace, diag) is None  # no --save-run: nothing saved
    with pytest.raises(errors.NeurontraceError, match="--tag, --model only apply to a saved run"):
        save_run(parser.parse_args([str(a), "--tag", "x", "--model", "m"]), trace, diag)
    out = tmp_path / "cat"
    first = save_run(parser.parse_args([str(a), "--save-run", str(out), "--tag", "base", "--model", "m"]),
                     trace, diag)
    second = save_run(parser.parse_args([str(b), "--save-run", str(out), "--note", "after", "--model", "m"]),
                      neurontrace.load(b), diagnose(neurontrace.load(b)))
    assert first is not None and second is not None and (first.run_id, second.run_id) == (1, 2)
    err = capsys.readouterr().err
    assert f"saved run 1 to {out / FILE_NAME} (tags: base)" in err
    assert f"next: neurontrace runs compare 1 2 --dir {out}" in err
    with pytest.raises(SystemExit):
        parser.parse_args([str(a), "--save-run", str(a)])  # a file, not a directory


def test_stored_diagnosis_rebuilds_for_the_report(catalog: RunCatalog) -> None:
    from rich.console import Console

    from neurontrace.render.report import render

    rec = catalog.get(2)
    diag = Diagnosis.from_dict(rec.diagnosis)
    assert diag.as_dict() == rec.diagnosis  # the rebuilt Diagnosis gives back the stored document
    console = Console(record=True, width=120)
    render(diag, console)
    assert "aten::nonzero" in console.export_text()


def test_run_facts_of_a_plain_trace(pair: tuple[Path, Path]) -> None:
    facts = run_facts(neurontrace.load(pair[0]))
    assert facts["formats"] == ["kineto"] and facts["run"] is None and facts["synthetic"] is False
    assert "neurontrace.accounting" not in facts["metadata"] and "kineto.distributedInfo" in facts["metadata"]


def test_parse_time() -> None:
    assert parse_time("2026-01-31") == "2026-01-31T00:00:00Z"
    assert parse_time("2026-01-31", end=True) == "2026-02-01T00:00:00Z"
    assert parse_time("2026-01-31T12:30+02:00") == "2026-01-31T10:30:00Z"


def _runs_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "neurontrace", "runs", *map(str, args)], capture_output=True,
                          text=True, timeout=120, check=False, env={**os.environ, "COLUMNS": "200"})


def test_a_run_that_cannot_be_read_is_left_out_with_a_warning_naming_it(catalog: RunCatalog) -> None:
    db = sqlite3.connect(catalog.path)
    with db:
        db.execute("UPDATE runs SET diagnosis = '{\"devices\": [' WHERE run_id = 2")  # cut off
        db.execute("UPDATE runs SET diagnosis = '{\"devices\": [{\"no window\": 1}]}' WHERE run_id = 3")
    db.close()
    with pytest.warns(CatalogWarning, match=r"left out 2 run\(s\).*run 3 \(KeyError.*run 2 \(JSONDecodeError"):
        assert [r.run_id for r in catalog.runs()] == [1]
    assert set(catalog.unreadable) == {2, 3}
    with pytest.raises(CatalogDamagedError, match=r"run 2 cannot be read.*runs delete 2"):
        catalog.get(2)
    res = _runs_cli("list", "--dir", catalog.directory)
    assert res.returncode == 0 and "runs in" in res.stdout
    assert "warning: " in res.stderr and "run 2 (" in res.stderr and "run 3 (" in res.stderr
    assert "Traceback" not in res.stderr
    res = _runs_cli("show", "2", "--dir", catalog.directory)
    assert res.returncode == errors.EXIT_MALFORMED and "cannot be read" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert _runs_cli("delete", "2", "--dir", catalog.directory).returncode == 0
    assert _runs_cli("show", "1", "--dir", catalog.directory).returncode == 0


def test_a_catalog_without_its_tables_says_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    db = sqlite3.connect(tmp_path / "runs" / FILE_NAME)
    db.execute("PRAGMA user_version = 1")
    db.close()
    with pytest.raises(CatalogDamagedError, match="without its table"):
        RunCatalog(tmp_path / "runs")
    for args in (["list"], ["show", "latest"], ["compare", "1", "2"], ["delete", "1"]):
        res = _runs_cli(*args, "--dir", tmp_path / "runs")
        assert res.returncode == errors.EXIT_MALFORMED, (args, res.stderr)
        assert "move it aside" in res.stderr.lower() and len(res.stderr.strip().splitlines()) == 1
