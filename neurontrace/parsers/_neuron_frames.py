"""Source frames for NeuronCore instructions: which line of code each instruction came from.

An instruction can name its origin several ways (neuron.md §3.4, §3.7): a framework Python stack
(``stack_frame_ids`` → ``StackFrame*`` tables), a framework ``layer``, an ``hlo_name``, an NKI
kernel stack (``kernel_instruction_name`` → ``KernelInstructions``/``KernelStackFrames``) and a
source line (``nki_source_location``, ``bir_debug_info_source_location``). They are stacked into
one calling-context path, outermost first:

    python stack (root → leaf) → layer → hlo op → NKI kernel stack (root → leaf) → source line

An instruction's ``frame_id`` is the innermost *user* node of its path (user code: not the
framework, the standard library or an installed package), else the innermost node. Distinct
combinations of link values are few, so paths are built once per combination in Python and
spread to the rows with Arrow ``take``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._neuron_read import SourceTable
from ._stacks import is_user_file

LINK_COLUMNS = ("stack_frame_ids", "layer", "hlo_name", "kernel_instruction_name", "nki_source_location",
                "bir_debug_info_source_location")
_LOCATION = re.compile(r"^(?P<file>.+?):(?P<line>\d+)(?::\d+)?$")

Node = tuple[int | None, str, str | None, int | None, str | None]  # parent, kind, file, line, function


class FrameBuilder:
    """Grows the ``frames`` table as instructions ask for paths; one node per distinct path step."""

    def __init__(self, tables: dict[str, SourceTable]) -> None:
        self._nodes: dict[Node, int] = {}
        self._rows: list[Node] = []
        self._user: list[bool] = []
        self._paths: dict[tuple[Any, ...], int | None] = {}
        self._py = _python_stacks(tables)
        self._kernel = _kernel_stacks(tables)
        # (link columns, their dictionaries, sorted distinct codes, frame id of each) of the last batch
        self._code_cache: tuple[list[str], list[pa.Array], np.ndarray, np.ndarray] | None = None

    @property
    def empty(self) -> bool:
        return not self._rows

    def link(self, batch: pa.Table) -> pa.Array | None:
        """The frame id of each row of ``batch`` (null where it names no source), or None if none do."""
        out = np.empty(batch.num_rows, np.int64)
        if not self.link_into(batch, out):
            return None
        missing = out < 0
        return pa.array(out, pa.int64(), mask=missing) if missing.any() else pa.array(out, pa.int64())

    def link_into(self, batch: pa.Table, out: np.ndarray) -> bool:
        """Write the frame id of each row of ``batch`` into ``out`` (-1 where it names no source).

        Returns False when no row names one (``out`` then holds scratch values).
        """
        cols = [c for c in LINK_COLUMNS if c in batch.column_names]
        if not cols:
            return False
        encoded = [_dict_chunk(batch[c]) for c in cols]
        dicts = [e.dictionary for e in encoded]
        radix = [len(d) + 1 for d in dicts]  # 0 stands for null
        if float(np.prod(np.array(radix, dtype=np.float64))) >= 2.0**62:
            # astronomically many distinct values: one representative row per combination
            parts, rows_of = _representatives(encoded)
            frame_of = self._frames_of(cols, dicts, parts)
        else:
            # Mixed-radix code of the per-column dictionary indices (index + 1, 0 for null): one
            # int64 per row, decodable, computed in ``out`` itself (no temporary the size of the
            # batch). Rows get sum(index * weight); the constant sum(weight) (the "+ 1"s) is added
            # to the few distinct codes only.
            codes = out
            shift = 0
            for j, (e, r) in enumerate(zip(encoded, radix, strict=True)):
                idx = e.indices if not e.indices.null_count else pc.fill_null(e.indices, -1)
                if j == 0:
                    codes[:] = np.asarray(idx.to_numpy())
                else:
                    codes *= r
                    codes += np.asarray(idx.to_numpy())
                shift = shift * r + 1
            combos = pc.dictionary_encode(pa.array(codes))
            rows_of = combos.indices
            frame_of = self._frames_of_codes(cols, dicts, radix, np.asarray(combos.dictionary.to_numpy()) + shift)
            del combos
        if (frame_of < 0).all():
            return False
        np.take(frame_of, np.asarray(rows_of.to_numpy(zero_copy_only=False)), out=out, mode="clip")
        return True

    def _frames_of_codes(self, cols: list[str], dicts: list[pa.Array], radix: list[int],
                         codes: np.ndarray) -> np.ndarray:
        """Frame id (-1 for none) of each distinct code; codes seen in an earlier batch with the
        same dictionaries (a file read in small batches repeats them) are looked up, not rebuilt."""
        cached = self._code_cache
        if cached is None or cached[0] != cols or any(not a.equals(b) for a, b in zip(cached[1], dicts, strict=True)):
            cached = self._code_cache = (cols, dicts, np.empty(0, np.int64), np.empty(0, np.int64))
        known, frames = cached[2], cached[3]
        pos = np.minimum(np.searchsorted(known, codes), max(len(known) - 1, 0))
        hit = known[pos] == codes if len(known) else np.zeros(len(codes), np.bool_)
        frame_of = np.where(hit, frames[pos] if len(known) else -1, -1)
        new = ~hit
        if new.any():
            fresh = self._frames_of(cols, dicts, _decode(codes[new], radix))
            frame_of[new] = fresh
            merged = np.concatenate([known, codes[new]])
            order = np.argsort(merged, kind="stable")
            self._code_cache = (cols, dicts, merged[order], np.concatenate([frames, fresh])[order])
        return frame_of

    def _frames_of(self, cols: list[str], dicts: list[pa.Array], parts: list[list[int]]) -> np.ndarray:
        """Frame id (-1 for none) of each combination of per-column index (+1, 0 for null)."""
        k = len(parts[0])
        at_slot = {LINK_COLUMNS.index(c): j for j, c in enumerate(cols)}
        nothing: list[Any] = [None] * k
        spelled = [[None, *d.to_pylist()] for d in dicts]
        per_slot = [[spelled[at_slot[s]][i] for i in parts[at_slot[s]]] if s in at_slot else nothing
                    for s in range(len(LINK_COLUMNS))]
        known = self._paths
        frame_ids: list[int] = []
        for key in zip(*per_slot, strict=True):
            fid = known[key] if key in known else self._path(key)
            frame_ids.append(-1 if fid is None else fid)
        return np.array(frame_ids, dtype=np.int64)

    def table(self) -> pa.Table:
        rows = self._rows
        return pa.table({
            "frame_id": pa.array(range(len(rows)), pa.int64()),
            "parent_id": pa.array([r[0] for r in rows], pa.int64()),
            "file": pa.array([r[2] for r in rows], pa.string()),
            "line": pa.array([r[3] for r in rows], pa.int32()),
            "function": pa.array([r[4] for r in rows], pa.string()),
            "kind": pa.array([r[1] for r in rows], pa.string()),
            "is_user": pa.array(self._user, pa.bool_()),
        })

    # -- paths -------------------------------------------------------------------------------------

    def _path(self, links: tuple[Any, ...]) -> int | None:
        if links in self._paths:
            return self._paths[links]
        sf_ids, layer, hlo, kin, nki, bir = links
        steps: list[tuple[str, str | None, int | None, str | None]] = []
        first_sf = _first(_id_list(sf_ids))
        if first_sf is not None:
            steps += self._py.get(first_sf, [])
        if layer:
            steps.append(("layer", None, None, str(layer)))
        if hlo:
            steps.append(("hlo", None, None, str(hlo)))
        kernel = self._kernel.get(str(kin)) if kin else None
        if kernel:
            steps += kernel
        elif nki or bir:
            loc = _first(_locations(nki)) or _first(_locations(bir))
            if loc is not None:
                steps.append(("nki", loc[0], loc[1], None))
        parent: int | None = None
        best: int | None = None
        for kind, file, line, function in steps:
            parent = self._node((parent, kind, file, line, function))
            if self._user[parent]:
                best = parent
        result = best if best is not None else parent
        self._paths[links] = result
        return result

    def _node(self, node: Node) -> int:
        fid = self._nodes.get(node)
        if fid is None:
            fid = self._nodes[node] = len(self._rows)
            self._rows.append(node)
            kind, file = node[1], node[2]
            self._user.append(kind in ("python", "nki") and is_user_file(file))
        return fid


def _decode(codes: np.ndarray, radix: list[int]) -> list[list[int]]:
    """Per-column index (+1, 0 = null) of each mixed-radix code."""
    parts = []
    for r in reversed(radix):
        codes, rest = np.divmod(codes, r)
        parts.append(rest.tolist())
    return parts[::-1]


def _representatives(encoded: list[pa.DictionaryArray]) -> tuple[list[list[int]], pa.Array]:
    idx = [np.asarray(pc.fill_null(e.indices, -1).to_numpy(zero_copy_only=False), np.int64) + 1 for e in encoded]
    codes = idx[0]
    for i, e in zip(idx[1:], encoded[1:], strict=True):
        codes = _compact(codes * (len(e.dictionary) + 1) + i)[0]
    pos, n = _compact(codes)
    first = np.full(n, -1, dtype=np.int64)
    first[pos[::-1]] = np.arange(len(pos), dtype=np.int64)[::-1]
    return [i[first].tolist() for i in idx], pa.array(pos)


def _compact(codes: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense codes 0..k-1 for the distinct values of ``codes`` (hash based, no sort), and k."""
    arr = pa.array(codes)
    uniq = pc.unique(arr)
    pos = np.asarray(pc.index_in(arr, uniq).to_numpy(zero_copy_only=False), dtype=np.int64)
    return pos, len(uniq)


