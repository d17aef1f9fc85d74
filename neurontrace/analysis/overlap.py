"""Communication and compute overlap: how much collective (and copy) time runs under compute.

Attribution counts only *exposed* communication (collectives with no compute running). This module
gives the whole of it and the hidden part, per device and per step:

    compute      [=======]      [=========]
    collective       [======][====]            total 10, overlapped 3 + 2 = 5
    hidden share     50%: "50% of communication is hidden by compute"

Each kind is the union of its events' intervals on the device (two streams copying at once count
once), cut to the window; *overlapped* is the part of that union also covered by compute.

Out of core (``Options.owned``, analysis/slices.py): a slice cuts the unions to the window and to its own
instants, and lists every step it sees (``spans``) with that step's part of its time; ``merge`` adds the four
totals and, per step (name, start, end), the steps' parts, keeping the per-step list only when the steps of all
slices together are disjoint, as on the whole rank. Every figure is a length of a union of intervals, so it is
additive over a partition of time: exact at any cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa

from neurontrace.analysis.attribution import CPU_DEVICE, DeviceAttribution, device_rows
from neurontrace.analysis.contract import Context, DeviceSection
from neurontrace.analysis.device_window import driving_pids, whole_window
from neurontrace.analysis.driving import driving_host_events
from neurontrace.analysis.intervals import clip, union, within
from neurontrace.analysis.work import device_categories
from neurontrace.columns import isin, keep, of_rank, select
from neurontrace.units import duration

COMPUTE = ("compute",)
COLLECTIVES = ("collective",)
COPIES = ("memcpy", "dma")  # host<->device and device<->device copies, NeuronCore DMA


@dataclass
class Overlap:
    collectives_total_ns: int
    collectives_overlapped_ns: int
    copies_total_ns: int
    copies_overlapped_ns: int
    steps: list[dict[str, Any]] = field(default_factory=list)
    # A slice's value only (Options.owned): every step (name, start, end) it saw, for ``merge``'s disjointness test.
    spans: list[tuple[str, int, int]] | None = None

    @staticmethod
    def share(total: int, overlapped: int) -> float | None:
        return overlapped / total if total else None

    @property
    def collectives_hidden(self) -> float | None:
        return self.share(self.collectives_total_ns, self.collectives_overlapped_ns)

    @property
    def copies_hidden(self) -> float | None:
        return self.share(self.copies_total_ns, self.copies_overlapped_ns)

    def sentence(self) -> str | None:
        """ "x% of communication is hidden by compute" (None when there is no communication)."""
        h = self.collectives_hidden
        return None if h is None else f"{100 * h:.1f}% of communication is hidden by compute"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"collectives_total_ns": self.collectives_total_ns,
                               "collectives_overlapped_ns": self.collectives_overlapped_ns,
                               "copies_total_ns": self.copies_total_ns,
                               "copies_overlapped_ns": self.copies_overlapped_ns, "steps": self.steps}
        if self.spans is not None:
            out["spans"] = [list(s) for s in self.spans]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Overlap:
        spans = d.get("spans")
        return cls(int(d["collectives_total_ns"]), int(d["collectives_overlapped_ns"]), int(d["copies_total_ns"]),
                   int(d["copies_overlapped_ns"]), list(d.get("steps") or []),
                   None if spans is None else [(str(n), int(a), int(b)) for n, a, b in spans])


def _union_of(dev: pa.Table, categories: tuple[str, ...], lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    # The category each event counts as (names.device_category): a symmetric-memory all-reduce kernel
    # is a collective here as it is in attribution, though the parser filed it as compute.
    t = keep(dev, np.isin(device_categories(dev), categories))
    s = t["ts_ns"].to_numpy()
    return union(*clip(s, s + t["dur_ns"].to_numpy(), lo, hi))


def intersect(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The intersection of two disjoint sorted interval lists, as one disjoint sorted list."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    return within(b[0], b[1], a[0], a[1])


def _length(iv: tuple[np.ndarray, np.ndarray]) -> int:
    return int((iv[1] - iv[0]).sum())


def _per_step(iv: tuple[np.ndarray, np.ndarray], lo: np.ndarray, hi: np.ndarray) -> list[int]:
    s, e = within(iv[0], iv[1], lo, hi)
    step = np.searchsorted(lo, s, side="right") - 1
    return np.bincount(step, weights=e - s, minlength=len(lo)).astype(np.int64).tolist() if len(lo) else []


def overlap(dev: pa.Table, window: tuple[int, int], steps: Sequence[tuple[str, int, int]] = (),
            owned: tuple[int, int] | None = None) -> Overlap:
    """Overlap on one device's events (``dev``: that device and rank only) within ``window``.

    ``steps`` are (name, start, end) of the profiled steps; each gets the same four numbers. ``owned``: a
    slice's instants (the unions are cut to them too, and the value lists ``steps`` in ``spans``).
    """
    lo, hi = window
    if owned is not None:
        lo = max(lo, owned[0])
        hi = max(min(hi, owned[1]), lo)
    comp = _union_of(dev, COMPUTE, lo, hi)
    coll = _union_of(dev, COLLECTIVES, lo, hi)
    copy = _union_of(dev, COPIES, lo, hi)
    coll_hidden, copy_hidden = intersect(coll, comp), intersect(copy, comp)
    out = Overlap(_length(coll), _length(coll_hidden), _length(copy), _length(copy_hidden))
    ordered = sorted((s for s in steps if s[2] > s[1]), key=lambda s: s[1])
    disjoint = all(a[2] <= b[1] for a, b in pairwise(ordered))
    if ordered and disjoint:
        slo = np.array([s[1] for s in ordered], dtype=np.int64)
        shi = np.array([s[2] for s in ordered], dtype=np.int64)
        cols = [_per_step(iv, slo, shi) for iv in (coll, coll_hidden, copy, copy_hidden)]
        out.steps = [{"step": name, "collectives_total_ns": a, "collectives_overlapped_ns": b,
                      "copies_total_ns": c, "copies_overlapped_ns": d}
                     for (name, _, _), a, b, c, d in zip(ordered, *cols, strict=True)]
    if owned is not None:
        out.spans = ordered
    return out


def merge(values: list[Overlap | None]) -> Overlap | None:
    """One device's per-slice values (time order) -> the rank's: the totals added, each step's parts added."""
    parts = [v for v in values if v is not None]
    if not parts:
        return None
    out = Overlap(*(sum(getattr(v, k) for v in parts) for k in
                    ("collectives_total_ns", "collectives_overlapped_ns", "copies_total_ns", "copies_overlapped_ns")))
    ordered = sorted({s for v in parts for s in v.spans or ()}, key=lambda s: (s[1], s[2], s[0]))
    if ordered and all(a[2] <= b[1] for a, b in pairwise(ordered)):
        keys = ("collectives_total_ns", "collectives_overlapped_ns", "copies_total_ns", "copies_overlapped_ns")
        total = {s: dict.fromkeys(keys, 0) for s in ordered}
        for v in parts:  # a slice whose steps were disjoint listed each with its parts, in ``spans`` order
            for span, step in zip(v.spans or (), v.steps, strict=False):
                for k in keys:
                    total[span][k] += step[k]
        out.steps = [{"step": s[0], **total[s]} for s in ordered]
    return out


