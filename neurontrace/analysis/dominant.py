"""What the window was spent on: the ops, annotations and kernels that cover most of each device's window.

A share of a cause says *why* the device waited; the user acts on *what* ran: "aten::copy_ 87% of the window",
"Optimizer.step#Adam.step 72%". Per device, over its attribution window:

- ``op``: the outermost framework ops of the host driving the device (an op nested in another op of its thread is
  part of that op), by name;
- ``annotation``: the outermost ``record_function`` ranges (``user_annotation``), by name, not the
  ``ProfilerStep#N`` markers (the window is made of them);
- ``kernel``: the device's own work (kernels, copies, collectives), by name, on accelerators.

Each name's time is the union of its intervals inside the window (never more than the window), and its share is
of the window. :func:`headline` names the cause that took most of the window and the entry behind it.

Out of core (``Options.owned``, analysis/slices.py): a slice cuts every name's intervals to its part of the
window and keeps *every* name (not the top ``TOP``); ``merge`` adds each name's time and the parts' lengths over
the slices, then ranks and cuts to ``TOP`` as :func:`dominant` does. A union of intervals is additive over a partition of
time, and an op nested in another is nested in every slice that holds it (the slice holds every event
overlapping it, so the enclosing one too): exact at any cut.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from neurontrace.analysis.attribution import CPU_DEVICE, DeviceAttribution, device_rows
from neurontrace.analysis.contract import Context, DeviceSection
from neurontrace.analysis.device_window import part_window
from neurontrace.analysis.driving import driving_host_events
from neurontrace.analysis.intervals import union
from neurontrace.analysis.work import DEVICE_WORK, device_categories
from neurontrace.causes import CAUSES
from neurontrace.columns import codes, isin, keep, of_rank, row_codes
from neurontrace.units import duration

TOP = 5  # entries kept per kind


@dataclass
class Dominant:
    """Per kind (``op``, ``annotation``, ``kernel``), the names covering most of the window, largest first:
    ``{"name", "ns", "share"}`` (share of the window)."""

    window_ns: int
    entries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"window_ns": self.window_ns, "entries": self.entries}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Dominant:
        return cls(int(d.get("window_ns") or 0), {k: [dict(e) for e in v] for k, v in (d.get("entries") or {}).items()})

    def top(self, *kinds: str) -> dict[str, Any] | None:
        """The largest entry among ``kinds`` (all kinds when none given)."""
        pool = [e for k, v in self.entries.items() if not kinds or k in kinds for e in v]
        return max(pool, key=lambda e: (e["ns"], e["name"]), default=None)

    def describe(self, *kinds: str, n: int = 2) -> str:
        """``"aten::copy_ 87.0% of the window, Optimizer.step#Adam.step 10.0%"`` (empty when nothing ran)."""
        pool = sorted((e for k, v in self.entries.items() if not kinds or k in kinds for e in v),
                      key=lambda e: (-e["ns"], e["name"]))[:n]
        return ", ".join(f"{_short(e['name'])} {100 * e['share']:.1f}%" + (" of the window" if i == 0 else "")
                         for i, e in enumerate(pool))


def _short(name: str, width: int = 80) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def dominant(ctx: Context, d: DeviceAttribution) -> Dominant:
    trace = ctx.trace
    lo, hi = part_window(ctx, d)  # a slice: its part of the window, every name (merge ranks them)
    top = TOP if ctx.options.owned is None else None
    if d.device == CPU_DEVICE and not trace.device_events.num_rows:
        host, dev = of_rank(trace.system_events, d.rank), None
    else:
        dev = device_rows(trace, d.device, d.rank)
        host = driving_host_events(trace, dev)
    out = Dominant(hi - lo)
    ops = keep(host, isin(host["category"], ["framework_op"]))
    out.entries["op"] = _by_name(_outermost(ops), lo, hi, top)
    # record_function ranges, not the profiler's own marks ("PyTorch Profiler (0)" spans the whole recording)
    ann = keep(host, isin(host["category"], ["annotation"]) & ~isin(host["raw_category"], ["Trace"])
               & (host["dur_ns"].to_numpy() > 0))
    out.entries["annotation"] = _by_name(_outermost(ann), lo, hi, top)
    if dev is not None and dev.num_rows:
        work = keep(dev, np.isin(device_categories(dev), list(DEVICE_WORK)))
        out.entries["kernel"] = _by_name(work, lo, hi, top)
    out.entries = {k: v for k, v in out.entries.items() if v}
    return out


def _outermost(t: pa.Table) -> pa.Table:
    """Rows not nested in another row of the same thread (pid, tid)."""
    if t.num_rows < 2:
        return t
    thread = row_codes(codes(t["pid"])[0], codes(t["tid"])[0])
    s = t["ts_ns"].to_numpy()
    e = s + t["dur_ns"].to_numpy()
    order = np.lexsort((-e, s, thread))
    th, eo = thread[order], e[order]
    nested = np.zeros(len(order), dtype=bool)
    first = np.flatnonzero(np.r_[True, th[1:] != th[:-1]])
    for a, b in zip(first.tolist(), np.r_[first[1:], len(order)].tolist(), strict=True):
        reach = np.maximum.accumulate(eo[a:b])
        nested[a + 1:b] = reach[:-1] >= eo[a + 1:b]
    return t.take(pa.array(np.sort(order[~nested])))


def _by_name(t: pa.Table, lo: int, hi: int, top: int | None) -> list[dict[str, Any]]:
    if not t.num_rows or hi <= lo:
        return []
    code, values = codes(t["name"])
    s = t["ts_ns"].to_numpy()
    e = s + t["dur_ns"].to_numpy()
    inside = np.flatnonzero((s < hi) & (e > lo) & (code >= 0))
    if not len(inside):
        return []
    # One sort by (name, start) and a running reach per name: each name's union in one pass over its rows.
    order = inside[np.lexsort((s[inside], code[inside]))]
    c, cs, ce = code[order], np.maximum(s[order], lo), np.minimum(e[order], hi)
    first = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    totals: list[tuple[int, str]] = []
    for a, b in zip(first.tolist(), np.r_[first[1:], len(c)].tolist(), strict=True):
        us, ue = union(cs[a:b], ce[a:b])
        totals.append((int((ue - us).sum()), str(values[c[a]])))
    return _ranked(totals, hi - lo, top)


def _ranked(totals: list[tuple[int, str]], window_ns: int, top: int | None) -> list[dict[str, Any]]:
    totals.sort(key=lambda x: (-x[0], x[1]))
    return [{"name": n, "ns": ns, "share": round(ns / window_ns, 4)} for ns, n in totals[:top] if ns > 0]


def merge(values: list[Dominant]) -> Dominant:
    """One device's per-slice values (time order, every name each) -> the rank's: each name's time added, the
    ``TOP`` largest per kind, shares of the slices' parts of the window together (the whole window)."""
    window_ns = sum(v.window_ns for v in values)
    by_kind: dict[str, dict[str, int]] = {}
    for v in values:
        for kind, entries in v.entries.items():
            names = by_kind.setdefault(kind, {})
            for e in entries:
                names[e["name"]] = names.get(e["name"], 0) + int(e["ns"])
    out = Dominant(window_ns)
    for kind in ("op", "annotation", "kernel"):
        if kind in by_kind and (ranked := _ranked([(ns, n) for n, ns in by_kind[kind].items()], window_ns, TOP)):
            out.entries[kind] = ranked
    return out


def headline(d: DeviceAttribution, value: Dominant | None) -> str:
    """One line: the cause that took most of the window and what ran then (plain text)."""
    cause = max(CAUSES, key=lambda c: (d.causes_ns[c], -CAUSES.index(c)))
    line = f"{cause} {100 * d.fraction(cause):.1f}% of {duration(d.window_ns)}"
    if value is None:
        return line
    if cause in ("compute", "collectives", "data_movement") and "kernel" in value.entries:
        kinds: tuple[str, ...] = ("kernel",)  # what the device ran
    else:  # what the host ran (a CPU device's compute is its ops)
        kinds = ("op",) if cause == "compute" else ("op", "annotation")
    what = value.describe(*kinds)
    return f"{line}; dominant: {what}" if what else line


def _text(value: Dominant) -> list[str]:
    parts = [f"{kind}s: {value.describe(kind, n=3)}" for kind in ("op", "annotation", "kernel") if kind in value.entries]
    return ["dominant " + "; ".join(parts)] if parts else []


SECTION = DeviceSection("dominant", "dominant", dominant, to_json=lambda v: v.as_dict(), from_json=Dominant.from_dict,
                        text=_text, merge=merge)
