"""PyTorch memory snapshots (``torch.cuda.memory._snapshot()`` / ``_dump_snapshot`` pickles) → `Trace`.

The format is the one ``torch/cuda/memory.py`` documents in ``_snapshot``'s docstring (torch-neuronx writes
the same): a dict with ``segments`` (each ``address``, ``total_size``, ``stream``, ``device``, ``blocks``
of ``address``, ``size``, ``state``, ``frames``) and ``device_traces`` (one list per device of entries
with ``action`` — ``alloc``, ``free_requested``, ``free_completed``, ``segment_alloc``, ``segment_free``,
``segment_map``, ``segment_unmap``, ``snapshot``, ``oom`` — ``addr``, ``size``, ``stream``, ``time_us``,
``frames``, and ``device_free`` on an ``oom``). Each frame is ``filename``, ``line``, ``name``.

**A pickle is code.** The file is read by :class:`SafeUnpickler`, which builds builtin containers and
scalars only: any global (a class, a function, ``os.system``) is refused with
:class:`~neurontrace.errors.UnsafePickleError` before anything runs. A cut-off pickle is a
:class:`~neurontrace.errors.TruncatedTraceError`.

What becomes rows of ``memory_events``: every trace entry, with the allocator's totals rebuilt by replay.
The snapshot's own state (the blocks allocated when it was taken) fixes the end of the replay, so the totals
are exact even when the history ring buffer dropped its oldest entries: start = end - net change. A
snapshot without history (recording off) gives one ``alloc`` row per allocated block, at time 0.
Entry and segment keys this reader does not know (a newer torch) are counted in a warning and ignored.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from neurontrace._io import read_content
from neurontrace._numbers import checked_float
from neurontrace.errors import MalformedTraceError, TruncatedTraceError, UnsafePickleError
from neurontrace.load import Probe
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import ACCOUNTING_KEY, ParseAccounting, Trace, metadata_table

from ._normalized_meta import with_normalized
from ._stacks import is_user_file

FORMAT = "torch-memory-snapshot"
_ACTIONS = {"alloc": "alloc", "free_requested": "free_requested", "free_completed": "free",
            "segment_alloc": "segment_alloc", "segment_free": "segment_free", "segment_map": "segment_map",
            "segment_unmap": "segment_unmap", "snapshot": "snapshot", "oom": "oom"}
_ENTRY_KEYS = frozenset({"action", "addr", "size", "stream", "time_us", "frames", "device_free", "pool_id",
                         "compile_context", "user_metadata", "forward_frames"})
_SEGMENT_KEYS = frozenset({"device", "address", "total_size", "stream", "segment_type", "segment_pool_id",
                           "allocated_size", "active_size", "requested_size", "blocks", "is_expandable", "frames"})
# neurontrace_synthetic: the label of a snapshot made by neurontrace.testing.synthetic_snapshot
_TOP_KEYS = frozenset({"segments", "device_traces", "allocator_settings", "external_annotations",
                       "neurontrace_synthetic"})


class SafeUnpickler(pickle.Unpickler):
    """Builtin containers and scalars only: every global lookup is refused, so no callable is ever reached."""

    def find_class(self, module: str, name: str) -> Any:
        raise UnsafePickleError(f"the pickle asks for {module}.{name}; a memory snapshot holds only dicts, lists "
                                "and numbers, so this file is refused unread (a pickle can run code)")


def safe_loads(data: Any, source: str) -> Any:
    """The object a pickle (bytes, or a buffer of them) holds, built by :class:`SafeUnpickler`; a named error
    for anything else."""
    try:
        return SafeUnpickler(io.BytesIO(memoryview(data))).load()
    except UnsafePickleError:
        raise
    except (EOFError, pickle.UnpicklingError) as exc:
        if not isinstance(exc, EOFError) and "truncated" not in str(exc):
            raise MalformedTraceError(f"{source}: not a readable pickle ({exc})") from exc
        raise TruncatedTraceError(f"{source}: the pickle ends early (cut off after {len(data)} bytes); dump the "
                                  "snapshot again") from exc
    except RecursionError as exc:
        raise MalformedTraceError(f"{source}: the pickle is nested too deeply to be a memory snapshot") from exc
    except (ValueError, TypeError, IndexError, KeyError, AttributeError,
            MemoryError, OverflowError) as exc:
        raise MalformedTraceError(f"{source}: not a readable pickle ({exc})") from exc


def sniff(probe: Probe) -> bool:
    head = probe.head
    return (not probe.is_dir and len(head) > 2 and head[0] == 0x80 and 2 <= head[1] <= 5
            and (b"segments" in head or b"device_traces" in head))


def parse(path: Path, *, progress: Progress = no_progress) -> Trace:
    content = read_content(path, progress)
    if not content.complete:
        raise TruncatedTraceError(f"{path}: {content.damage}; dump the snapshot again")
    return from_object(safe_loads(content.data, str(path)), source=str(path))


def from_object(snap: Any, *, source: str = "<snapshot>") -> Trace:
    """A snapshot already in memory (``torch.cuda.memory._snapshot()``'s dict) as a Trace."""
    if not isinstance(snap, dict) or not ({"segments", "device_traces"} & set(snap)):
        raise MalformedTraceError(f"{source}: not a memory snapshot (expected a dict with segments and "
                                  f"device_traces, found {type(snap).__name__})")
    _check_depth(snap, source)
    acct = ParseAccounting(source=source, format=FORMAT)
    unknown: dict[str, int] = {}
    for k in set(snap) - _TOP_KEYS:
        unknown[f"snapshot.{k}"] = 1
    segments = _list(snap.get("segments"), "segments", source)
    traces = _list(snap.get("device_traces"), "device_traces", source)
    frames = _Frames()
    state = _state(segments, unknown, acct)
    cols: dict[str, list[Any]] = {k: [] for k in ("ts_ns", "device", "action", "addr", "bytes", "stream",
                                                  "frame_id", "total_allocated_bytes", "total_reserved_bytes")}
    timed = True
    for dev, entries in enumerate(traces):
        acct.events_read += len(entries) if isinstance(entries, list) else 0
        rows = _entries(dev, entries if isinstance(entries, list) else [], frames, unknown, acct)
        if rows:
            timed &= all(r[0] is not None for r in rows)
            _replay(rows, state.get(dev, (0, 0)), cols, f"cuda:{dev}")
    history_devices = {d for d, e in enumerate(traces) if isinstance(e, list) and e}
    for dev, blocks in state.blocks.items():  # no history for this device: its allocated blocks, at time 0
        if dev in history_devices:
            continue
        acct.events_read += len(blocks)
        acct.keep("memory_events", len(blocks))
        alloc = 0
        for addr, size, fr in blocks:
            alloc += size
            for k, v in zip(cols, (0, f"cuda:{dev}", "alloc", addr, size, None, frames.id(fr), alloc,
                                   state.get(dev, (0, 0))[1]), strict=True):
                cols[k].append(v)
    if not timed:
        acct.warnings.append("trace entries without time_us: their rows are ordered by position (1 ns apart)")
    if unknown:
        listed = ", ".join(f"{k} ({n})" for k, n in sorted(unknown.items()))
        acct.warnings.append(f"keys this reader does not know (a newer torch?) were ignored: {listed}")
    acct.check()
    n = len(cols["ts_ns"])
    mem = pa.table({
        "ts_ns": pa.array(cols["ts_ns"], pa.int64()), "device": pa.array(cols["device"], pa.string()),
        "rank": pa.nulls(n, pa.int32()), "action": pa.array(cols["action"], pa.string()),
        "addr": pa.array(cols["addr"], pa.int64()), "bytes": pa.array(cols["bytes"], pa.int64()),
        "total_allocated_bytes": pa.array(cols["total_allocated_bytes"], pa.int64()),
        "total_reserved_bytes": pa.array(cols["total_reserved_bytes"], pa.int64()),
        "stream": pa.array(cols["stream"], pa.int64()), "frame_id": pa.array(cols["frame_id"], pa.int64()),
    })
    facts: dict[str, Any] = {"format": FORMAT, "clock": "unix_epoch_ns" if timed and n else "snapshot_order",
             "backend": "cuda", "memory_snapshot": state.summary(), ACCOUNTING_KEY: acct.as_dict()}
    if isinstance(snap.get("neurontrace_synthetic"), str):
        facts.update({"synthetic": True, "synthetic_note": snap["neurontrace_synthetic"]})
    return with_normalized(Trace(memory_events=mem, frames=frames.table(), metadata=metadata_table(facts, source=source)))


MAX_DEPTH = 32  # a snapshot nests about 7 deep (segments > blocks > frames > frame); far more is not one


def _check_depth(obj: Any, source: str) -> None:
    """Refuse containers nested deeper than MAX_DEPTH; each container is visited once (a pickle's memo can
    share one list many times over, which a naive walk would follow exponentially)."""
    seen: set[int] = set()
    todo: list[tuple[Any, int]] = [(obj, 0)]
    while todo:
        o, depth = todo.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if depth > MAX_DEPTH:
            raise MalformedTraceError(f"{source}: containers nested more than {MAX_DEPTH} deep; a memory snapshot "
                                      "nests about 7 deep, so this is not one")
        items = o.values() if isinstance(o, dict) else o if isinstance(o, list | tuple) else ()
        todo += [(v, depth + 1) for v in items if isinstance(v, dict | list | tuple)]


def _list(v: Any, what: str, source: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise MalformedTraceError(f"{source}: {what} is a {type(v).__name__}, expected a list")
    return v


class _State:
    """The allocator's state when the snapshot was taken, per device."""

    def __init__(self) -> None:
        self.totals: dict[int, tuple[int, int]] = {}  # device -> (allocated, reserved)
        self.blocks: dict[int, list[tuple[int, int, Any]]] = {}  # device -> allocated (addr, size, frames)
        self.segments: dict[int, dict[str, int]] = {}

    def get(self, dev: int, default: tuple[int, int]) -> tuple[int, int]:
        return self.totals.get(dev, default)

    def summary(self) -> list[dict[str, Any]]:
        return [{"device": f"cuda:{d}", **s} for d, s in sorted(self.segments.items())]


_LIMIT = 1 << 53  # sizes, addresses and times beyond 2^53 (8 PiB, 285 years in µs) are no real allocator's


def _int(v: Any) -> int | None:
    """An int field, or None when it is not an int or lies beyond ±2^53 (so sums and ns stay in int64)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and -_LIMIT < v < _LIMIT else None


def _time(v: Any) -> float | None:
    """``time_us`` through the one checked conversion, within ±2^53 µs."""
    t = checked_float(v)
    return t if t is not None and abs(t) < _LIMIT else None


def _state(segments: list[Any], unknown: dict[str, int], acct: ParseAccounting) -> _State:
    st = _State()
    bad = 0
    for seg in segments:
        if not isinstance(seg, dict) or _int(seg.get("total_size")) is None:
            bad += 1
            continue
        for k in set(seg) - _SEGMENT_KEYS:
            unknown[f"segment.{k}"] = unknown.get(f"segment.{k}", 0) + 1
        dev = _int(seg.get("device")) or 0
        s = st.segments.setdefault(dev, {"segments": 0, "reserved_bytes": 0, "allocated_bytes": 0,
                                         "largest_free_block_bytes": 0, "free_blocks": 0})
        s["segments"] += 1
        s["reserved_bytes"] += seg["total_size"]
        for b in seg.get("blocks") or []:
            size = _int(b.get("size")) if isinstance(b, dict) else None
            if size is None:
                bad += 1
                continue
            if b.get("state") == "active_allocated":
                s["allocated_bytes"] += size
                st.blocks.setdefault(dev, []).append((_int(b.get("address")) or 0, size, b.get("frames")))
            elif b.get("state") == "inactive":
                s["free_blocks"] += 1
                s["largest_free_block_bytes"] = max(s["largest_free_block_bytes"], size)
    for dev, s in st.segments.items():
        st.totals[dev] = (s["allocated_bytes"], s["reserved_bytes"])
    if bad:
        acct.warnings.append(f"{bad} segments or blocks without a size were left out of the snapshot's state")
    return st


# time_us, action, addr, size, stream, frame
_Row = tuple[int | float | None, str, int | None, int, int | None, int | None]


def _entries(dev: int, entries: list[Any], frames: _Frames, unknown: dict[str, int],
             acct: ParseAccounting) -> list[_Row]:
    rows: list[_Row] = []
    for e in entries:
        action = _ACTIONS.get(str(e.get("action"))) if isinstance(e, dict) else None
        size = _int(e.get("size")) if isinstance(e, dict) else None
        if action is None or size is None or size < 0:
            acct.skip("snapshot trace entry with an unknown action or no size", 1)
            continue
        for k in set(e) - _ENTRY_KEYS:
            unknown[f"entry.{k}"] = unknown.get(f"entry.{k}", 0) + 1
        rows.append((_time(e.get("time_us")), action,
                     _int(e.get("addr")), size, _int(e.get("stream")), frames.id(e.get("frames"))))
    acct.keep("memory_events", len(rows))
    return rows


_ALLOC_SIGN = {"alloc": 1, "free": -1}
_RESERVE_SIGN = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
# The sign of each action's `bytes` (memory_events: + allocated, - freed; an oom: what was asked).
_SIGN = {**_ALLOC_SIGN, **_RESERVE_SIGN, "free_requested": -1, "snapshot": 1, "oom": 1}


def _replay(rows: list[_Row], end: tuple[int, int], cols: dict[str, list[Any]], device: str) -> None:
    """Rows with totals rebuilt backwards from the snapshot's state (``end``: allocated, reserved)."""
    da = np.asarray([_ALLOC_SIGN.get(r[1], 0) * r[3] for r in rows], dtype=np.int64)
    dr = np.asarray([_RESERVE_SIGN.get(r[1], 0) * r[3] for r in rows], dtype=np.int64)
    alloc = end[0] - int(da.sum()) + np.cumsum(da)
    res = end[1] - int(dr.sum()) + np.cumsum(dr)
    for i, (t, action, addr, size, stream, frame) in enumerate(rows):
        cols["ts_ns"].append(round(t * 1000) if t is not None else i)
        cols["device"].append(device)
        cols["action"].append(action)
        cols["addr"].append(addr)
        cols["bytes"].append(size * _SIGN[action])
        cols["stream"].append(stream)
        cols["frame_id"].append(frame)
        cols["total_allocated_bytes"].append(int(alloc[i]))
        cols["total_reserved_bytes"].append(int(res[i]))


class _Frames:
    """The calling-context tree of the snapshot's stacks (innermost frame first in the input)."""

    def __init__(self) -> None:
        self.nodes: dict[tuple[int, str, int, str], int] = {}
        self.rows: list[tuple[int, str, int, str, bool]] = []  # parent, file, line, function, is_user
        self.stacks: dict[int, int] = {}  # id() of a frames list seen -> its frame id (lists repeat in memo)

    def id(self, frames: Any) -> int | None:
        """The innermost user frame of a stack (its innermost frame when no user code is on it)."""
        if not isinstance(frames, list) or not frames:
            return None
        key = id(frames)
        if key in self.stacks:
            return self.stacks[key] if self.stacks[key] >= 0 else None
        parent, user, node = -1, -1, -1
        for f in reversed(frames):
            if not isinstance(f, dict):
                continue
            loc = (parent, str(f.get("filename", "")), _int(f.get("line")) or 0, str(f.get("name", "")))
            node = self.nodes.get(loc, -1)
            if node < 0:
                node = self.nodes[loc] = len(self.rows)
                self.rows.append((parent, loc[1], loc[2], loc[3], is_user_file(loc[1])))
            if self.rows[node][4]:
                user = node
            parent = node
        out = user if user >= 0 else (node if node >= 0 else None)
        self.stacks[key] = out if out is not None else -1
        return out

    def table(self) -> pa.Table:
        parent = [r[0] for r in self.rows]
        return pa.table({
            "frame_id": pa.array(range(len(self.rows)), pa.int64()),
            "parent_id": pa.array([p if p >= 0 else None for p in parent], pa.int64()),
            "file": pa.array([r[1] for r in self.rows], pa.string()),
            "line": pa.array([r[2] for r in self.rows], pa.int32()),
            "function": pa.array([r[3] for r in self.rows], pa.string()),
            "kind": pa.array(["python"] * len(self.rows), pa.string()),
            "is_user": pa.array([r[4] for r in self.rows], pa.bool_()),
        })
