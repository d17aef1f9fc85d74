"""Test support: the sections computed on the time slices of a rank (Options.owned) and merged, beside the same
sections computed on the whole rank, both as ``to_json`` documents (tests/test_sliced_sections.py)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow.compute as pc

from neurontrace.analysis import phases, registry
from neurontrace.analysis.contract import Context, Options, Section
from neurontrace.analysis.diagnose import diagnose_rank
from neurontrace.analysis.malformed import sanitize
from neurontrace.analysis.slices import slice_of
from neurontrace.analysis.stalls import frame_sources
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
    """One rank diagnosed whole (``diagnose_rank``), and its sections on slices cut at chosen instants."""

    def __init__(self, trace: Trace, options: Options | None = None) -> None:
        self.options = options or Options()
        self.whole = diagnose_rank(trace, self.options)
        self.trace, _ = sanitize(trace)  # the events the sections read (diagnose_rank's first step)
        self.frames = frame_sources(self.trace)

    def want(self, section: Section) -> Any:
        """The section's JSON on the whole rank."""
        v = self.whole.sections.get(section.key)
        return None if v is None else section.to_json(v)

    def slices(self, cuts: list[int]) -> list[dict[str, Any]]:
        """Every section's value on each slice, in time order. A slice gets the whole rank's core results (its
        devices, their windows) and the earlier sections' values computed on the slice."""
        lo, hi = bounds(self.trace)
        edges = [lo, *sorted(c for c in cuts if lo < c < hi), hi]
        out = []
        for a, b in itertools.pairwise(edges):
            ctx = Context(slice_of(self.trace, (a, b)), self.whole.devices, self.whole.fallback_ops, self.frames,
                          replace(self.options, owned=(a, b)))
            for s in registry.SECTIONS:
                v = s.compute(ctx)
                if v is not None:
                    ctx.sections[s.key] = v
            out.append(ctx.sections)
        return out

    @staticmethod
    def merged(section: Section, slices: list[dict[str, Any]]) -> Any:
        """The section's merge of the slices' values, as JSON."""
        assert section.merge is not None
        v = section.merge([s.get(section.key) for s in slices])
        return None if v is None else section.to_json(v)
