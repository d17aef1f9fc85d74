"""Time slices of one rank, for ``diagnose`` out of core (docs/scale.md, "diagnose DATASET").

A slice owns the instants ``[start, end)`` of one rank's clock. Its trace holds every event that
overlaps the slice (``Trace.filter``: events begun earlier are carried in), so each analysis sees the
context it would see in memory; to make the slices' values add up to the whole rank's, an analysis
run on a slice (``Options.owned`` set) **counts** an event only in the slice where it starts
(:func:`owned_rows`) and **sums time** only inside the slice (:func:`clip`). ``Section.merge`` then
combines the slices' values, in time order, into the value ``compute`` gives on the whole rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from neurontrace.analysis.default_window import Window
from neurontrace.analysis.device_activity import Unrecorded
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


def owned_window(window: tuple[int, int], owned: tuple[int, int] | None) -> tuple[int, int]:
    """The part of ``window`` a slice owns (the window itself without a slice; empty, at the slice's start or
    the window's edge, when they do not meet)."""
    if owned is None:
        return window
    lo = min(max(window[0], owned[0]), window[1])
    return lo, max(lo, min(window[1], owned[1]))


@dataclass
class DevicePlan:
    """What one attributed device of the whole rank needs in every slice (analysis/slice_plan.py): its window
    and the rule that chose it, the processes driving it, and its start-up calls (analysis/startup.py)."""

    device: str
    rank: int | None
    window: Window
    pids: tuple[str, ...] | None  # the driving host processes (None: every host event of the rank)
    startup_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    python_cutoff_ns: int | None = None  # sources.python_cutoff of its driving host's Python events


@dataclass
class RankPlan:
    """The whole rank's facts a slice cannot see alone, found in a bounded first pass (analysis/slice_plan.py)
    and handed to every slice's ``diagnose_rank`` through ``Options.plan``."""

    devices: list[DevicePlan]  # in report order
    cpu: bool  # no device events in the rank: each rank's CPU is the device (attribution.cpu_work)
    clipped_ends: dict[int, int] = field(default_factory=dict)  # event id -> end: sanitize's longer_than_trace
    first_step_end: int | None = None  # the end of the first step (phases' time to first step)
    missing: Unrecorded | None = None  # device_activity.unrecorded of the whole rank
    # How far beyond its instants each slice is read (analysis/slice_reach.py): launch, ops, engine_waits link
    # events across a cut. Found in the first pass (slice_reach.StreamedReach); what a slice owns stays its instants.
    halo_ns: int = 0

    def window_of(self, device: str, rank: int | None) -> Window | None:
        """The whole rank's window of one device (None: not an attributed device)."""
        return next((d.window for d in self.devices if (d.device, d.rank) == (device, rank)), None)
