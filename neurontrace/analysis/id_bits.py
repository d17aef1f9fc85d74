"""A set of integer ids that grows slice by slice: one bit per id of the span it covers, where that is smaller.

The out-of-core plan carries forward the ids of every launch in the steps of a rank (analysis/slice_plan.py):
millions at tens of GB of JSON. Held as a sorted array they cost 8 bytes each and a merge per slice; event ids
and correlation ids are dense in their span (an event id is a row's place in the rank), so a bitmap over the
span costs one bit per id there: 64x less. Ids spread thinly over a wide span (hostile or odd input) would make
the bitmap the larger: the set then stays a sorted array. Both answer the same, exactly.
"""

from __future__ import annotations

import numpy as np

_DENSE = 64  # a bitmap is used while its bits number at most this many times the ids held (it is then smaller)


class IdBits:
    """Distinct int64 ids: :meth:`add` joins more, :meth:`has` tells which of some values are held."""

    def __init__(self) -> None:
        self.base = 0
        self.bits: np.ndarray | None = None  # packed (np.packbits order), bit i = id base + i
        self.sorted = np.zeros(0, np.int64)  # the ids, where no bitmap is kept
        self.count = 0

    def add(self, ids: np.ndarray) -> None:
        new = np.unique(np.asarray(ids, np.int64))
        if not len(new):
            return
        lo, hi = int(new[0]), int(new[-1])
        if self.bits is None:
            both = _merged(self.sorted, new)
            span = int(both[-1]) - int(both[0]) + 1
            if span > _DENSE * len(both):
                self.sorted, self.count = both, len(both)
                return
            self.base, self.bits, self.sorted = int(both[0]), np.zeros((span + 7) // 8, np.uint8), np.zeros(0, np.int64)
            self.count = 0
            new, lo, hi = both, int(both[0]), int(both[-1])
        if not self._cover(lo, hi, len(new)):  # too sparse now: back to the sorted array
            self.add(new)
            return
        assert self.bits is not None
        at = new - self.base
        fresh = ~self._test(at)
        self.count += int(fresh.sum())
        np.bitwise_or.at(self.bits, at[fresh] >> 3, (np.uint8(128) >> (at[fresh] & 7)).astype(np.uint8))

    def has(self, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values, np.int64)
        if self.bits is None:
            at = np.searchsorted(self.sorted, values)
            found = at < len(self.sorted)
            found[found] = self.sorted[at[found]] == values[found]
            return found
        at = values - self.base
        inside = (at >= 0) & (at < len(self.bits) * 8)
        found = np.zeros(len(values), bool)
        found[inside] = self._test(at[inside])
        return found

    def __len__(self) -> int:
        return self.count

    @property
    def nbytes(self) -> int:
        return self.sorted.nbytes + (0 if self.bits is None else self.bits.nbytes)

    def _test(self, at: np.ndarray) -> np.ndarray:
        assert self.bits is not None
        return np.asarray(self.bits[at >> 3] & (np.uint8(128) >> (at & 7)).astype(np.uint8), bool)

    def _cover(self, lo: int, hi: int, n: int) -> bool:
        """Widens the bitmap to hold ``lo`` .. ``hi`` (``n`` ids coming); or, where the span would be sparse, drops
        it for the sorted ids (False)."""
        assert self.bits is not None
        first, last = min(lo, self.base), max(hi, self.base + len(self.bits) * 8 - 1)
        span = last - first + 1
        if span > _DENSE * (self.count + n):
            held = np.flatnonzero(np.unpackbits(self.bits)).astype(np.int64) + self.base
            self.bits, self.sorted, self.count = None, held, len(held)
            return False
        if first < self.base:  # whole bytes in front: the bits keep their places within a byte
            pad = (self.base - first + 7) // 8
            self.bits = np.concatenate([np.zeros(pad, np.uint8), self.bits])
            self.base -= pad * 8
        need = (last - self.base) // 8 + 1
        if need > len(self.bits):
            self.bits = np.concatenate([self.bits, np.zeros(need - len(self.bits), np.uint8)])
        return True


def _merged(held: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Two sorted distinct runs as one: a stable sort merges them in one pass (never a sort of them all)."""
    if not len(held):
        return new
    both = np.concatenate([held, new])
    both.sort(kind="stable")
    return both[np.r_[True, both[1:] != both[:-1]]]
