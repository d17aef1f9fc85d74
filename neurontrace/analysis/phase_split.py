"""The training-phase split of each step: forward, backward, optimizer and other time (``phases.split``).

From the trace's own marks, on the host timeline of each ``ProfilerStep``, by priority where they overlap:

=============  ==================================================================================================
phase          the host during that time
=============  ==================================================================================================
``optimizer``  inside torch.optim's ``Optimizer.step#…`` / ``Optimizer.zero_grad#…`` ranges (names.OPTIMIZER)
``backward``   inside the autograd engine's ``autograd::engine::evaluate_function: …`` ranges or the
               ``Tensor.backward`` frames (names.BACKWARD)
``other``      inside the input pipeline (``enumerate(DataLoader)#…``; names.INPUT_PIPELINE): loading the
               batch is not the forward pass
``forward``    from the step's first framework op outside those ranges up to its first backward mark (or its
               last op, for a step with no backward), and forward ranges (names.FORWARD)
``other``      the rest of the step (data loading, logging, the profiler's own step, gaps)
=============  ==================================================================================================

The four add up to the step exactly. A trace without steps is split over its whole host span (no per-step rows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from neurontrace.analysis import names
from neurontrace.analysis.intervals import layered
from neurontrace.analysis.slices import owned_rows
from neurontrace.columns import isin, matches, select
from neurontrace.trace import Trace

PHASES = ("forward_ns", "backward_ns", "optimizer_ns", "other_ns")


@dataclass
class Split:
    """Per step ``{"step", "forward_ns", "backward_ns", "optimizer_ns", "other_ns"}`` and their total."""

    steps: list[dict[str, int]] = field(default_factory=list)
    total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    rank: int | None = None  # the rank split (a job's split is its slowest rank's)

    def as_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "total": self.total, "rank": self.rank}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Split:
        return cls([dict(s) for s in d.get("steps") or []], dict(d.get("total") or dict.fromkeys(PHASES, 0)),
                   d.get("rank"))

    def text(self) -> str:
        span = sum(self.total.values())
        if not span:
            return ""
        parts = ", ".join(f"{p.removesuffix('_ns')} {100 * self.total[p] / span:.1f}%" for p in PHASES)
        where = f" over {len(self.steps)} steps" if self.steps else " over the trace (no steps)"
        return f"training phases{where}: {parts}"


def split(trace: Trace, owned: tuple[int, int] | None = None, rank_has_steps: bool = False) -> Split:
    """The split of every step (with ``owned``, a time slice: of the steps starting in it, none when the rank
    has steps elsewhere only; a rank without steps: the slice's part of the trace, which only approximates
    the whole trace's forward pass: docs/scale.md)."""
    host = trace.system_events
    if not host.num_rows:
        return Split()
    start = host["ts_ns"].to_numpy()
    end = start + host["dur_ns"].to_numpy()
    optimizer = matches(host["name"], names.OPTIMIZER)
    backward = matches(host["name"], names.BACKWARD)
    pipeline = matches(host["name"], names.INPUT_PIPELINE) & ~isin(host["category"], ["python"])
    forward_marks = matches(host["name"], names.FORWARD)
    ops = isin(host["category"], ["framework_op"]) & ~optimizer & ~backward
    steps = select(host, "category", "step")
    ranks = [r for r in host["rank"].to_pylist() if r is not None]
    near = _Overlapping(start, end, optimizer | backward | pipeline | forward_marks | ops)
    if owned is not None:
        steps = steps.filter(pa.array(owned_rows(steps, owned)))
    if not steps.num_rows and (owned is None or not rank_has_steps):
        lo, hi = int(start.min()), int(end.max())
        if owned is not None:
            lo, hi = max(lo, owned[0]), max(lo, owned[0], min(hi, owned[1]))
        total = _one(lo, hi, start, end, optimizer, backward, pipeline, forward_marks, ops, near)
        return Split([], total, min(ranks, default=None))
    rows: list[dict[str, int]] = []
    for name, ts, dur in zip(steps["name"].cast(pa.string()).to_pylist(), steps["ts_ns"].to_pylist(),
                             steps["dur_ns"].to_pylist(), strict=True):
        number = name.rsplit("#", 1)[-1] if name and "#" in name else str(len(rows))
        part = _one(int(ts), int(ts + dur), start, end, optimizer, backward, pipeline, forward_marks, ops, near)
        rows.append({"step": int(number) if number.isdigit() else len(rows), **part})
    rows.sort(key=lambda r: r["step"])
    return Split(rows, {p: sum(r[p] for r in rows) for p in PHASES}, min(ranks, default=None))


class _Overlapping:
    """The rows of ``wanted`` that overlap a range, found without a pass over every row per step (which made
    the split quadratic in the number of steps): rows sorted by start with the running maximum of their ends,
    so rows that end before the range are skipped by one search, and those starting after it by another."""

    def __init__(self, start: np.ndarray, end: np.ndarray, wanted: np.ndarray) -> None:
        rows = np.flatnonzero(wanted)
        self.by_start = rows[np.argsort(start[rows], kind="stable")]
        self.starts = start[self.by_start]
        self.reach = np.maximum.accumulate(end[self.by_start]) if len(rows) else np.zeros(0, np.int64)
        self.end = end

    def rows(self, lo: int, hi: int) -> np.ndarray:
        """Row numbers, ascending, of the wanted rows with ``start < hi`` and ``end > lo``."""
        first = int(np.searchsorted(self.reach, lo, side="right"))  # every row before it ends by lo
        last = int(np.searchsorted(self.starts, hi, side="left"))  # every row from it starts at hi or later
        cand = self.by_start[first:max(first, last)]
        return np.sort(cand[self.end[cand] > lo])


def _one(lo: int, hi: int, start: np.ndarray, end: np.ndarray, optimizer: np.ndarray, backward: np.ndarray,
         pipeline: np.ndarray, forward_marks: np.ndarray, ops: np.ndarray, near: _Overlapping) -> dict[str, int]:
    inside = near.rows(lo, hi)  # the rows of any of the masks with start < hi and end > lo, in row order

    def of(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m = inside[mask[inside]]
        return start[m], end[m]

    opt, bwd, inp = of(optimizer), of(backward), of(pipeline)
    # The forward pass: from the first op that is not loading data or the optimizer, to the first backward mark.
    op_s, op_e = of(ops)
    not_loading = ~_covered_by(op_s, op_e, inp) & ~_covered_by(op_s, op_e, opt)
    op_s, op_e = op_s[not_loading], op_e[not_loading]
    fwd_s, fwd_e = of(forward_marks)
    if len(op_s):
        first = int(op_s.min())
        later_bwd = bwd[0][bwd[0] >= first]
        stop = int(later_bwd.min()) if len(later_bwd) else int(op_e.max())
        if stop > first:
            fwd_s, fwd_e = np.r_[fwd_s, first], np.r_[fwd_e, stop]
    owned, unexplained, _ = layered((lo, hi), [opt, bwd, inp, (fwd_s, fwd_e)])
    return {"forward_ns": int(owned[3]), "backward_ns": int(owned[1]), "optimizer_ns": int(owned[0]),
            "other_ns": int(owned[2] + unexplained)}


def _covered_by(s: np.ndarray, e: np.ndarray, ranges: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Per interval [s, e): it lies inside one of ``ranges``."""
    rs, re_ = ranges
    if not len(rs) or not len(s):
        return np.zeros(len(s), dtype=bool)
    order = np.argsort(rs, kind="stable")
    rs, reach = rs[order], np.maximum.accumulate(re_[order])
    i = np.searchsorted(rs, s, side="right") - 1
    return (i >= 0) & (reach[np.maximum(i, 0)] >= e)


def merge(parts: list[Split]) -> Split:
    """One rank's split from its time slices' (each of the steps starting in it), in time order."""
    rows = sorted((dict(r) for p in parts for r in p.steps), key=lambda r: r["step"])
    total = {k: sum(p.total[k] for p in parts) for k in PHASES}
    return Split(rows, total, min((p.rank for p in parts if p.rank is not None), default=None))


def combine(parts: list[Split]) -> Split:
    """A job's split: its slowest rank's (the job's steps last as long as that rank's)."""
    return max(parts, key=lambda p: (sum(p.total.values()), -(p.rank or 0)))
