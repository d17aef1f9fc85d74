"""``neurontrace ops`` over the same windows as ``diagnose``: one table of shares for both.

Without ``--window``, ``ops`` used to sum kernels over the whole trace while ``diagnose``'s op-efficiency
section used each device's analysis window, so the two printed different shares of one trace. Here each
attributed device's op table is built over its default analysis window
(:func:`neurontrace.analysis.attribution.default_windows`), exactly as the diagnose section builds it, and
the devices' tables are put side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

from neurontrace.analysis.attribution import default_windows
from neurontrace.analysis.ops import OpRow, OpsReport, op_table
from neurontrace.analysis.peaks import DevicePeak
from neurontrace.trace import Trace


@dataclass(frozen=True)
class UsedWindow:
    device: str
    rank: int | None
    span: tuple[int, int]
    source: str  # the window rule in words, as diagnose prints it


def default_op_table(trace: Trace, *, device: str | None = None) -> tuple[OpsReport, list[UsedWindow]]:
    """The op table of every attributed device (or only ``device``) over its default analysis window."""
    rows: list[OpRow] = []
    devices: dict[str, DevicePeak] = {}
    skipped: dict[str, int] = {}
    used: list[UsedWindow] = []
    for dev, rank, window in default_windows(trace):
        if device is not None and dev != device:
            continue
        part = op_table(trace, window=window.span, device=dev, rank=rank)
        rows += part.rows
        devices.update(part.devices)
        for reason, n in part.skipped.items():
            skipped[reason] = skipped.get(reason, 0) + n
        used.append(UsedWindow(dev, rank, window.span, window.source))
    return OpsReport(rows, devices, skipped), used
