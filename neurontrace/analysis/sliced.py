"""One rank diagnosed slice by slice, in bounded memory: ``diagnose DATASET`` out of core (docs/scale.md).

The rank is cut at instants (``cuts``) into time slices; a first bounded pass over the slices finds what no
slice sees alone (analysis/slice_plan.py: each device's window, its driving processes, its start-up calls),
then each slice is read (every event overlapping it: ``Reader``) and diagnosed by the same
:func:`~neurontrace.analysis.diagnose.diagnose_rank` with ``Options.owned`` and ``Options.plan`` set, and
the slices' results are merged into the rank's :class:`RankResult`: the core here (attribution summed,
stalls joined across cuts by analysis/stall_merge.py, fallback ops by fallback.merge_slices), each
registered section and device section by its ``merge``. A section without one is left out, named in ONE
warning of the report's ``warnings``.

:func:`diagnose_sliced` is the in-memory reference (a Trace cut at ``cuts``); ``neurontrace.dataset`` hands
a reader over a dataset's time parts to :func:`diagnose_slices`. Cuts at the starts of the driving host's
profiled steps give the whole rank's answer exactly (:func:`step_cuts`); docs/scale.md says which figures an
arbitrary cut can change, and why.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import numpy as np

from neurontrace.analysis import load_warnings, malformed, registry
from neurontrace.analysis.attribution import DeviceAttribution, detail_priority, planned_labels
from neurontrace.analysis.contract import Options
from neurontrace.analysis.diagnose import RankResult, diagnose_rank
from neurontrace.analysis.fallback import merge_slices
from neurontrace.analysis.slice_plan import Reader, plan_rank
from neurontrace.analysis.slices import DevicePlan, RankPlan, slice_of
from neurontrace.analysis.stall_merge import LabelKey, label_keys, merge_stalls
from neurontrace.analysis.stalls import Stall, describe, frame_sources
from neurontrace.analysis.window import trace_span
from neurontrace.causes import CAUSES
from neurontrace.columns import select
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import Trace

OUT_OF_CORE = "out_of_core"  # the format of the warning naming the sections left out


def slices_of(span: tuple[int, int], cuts: list[int]) -> list[tuple[int, int]]:
    """The slices ``[start, end)`` of a rank spanning ``span`` (first start, last end) cut at ``cuts``."""
    inner = sorted({int(c) for c in cuts if span[0] < c <= span[1]})
    bounds = [span[0], *inner, span[1] + 1]  # + 1: an instant at the very end belongs to the last slice
    return list(itertools.pairwise(bounds))


def step_cuts(steps: list[tuple[int, int]], sizes: list[tuple[int, int]] | None = None, budget: int = 0) -> list[int]:
    """Where to cut a rank with profiled ``steps`` (start, end): at the starts of steps only (a rank without
    steps: at the starts of its time parts, ``sizes``: (first start, weight) of each); every candidate without ``sizes``, else as few as keep each slice near ``budget`` of weight (a
    slice holds at least one candidate's stretch, whatever it weighs). A step is never cut: the phase split
    reads each step whole (docs/scale.md)."""
    starts = sorted({s for s, _ in steps})
    spans = sorted(steps)
    candidates = set(starts[1:])
    if not spans:  # between steps a cut can move the critical path's window path (docs/critical_path.md)
        candidates.update(t for t, _ in sizes or [])
    ordered = sorted(candidates)
    if not sizes:
        return ordered
    parts = sorted(sizes)
    part_start = np.array([s for s, _ in parts], np.int64)
    weight = np.r_[0, np.cumsum([b for _, b in parts])]

    def before(t: float) -> int:  # the weight of the parts starting before t
        return int(weight[np.searchsorted(part_start, t, side="left")])

    cuts: list[int] = []
    last = 0
    for prev, t in zip([None, *ordered], [*ordered, float("inf")], strict=True):  # inf: the last slice's end
        if prev is not None and before(t) - last > budget:
            cuts.append(prev)
            last = before(prev)
    return cuts


def host_steps(trace: Trace) -> list[tuple[int, int]]:
    """(start, end) of the profiled steps of a (slice of a) rank."""
    steps = select(trace.system_events, "category", "step")
    return [(int(t), int(t + d)) for t, d in zip(steps["ts_ns"].to_pylist(), steps["dur_ns"].to_pylist(),
                                                 strict=True)]


def host_step_starts(trace: Trace) -> list[int]:
    """The starts of the profiled steps of a (slice of a) rank."""
    steps = select(trace.system_events, "category", "step")
    return [int(t) for t in steps["ts_ns"].to_pylist()]


def diagnose_sliced(trace: Trace, cuts: list[int], options: Options | None = None) -> RankResult:
    """The in-memory reference of slicing: one rank's ``trace`` cut at ``cuts``, each slice diagnosed alone
    and the slices merged (equal to ``diagnose_rank(trace)`` for cuts at step starts; docs/scale.md)."""
    return diagnose_slices(lambda owned: slice_of(trace, owned), slices_of(trace_span(trace), cuts), options)


def diagnose_slices(read: Reader, slices: list[tuple[int, int]], options: Options | None = None, *,
                    progress: Progress = no_progress, halo: int | None = None) -> RankResult:
    """One rank from ``read`` (the events overlapping a slice) over ``slices`` (in time order); each slice's
    analysis reads its instants widened by ``halo`` ns on both sides (what it owns stays its instants): by default
    the plan's, which its first pass found (``RankPlan.halo_ns``, analysis/slice_reach.py)."""
    options = options or Options()
    progress("planning the slices", 0, len(slices))
    plan = plan_rank(read, slices, options.window)
    parts: list[RankResult] = []
    for i, owned in enumerate(slices):
        progress("diagnosing slice by slice", i, len(slices))
        margin = plan.halo_ns if halo is None else halo
        held = (owned[0] - margin, owned[1] + margin)
        parts.append(diagnose_rank(read(held), replace(options, owned=owned, plan=plan)))
    progress("diagnosing slice by slice", len(slices), len(slices))
    return merge_rank(parts, plan, options, _Describer(read, slices, plan, parts))


class _Describer:
    """Finds the events behind a stall joined across cuts, on the slices it spans, read again together."""

    def __init__(self, read: Reader, slices: list[tuple[int, int]], plan: RankPlan, parts: list[RankResult]):
        self.read, self.slices, self.plan, self.parts = read, slices, plan, parts

    def __call__(self, dp: DevicePlan, members: list[int], start: int, end: int, cause: str,
                 owner: LabelKey) -> Stall:
        owned = (self.slices[members[0]][0], self.slices[members[-1]][1])
        trace, _ = malformed.sanitize(self.read(owned), owned, self.plan)
        fallback = np.fromiter({i for k in members for op in self.parts[k].fallback_ops if op.charged
                                for i in op.event_ids}, np.int64)
        labels = planned_labels(trace, dp, self.plan, fallback)
        keys = label_keys(labels)
        k = keys.index(owner) if owner in keys else -1
        return describe(trace, labels, [(end - start, start, k, cause)], frame_sources(trace),
                        (dp.python_cutoff_ns,))[0]


def merge_rank(parts: list[RankResult], plan: RankPlan, options: Options, describer: _Describer) -> RankResult:
    """The rank's result from its slices' (in time order)."""
    devices = [_merge_device(dp, [d for p in parts for d in p.devices if (d.device, d.rank) == (dp.device, dp.rank)],
                             options, describer) for dp in plan.devices]
    left_out: list[str] = []
    for dev_section in registry.DEVICE_SECTIONS:
        if dev_section.merge is None:
            left_out.append(dev_section.key)
    sections: dict[str, Any] = {}
    for s in registry.SECTIONS:
        values = [p.sections[s.key] for p in parts if s.key in p.sections]
        if s.merge is None:
            left_out.append(s.key)
        elif values:
            value = s.merge(values)
            if value is not None:
                sections[s.key] = value
    warned = sections.get(load_warnings.SECTION.key, load_warnings.LoadWarnings())
    warned = load_warnings.with_checks(warned, sections.get(malformed.SECTION.key))
    if left_out:
        warned.items.append(load_warnings.LoadWarning("diagnose", OUT_OF_CORE, (
            f"diagnosed out of core, {len(parts)} time slices: {', '.join(left_out)} cannot be computed slice "
            f"by slice yet and are left out (docs/scale.md, 'diagnose DATASET')")))
    if warned.items or load_warnings.SECTION.key in sections:
        sections[load_warnings.SECTION.key] = warned
    origin = options.origin_ns if options.window is not None and options.origin_ns is not None else \
        min((d.window[0] for d in devices), default=None)
    first = parts[0]
    return RankResult(first.rank, first.inputs, devices, merge_slices([p.fallback_ops for p in parts]), sections,
                      first.synthetic, origin)


def _merge_device(dp: DevicePlan, slices: list[DeviceAttribution], options: Options,
                  describer: _Describer) -> DeviceAttribution:
    window = options.window or dp.window.span
    causes = dict.fromkeys(CAUSES, 0)
    detail: dict[str, int] = {}
    for d in slices:
        for c, v in d.causes_ns.items():
            causes[c] += v
        for k, v in d.detail_ns.items():
            detail[k] = detail.get(k, 0) + v
    detail = {k: detail[k] for k in sorted(detail, key=lambda k: detail_priority(*k.split(".", 1)))}
    rule = ("option", "--window", None, 0) if options.window else (dp.window.rule, dp.window.source,
                                                                   dp.window.lag_ns, dp.window.steps)
    out = DeviceAttribution(dp.device, dp.rank, window, rule[1], causes, detail, window_rule=rule[0],
                            window_steps=rule[3], device_lag_ns=rule[2])
    out.top_stalls = merge_stalls([(d.top_stalls, d.slice_stalls) for d in slices if d.slice_stalls is not None],
                                  options.top, lambda members, s, e, c, owner: describer(dp, members, s, e, c, owner))
    for ds in registry.DEVICE_SECTIONS:
        values = [d.sections[ds.key] for d in slices if ds.key in d.sections]
        if ds.merge is not None and values:
            value = ds.merge(values)
            if value is not None:
                out.sections[ds.key] = value
    out.check()
    return out
