"""Exact distributions that merge: the distinct values of a sample and how often each occurs.

A median or a percentile of a rank's values cannot be made from its slices' medians, but it can from their
value counts: ``merge`` adds the counts, and :func:`lower` / :func:`median` read the merged sample exactly as
``np.percentile(..., method="lower")`` and ``np.median`` read the values themselves. The size grows with the
distinct values, never past the sample's. Counts travel as ``[[value, count], ...]`` (plain JSON).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

Counts = list[list[int]]  # [[value, count], ...], values ascending


def of(values: np.ndarray) -> Counts:
    """The value counts of an integer sample."""
    v, c = np.unique(np.asarray(values, dtype=np.int64), return_counts=True)
    return [[int(a), int(b)] for a, b in zip(v.tolist(), c.tolist(), strict=True)]


def merge(parts: Iterable[Counts]) -> Counts:
    """The value counts of the union of the samples (their counts added)."""
    total: dict[int, int] = {}
    for part in parts:
        for v, c in part:
            total[v] = total.get(v, 0) + c
    return [[v, total[v]] for v in sorted(total)]


def size(counts: Counts) -> int:
    return sum(c for _, c in counts)


def _at(counts: Counts, index: int) -> int:
    """The value at ``index`` of the sorted sample."""
    seen = 0
    for v, c in counts:
        seen += c
        if index < seen:
            return v
    raise IndexError(index)


def lower(counts: Counts, q: float) -> int | None:
    """``np.percentile(sample, q, method="lower")`` (its index: floor((n - 1) * q / 100)); None when empty."""
    n = size(counts)
    if not n:
        return None
    return _at(counts, int(np.floor((n - 1) * np.true_divide(q, 100))))


def median(counts: Counts) -> float | None:
    """``float(np.median(sample))``: the middle value, or the mean of the two middle ones; None when empty."""
    n = size(counts)
    if not n:
        return None
    if n % 2:
        return float(_at(counts, n // 2))
    return float(np.mean([_at(counts, n // 2 - 1), _at(counts, n // 2)]))


def largest(counts: Counts) -> int | None:
    return counts[-1][0] if counts else None
