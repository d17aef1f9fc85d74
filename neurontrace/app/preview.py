"""The first view before the track index: every process and device as its header row, in one pass.

The track index (``tracks.build``) sorts every event into its lane (the nesting depth of each one), about ten
sorts, searches and gathers over all rows; on a big trace that is most of what the page waits for (tens of
seconds at 10 M events on a machine slow to fault fresh memory in). The first figure does not need it: the page
opens on the whole trace, where each process or device is its header row, whose bins are the coverage of all of
its events (``lod.group_busy``). :func:`build` computes that coverage straight from the event tables, a chunk of
``CHUNK`` events at a time (no per-event array larger than a chunk besides the tables' own codes), and
returns a :class:`~neurontrace.app.tracks.TrackIndex` the page draws as it draws any other:

- the real groups (same keys, labels and order as the full index's), each with one placeholder track of one
  lane (``indexing…``);
- a group with ``lod.COARSE_MIN_EVENTS`` events or more: its header's whole-trace coverage, exactly the
  ``lod.Coarse`` the full index keeps for it (``lod.prepare``), and no events;
- a smaller group: its events on that one lane, so its header is binned from them, as the full index bins it
  from its lanes.

So the preview's header rows are the full index's header rows for any window the coverage answers (the whole
trace, where the page opens), bin for bin (``tests/test_app_preview.py``, on a real trace). Zoomed in further, a
big group's header is blank until the full index is ready; the server builds it right after the preview and
swaps it in (``server.ViewerState.load``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis.compile_spans import compile_mask
from neurontrace.app import lod
from neurontrace.app.compile_view import COMPILE_CODE
from neurontrace.app.palette import CATEGORIES
from neurontrace.app.tracks import (
    DEVICE,
    DEVICE_TABLE,
    HOST,
    SYSTEM_TABLE,
    WORK,
    Group,
    Track,
    TrackIndex,
    group_naming,
    group_order,
    kineto_process_names,
)
from neurontrace.columns import codes, encoded
from neurontrace.trace import Trace

LABEL = "indexing… (lanes appear when done)"
CHUNK = 1 << 20  # events summed at a time: each chunk costs a pass over the groups' bins too, so chunks are big
MAX_CELLS = 1 << 24  # groups x categories x coarse bins summed at once (128 MiB of float64): more, no preview


def build(trace: Trace, *, markers: tuple[str, ...] = ()) -> TrackIndex | None:
    """The preview index of ``trace`` (``markers``: the categories its header rows leave out, as
    ``lod.prepare`` is told); None when there are too many groups to sum at once (the caller builds the full
    index instead)."""
    parts = [_columns(trace.system_events, SYSTEM_TABLE), _columns(trace.device_events, DEVICE_TABLE)]
    keys = sorted({k for p in parts for k in p["keys"]}, key=group_order)
    position = {k: i for i, k in enumerate(keys)}
    n_groups = len(keys)
    n = sum(p["n"] for p in parts)
    origin = min((p["ts_min"] for p in parts if p["n"]), default=0)
    span = max((p["end_max"] - origin for p in parts if p["n"]), default=1)
    present = np.flatnonzero(sum(p["cats"] for p in parts)) if n else np.zeros(0, np.int64)
    compact = np.zeros(len(CATEGORIES), dtype=np.int64)
    compact[present] = np.arange(len(present))
    categories = [CATEGORIES[int(c)] for c in present]
    n_cat = max(1, len(categories))
    if n_groups * n_cat * lod.COARSE_BINS > MAX_CELLS:
        return None
    drop = np.zeros(n_cat, dtype=bool)
    drop[[categories.index(c) for c in markers if c in categories]] = True
    w = lod.coarse_window(0, max(span, 1))
    matrix = np.zeros((n_groups * n_cat, w.n_bins), dtype=np.float64)
    starts = np.zeros(n_groups * w.n_bins, dtype=np.int64)
    counts = np.zeros(n_groups, dtype=np.int64)
    lasting = np.zeros(n_groups, dtype=np.int64)  # events longer than 0: a group without is not drawn
    for p in parts:
        p["group"] = p["lookup"].copy()
        p["group"][p["used"]] = [position[k] for k in p["keys"]]
        for i, j in _chunks(p["n"]):
            g = p["group"][_combined(p, i, j)]
            counts += np.bincount(g, minlength=n_groups)
            lasting += np.bincount(g[p["dur"][i:j] > 0], minlength=n_groups)
            cat = compact[_category(p, i, j)]
            keep = ~drop[cat]
            start = p["ts"][i:j][keep] - origin
            end = start + np.maximum(p["dur"][i:j][keep], 0)
            row = g[keep] * n_cat + cat[keep]
            matrix += lod._busy(start, end, row, w, n_groups * n_cat)[0]
            starts += np.bincount(g[keep] * w.n_bins + lod.coarse_bin(start, w), minlength=n_groups * w.n_bins)
    big = counts >= lod.COARSE_MIN_EVENTS
    group_coarse = {g: lod.coarse_from(matrix[g * n_cat:(g + 1) * n_cat], starts[g * w.n_bins:(g + 1) * w.n_bins],
                                       w, n_cat) for g in np.flatnonzero(big).tolist()}
    ev = _small_events(parts, big, origin, compact)
    hosts = {k[1] for k in keys if k[0] == HOST}
    ranks = {k[1] for k in keys if k[0] == DEVICE and k[1] is not None}
    names = kineto_process_names(trace)
    groups, tracks = [], []
    for g, key in enumerate(keys):
        gid, label, device, rank = group_naming(key, hosts, ranks, names)
        groups.append(Group(g, str(key[0]), gid, label, (g,), device, rank))
        tracks.append(Track(g, str(key[0]), g, LABEL, int(counts[g]), 1, g, WORK, not lasting[g]))
    lane_offsets = np.searchsorted(ev["group"], np.arange(n_groups + 1)).astype(np.int64)
    cummax = ev["end"].copy()
    for a, b in zip(lane_offsets[:-1].tolist(), lane_offsets[1:].tolist(), strict=True):
        if b > a:
            cummax[a:b] = np.maximum.accumulate(ev["end"][a:b])
    id_order = np.argsort(ev["event_id"], kind="stable")
    return TrackIndex(
        origin_ns=origin, span_ns=max(span, 1), start=ev["start"], end=ev["end"], cat=ev["cat"].astype(np.int16),
        name=ev["name"], event_id=ev["event_id"], table=ev["table"], row=ev["row"], lane_offsets=lane_offsets,
        lane_track=np.arange(n_groups, dtype=np.int32), lane_depth=np.zeros(n_groups, dtype=np.int32),
        cummax_end=cummax, tracks=tracks, groups=groups, names=np.array(ev["names"], dtype=object),
        categories=categories, group_coarse=group_coarse, _ids_sorted=ev["event_id"][id_order], _id_pos=id_order)


def _chunks(n: int) -> list[tuple[int, int]]:
    return [(i, min(i + CHUNK, n)) for i in range(0, n, CHUNK)]


def _indices(col: pa.ChunkedArray) -> tuple[np.ndarray, list[Any]]:
    """(the dictionary codes of a string column, as the table holds them, -1 for null; the values)."""
    arr = encoded(col)
    idx = arr.indices if arr.null_count == 0 else pc.fill_null(arr.indices, -1)
    return idx.to_numpy(zero_copy_only=False), arr.dictionary.to_pylist()


def _combined(p: dict[str, Any], i: int, j: int) -> np.ndarray:
    """Rows i:j's (a, b) group key codes combined into one number (nulls as 0)."""
    return np.asarray((p["a"][i:j].astype(np.int64) + 1) * (len(p["bv"]) + 1) + (p["b"][i:j].astype(np.int64) + 1))


