"""Test support: the sections computed on the time slices of a rank (Options.owned) and merged, beside the same
sections computed on the whole rank, both as ``to_json`` documents (tests/test_sliced_sections.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow.compute as pc

from neurontrace.analysis import phases
from neurontrace.analysis.contract import Options, Section
from neurontrace.analysis.diagnose import diagnose_rank
from neurontrace.analysis.malformed import sanitize
from neurontrace.analysis.slice_plan import plan_rank
from neurontrace.analysis.sliced import diagnose_sliced, slices_of
from neurontrace.analysis.slices import slice_of
from neurontrace.analysis.window import trace_span
from neurontrace.trace import Trace


def bounds(trace: Trace) -> tuple[int, int]:
    """The rank's first instant and one past its last."""
    tabs = [t for t in (trace.system_events, trace.device_events) if t.num_rows]
    lo = min(int(pc.min(t["ts_ns"]).as_py()) for t in tabs)
    hi = max(int(pc.max(pc.add(t["ts_ns"], t["dur_ns"])).as_py()) for t in tabs)
    if trace.memory_events.num_rows:
        lo = min(lo, int(pc.min(trace.memory_events["ts_ns"]).as_py()))
        hi = max(hi, int(pc.max(trace.memory_events["ts_ns"]).as_py()))
    return lo, hi + 1


def step_cuts(trace: Trace) -> list[int]:
    """The starts of the rank's steps after the first (ProfilerStep#N, as phases reads them)."""
    return [int(s["start_ns"]) for s in phases.phases(trace).steps[1:]]


def even_cuts(trace: Trace, n: int) -> list[int]:
    """``n`` instants evenly spread inside the rank, wherever they fall (inside events, steps, walks)."""
    lo, hi = bounds(trace)
    return [int(x) for x in np.linspace(lo, hi, n + 2)[1:-1]]


class Sliced:
    """One rank diagnosed whole (``diagnose_rank``), and slice by slice as ``diagnose DATASET`` does
    (analysis/sliced.py: the plan of the whole rank, each slice through ``diagnose_rank`` with ``owned``)."""

    def __init__(self, trace: Trace, options: Options | None = None) -> None:
        self.options = options or Options()
        self.raw = trace
        self.whole = diagnose_rank(trace, self.options)
        self.trace, _ = sanitize(trace)  # the events the sections read (diagnose_rank's first step)

    def want(self, section: Section) -> Any:
        """The section's JSON on the whole rank."""
        v = self.whole.sections.get(section.key)
        return None if v is None else section.to_json(v)

    def slices(self, cuts: list[int]) -> list[dict[str, Any]]:
        """Every section's value on each slice (where it has one), in time order."""
        def read(owned: tuple[int, int]) -> Trace:
            return slice_of(self.raw, owned)

        owned = slices_of(trace_span(self.raw), cuts)
        plan = plan_rank(read, owned, self.options.window)
        return [diagnose_rank(read(o), replace(self.options, owned=o, plan=plan)).sections for o in owned]

    @staticmethod
    def merged(section: Section, slices: list[dict[str, Any]]) -> Any:
        """The section's merge of the slices' values, as JSON."""
        assert section.merge is not None
        v = section.merge([s[section.key] for s in slices if section.key in s])
        return None if v is None else section.to_json(v)

    def sliced(self, cuts: list[int]) -> dict[str, Any]:
        """Every section's value in ``diagnose_sliced`` (the in-memory reference of diagnose DATASET)."""
        return diagnose_sliced(self.raw, cuts, self.options).sections

    @staticmethod
    def doc(section: Section, sections: dict[str, Any]) -> Any:
        v = sections.get(section.key)
        return None if v is None else section.to_json(v)
