"""One level down inside NeuronCore executions: what each engine wait was waiting for.

An engine blocked on a semaphore or event (``sync_wait`` rows: ``evt_wait_time_ns``,
``EVENT_SEMAPHORE*`` instructions, ``CoreBarriers``) is waiting on whatever produces that signal. The
producer is found by timing, vectorized over all waits of a device: the DMA transfer, collective
or other engine's instruction (on another track of the same device) whose end is nearest to the
moment the wait ended, no earlier than the wait's start. Its category names the charge:

    dma → data_movement      collective → collectives      compute → compute_dependency

A wait with no such producer within ``TOLERANCE_NS`` of its end is ``unknown``.

Wait times are **unions of intervals per engine, never sums**: ``evt_wait_time_ns`` overlaps across
instructions (one real profile summed 390 ms of waits inside a 105 ms window; formats/neuron.md
addendum, "Parquet in practice"). On each engine track a nanosecond of waiting is charged once, to the
first of collectives, data_movement, compute_dependency, unknown whose waits cover it; the totals add
the engines (each engine's waiting is its own), and ``wait_wall_ns`` is the union over all engines.
Throttled time (``throttle`` rows) and the device's Summary metrics (fractions 0..1) are reported beside.

Out of core (``Options.owned``, analysis/slices.py): a slice counts the waits that start in it and cuts every
union (per engine and charge, all engines, throttling) to the window and to its own instants; ``merge`` adds
them (the Summary metrics are the run's, the same in every slice: the first). Each nanosecond is charged by the
waits covering it, so the sums are exact at any cut **provided each wait gets the same producer in every slice
that holds it**: a wait's producer is looked for among the events ending in ``[wait start, wait end +
TOLERANCE_NS]``, and a slice holds them all when no cut falls inside the wait or within ``TOLERANCE_NS`` after
its end, or when the slice's trace reaches that far beyond its instants (analysis/slice_reach.py's halo does). At other cuts the split of waiting
among the charges may differ; the count, the per-engine totals, the wall time and throttling stay exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from neurontrace.analysis.attribution import DeviceAttribution
from neurontrace.analysis.contract import Context, DeviceSection
from neurontrace.analysis.device_window import whole_window
from neurontrace.analysis.intervals import clip, layered, union
from neurontrace.analysis.slices import owned_rows
from neurontrace.columns import isin, of_rank, select
from neurontrace.trace import Trace
from neurontrace.units import duration

CHARGE = {"dma": "data_movement", "collective": "collectives", "compute": "compute_dependency"}
TOLERANCE_NS = 2_000  # a producer may finish this long after the wait ends (clock skew between engines)


@dataclass
class EngineWaits:
    """The section's value for one Neuron device (``--json``: ``devices[].engine_waits``)."""

    waits_ns: dict[str, int]  # charge (collectives, data_movement, compute_dependency, unknown) -> ns
    waits_by_engine_ns: dict[str, dict[str, int]]  # engine track -> charge -> ns (non-zero only)
    wait_count: int
    throttled_ns: int
    summary: dict[str, Any] = field(default_factory=dict)  # the device's Summary metrics (fractions 0..1)
    wait_wall_ns: int | None = None  # union over all engines; None in documents written before it existed

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"waits_ns": self.waits_ns, "waits_by_engine_ns": self.waits_by_engine_ns}
        if self.wait_wall_ns is not None:
            out["wait_wall_ns"] = self.wait_wall_ns
        out.update(wait_count=self.wait_count, throttled_ns=self.throttled_ns, summary=self.summary)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineWaits:
        return cls(dict(d["waits_ns"]), {k: dict(v) for k, v in (d.get("waits_by_engine_ns") or {}).items()},
                   int(d["wait_count"]), int(d["throttled_ns"]), dict(d.get("summary") or {}), d.get("wait_wall_ns"))


def engine_waits(trace: Trace, device: str, rank: int | None, window: tuple[int, int],
                 owned: tuple[int, int] | None = None) -> dict[str, Any] | None:
    """Waits by producer, throttled time and Summary metrics of one Neuron device; None otherwise.

    ``owned``: a slice's instants (waits counted where they start, time cut to the slice too)."""
    if not device.startswith("neuron:"):
        return None
    dev = select(trace.device_events, "device", device)
    if rank is not None:
        dev = of_rank(dev, rank)
    lo, hi = window
    waits = dev.filter(pa.array(isin(dev["category"], ["sync_wait"])))
    s, e = _spans(waits)
    count = int(((e > lo) & (s < hi) & owned_rows(waits, owned)).sum())  # by start in the slice, if one
    if owned is not None:
        lo = max(lo, owned[0])
        hi = max(min(hi, owned[1]), lo)
    inside = (e > lo) & (s < hi)
    waits = waits.filter(pa.array(inside))
    ws, we = np.maximum(s[inside], lo), np.minimum(e[inside], hi)
    kinds = ("collectives", "data_movement", "compute_dependency", "unknown")  # priority where waits overlap
    charged = dict.fromkeys(kinds, 0)
    by_engine: dict[str, dict[str, int]] = {}
    wall_s, wall_e = union(ws, we) if len(ws) else (ws, we)
    if len(ws):
        producers = dev.filter(pa.array(isin(dev["category"], CHARGE)))
        charge = np.asarray(_producer_charge(waits, producers), dtype=object)
        track = np.asarray(waits["track"].cast(pa.string()).fill_null("").to_numpy(zero_copy_only=False),
                           dtype=object)
        for engine in sorted(set(track.tolist())):
            on = track == engine
            per_charge, _, _ = layered((lo, hi), [union(ws[on & (charge == k)], we[on & (charge == k)])
                                                  for k in kinds])
            by_engine[str(engine)] = {k: int(v) for k, v in zip(kinds, per_charge, strict=True) if v}
            for k, v in zip(kinds, per_charge, strict=True):
                charged[k] += int(v)
    throttle = dev.filter(pa.array(isin(dev["category"], ["throttle"])))
    ts, te = union(*clip(*_spans(throttle), lo, hi))
    return {
        "waits_ns": charged,
        "waits_by_engine_ns": by_engine,
        "wait_wall_ns": int((wall_e - wall_s).sum()),
        "wait_count": count,
        "throttled_ns": int((te - ts).sum()),
        "summary": _summary(trace, device),
    }