def step_spans(host: pa.Table, window: tuple[int, int]) -> list[tuple[str, int, int]]:
    """(name, start, end) of the host's step markers (ProfilerStep#N) that overlap ``window``."""
    steps = select(host, "category", "step")
    s = steps["ts_ns"].to_numpy()
    e = s + steps["dur_ns"].to_numpy()
    names = steps["name"].cast(pa.string()).to_pylist()
    return [(str(n), int(a), int(b)) for n, a, b in zip(names, s, e, strict=True) if b > window[0] and a < window[1]]


def _text(o: Overlap) -> list[str]:
    out = []
    if o.collectives_total_ns:
        out.append(f"{o.sentence()} ({duration(o.collectives_overlapped_ns)} of {duration(o.collectives_total_ns)})")
    if o.copies_total_ns and o.copies_hidden is not None:
        out.append(f"{100 * o.copies_hidden:.1f}% of copy time is hidden by compute "
                   f"({duration(o.copies_overlapped_ns)} of {duration(o.copies_total_ns)})")
    return out


def device_and_host(ctx: Context, d: DeviceAttribution) -> tuple[pa.Table, pa.Table]:
    """One attributed device's events and the host events of the process driving it, found once per
    diagnosis for the device sections that need both (this one and launch)."""
    key = ("device_and_host", d.device, d.rank)
    if key not in ctx.shared:
        dev = device_rows(ctx.trace, d.device, d.rank)
        pids = driving_pids(ctx, d)  # a slice: the whole rank's driving processes, as the plan found them
        if pids:
            host = of_rank(ctx.trace.system_events.drop_columns(["args"]), d.rank)
            ctx.shared[key] = dev, keep(host, isin(host["pid"], list(pids)))
        else:
            ctx.shared[key] = dev, driving_host_events(ctx.trace, dev)
    found: tuple[pa.Table, pa.Table] = ctx.shared[key]
    return found


def _compute(ctx: Context, d: DeviceAttribution) -> Overlap | None:
    dev, host = device_and_host(ctx, d)
    if d.device == CPU_DEVICE if ctx.options.owned is not None else dev.num_rows == 0:
        return None  # the host CPU standing in for a device: nothing to overlap (a slice may hold none of its rows)
    window = whole_window(ctx, d)
    return overlap(dev, window, step_spans(host, window), ctx.options.owned)


SECTION = DeviceSection("overlap", "communication overlap", _compute, to_json=lambda v: v.as_dict(),
                        from_json=Overlap.from_dict, text=_text, merge=merge)
