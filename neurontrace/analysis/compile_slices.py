"""The compile section out of core: one rank's report from the parts of its time slices (analysis/slices.py).

The report reads few of a rank's host events: the compile ranges and their ``dynamo_data`` annotations
(analysis/compile.py), and the ranges of the compiled code running (analysis/compile_runtime.py: regions, guard
checks, graph calls, compiled forward/backward, Dynamo entry frames, user Python frames). Its figures are not
sums over time (a compile range nested in the one before it is skipped, a region's function is the first user
frame inside it, compiled calls are compared with eager calls by their medians), so a slice keeps those events
that start in it (each event in exactly one slice), projected to the columns the report reads, with the steps
that start in it; ``merge`` joins them in recorded order and builds the report once, by the same code as in
memory: the whole rank's report exactly, wherever the cuts fall. The compile-log rows (``Options.compiles``)
are the rank's whole logs, the same in every slice: the merge reads the first slice's.

What it holds: the compile ranges and the compiled code's ranges are a few per compiled call; of the user
Python frames (recorded only with ``with_stack=True``) only those the report tells apart
(``compile_runtime.runtime_mask``): each thread's first, the first in each region, the eager calls. Measured by
``bench/slice_parts.py`` (docs/compile.md, "Out of core").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from neurontrace.analysis import phases
from neurontrace.analysis.compile_runtime import runtime_mask
from neurontrace.analysis.compile_spans import compile_mask
from neurontrace.analysis.contract import Context
from neurontrace.analysis.labels import per_distinct
from neurontrace.analysis.slice_rows import kept
from neurontrace.analysis.slices import owned_rows

COLUMNS = ("event_id", "ts_ns", "dur_ns", "name", "category", "rank", "pid", "tid")  # what the report reads
_NOTE = re.compile(r"^dynamo_data: compile_id=")


@dataclass
class CompileSlice:
    """A time slice's part of the compile section (see the module's docstring)."""

    owned: tuple[int, int]
    host: pa.Table  # the host events the report reads that start in the slice, projected to COLUMNS
    steps: list[dict[str, Any]]  # the steps (phases) that start in the slice
    logs: pa.Table | None  # the rank's compile-log rows (Options.compiles)
    warnings: tuple[str, ...]


def _read(host: pa.Table, owned: tuple[int, int]) -> np.ndarray:
    if host.num_rows == 0:
        return np.zeros(0, dtype=bool)
    codes, keys = per_distinct([host["category"], host["name"]],
                               lambda c, n: c == "annotation" and bool(_NOTE.match(n or "")))
    notes = np.asarray(keys, dtype=bool)[codes] if len(keys) else np.zeros(host.num_rows, dtype=bool)
    return np.asarray(compile_mask(host) | notes | runtime_mask(host, owned), dtype=bool)


def slice_value(ctx: Context) -> CompileSlice:
    owned = ctx.options.owned
    assert owned is not None
    host = ctx.trace.system_events
    mask = _read(host, owned) & owned_rows(host, owned)
    rows = kept(host, mask, COLUMNS)
    ph = ctx.sections.get(phases.SECTION.key)
    steps = [dict(s) for s in (ph.steps if ph is not None else phases.phases(ctx.trace).steps)
             if owned[0] <= s["start_ns"] < owned[1]]
    return CompileSlice(owned, rows, steps, ctx.options.compiles, ctx.options.compile_warnings)


T = TypeVar("T")


def merge_slices(parts: list[CompileSlice | None],
                 report: Callable[[pa.Table, pa.Table | None, tuple[str, ...], list[dict[str, Any]]], T],
                 empty: Callable[[], T]) -> T:
    """The rank's report from its slices' parts, in time order: ``report`` (compile.py's, of a rank's host
    events, compile logs, warnings and steps) on the parts joined, exactly what ``compute`` gives on the rank."""
    vals = [p for p in parts if p is not None]
    if not all(isinstance(p, CompileSlice) for p in vals):
        raise ValueError("compile.merge takes values computed with Options.owned")
    if not vals:
        return empty()
    tables = [p.host for p in vals if p.host.num_rows]
    host = pa.concat_tables(tables).unify_dictionaries().combine_chunks() if tables else vals[0].host
    if host.num_rows:  # back in recorded order (event ids number the events as read)
        host = host.take(pa.array(np.argsort(host["event_id"].to_numpy(), kind="stable")))
    by_step: dict[int, dict[str, Any]] = {}
    for p in vals:  # a step several processes mark, cut between them: earliest start, latest end (as phases)
        for s in p.steps:
            cur = by_step.get(s["step"])
            if cur is None:
                by_step[s["step"]] = dict(s)
            else:
                end = max(cur["start_ns"] + cur["dur_ns"], s["start_ns"] + s["dur_ns"])
                cur["start_ns"] = min(cur["start_ns"], s["start_ns"])
                cur["dur_ns"] = end - cur["start_ns"]
    steps = sorted(by_step.values(), key=lambda s: s["start_ns"])
    return report(host, vals[0].logs, vals[0].warnings, steps)