def _spans(t: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    s = t["ts_ns"].to_numpy()
    return s, s + t["dur_ns"].to_numpy()


def _producer_charge(waits: pa.Table, producers: pa.Table) -> list[str]:
    """Per wait, the charge of the producer ending nearest its end (vectorized binary search).

    The waiting engine itself is blocked, so producers ending inside the wait are other engines,
    queues or collectives; no per-track test is needed.
    """
    ws, we = _spans(waits)
    if producers.num_rows == 0:
        return ["unknown"] * len(ws)
    _, pe = _spans(producers)
    pcat = np.asarray(producers["category"].cast(pa.string()).to_pylist(), dtype=object)
    order = np.argsort(pe, kind="stable")
    ends = pe[order]
    lo = np.searchsorted(ends, ws, side="left")  # first producer ending at or after the wait start
    hi = np.searchsorted(ends, we + TOLERANCE_NS, side="right")  # past the last one in tolerance
    before = np.searchsorted(ends, we, side="right") - 1  # latest ending at or before the wait end
    after = before + 1
    ok_before = (before >= lo) & (before < hi)
    ok_after = (after >= lo) & (after < hi)
    gap_before = np.where(ok_before, we - ends[np.clip(before, 0, len(ends) - 1)], np.iinfo(np.int64).max)
    gap_after = np.where(ok_after, ends[np.clip(after, 0, len(ends) - 1)] - we, np.iinfo(np.int64).max)
    pick = np.where(gap_before <= gap_after, before, after)
    found = ok_before | ok_after
    kinds = np.array([CHARGE.get(str(c), "unknown") for c in pcat], dtype=object)[order]
    charge: list[str] = np.where(found, kinds[np.clip(pick, 0, len(ends) - 1)], "unknown").tolist()
    return charge


def _summary(trace: Trace, device: str) -> dict[str, Any]:
    for s in trace.meta_all("neuron.summary"):
        if isinstance(s, dict) and s.get("device") in (device, None):
            metrics = s.get("metrics", s)
            return dict(metrics) if isinstance(metrics, dict) else {}
    return {}


def _text(w: EngineWaits) -> list[str]:
    waits = ", ".join(f"{k} {duration(v)}" for k, v in w.waits_ns.items() if v) or "none"
    mfu = w.summary.get("mfu_estimated_percent")
    extra = f"; MFU {100 * mfu:.1f}%" if isinstance(mfu, int | float) else ""
    wall = (f" (unions per engine; {duration(w.wait_wall_ns)} with any engine waiting)"
            if w.wait_wall_ns is not None else "")
    return [f"engine waits ({w.wait_count}): {waits}{wall}; throttled {duration(w.throttled_ns)}{extra}"]


def _compute(ctx: Context, d: DeviceAttribution) -> EngineWaits | None:
    found = engine_waits(ctx.trace, d.device, d.rank, whole_window(ctx, d), ctx.options.owned)
    return None if found is None else EngineWaits.from_dict(found)


def merge(values: list[EngineWaits | None]) -> EngineWaits | None:
    """One device's per-slice values (time order) -> the rank's: every figure added, the Summary the first's."""
    parts = [v for v in values if v is not None]
    if not parts:
        return None
    kinds = list(parts[0].waits_ns)
    waits = {k: sum(v.waits_ns.get(k, 0) for v in parts) for k in kinds}
    by_engine: dict[str, dict[str, int]] = {}
    for engine in sorted({e for v in parts for e in v.waits_by_engine_ns}):
        sums = {k: sum(v.waits_by_engine_ns.get(engine, {}).get(k, 0) for v in parts) for k in kinds}
        by_engine[engine] = {k: n for k, n in sums.items() if n}
    wall = None if any(v.wait_wall_ns is None for v in parts) else sum(v.wait_wall_ns or 0 for v in parts)
    return EngineWaits(waits, by_engine, sum(v.wait_count for v in parts), sum(v.throttled_ns for v in parts),
                       parts[0].summary, wall)


def of_device(d: DeviceAttribution) -> EngineWaits | None:
    """Neuron devices: this section's value for ``d`` (waits by producer); None elsewhere."""
    value = d.sections.get(SECTION.key)
    return value if isinstance(value, EngineWaits) else None


SECTION = DeviceSection("engine_waits", "engine waits", _compute, to_json=lambda v: v.as_dict(),
                        from_json=EngineWaits.from_dict, text=_text, merge=merge)
