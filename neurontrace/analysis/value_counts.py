"""Exact distributions that merge: the distinct values of a sample and how often each occurs.

A median or a percentile of a rank's values cannot be made from its slices' medians, but it can from their
value counts: :func:`merge` adds the counts, and :func:`lower` / :func:`median` read the merged sample exactly as
``np.percentile(..., method="lower")`` and ``np.median`` read the values themselves. The size grows with the
distinct values, never past the sample's: two machine integers (16 bytes) per distinct value, held in
``array`` buffers (``as_list`` / ``from_list``: ``[[values...], [counts...]]``, plain JSON).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def _empty() -> array[int]:
    return array("q")


@dataclass(frozen=True)
class Counts:
    """Distinct values (ascending) and how many times each occurs."""

    values: array[int] = field(default_factory=_empty)
    counts: array[int] = field(default_factory=_empty)

    def as_list(self) -> list[list[int]]:
        return [self.values.tolist(), self.counts.tolist()]

    @classmethod
    def from_list(cls, v: Any) -> Counts:
        return cls(array("q", v[0]), array("q", v[1])) if v else cls()


def _np(a: array[int]) -> np.ndarray:
    return np.frombuffer(a, dtype=np.int64) if len(a) else np.zeros(0, dtype=np.int64)


def _counts(values: np.ndarray, counts: np.ndarray) -> Counts:
    return Counts(array("q", values.astype(np.int64).tobytes()), array("q", counts.astype(np.int64).tobytes()))


def of(values: np.ndarray) -> Counts:
    """The value counts of an integer sample."""
    v, c = np.unique(np.asarray(values, dtype=np.int64), return_counts=True)
    return _counts(v, c)


def merge(parts: Iterable[Counts]) -> Counts:
    """The value counts of the union of the samples (their counts added)."""
    parts = list(parts)
    if not parts:
        return Counts()
    v = np.concatenate([_np(p.values) for p in parts])
    c = np.concatenate([_np(p.counts) for p in parts])
    out, inverse = np.unique(v, return_inverse=True)
    return _counts(out, np.bincount(inverse.reshape(-1), weights=c, minlength=len(out)).round())


def size(counts: Counts) -> int:
    return int(_np(counts.counts).sum())


def _at(counts: Counts, index: int) -> int:
    """The value at ``index`` of the sorted sample."""
    return int(_np(counts.values)[np.searchsorted(np.cumsum(_np(counts.counts)), index, side="right")])


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
    return int(counts.values[-1]) if len(counts.values) else None