def _category(p: dict[str, Any], i: int, j: int) -> np.ndarray:
    """Rows i:j's palette category (compile events coded ``compile``, as the full index codes them)."""
    cat = p["cat_map"][p["cat_idx"][i:j]]
    if p["compile"] is not None:
        cat[p["compile"][i:j]] = COMPILE_CODE
    return np.asarray(cat)


def _columns(table: pa.Table, which: int) -> dict[str, Any]:
    """One table's codes (its own arrays, no per-row copy) and one chunked pass: its group keys, categories
    present, first start and last end."""
    cat_idx, cat_values = _indices(table["category"])
    cat_map = np.array([CATEGORIES.index(c) if c in CATEGORIES else CATEGORIES.index("other")
                        for c in cat_values] + [CATEGORIES.index("other")], dtype=np.int16)
    if which == SYSTEM_TABLE:
        (a, av), (b, bv) = _indices(table["host"]), _indices(table["pid"])
        mask = compile_mask(table)
    else:
        (a, av), (b, bv) = _indices(table["rank"].cast(pa.string())), _indices(table["device"])
        mask = None
    n = table.num_rows
    p: dict[str, Any] = {"table": table, "which": which, "n": n, "ts": table["ts_ns"].to_numpy(),
                         "dur": table["dur_ns"].to_numpy(), "a": a, "b": b, "bv": bv, "cat_idx": cat_idx,
                         "cat_map": cat_map, "compile": mask if mask is not None and mask.any() else None}
    seen = np.zeros((len(av) + 1) * (len(bv) + 1), dtype=np.int64)
    cats = np.zeros(len(CATEGORIES), dtype=np.int64)
    ts_min, end_max = None, None
    for i, j in _chunks(n):
        seen += np.bincount(_combined(p, i, j), minlength=len(seen))
        cats += np.bincount(_category(p, i, j), minlength=len(CATEGORIES))
        ts, end = p["ts"][i:j], p["ts"][i:j] + np.maximum(p["dur"][i:j], 0)
        ts_min = int(ts.min()) if ts_min is None else min(ts_min, int(ts.min()))
        end_max = int(end.max()) if end_max is None else max(end_max, int(end.max()))
    used = np.flatnonzero(seen)
    k = len(bv) + 1
    side = HOST if which == SYSTEM_TABLE else DEVICE
    p["keys"] = [(side, av[u // k - 1] if u // k else None, bv[u % k - 1] if u % k else None) for u in used.tolist()]
    p["used"], p["lookup"] = used, np.zeros(len(seen), dtype=np.int64)
    p.update(cats=cats, ts_min=ts_min or 0, end_max=end_max or 0)
    return p


def _small_events(parts: list[dict[str, Any]], big: np.ndarray, origin: int, compact: np.ndarray) -> dict[str, Any]:
    """The events of the groups below ``lod.COARSE_MIN_EVENTS``, by group then start (each group one lane)."""
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("group", "start", "end", "cat", "name", "event_id",
                                                          "table", "row")}
    names: list[str] = []
    for p in parts:
        small = ~big[p["group"]]
        rows = np.concatenate([i + np.flatnonzero(small[_combined(p, i, j)]) for i, j in _chunks(p["n"])]
                              + [np.zeros(0, np.int64)])
        k = len(p["bv"]) + 1
        g = p["group"][(p["a"][rows].astype(np.int64) + 1) * k + (p["b"][rows].astype(np.int64) + 1)]
        start = p["ts"][rows] - origin
        name_idx, name_values = codes(p["table"]["name"].take(pa.array(rows)))
        cols["group"].append(g)
        cols["start"].append(start)
        cols["end"].append(start + np.maximum(p["dur"][rows], 0))
        cat = p["cat_map"][p["cat_idx"][rows]]
        if p["compile"] is not None:
            cat[p["compile"][rows]] = COMPILE_CODE
        cols["cat"].append(compact[cat])
        cols["name"].append(np.where(name_idx < 0, 0, name_idx) + len(names))
        cols["event_id"].append(p["table"]["event_id"].to_numpy()[rows])
        cols["table"].append(np.full(len(rows), p["which"], dtype=np.int8))
        cols["row"].append(rows.astype(np.int64))
        names += [str(v) for v in name_values] or [""]
    out: dict[str, Any] = {k: np.concatenate(v) for k, v in cols.items()}
    order = np.lexsort((out["start"], out["group"]))
    out = {k: v[order] for k, v in out.items()}
    out["name"] = out["name"].astype(np.int32)
    out["names"] = names
    return out
