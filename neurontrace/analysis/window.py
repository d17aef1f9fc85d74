"""``--window``: the user's window, as offsets from the report's time 0, or absolute.

Syntax: ``START:END`` with each bound a number and a unit (``ns``, ``us``/``µs``, ``ms``, ``s``: a bare number
is refused, since ``5:10`` would silently mean nanoseconds), measured from the report's time 0, the start of
the analysis window that ``diagnose`` prints as its origin and the viewer draws at x = 0
(:func:`neurontrace.analysis.attribution.default_origin`), so a time printed by a report can be pasted back,
e.g. ``120ms:340ms``; or ``abs:START_NS:END_NS`` on the trace's own clock in integer nanoseconds (as ``--json``
writes times). A window that does not overlap the trace is an error; one that overhangs it is cut to the
trace, with a warning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from neurontrace.errors import WindowError
from neurontrace.trace import Trace
from neurontrace.units import duration

_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_BOUND = re.compile(r"^\s*(?P<sign>-)?(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>ns|us|µs|ms|s)\s*$")
FORMS = "START:END with units (e.g. 120ms:340ms, 1.5s:2s, 0us:800us) or abs:START_NS:END_NS"


@dataclass(frozen=True)
class WindowSpec:
    start_ns: int
    end_ns: int
    absolute: bool  # True: trace-clock ns; False: offsets from the report's time 0

    def describe(self) -> str:
        return (f"abs:{self.start_ns}:{self.end_ns}" if self.absolute else
                f"{_offset(self.start_ns)} to {_offset(self.end_ns)}")


def parse_window(text: str) -> WindowSpec:
    """``START:END`` (offsets with units) or ``abs:START_NS:END_NS``; ValueError with the reason otherwise."""
    absolute = text.startswith("abs:")
    parts = text[4:].split(":") if absolute else text.split(":")
    if len(parts) != 2:
        raise ValueError(f"expected {FORMS}, got {text!r}")
    if absolute:
        try:
            start, end = (int(p) for p in parts)
        except ValueError:
            raise ValueError(f"abs: takes integer nanoseconds on the trace clock, got {text!r}") from None
    else:
        bounds = [_BOUND.match(p) for p in parts]
        if not all(bounds):
            raise ValueError(f"each bound is a number with a unit (ns, us, ms, s): expected {FORMS}, got {text!r}")
        start, end = ((-1 if m["sign"] else 1) * round(float(m["num"]) * _UNITS[m["unit"]]) for m in bounds if m)
    if end <= start:
        raise ValueError(f"the window must end after it starts, got {text!r}")
    return WindowSpec(start, end, absolute)


def trace_span(trace: Trace) -> tuple[int, int]:
    """First event start to last event end, over host and device events."""
    spans = [t for t in (trace.system_events, trace.device_events) if t.num_rows]
    if not spans:
        return 0, 0
    start = min(int(t["ts_ns"].to_numpy().min()) for t in spans)
    end = max(int((t["ts_ns"].to_numpy() + t["dur_ns"].to_numpy()).max()) for t in spans)
    return start, end


def resolve(spec: WindowSpec, trace: Trace, origin_ns: int) -> tuple[tuple[int, int], str | None]:
    """(the window on the trace clock, cut to the trace; a warning when it was cut, else None).

    ``origin_ns`` is the report's time 0 (attribution.default_origin). WindowError when the window misses
    the trace entirely."""
    return resolve_span(spec, trace_span(trace), origin_ns)


def resolve_span(spec: WindowSpec, extent: tuple[int, int], origin_ns: int) -> tuple[tuple[int, int], str | None]:
    """:func:`resolve` for a trace spanning ``extent`` (first start, last end) that is not held (out of core)."""
    lo, hi = extent
    start, end = (spec.start_ns, spec.end_ns) if spec.absolute else (origin_ns + spec.start_ns,
                                                                       origin_ns + spec.end_ns)
    span = f"{_offset(lo - origin_ns)} to {_offset(hi - origin_ns)} (abs:{lo}:{hi})"
    if end <= lo or start >= hi:
        raise WindowError(f"--window {spec.describe()} lies outside the trace, which spans {span}; offsets count "
                          f"from the report's time 0, the analysis window start (abs:{origin_ns})")
    cut = (max(start, lo), min(end, hi))
    if cut == (start, end):
        return cut, None
    return cut, (f"--window {spec.describe()} overhangs the trace, which spans {span}: cut to "
                 f"{_offset(cut[0] - origin_ns)} to {_offset(cut[1] - origin_ns)}")


def _offset(ns: int) -> str:
    return ("-" if ns < 0 else "+") + duration(abs(ns))
