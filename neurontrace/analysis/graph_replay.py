"""Graph replay: how many CUDA/HIP graph launches the host driving each device made (names.GRAPH_LAUNCH).

A device fed by graph replays is not helped by the advice "use CUDA graphs" (the host_bound finding reads this).
"""

from __future__ import annotations

from neurontrace.analysis import names
from neurontrace.analysis.attribution import DeviceAttribution
from neurontrace.analysis.contract import Context, DeviceSection
from neurontrace.analysis.overlap import device_and_host
from neurontrace.columns import matches, select


def _compute(ctx: Context, d: DeviceAttribution) -> int | None:
    dev, host = device_and_host(ctx, d)
    if dev.num_rows == 0:
        return None
    runtime = select(host, "category", "runtime", "driver")
    n = int(matches(runtime["name"], names.GRAPH_LAUNCH).sum()) if runtime.num_rows else 0
    return n or None


def _text(n: int) -> list[str]:
    return [f"{n} graph launches (CUDA/HIP graph replay)"]


SECTION = DeviceSection("graph_launches", "graph replay", _compute, text=_text)