def _dict_chunk(col: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray:
    if isinstance(col, pa.ChunkedArray):  # one chunk (a batch) needs no copy
        arr = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    else:
        arr = col
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr.cast(pa.string()) if not pa.types.is_string(arr.type) else arr)
    return arr


def _first(items: Sequence[Any]) -> Any:
    return items[0] if items else None


def _id_list(value: Any) -> list[str]:
    """``stack_frame_ids`` as written: a list, or its text (``[101, 102]``, ``101,102``)."""
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    text = str(value).strip().strip("[]")
    return [t.strip().strip("'\"") for t in text.split(",") if t.strip()]


def _locations(value: Any) -> list[tuple[str, int | None]]:
    """``file.py:42`` locations from a string, a JSON list of strings, or a comma-separated list."""
    if value is None:
        return []
    items: list[Any]
    if isinstance(value, list | tuple):
        items = list(value)
    else:
        text = str(value).strip()
        try:
            parsed = json.loads(text) if text.startswith("[") else None
        except (ValueError, RecursionError):
            parsed = None
        items = parsed if isinstance(parsed, list) else [t for t in text.strip("[]").split(",") if t.strip()]
    out: list[tuple[str, int | None]] = []
    for item in items:
        s = str(item).strip().strip("'\"")
        m = _LOCATION.match(s)
        out.append((m.group("file"), int(m.group("line"))) if m else (s, None))
    return out


