"""The window a device section works in, on a whole rank or on one time slice of it.

On a whole rank it is the device's attribution window (``DeviceAttribution.window``). On a time slice
(``Options.owned``, analysis/sliced.py) the attribution's window is only the slice's part of it; the whole
rank's window comes with the slice plan (``Options.plan``), and a section needs both: the whole one to decide
which events belong to the window (the ops launched in it, the steps overlapping it), the slice's part to
count and clip.
"""

from __future__ import annotations

from neurontrace.analysis.attribution import DeviceAttribution
from neurontrace.analysis.contract import Context
from neurontrace.analysis.slices import owned_window


def whole_window(ctx: Context, d: DeviceAttribution) -> tuple[int, int]:
    """The device's window on the whole rank (the plan's, on a slice that has one)."""
    plan = ctx.options.plan
    found = plan.window_of(d.device, d.rank) if plan is not None else None
    return found.span if found is not None else d.window


def part_window(ctx: Context, d: DeviceAttribution) -> tuple[int, int]:
    """The slice's part of the device's whole window (the whole window without a slice)."""
    return owned_window(whole_window(ctx, d), ctx.options.owned)


def driving_pids(ctx: Context, d: DeviceAttribution) -> tuple[str, ...] | None:
    """On a slice with a plan: the processes that drive ``d`` on the whole rank (None: not known here)."""
    plan = ctx.options.plan
    if plan is None or ctx.options.owned is None:
        return None
    return next((dp.pids for dp in plan.devices if (dp.device, dp.rank) == (d.device, d.rank)), None)
