"""Source frames of a Kineto trace, and the frame each event is charged to.

Two ways torch.profiler records stacks:
- ``python_function`` events (``with_stack=True`` since torch 1.10): timed frames with ``Python id``
  and ``Python parent id``; an op's frame is the innermost Python frame on its thread enclosing it;
- a ``Call stack`` arg on each op (torch 1.8/1.9): ``"file(line): fn;caller(line): fn;..."``,
  innermost first.

Either way an event is charged to its innermost *user* frame (see ``_stacks.is_user_file``), or to
its innermost frame when no user code is on the stack. Device ops inherit the frame of the
framework op that launched them (same External id).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from neurontrace.parsers._pool import POOL, pc
from neurontrace.trace import ParseAccounting

from ._arrow import dictionary, first_seen, lookup, min_by_key, pair_codes
from ._stacks import innermost_enclosing, is_user_file, python_frames, rows_of

_OP_CATEGORIES = pa.array(["cpu_op", "Operator"])
UNNAMED_FRAME = "<unnamed python_function>"


def link_frames(system: pa.Table, device: pa.Table, acct: ParseAccounting) -> tuple[pa.Table | None, pa.Table,
                                                                                      pa.Table]:
    """(frames table or None, system with ``frame_id``, device with ``frame_id``)."""
    frames, frame_of_row = _python(system, acct)
    stacks = _call_stacks(system, offset=frames.num_rows if frames is not None else 0)
    if stacks is not None:
        stack_frames, stack_of_row = stacks
        frame_of_row = np.where(frame_of_row >= 0, frame_of_row, stack_of_row)
        frames = stack_frames if frames is None else pa.concat_tables([frames, stack_frames], memory_pool=POOL)
    system = system.append_column("frame_id", pa.array(frame_of_row, mask=frame_of_row < 0, memory_pool=POOL))
    return frames, system, device.append_column("frame_id", _by_external_id(system, device))


def _python(system: pa.Table, acct: ParseAccounting) -> tuple[pa.Table | None, np.ndarray]:
    frame_of_row = np.full(system.num_rows, -1, dtype=np.int64)
    py_mask = pc.fill_null(pc.equal(system["cat"], "python_function"), False)
    is_py = py_mask.to_numpy(zero_copy_only=False)
    py_rows = np.flatnonzero(is_py)
    if not len(py_rows):
        return None, frame_of_row
    py = pc.filter(system.select(["name", "python_id", "python_parent_id"]), py_mask)  # filter: no index array
    unnamed = py["name"].null_count
    if unnamed:  # a frame without a name is still a frame (its callees keep their caller chain)
        acct.warnings.append(f"{unnamed} python_function events have no name; kept as frames named "
                             f"{UNNAMED_FRAME!r}")
        py = py.set_column(0, "name", pc.fill_null(py["name"], UNNAMED_FRAME))
    py_id = pc.fill_null(py["python_id"], -1).to_numpy()
    parent = pc.fill_null(py["python_parent_id"], -1).to_numpy()
    try:
        pf = python_frames(py["name"], py_id, parent)
    except ValueError:
        acct.warnings.append("Python parent ids form a cycle; frames kept without their callers")
        parent = np.full(len(py_id), -1)
        pf = python_frames(py["name"], py_id, parent)
    frame_of_row[py_rows] = pf.node_of_event
    parent_rows = rows_of(py_id, parent)  # per python event: its parent's python-event index

    # Each other host event: the innermost Python frame on its thread that encloses it.
    start = system["ts_ns"].to_numpy()
    end = start + pc.fill_null(system["dur_ns"], 0).to_numpy()
    thread, _ = pair_codes(system["pid"], system["tid"])  # one code per pid/tid
    pos_of_row = np.full(system.num_rows, -1, dtype=np.int64)  # reused: valid for the current thread
    for code in np.unique(thread[py_rows]):
        in_thread = thread == code
        fr = np.flatnonzero(in_thread & is_py)
        fr = fr[np.lexsort((fr, start[fr]))]
        pos_of_row[fr] = np.arange(len(fr))
        fr_parent_rows = parent_rows[np.searchsorted(py_rows, fr)]
        parent_at = py_rows[np.maximum(fr_parent_rows, 0)]
        # A parent on another thread (a writer's or an edit's python_parent_id) is no enclosing frame here;
        # its position would be another thread's (pos_of_row is valid for this thread only).
        fr_parent = np.where((fr_parent_rows >= 0) & (thread[parent_at] == code), pos_of_row[parent_at], -1)
        targets = np.flatnonzero(in_thread & ~is_py)
        if not len(targets):
            continue
        enc = innermost_enclosing(start[fr], end[fr], fr_parent, start[targets], end[targets])
        node = np.where(enc >= 0, frame_of_row[fr[np.maximum(enc, 0)]], -1)
        user = np.where(node >= 0, pf.nearest_user[np.maximum(node, 0)], -1)
        frame_of_row[targets] = np.where(user >= 0, user, node)
    return pf.frames, frame_of_row


def _call_stacks(system: pa.Table, offset: int) -> tuple[pa.Table, np.ndarray] | None:
    """Frames from legacy ``Call stack`` args; one pass over the distinct stacks (few), not the events."""
    has = system["call_stack"].is_valid().to_numpy(zero_copy_only=False)
    if not has.any():
        return None
    rows = np.flatnonzero(has)
    all_codes, distinct = dictionary(system["call_stack"])  # the distinct stacks; the rows' text is not copied
    # Stacks numbered in the order they first occur, whatever order the decoder's dictionary holds them in.
    used, stack_codes = first_seen(all_codes[rows], len(distinct))
    distinct = distinct.take(pa.array(used, memory_pool=POOL))
    nodes: dict[tuple[int, str], int] = {}
    parent_of: list[int] = []
    locations: list[tuple[str | None, int | None, str]] = []
    frame_of_stack = []
    for stack in distinct.to_pylist():
        parent, innermost_user, node = -1, -1, -1
        for entry in reversed([e for e in stack.split(";") if e]):
            node = nodes.setdefault((parent, entry), len(parent_of))
            if node == len(parent_of):
                parent_of.append(parent)
                locations.append(_split_location(entry))
            if is_user_file(locations[node][0]):
                innermost_user = node
            parent = node
        frame_of_stack.append(innermost_user if innermost_user >= 0 else node)
    frame_of_row = np.full(system.num_rows, -1, dtype=np.int64)
    stack_frame = np.asarray(frame_of_stack, dtype=np.int64)[stack_codes]
    frame_of_row[rows] = np.where(stack_frame >= 0, stack_frame + offset, -1)
    parents = np.asarray(parent_of, dtype=np.int64)
    frames = pa.table({
        "frame_id": pa.array(np.arange(len(parent_of), dtype=np.int64) + offset, memory_pool=POOL),
        "parent_id": pa.array(parents + offset, mask=parents < 0, memory_pool=POOL),
        "file": pa.array([loc[0] for loc in locations], pa.string(), memory_pool=POOL),
        "line": pa.array([loc[1] for loc in locations], pa.int32(), memory_pool=POOL),
        "function": pa.array([loc[2] for loc in locations], pa.string(), memory_pool=POOL),
        "kind": pa.array(["call_stack"] * len(parent_of), pa.string(), memory_pool=POOL),
        "is_user": pa.array([is_user_file(loc[0]) for loc in locations], pa.bool_(), memory_pool=POOL),
    })
    return frames, frame_of_row


def _split_location(entry: str) -> tuple[str | None, int | None, str]:
    head, sep, function = entry.partition("): ")
    file_, paren, line = head.rpartition("(")
    if not (sep and paren and line.isdigit()):
        return None, None, entry
    return file_, int(line), function


def _by_external_id(system: pa.Table, device: pa.Table) -> pa.Array:
    is_op = pc.fill_null(pc.is_in(system["cat"], _OP_CATEGORIES), False)
    ops = pc.filter(system.select(["external_id", "external_id_legacy", "frame_id"]),
                    pc.and_(is_op, pc.is_valid(system["frame_id"])))
    ext = pc.coalesce(ops["external_id"], ops["external_id_legacy"])
    keys = pc.filter(pa.table({"ext": ext, "frame_id": ops["frame_id"]}), pc.is_valid(ext))
    if keys.num_rows == 0 or device.num_rows == 0:
        return pa.nulls(device.num_rows, pa.int64(), memory_pool=POOL)
    ext_keys, frame = min_by_key(keys["ext"].to_numpy(), keys["frame_id"].to_numpy())
    dev_ext = pc.coalesce(device["external_id"], device["external_id_legacy"])
    pos, hit = lookup(ext_keys, pc.fill_null(dev_ext, 0).to_numpy())
    hit &= dev_ext.is_valid().to_numpy(zero_copy_only=False)
    return pa.array(frame[pos], pa.int64(), mask=~hit, memory_pool=POOL)