def _python_stacks(tables: dict[str, SourceTable]) -> dict[str, list[tuple[str, str | None, int | None, str | None]]]:
    """StackFrame id → its path (root first) of (kind, file, line, function)."""
    need = ("StackFrame", "StackFrameFileLocation", "StackFrameFileName", "StackFrameFunctionName")
    if any(t not in tables for t in need):
        return {}
    frames = {str(r["id"]): r for r in tables["StackFrame"].read().to_pylist()}
    locs = {str(r["id"]): r for r in tables["StackFrameFileLocation"].read().to_pylist()}
    files = {str(r["id"]): r.get("name") for r in tables["StackFrameFileName"].read().to_pylist()}
    funcs = {str(r["id"]): r.get("name") for r in tables["StackFrameFunctionName"].read().to_pylist()}
    out: dict[str, list[tuple[str, str | None, int | None, str | None]]] = {}
    for fid in frames:
        chain = []
        cur: str | None = fid
        seen: set[str] = set()
        while cur is not None and cur in frames and cur not in seen:
            seen.add(cur)
            row = frames[cur]
            loc = locs.get(str(row.get("file_location_id")), {})
            chain.append(("python", files.get(str(loc.get("file_name_id"))), loc.get("line_number"),
                          funcs.get(str(loc.get("function_name_id")))))
            parent = row.get("parent_frame_id")
            cur = None if parent in (None, "0", 0, "") else str(parent)
        out[fid] = chain[::-1]
    return out


def _kernel_stacks(tables: dict[str, SourceTable]) -> dict[str, list[tuple[str, str | None, int | None, str | None]]]:
    """kernel_instruction_name → NKI kernel function chain (root first) plus the instruction's line."""
    if "KernelInstructions" not in tables:
        return {}
    stack_rows: dict[Any, dict[str, Any]] = {}
    if "KernelStackFrames" in tables:
        stack_rows = {r["stack_frame_id"]: r for r in tables["KernelStackFrames"].read().to_pylist()}
    out: dict[str, list[tuple[str, str | None, int | None, str | None]]] = {}
    for r in tables["KernelInstructions"].read().to_pylist():
        chain: list[tuple[str, str | None, int | None, str | None]] = []
        cur = r.get("stack_frame_id")
        seen: set[Any] = set()
        innermost: str | None = None
        while cur is not None and cur in stack_rows and cur not in seen:
            seen.add(cur)
            sf = stack_rows[cur]
            fn = sf.get("fully_qualified_function_name")
            innermost = innermost or fn
            chain.append(("nki", sf.get("file_path"), sf.get("line_number"), fn))
            cur = sf.get("parent_stack_frame_id")
        chain.reverse()
        if r.get("file_path") is not None or r.get("line_number") is not None:
            chain.append(("nki", r.get("file_path"), r.get("line_number"), innermost))
        if chain and r.get("kernel_instruction_name") is not None:
            out[str(r["kernel_instruction_name"])] = chain
    return out
