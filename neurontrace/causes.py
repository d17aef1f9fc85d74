"""The six causes every nanosecond of device time is attributed to, declared once.

Their order is the attribution's priority (where activities overlap, the first wins: DESIGN.md,
"Stall attribution") and the order every report, plot and the viewer list them in. Each has one
label for people and one colour, used by the text report (rich renders the hex colour, or the
nearest the terminal has), the plotly figures and the viewer alike. The meanings are docs/diagnose.md's
table. This module imports nothing, so every layer can use it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    name: str  # the key in causes_ns and the JSON documents
    label: str  # how people read it
    color: str  # "#rrggbb"
    meaning: str  # what the device was doing meanwhile


VOCABULARY: tuple[Cause, ...] = (
    Cause("compute", "compute", "#2e7d32", "at least one compute kernel / engine instruction runs"),
    Cause("collectives", "collectives", "#7b1fa2", "no compute; a collective is in flight (exposed communication)"),
    Cause("data_movement", "data movement", "#1565c0", "no compute or collective; a copy / DMA is in flight"),
    Cause("host_fallback", "host fallback", "#d32f2f", "idle, while the host runs ops that fell back to the CPU"),
    Cause("host_overhead", "host overhead", "#f9a825", "idle, while the host is otherwise busy"),
    Cause("idle", "idle", "#90a4ae", "idle, and nothing recorded explains it"),
)

CAUSES: tuple[str, ...] = tuple(c.name for c in VOCABULARY)  # in priority order
LABELS: dict[str, str] = {c.name: c.label for c in VOCABULARY}
COLORS: dict[str, str] = {c.name: c.color for c in VOCABULARY}
