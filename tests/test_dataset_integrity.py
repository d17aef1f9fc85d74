"""Datasets read only what their marker lists, as it was written: a missing partition, an extra one, a
part file of another schema (a newer version's), one changed since it was written or while it is read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import neurontrace
from neurontrace import dataset
from neurontrace.errors import InputChangedError, MalformedTraceError, TraceWarning
from tests.conftest import SAMPLES

RANKS = SAMPLES / "gloo_8rank"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real two-rank dataset (ranks 0 and 1 of the gloo job), converted once."""
    src = tmp_path_factory.mktemp("job")
    for r in (0, 1):
        shutil.copy(RANKS / f"rank-{r}.pt.trace.json.gz", src)
    from neurontrace.distributed import convert

    path, _, failures = convert(src, tmp_path_factory.mktemp("out") / "ds", local=True)
    assert not failures
    return path


@pytest.fixture
def ds_copy(written: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ds"
    shutil.copytree(written, dst)
    return dst


def _marker(p: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((p / dataset.MARKER).read_text())
    return doc


def test_a_missing_partition_is_a_named_error_at_open(ds_copy: Path) -> None:
    (ds_copy / "device_events" / "rank=1" / "part-0.parquet").unlink()
    with pytest.raises(MalformedTraceError, match=r"1 part file its marker lists is missing \(device_events/rank=1"):
        neurontrace.open_dataset(ds_copy)


def test_an_extra_partition_is_never_read_and_is_counted(ds_copy: Path, written: Path) -> None:
    for table in ("system_events", "device_events"):  # a rank the marker does not list, dropped beside
        shutil.copytree(ds_copy / table / "rank=1", ds_copy / table / "rank=7")
    with pytest.warns(TraceWarning, match="2 part files not in its marker"):
        ds = neurontrace.open_dataset(ds_copy)
    assert len(ds.extra) == 2 and all("rank=7" in e for e in ds.extra)
    loaded, clean = ds.load(), neurontrace.open_dataset(written).load()
    assert all(t.equals(clean.tables[n]) for n, t in loaded.tables.items() if n != "metadata")
    # the metadata differs by one row: the dataset's own accounting entry, which carries the warning
    (own,) = [a for a in loaded.accounting if a.format == "neurontrace-dataset"]
    assert "2 part files not in its marker" in own.warnings[0] and own.events_read == 0
    assert loaded.metadata.num_rows == clean.metadata.num_rows + 1
    rows = sum(e["rows"]["system_events"] for e in ds.ranks)
    assert ds.dataset("system_events").count_rows() == rows  # the lazy scan leaves it out too


def test_a_part_file_of_another_schema_is_a_named_error(ds_copy: Path) -> None:
    f = ds_copy / "system_events" / "rank=0" / "part-0.parquet"
    t = pq.read_table(f)
    t = t.append_column("added_in_a_newer_version", pa.array([1] * t.num_rows))
    pq.write_table(t, f)
    doc = _marker(ds_copy)  # written consistently by that newer version: its marker knows the new size
    doc["ranks"][0]["bytes"]["system_events"] = f.stat().st_size
    (ds_copy / dataset.MARKER).write_text(json.dumps(doc))
    with pytest.raises(MalformedTraceError, match=r"not the schema this neurontrace reads.*added_in_a_newer"):
        neurontrace.open_dataset(ds_copy).load(0)
    assert neurontrace.open_dataset(ds_copy).load(1).num_events > 0  # the other rank still reads


def test_a_partition_changed_since_it_was_written_is_refused(ds_copy: Path) -> None:
    f = ds_copy / "system_events" / "rank=1" / "part-0.parquet"
    t = pq.read_table(f)
    pq.write_table(t.slice(0, t.num_rows // 2), f)  # another convert of half the events, over this one
    with pytest.raises(InputChangedError, match="changed since it was written"):
        neurontrace.open_dataset(ds_copy).load(1)


def test_a_partition_changed_while_it_is_read_is_refused(ds_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = ds_copy / "device_events" / "rank=0" / "part-0.parquet"
    real = pq.read_table

    def read_while_written(source: Any, *a: Any, **k: Any) -> pa.Table:
        table = real(source, *a, **k)
        if getattr(source, "name", None) == str(f):
            with f.open("ab") as w:  # a writer appends to the file between the reader's first and last byte
                w.write(b"\0" * 16)
        return table

    monkeypatch.setattr(pq, "read_table", read_while_written)
    with pytest.raises(InputChangedError, match="while it was read"):
        neurontrace.open_dataset(ds_copy).load(0)


@pytest.mark.parametrize("ranks", [5, [{"partition": "rank=../../etc", "part": 0}], [{"partition": "rank=0"}],
                                   [{"partition": "rank=0", "part": True}], [None]])
def test_a_marker_of_unexpected_shape_is_a_named_error(ds_copy: Path, ranks: Any) -> None:
    doc = _marker(ds_copy)
    doc["ranks"] = ranks
    (ds_copy / dataset.MARKER).write_text(json.dumps(doc))
    with pytest.raises(MalformedTraceError, match="'ranks' is not a list of entries"):
        neurontrace.open_dataset(ds_copy)
