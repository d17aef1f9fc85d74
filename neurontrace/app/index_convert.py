"""The viewer's index stored by ``neurontrace convert`` beside the dataset it wrote (app/index_store.py), the
rank read back from its part files: only the event columns the index needs, in the row order
``neurontrace.load`` gives, within a memory bound (docs/viewer.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from neurontrace import dataset
from neurontrace.app import lod
from neurontrace.app.index_store import key, location, save, single_partition
from neurontrace.app.tracks import build
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import Trace

# The event columns tracks.build and key() read (the rest, args above all, are never loaded for the index).
COLUMNS = ("event_id", "ts_ns", "dur_ns", "name", "category", "host", "rank", "pid", "tid", "track", "device")
# Peak RSS of reading a rank back (COLUMNS only) and building its index, per event: 383 bytes at 2 M events in a
# process of its own (243 MB above the imports at 0.5 M, 766 MB at 2 M), 424 at 10.1 M inside `convert --dataset`
# (its peak 4,419 MB, the streaming's leftovers included), measured with bench/convert_viewer_index.py and
# bench/viewer_speed.py --dataset-trace on tiled real traces (docs/viewer.md), rounded up to 500. MAX_EVENTS
# (4 M) keeps that peak within the 2 GB the streamed convert holds itself to; the first ``view`` of a bigger rank
# builds (and stores) the index instead, or ``convert --viewer-index-max-events N`` raises the bound.
PEAK_BYTES_PER_EVENT = 500
MAX_BYTES = 2_000_000_000
MAX_EVENTS = MAX_BYTES // PEAK_BYTES_PER_EVENT


def store_dataset(dataset_dir: str | Path, *, max_events: int | None = None,
                  progress: Progress = no_progress) -> tuple[Path | None, str]:
    """Store the viewer's index of the dataset at ``dataset_dir`` (already written) beside its parts: the
    event columns the index needs are read back from its part files, in the order ``neurontrace.load``
    gives them. Returns (where it is stored, a line saying so) or (None, why not): a dataset of several
    partitions (the viewer shows them as one Trace, so a partition's own index would never be used), or a
    rank of more than ``max_events`` events (default :data:`MAX_EVENTS`: the build holds every event)."""
    from neurontrace.app.model import MARKER_CATEGORIES

    limit = MAX_EVENTS if max_events is None else max_events
    ds = dataset.open_dataset(dataset_dir)
    partition = single_partition(ds.ranks)
    if partition is None:
        return None, (f"{len({e['partition'] for e in ds.ranks})} partitions: the viewer shows every rank as one "
                      "trace, so no index is stored; the first view builds it (and stores none)")
    events = sum(int(e["rows"]["system_events"]) + int(e["rows"]["device_events"]) for e in ds.ranks)
    if events > limit:
        return None, (f"{partition} has {events:,} events, above the {limit:,} whose index is built within "
                      f"{limit * PEAK_BYTES_PER_EVENT / 1e9:.1f} GB; the first view builds and stores it instead")
    progress("viewer index", 0, events)
    if len(ds.ranks) > 1 and not all(dataset.time_parts(e) for e in ds.ranks):
        trace = ds.load_partition(partition)  # separate traces of one rank: concatenated (ids renumbered) as load does
    else:
        trace = _index_columns(ds.path, partition, ds.ranks, sort=dataset.time_parts(ds.ranks[0]))
    index = build(trace)
    lod.prepare(index, markers=MARKER_CATEGORIES)
    where = save(index, location(ds.path, partition), key(trace))
    progress("viewer index", events, events)
    return where, f"stored the viewer's index of {partition} ({events:,} events) in {where}"


def _index_columns(root: Path, partition: str, entries: list[dict[str, Any]], *, sort: bool) -> Trace:
    """The event tables of one partition, only :data:`COLUMNS`, with its metadata (the Kineto names), in the
    row order of ``Dataset.load`` (a streamed trace's time parts: put back in event_id order, dataset.file_order)."""
    tables: dict[str, pa.Table] = {}
    for name in ("system_events", "device_events", "metadata"):
        cols = None if name == "metadata" else list(COLUMNS)
        parts = [pq.read_table(root / name / partition / f"part-{e['part']}.parquet", columns=cols) for e in entries]
        table = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
        tables[name] = table.sort_by("event_id") if sort and name != "metadata" else table
    return Trace(**tables)
