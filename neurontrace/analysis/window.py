"""``--window``: the user's window, as offsets from the trace start (what every report prints), or absolute.

Syntax: ``START:END`` with each bound a number and an optional unit (``ns`` when none, ``us``/``µs``,
``ms``, ``s``), measured from the trace start (its first event), e.g. ``120ms:340ms``; or
``abs:START_NS:END_NS`` on the trace's own clock in integer nanoseconds (as ``--json`` writes times).
A window that does not overlap the trace is an error; one that overhangs it is cut to the trace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from neurontrace.errors import WindowError
from neurontrace.trace import Trace

_UNITS = {"": 1, "ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_BOUND = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>ns|us|µs|ms|s)?\s*$")


@dataclass(frozen=True)
class WindowSpec:
    start_ns: int
    end_ns: int
    absolute: bool  # True: trace-clock ns; False: offsets from the trace start

    def describe(self) -> str:
        return (f"abs:{self.start_ns}:{self.end_ns}" if self.absolute else
                f"+{self.start_ns / 1e6:,.3f} ms to +{self.end_ns / 1e6:,.3f} ms")


def parse_window(text: str) -> WindowSpec:
    """``START:END`` (offsets with units) or ``abs:START_NS:END_NS``; ValueError with the reason otherwise."""
    absolute = text.startswith("abs:")
    parts = text[4:].split(":") if absolute else text.split(":")
    if len(parts) != 2:
        raise ValueError(f"expected START:END (offsets from the trace start, e.g. 120ms:340ms) or "
                         f"abs:START_NS:END_NS, got {text!r}")
    if absolute:
        try:
            start, end = (int(p) for p in parts)
        except ValueError:
            raise ValueError(f"abs: takes integer nanoseconds on the trace clock, got {text!r}") from None
    else:
        bounds = [_BOUND.match(p) for p in parts]
        if not all(bounds):
            raise ValueError(f"each bound is a number with an optional unit (ns, us, ms, s), got {text!r}")
        start, end = (round(float(m["num"]) * _UNITS[m["unit"] or ""]) for m in bounds if m)
    if end <= start:
        raise ValueError(f"the window must end after it starts, got {text!r}")
    return WindowSpec(start, end, absolute)


def trace_span(trace: Trace) -> tuple[int, int]:
    """First event start to last event end, over host and device events (the origin of report offsets)."""
    spans = [t for t in (trace.system_events, trace.device_events) if t.num_rows]
    if not spans:
        return 0, 0
    start = min(int(t["ts_ns"].to_numpy().min()) for t in spans)
    end = max(int((t["ts_ns"].to_numpy() + t["dur_ns"].to_numpy()).max()) for t in spans)
    return start, end


def resolve(spec: WindowSpec, trace: Trace) -> tuple[int, int]:
    """The window on the trace clock, cut to the trace; WindowError when it misses the trace entirely."""
    lo, hi = trace_span(trace)
    start, end = (spec.start_ns, spec.end_ns) if spec.absolute else (lo + spec.start_ns, lo + spec.end_ns)
    if end <= lo or start >= hi:
        raise WindowError(f"--window {spec.describe()} lies outside the trace, which spans +0 to "
                          f"+{(hi - lo) / 1e6:,.3f} ms (abs:{lo}:{hi}); offsets count from the trace start")
    return max(start, lo), min(end, hi)
