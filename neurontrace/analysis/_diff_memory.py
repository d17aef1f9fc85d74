"""``diff``'s memory comparison: per device, the peak and the growth per step of both runs (docs/memory.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neurontrace.analysis import memory

FIGURES = ("peak_allocated_bytes", "peak_reserved_bytes", "growth_bytes_per_step")
LABELS = {"peak_allocated_bytes": "peak allocated", "peak_reserved_bytes": "peak reserved",
          "growth_bytes_per_step": "growth per step"}  # as diff's report and the two-run page name them


def memory_deltas(a: Mapping[str, Any], b: Mapping[str, Any],
                  change: Any) -> list[dict[str, Any]]:
    """One entry per device and rank in either diagnosis' memory section: each figure's ``change`` (baseline,
    change, delta, pct). A device with several processes counts its largest figure. Empty when neither run
    recorded memory events."""
    sides = [_by_device(d) for d in (a, b)]
    keys = sorted(set(sides[0]) | set(sides[1]), key=lambda k: (k[1] is None, k[1] or 0, k[0]))
    return [{"device": dev, "rank": rank,
             **{f: change(sides[0].get((dev, rank), {}).get(f), sides[1].get((dev, rank), {}).get(f))
                for f in FIGURES}} for dev, rank in keys]


def _by_device(doc: Mapping[str, Any]) -> dict[tuple[str, int | None], dict[str, int | None]]:
    out: dict[tuple[str, int | None], dict[str, int | None]] = {}
    for d in (doc.get(memory.SECTION.key) or {}).get("devices") or []:
        cur = out.setdefault((d["device"], d.get("rank")), {})
        for f in FIGURES:
            v = d.get(f)
            if v is not None:
                old = cur.get(f)
                cur[f] = v if old is None else max(v, old)
    return out
