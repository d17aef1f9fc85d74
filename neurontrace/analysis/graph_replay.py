"""Graph replay: how many CUDA/HIP graph launches the host driving each device made (names.GRAPH_LAUNCH).

A device fed by graph replays is not helped by the advice "use CUDA graphs" (the host_bound finding reads this).

Out of core (``Options.owned``, analysis/slices.py): a slice counts the launch calls that start in it, and its
value is kept even when zero or when the slice holds no rows of the device; ``merge`` adds the counts (absent
when the sum is zero, as on the whole rank). Exact at any cut.
"""

from __future__ import annotations

from dataclasses import dataclass

from neurontrace.analysis import names
from neurontrace.analysis.attribution import CPU_DEVICE, DeviceAttribution
from neurontrace.analysis.contract import Context, DeviceSection
from neurontrace.analysis.overlap import device_and_host
from neurontrace.analysis.slices import owned_rows
from neurontrace.columns import keep, matches, select


@dataclass(frozen=True)
class GraphLaunches:
    """The section's value: graph launches counted on the driving host. ``--json``: the count, an integer
    (``devices[].graph_launches``; absent where there are none)."""

    count: int

    def as_int(self) -> int:
        return self.count

    @classmethod
    def from_int(cls, n: int) -> GraphLaunches:
        return cls(int(n))


def _compute(ctx: Context, d: DeviceAttribution) -> GraphLaunches | None:
    dev, host = device_and_host(ctx, d)
    owned = ctx.options.owned
    if owned is not None:  # a slice: its count, even 0 or without device rows here (``merge`` decides)
        if d.device == CPU_DEVICE:
            return None
        host = keep(host, owned_rows(host, owned))
    elif dev.num_rows == 0:
        return None
    runtime = select(host, "category", "runtime", "driver")
    n = int(matches(runtime["name"], names.GRAPH_LAUNCH).sum()) if runtime.num_rows else 0
    return GraphLaunches(n) if n or owned is not None else None


def merge(values: list[GraphLaunches | None]) -> GraphLaunches | None:
    """One device's per-slice counts (time order) -> the rank's: their sum, absent when it is zero."""
    n = sum(v.count for v in values if v is not None)
    return GraphLaunches(n) if n else None


def replays(d: DeviceAttribution) -> bool:
    """The host driving ``d`` replays CUDA/HIP graphs (advice that says "use CUDA graphs" does not apply)."""
    value = d.sections.get(SECTION.key)
    return isinstance(value, GraphLaunches) and value.count > 0


def _text(v: GraphLaunches) -> list[str]:
    return [f"{v.count} graph launches (CUDA/HIP graph replay)"]


SECTION = DeviceSection("graph_launches", "graph replay", _compute, to_json=lambda v: v.as_int(),
                        from_json=GraphLaunches.from_int, text=_text, merge=merge)
