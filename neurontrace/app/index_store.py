"""The viewer's index stored beside a dataset's parts, so that ``neurontrace view DATASET`` opens without
building it.

Building the index (:func:`neurontrace.app.tracks.build` and the level-of-detail sums of
:func:`neurontrace.app.lod.prepare`) costs a few sorts and gathers of every event: 1.4 CPU s per million
events, and on a machine where fresh memory is slow to fault in, several times that in wall time (it
allocates about 70 bytes per event). Stored once, it is opened again with every per-event array
memory-mapped (``numpy.load(mmap_mode="r")`` of uncompressed ``.npy`` files): opening reads a small JSON
file and maps the arrays, and the first figure touches only the pages it draws (the lanes' offsets, the
level-of-detail sums, binary searches), so the open costs milliseconds whatever the event count.

Layout, beside the tables (``DATASET/viewer/<partition>/``; ``neurontrace.open_dataset`` lists only
``*/rank=*/*.parquet`` files, so these are never taken for a table's parts)::

    index.json      version, the key of the tables it indexes, tracks, groups, names, categories, level-of-detail
    start.npy ...   one array per TrackIndex column (every event), lane arrays, level-of-detail sums

The index is exactly what :func:`tracks.build` gives (the same arrays, saved and read back), so every view
drawn from it is the one drawn from a fresh build. It is used only when its key matches the Trace it is
applied to (rows and a checksum of the start times of both event tables, :func:`key`); otherwise the
caller builds the index again. Written atomically (a directory renamed into place), so a killed writer
leaves no half index behind.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from neurontrace.app import lod
from neurontrace.app.tracks import Group, Track, TrackIndex, build
from neurontrace.trace import Trace

VERSION = 1
DIRECTORY = "viewer"
META = "index.json"
# TrackIndex's arrays, one .npy file each (the per-event ones are memory-mapped on open).
ARRAYS = ("start", "end", "cat", "name", "event_id", "table", "row", "lane_offsets", "lane_track", "lane_depth",
          "cummax_end", "_ids_sorted", "_id_pos")


def key(trace: Trace) -> dict[str, Any]:
    """What identifies the event tables an index was built from: their rows and a wrapping sum of their
    start times (one vectorized pass over a column already in memory)."""
    out: dict[str, Any] = {"version": VERSION}
    for name in ("system_events", "device_events"):
        table = getattr(trace, name)
        ts = np.asarray(table["ts_ns"].fill_null(0).to_numpy(), dtype=np.int64) if table.num_rows else \
            np.zeros(0, np.int64)
        out[name] = [int(table.num_rows), int(ts.sum(dtype=np.int64))]
    return out


def location(dataset: str | Path, partition: str) -> Path:
    return Path(dataset) / DIRECTORY / partition


def save(index: TrackIndex, directory: str | Path, index_key: dict[str, Any]) -> Path:
    """Write ``index`` (built, its level of detail prepared) to ``directory``, replacing what was there."""
    out = Path(directory)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        for name in ARRAYS:
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(getattr(index, name)), allow_pickle=False)
        coarse = {}
        for kind, table in (("lane", index.coarse), ("group", index.group_coarse)):
            for k, c in table.items():
                tag = f"{kind}{int(k)}"
                np.save(tmp / f"coarse_{tag}_cats.npy", np.asarray(c.cats), allow_pickle=False)
                np.save(tmp / f"coarse_{tag}_cum.npy", np.asarray(c.cum), allow_pickle=False)
                np.save(tmp / f"coarse_{tag}_count.npy", np.asarray(c.count), allow_pickle=False)
                coarse[tag] = {"kind": kind, "key": int(k), "t0": int(c.t0), "bin_ns": float(c.bin_ns),
                               "n_cat": int(c.n_cat)}
        meta = {
            "key": index_key, "origin_ns": int(index.origin_ns), "span_ns": int(index.span_ns),
            "tracks": [[t.index, t.side, t.group, t.label, t.n_events, t.depth, t.first_lane, t.layer, t.empty]
                       for t in index.tracks],
            "groups": [[g.index, g.side, g.key, g.label, list(g.tracks), g.device, g.rank] for g in index.groups],
            "names": [None if n is None else str(n) for n in index.names.tolist()],
            "categories": list(index.categories), "coarse": coarse,
        }
        (tmp / META).write_text(json.dumps(meta))
        if out.exists():
            shutil.rmtree(out)
        tmp.replace(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def load(directory: str | Path, index_key: dict[str, Any]) -> TrackIndex | None:
    """The index stored in ``directory`` if it indexes the tables ``index_key`` names; None when there is none,
    it is of another version or other tables, or it cannot be read (the caller builds the index then)."""
    d = Path(directory)
    try:
        meta = json.loads((d / META).read_text())
        if not isinstance(meta, dict) or meta.get("key") != index_key:
            return None
        arrays = {name: np.asarray(np.load(d / f"{name}.npy", mmap_mode="r", allow_pickle=False))
                  for name in ARRAYS}
        tracks = [Track(int(i), str(side), int(g), str(label), int(n), int(depth), int(first), str(layer), bool(e))
                  for i, side, g, label, n, depth, first, layer, e in meta["tracks"]]
        groups = [Group(int(i), str(side), str(k), str(label), tuple(int(t) for t in ts), dev, rank)
                  for i, side, k, label, ts, dev, rank in meta["groups"]]
        index = TrackIndex(
            origin_ns=int(meta["origin_ns"]), span_ns=int(meta["span_ns"]), start=arrays["start"], end=arrays["end"],
            cat=arrays["cat"], name=arrays["name"], event_id=arrays["event_id"], table=arrays["table"],
            row=arrays["row"], lane_offsets=arrays["lane_offsets"], lane_track=arrays["lane_track"],
            lane_depth=arrays["lane_depth"], cummax_end=arrays["cummax_end"], tracks=tracks, groups=groups,
            names=np.array(meta["names"], dtype=object), categories=[str(c) for c in meta["categories"]],
            _ids_sorted=arrays["_ids_sorted"], _id_pos=arrays["_id_pos"])
        for tag, c in meta["coarse"].items():
            pre = lod.Coarse(int(c["t0"]), float(c["bin_ns"]), int(c["n_cat"]),
                             np.load(d / f"coarse_{tag}_cats.npy", allow_pickle=False),
                             np.load(d / f"coarse_{tag}_cum.npy", allow_pickle=False),
                             np.load(d / f"coarse_{tag}_count.npy", allow_pickle=False))
            (index.coarse if c["kind"] == "lane" else index.group_coarse)[int(c["key"])] = pre
    except (OSError, ValueError, KeyError, TypeError):  # missing, partial or foreign files: build instead
        return None
    if len(index.start) != index_key["system_events"][0] + index_key["device_events"][0]:
        return None
    return index


def single_partition(ranks: Any) -> str | None:
    """The partition of a dataset marker's ``ranks`` entries when they are all of one (what one stored index
    covers: the viewer shows one Trace), else None."""
    partitions = {e.get("partition") for e in ranks if isinstance(e, dict)} if isinstance(ranks, list) else set()
    only = next(iter(partitions)) if len(partitions) == 1 else None
    return only if isinstance(only, str) else None


def store_for(trace: Trace, dataset_dir: str | Path, partition: str) -> Path:
    """Build the index of ``trace`` (one partition of a dataset being written) and store it beside its parts:
    what ``convert`` calls so that the first ``view`` of the dataset opens without building it."""
    from neurontrace.app.model import MARKER_CATEGORIES

    index = build(trace)
    lod.prepare(index, markers=MARKER_CATEGORIES)
    return save(index, location(dataset_dir, partition), key(trace))

