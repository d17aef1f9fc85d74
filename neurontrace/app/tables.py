"""Rows of the viewer's tables: top stalls, fallback ops, top ops/kernels, findings, and the report's
sections (no Dash).

Times in the rows are milliseconds (or microseconds where the column says so) for reading, plus
hidden integer nanosecond fields relative to the trace origin (``t0_ns``, ``t1_ns``) that the
timeline zooms to when a row is clicked.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurontrace.analysis import registry
from neurontrace.analysis.diagnose import Diagnosis
from neurontrace.app.palette import CAUSE_LABELS
from neurontrace.app.tracks import DEVICE_TABLE, TrackIndex

TOP_OPS = 200
# What "ops and kernels" are: host framework ops, and device work (not executions, waits or markers).
OP_CATEGORIES = ("framework_op", "compute", "collective", "memcpy", "memset", "dma", "compile", "load")


def _ms(ns: float) -> float:
    return round(float(ns) / 1e6, 4)


def _us(ns: float) -> float:
    return round(float(ns) / 1e3, 2)


def stall_rows(diag: Diagnosis, origin_ns: int) -> list[dict[str, Any]]:
    """Top stalls; "start" counts from the report's time 0 (``Diagnosis.origin_ns``), as ``diagnose`` prints it."""
    rows: list[dict[str, Any]] = []
    zero = diag.origin_ns if diag.origin_ns is not None else min((d.window[0] for d in diag.devices), default=0)
    for d in diag.devices:
        for s in d.top_stalls:
            t0 = s.start_ns - origin_ns
            rows.append({
                "device": d.device, "cause": CAUSE_LABELS.get(s.cause, s.cause), "detail": s.detail,
                "start_ms": _ms(s.start_ns - zero), "dur_ms": _ms(s.dur_ns), "source": s.source or "",
                "evidence": "; ".join(s.evidence), "t0_ns": t0, "t1_ns": t0 + s.dur_ns, "cause_key": s.cause,
            })
    rows.sort(key=lambda r: -float(r["dur_ms"]))
    return rows


def fallback_rows(diag: Diagnosis) -> list[dict[str, Any]]:
    return [{"name": op.name, "calls": op.calls, "host_ms": _ms(op.host_ns), "device_idle_ms": _ms(op.device_idle_ns),
             "found_by": op.found_by, "source": op.source or "",
             "event_id": op.event_ids[0] if op.event_ids else None}
            for op in diag.fallback_ops]


def finding_rows(diag: Diagnosis) -> list[dict[str, Any]]:
    return [f.as_dict() for f in diag.findings]


def report_rows(diag: Diagnosis) -> list[dict[str, Any]]:
    """Every registered section with something to say, as ``diagnose``'s text report prints them: each
    device's sections (analysis/registry.py DEVICE_SECTIONS), then the job's (SECTIONS); per part its
    title, the device it is about (``""`` for the job) and the section's own plain ``text`` lines. A
    section added to the registry appears here with no code of its own."""
    rows: list[dict[str, Any]] = []
    for d in diag.devices:
        where = d.device + ("" if d.rank is None else f" rank {d.rank}")
        for ds in registry.DEVICE_SECTIONS:
            value = d.sections.get(ds.key)
            lines = ds.text(value) if value is not None else []
            if lines:
                rows.append({"key": ds.key, "title": ds.title, "device": where, "lines": list(lines)})
    for s in registry.SECTIONS:
        value = diag.sections.get(s.key)
        lines = s.text(value) if value is not None else []
        if lines:
            rows.append({"key": s.key, "title": s.title, "device": "", "lines": list(lines)})
    return rows


def top_ops(ix: TrackIndex) -> list[dict[str, Any]]:
    """Framework ops and device kernels/copies/collectives by total time, each with its longest call."""
    wanted = [i for i, c in enumerate(ix.categories) if c in OP_CATEGORIES]
    if not wanted or not ix.n_events:
        return []
    sel = np.flatnonzero(np.isin(ix.cat, wanted))
    if not len(sel):
        return []
    dur = (ix.end - ix.start)[sel]
    key = ix.name[sel].astype(np.int64) * len(ix.categories) + ix.cat[sel]
    uniq, inv = np.unique(key, return_inverse=True)
    inv = inv.reshape(-1)
    total = np.bincount(inv, weights=dur)
    calls = np.bincount(inv)
    order = np.lexsort((-dur, inv))  # per group, longest first
    firsts = order[np.r_[True, inv[order][1:] != inv[order][:-1]]]
    longest = np.empty(len(uniq), dtype=np.int64)
    longest[inv[firsts]] = sel[firsts]
    top = np.argsort(-total, kind="stable")[:TOP_OPS]
    span = max(ix.span_ns, 1)
    rows = []
    for g in top.tolist():
        pos = int(longest[g])
        cat = ix.categories[int(ix.cat[pos])]
        rows.append({
            "name": str(ix.names[int(ix.name[pos])]), "category": cat,
            "side": "device" if int(ix.table[pos]) == DEVICE_TABLE else "host",
            "calls": int(calls[g]), "total_ms": _ms(total[g]), "mean_us": _us(total[g] / calls[g]),
            "max_us": _us(int(ix.end[pos] - ix.start[pos])), "share": round(float(100 * total[g] / span), 2),
            "event_id": int(ix.event_id[pos]), "t0_ns": int(ix.start[pos]), "t1_ns": int(ix.end[pos]),
        })
    return rows
