"""Source frames: a calling-context tree from nested frame events, and who called what.

Shared by parsers whose input records stack frames as timed events (torch.profiler's
``python_function`` events with ``Python id``/``Python parent id``). Everything is vectorized over
the depth of the stacks, never over events: each pass handles one tree level for all events.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._arrow import dictionary

# Frames from these places are the framework, the standard library or a common dependency, not
# the user's code. torch's Python tracer shortens paths relative to sys.path ("torch/nn/...py",
# "typing.py", "numpy/_core/..."), so the first path component is what identifies a library.
_LIBRARY_PATH = re.compile(r"(site-packages|dist-packages|/lib/python\d|^<|(^|/)neurontrace/)")
LIBRARY_ROOTS = frozenset(sys.stdlib_module_names) | {
    "torch", "torch_neuronx", "torch_xla", "torchvision", "torchaudio", "functorch", "triton", "numpy",
    "scipy", "pandas", "transformers", "accelerate", "neuronx_distributed", "libneuronxla", "jax",
    "typing_extensions", "_pytest", "pytest", "pluggy", "IPython", "ipykernel", "tornado", "neurontrace",
    # a Dask client or worker threads in the profiled process, and Jupyter's kernel machinery
    "dask", "distributed", "cloudpickle", "zmq", "anyio",
}
_PY_NAME = r"^(?P<file>.*)\((?P<line>\d+)\): (?P<function>.*)$"


def is_user_file(path: str | None) -> bool:
    """True for the user's own source files: not the framework, the stdlib or a known library."""
    if not path or _LIBRARY_PATH.search(path):
        return False
    if path.startswith("/"):  # absolute paths (older torch) say site-packages or lib/pythonX
        return True
    first = path.replace("\\", "/").split("/", 1)[0].removesuffix(".py")
    return first not in LIBRARY_ROOTS


@dataclass
class PythonFrames:
    """The frames table, and for each input frame event the id of its node in it."""

    frames: pa.Table
    node_of_event: np.ndarray  # int64, one per python event row
    nearest_user: np.ndarray  # int64 per node: itself if user code, else its nearest user caller, or -1


def python_frames(names: pa.Array, py_id: np.ndarray, parent_py_id: np.ndarray) -> PythonFrames:
    """Calling-context tree of python_function events; ``py_id``/``parent_py_id`` use -1 for none."""
    n = len(names)
    parent_row = rows_of(py_id, parent_py_id)
    depth = _depths(parent_row)
    loc_codes, locations = dictionary(names)
    node = np.full(n, -1, dtype=np.int64)
    node_parent: list[np.ndarray] = []
    node_loc: list[np.ndarray] = []
    next_id = 0
    for d in range(int(depth.max()) + 1 if n else 0):
        rows = np.flatnonzero(depth == d)
        parents = np.where(parent_row[rows] >= 0, node[np.maximum(parent_row[rows], 0)], -1)
        # One int64 key per (caller node, location): a 1-d unique is far faster than rows of pairs.
        radix = len(locations) + 1
        uniq, inverse = np.unique((parents + 1) * radix + loc_codes[rows], return_inverse=True)
        node[rows] = next_id + inverse.reshape(-1)
        node_parent.append(uniq // radix - 1)
        node_loc.append(uniq % radix)
        next_id += len(uniq)
    parent_of_node = np.concatenate(node_parent) if node_parent else np.zeros(0, np.int64)
    loc_of_node = np.concatenate(node_loc) if node_loc else np.zeros(0, np.int64)
    parts = pc.extract_regex(locations, _PY_NAME)
    file_ = pc.struct_field(parts, "file")
    line = pc.cast(pc.struct_field(parts, "line"), pa.int32())
    function = pc.if_else(pc.is_valid(parts), pc.struct_field(parts, "function"), locations)
    user_loc = np.array([is_user_file(f) for f in file_.to_pylist()], dtype=bool)
    frames = pa.table(
        {
            "frame_id": pa.array(np.arange(len(parent_of_node), dtype=np.int64)),
            "parent_id": pa.array(parent_of_node, mask=parent_of_node < 0),
            "file": pc.take(file_, loc_of_node),
            "line": pc.take(line, loc_of_node),
            "function": pc.take(function, loc_of_node),
            "kind": pa.array(["python"] * len(parent_of_node), pa.string()),
            "is_user": pa.array(user_loc[loc_of_node] if len(loc_of_node) else [], pa.bool_()),
        }
    )
    nearest = _nearest_user(parent_of_node, user_loc[loc_of_node] if len(loc_of_node) else np.zeros(0, bool))
    return PythonFrames(frames, node, nearest)


def innermost_enclosing(
    frame_start: np.ndarray,
    frame_end: np.ndarray,
    frame_parent: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
) -> np.ndarray:
    """For each interval [start, end], the innermost frame interval enclosing it (-1 for none).

    Frames are one thread's properly nested intervals sorted by start; ``frame_parent`` points at
    each frame's enclosing frame (positions in the same arrays). The latest frame starting at or
    before ``start`` either encloses the interval or is a finished descendant of the frame that
    does, so walking its parents finds the answer; each pass advances every unresolved interval.
    """
    cand = np.searchsorted(frame_start, start, side="right") - 1
    for _ in range(len(frame_start) + 1):
        bad = cand >= 0
        bad[bad] = frame_end[cand[bad]] < end[bad]
        if not bad.any():
            break
        cand[bad] = frame_parent[cand[bad]]
    return cand


def rows_of(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Row index of each ``wanted`` id in ``ids`` (-1 when absent or negative)."""
    order = np.argsort(ids, kind="stable")
    pos = np.searchsorted(ids[order], wanted)
    pos = np.minimum(pos, max(len(ids) - 1, 0))
    found = (len(ids) > 0) & (wanted >= 0)
    if len(ids):
        found &= ids[order][pos] == wanted
    return np.where(found, order[pos] if len(ids) else -1, -1)


def _depths(parent: np.ndarray) -> np.ndarray:
    """Depth of every node of a forest given parent pointers (-1 at roots), by pointer jumping.

    ``depth[i]`` holds the steps from i to ``anc[i]``; each round doubles the jump, so a stack d
    frames deep takes log2(d) rounds. Once ``anc[i]`` is -1, ``depth[i]`` is final.
    """
    depth = (parent >= 0).astype(np.int64)
    anc = parent.copy()
    for _ in range(64):
        live = np.flatnonzero(anc >= 0)
        if not len(live):
            return depth
        up = anc[live]
        depth[live] += depth[up]
        anc[live] = anc[up]
    raise ValueError("python frame parents form a cycle")


def _nearest_user(parent: np.ndarray, is_user: np.ndarray) -> np.ndarray:
    """Per node: itself if user code, else the nearest user-code caller, else -1."""
    nearest = np.where(is_user, np.arange(len(parent)), -1)
    anc = parent.copy()
    pending = (nearest < 0) & (anc >= 0)
    for _ in range(len(parent) + 1):
        if not pending.any():
            break
        hit = pending & is_user[np.maximum(anc, 0)]
        nearest[hit] = anc[hit]
        pending &= ~hit
        anc[pending] = parent[anc[pending]]
        pending &= anc >= 0
    return nearest
