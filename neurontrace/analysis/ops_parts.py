"""The op table of a time slice in a form that adds up: per group, sums and counts rather than figures.

``diagnose DATASET`` out of core (``Options.owned``, analysis/slices.py) computes the op-efficiency section
slice by slice. A group's row (analysis/ops.py: device, rank, op, kernel class) is sums over its members
(kernels, or a CPU trace's outermost ops) — count, time, FLOPs, bytes — plus two *modes* (the most frequent
precision and op class), so a slice keeps, per group, the sums over the members it owns and the counts of each
precision and class; :func:`merge` adds them group by group, and analysis/ops.py makes the rows from the sums
exactly as it makes them from one window. Parts travel as plain JSON (lists and dicts).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from neurontrace.analysis.op_costs import CLASS_NAMES, DTYPE_NAMES

Part = dict[str, Any]  # {"key": [device, rank, op, kernel_class], "kernels", "ops", "ns", "flops", ...}


def groups(keys: Sequence[tuple[str, int | None, str, str]], g: np.ndarray, mine: np.ndarray, ops: np.ndarray,
           dur: np.ndarray, flops: np.ndarray, nbytes: np.ndarray, known: np.ndarray, dtype: np.ndarray,
           cls: np.ndarray, class_names: Sequence[str]) -> list[Part]:
    """Per group (``keys[i]``, members where ``g == i``), the sums over its members in ``mine``; ``ops``: the
    group's op count as the slice counts it; ``dtype`` / ``cls``: per member an index into DTYPE_NAMES /
    ``class_names`` or -1."""
    n = len(keys)
    w = mine.astype(np.float64)
    sums = {k: np.bincount(g, weights=v * w, minlength=n) for k, v in
            (("ns", dur.astype(np.float64)), ("flops", flops), ("bytes", nbytes), ("known", known.astype(np.float64)))}
    kernels = np.bincount(g, weights=w, minlength=n)
    dtypes, classes = _counts(g, mine, dtype, DTYPE_NAMES), _counts(g, mine, cls, class_names)
    return [{"key": list(key), "kernels": int(kernels[i]), "ops": int(ops[i]), "ns": int(sums["ns"][i]),
             "flops": float(sums["flops"][i]), "bytes": float(sums["bytes"][i]), "known": int(sums["known"][i]),
             "dtype": dtypes.get(i, {}), "cls": classes.get(i, {})}
            for i, key in enumerate(keys) if kernels[i] or ops[i]]


def _counts(g: np.ndarray, mine: np.ndarray, codes: np.ndarray, names: Sequence[str]) -> dict[int, dict[str, int]]:
    """Per group, how many of its members in ``mine`` have each code (codes >= 0), by name."""
    at = mine & (codes >= 0)
    width = len(names) + 1
    pairs, c = np.unique(g[at].astype(np.int64) * width + codes[at], return_counts=True)
    out: dict[int, dict[str, int]] = {}
    for pair, n in zip(pairs.tolist(), c.tolist(), strict=True):
        out.setdefault(pair // width, {})[names[pair % width]] = int(n)
    return out


def first_owned(key: np.ndarray, ts: np.ndarray, mine: np.ndarray) -> np.ndarray:
    """The distinct ``key`` values whose earliest member (by ``ts``) is one of ``mine``: each counted once over
    the slices, in the slice that holds its first member."""
    if not len(key):
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((ts, key))
    first = order[np.r_[True, key[order][1:] != key[order][:-1]]]
    return np.asarray(key[first[mine[first]]])


def merge(slices: Iterable[list[Part]]) -> list[Part]:
    """The groups of several slices, their sums and counts added (each group once, in first-seen order)."""
    out: dict[tuple[Any, ...], Part] = {}
    for parts in slices:
        for p in parts:
            k = tuple(p["key"])
            if k not in out:
                out[k] = {**p, "dtype": dict(p["dtype"]), "cls": dict(p["cls"])}
                continue
            q = out[k]
            for f in ("kernels", "ops", "ns", "flops", "bytes", "known"):
                q[f] += p[f]
            for f in ("dtype", "cls"):
                for name, c in p[f].items():
                    q[f][name] = q[f].get(name, 0) + c
    return list(out.values())


def mode_dtype(counts: dict[str, int]) -> str | None:
    """The most frequent precision (ties: the first in DTYPE_NAMES), as ``ops._mode`` picks it."""
    return min(counts, key=lambda n: (-counts[n], DTYPE_NAMES.index(n))) if counts else None


def mode_class(counts: dict[str, int]) -> str:
    """The most frequent op class (ties: formula classes in CLASS_NAMES order, then engines by name)."""
    if not counts:
        return "unknown"
    return min(counts, key=lambda n: (-counts[n], (0, CLASS_NAMES.index(n), "") if n in CLASS_NAMES else (1, 0, n)))
