"""Cross-rank: skew of steps and collective time across the ranks of one job (several ranks only)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis._columns import select
from neurontrace.analysis.contract import Context, Section, ms
from neurontrace.trace import Trace


def cross_rank(trace: Trace) -> dict[str, Any]:
    """Skew of steps and collective time across ranks (empty unless the trace holds several)."""
    host = trace.system_events
    ranks = sorted(r for r in pc.unique(host["rank"]).to_pylist() if r is not None)
    if len(ranks) < 2:
        return {}
    steps = select(host, "category", "step")
    by_step: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)
    for name, rank, ts, dur in zip(steps["name"].cast(pa.string()).to_pylist(), steps["rank"].to_pylist(),
                                   steps["ts_ns"].to_pylist(), steps["dur_ns"].to_pylist(), strict=True):
        if rank is not None:
            by_step[name][rank] = (ts, dur)
    step_skew = []
    for name, per_rank in sorted(by_step.items()):
        if len(per_rank) < 2:
            continue
        starts = {r: v[0] for r, v in per_rank.items()}
        durs = {r: v[1] for r, v in per_rank.items()}
        step_skew.append({"step": name, "start_skew_ns": max(starts.values()) - min(starts.values()),
                          "max_dur_ns": max(durs.values()), "min_dur_ns": min(durs.values()),
                          "slowest_rank": max(durs, key=durs.__getitem__)})
    coll = select(trace.device_events, "category", "collective")
    per_rank = coll.group_by("rank").aggregate([("dur_ns", "sum")]).to_pylist()
    return {"ranks": ranks, "step_skew": step_skew,
            "collective_ns_by_rank": {str(r["rank"]): int(r["dur_ns_sum"]) for r in per_rank}}


def _text(value: dict[str, Any]) -> list[str]:
    if not value.get("step_skew"):
        return []
    worst = max(value["step_skew"], key=lambda s: s["start_skew_ns"])
    return [(f"{len(value['ranks'])} ranks; worst step start skew {ms(worst['start_skew_ns'])} ({worst['step']}, "
            f"slowest rank {worst['slowest_rank']})")]


def _compute(ctx: Context) -> dict[str, Any]:
    return cross_rank(ctx.trace)


SECTION = Section("cross_rank", "cross-rank", _compute, text=_text)
