"""Time slices of one rank, for ``diagnose`` out of core (docs/scale.md, "diagnose DATASET").

A slice owns the instants ``[start, end)`` of one rank's clock. Its trace holds every event that
overlaps the slice (``Trace.filter``: events begun earlier are carried in), so each analysis sees the
context it would see in memory; to make the slices' values add up to the whole rank's, an analysis
run on a slice (``Options.owned`` set) **counts** an event only in the slice where it starts
(:func:`owned_rows`) and **sums time** only inside the slice (:func:`clip`). ``Section.merge`` then
combines the slices' values, in time order, into the value ``compute`` gives on the whole rank.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from neurontrace.trace import Trace


def owned_rows(table: pa.Table, owned: tuple[int, int] | None) -> np.ndarray:
    """A mask of the rows this slice counts: those starting in ``[start, end)`` (all rows without a slice)."""
    ts = np.asarray(table["ts_ns"].to_numpy(zero_copy_only=False), dtype=np.int64) if table.num_rows else \
        np.zeros(0, dtype=np.int64)
    if owned is None:
        return np.ones(len(ts), dtype=bool)
    return (ts >= owned[0]) & (ts < owned[1])


def clip(starts: np.ndarray, ends: np.ndarray, owned: tuple[int, int] | None) -> tuple[np.ndarray, np.ndarray]:
    """Spans cut to the slice (unchanged without one); a span outside it becomes empty (start == end)."""
    if owned is None:
        return starts, ends
    s = np.clip(starts, owned[0], owned[1])
    return s, np.maximum(np.clip(ends, owned[0], owned[1]), s)


def slice_of(trace: Trace, owned: tuple[int, int]) -> Trace:
    """The events of ``trace`` a slice holds: every event overlapping ``[start, end)``."""
    return trace.filter(start_ns=owned[0], end_ns=owned[1])
