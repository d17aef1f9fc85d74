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
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from neurontrace.analysis import load_warnings, malformed, registry
from neurontrace.analysis.attribution import DeviceAttribution, detail_priority, planned_labels
from neurontrace.analysis.contract import DeviceSection, Options, Section
from neurontrace.analysis.diagnose import RankResult, diagnose_rank
from neurontrace.analysis.fallback import FallbackFold, finish_slices, fold_slices
from neurontrace.analysis.slice_plan import Reader, plan_rank
from neurontrace.analysis.slices import DevicePlan, RankPlan, slice_of
from neurontrace.analysis.stall_merge import LabelKey, StallFold, label_keys
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


def step_cuts(steps: list[tuple[int, int]], sizes: list[tuple[int, int]] | None = None, budget: int = 0,
              end: int | None = None) -> list[int]:
    """Where to cut a rank with profiled ``steps`` (start, end): at the starts of steps only (a rank without
    steps: at the starts of its time parts, ``sizes``: (first start, weight) of each; ``end``: the rank's last
    end); every candidate without ``sizes``, else as few as keep each slice near ``budget`` of weight (a
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
    part_end = np.r_[part_start[1:], max(end if end is not None else part_start[-1], part_start[-1])]
    part_weight = np.array([b for _, b in parts], np.float64)
    weight = np.r_[0, np.cumsum(part_weight)]

    def before(t: float) -> float:
        """The weight before t: the parts starting before it, the one it falls in pro rata of its time (up to the
        next part's start, or ``end``), so a slice holds about ``budget`` however much the parts weigh."""
        k = int(np.searchsorted(part_start, t, side="left"))
        if k == 0:
            return 0.0
        lo, hi = part_start[k - 1], part_end[k - 1]
        share = min(max((t - lo) / (hi - lo), 0.0), 1.0) if hi > lo else 1.0
        return float(weight[k - 1] + part_weight[k - 1] * share)

    cuts: list[int] = []
    last = 0.0
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
                    progress: Progress = no_progress, halo: int | None = None,
                    on_fold: Callable[[int, RankFold], None] | None = None) -> RankResult:
    """One rank from ``read`` (the events overlapping a slice) over ``slices`` (in time order); each slice's
    analysis reads its instants widened by ``halo`` ns on both sides (what it owns stays its instants): by default
    the plan's, which its first pass found (``RankPlan.halo_ns``, analysis/slice_reach.py). Each slice's result
    is folded into a :class:`RankFold` as soon as it is computed and dropped (``on_fold(k, fold)`` after slice
    ``k``: bench/fold_state.py)."""
    options = options or Options()
    progress("planning the slices", 0, len(slices))
    plan = plan_rank(read, slices, options.window)
    fold = RankFold(plan, options)
    for i, owned in enumerate(slices):
        progress("diagnosing slice by slice", i, len(slices))
        margin = plan.halo_ns if halo is None else halo
        held = (owned[0] - margin, owned[1] + margin)
        fold.add(diagnose_rank(read(held), replace(options, owned=owned, plan=plan)))
        if on_fold is not None:
            on_fold(i, fold)
    progress("diagnosing slice by slice", len(slices), len(slices))
    return fold.finish(_Describer(read, slices, plan))


class _Describer:
    """Finds the events behind a stall joined across cuts, on the slices it spans, read again together."""

    def __init__(self, read: Reader, slices: list[tuple[int, int]], plan: RankPlan):
        self.read, self.slices, self.plan = read, slices, plan

    def __call__(self, dp: DevicePlan, members: list[int], start: int, end: int, cause: str,
                 owner: LabelKey, fallback: np.ndarray) -> Stall:
        """``fallback``: the charged fallback event ids of those slices."""
        owned = (self.slices[members[0]][0], self.slices[members[-1]][1])
        trace, _ = malformed.sanitize(self.read(owned), owned, self.plan)
        labels = planned_labels(trace, dp, self.plan, fallback)
        keys = label_keys(labels)
        k = keys.index(owner) if owner in keys else -1
        return describe(trace, labels, [(end - start, start, k, cause)], frame_sources(trace),
                        (dp.python_cutoff_ns,))[0]


class _Folding:
    """One section's (or device section's) values over the slices: folded when it declares ``fold``, else held
    for its ``merge``."""

    def __init__(self, section: Section | DeviceSection) -> None:
        self.section, self.state, self.held, self.any = section, None, list[Any](), False
        self.folds = section.fold is not None and section.finish is not None

    def add(self, value: Any) -> None:
        self.any = True
        if self.folds:
            assert self.section.fold is not None
            self.state = self.section.fold(self.state, value)
        else:
            self.held.append(value)

    def finish(self) -> Any:
        if self.folds:
            assert self.section.finish is not None
            return self.section.finish(self.state)
        assert self.section.merge is not None
        return self.section.merge(self.held)


class _DeviceFold:
    """One planned device's running state: causes and details summed, stalls, device sections."""

    def __init__(self, dp: DevicePlan, top: int) -> None:
        self.dp = dp
        self.causes = dict.fromkeys(CAUSES, 0)
        self.detail: dict[str, int] = {}
        self.stalls = StallFold(top)
        self.sections = {ds.key: _Folding(ds) for ds in registry.DEVICE_SECTIONS if ds.merge is not None}

    def add(self, k: int, d: DeviceAttribution, fallback: np.ndarray) -> None:
        for c, v in d.causes_ns.items():
            self.causes[c] += v
        for key, v in d.detail_ns.items():
            self.detail[key] = self.detail.get(key, 0) + v
        if d.slice_stalls is not None:
            self.stalls.add(k, d.top_stalls, d.slice_stalls, fallback)
        for key, f in self.sections.items():
            if key in d.sections:
                f.add(d.sections[key])


class RankFold:
    """One rank's result folded slice by slice, in time order (:func:`diagnose_slices`): attribution summed,
    stalls joined across cuts (analysis/stall_merge.StallFold), fallback ops (fallback.fold_slices), each
    section by its ``fold`` (or its values held for its ``merge``). A slice's result is not kept."""

    def __init__(self, plan: RankPlan, options: Options) -> None:
        self.plan, self.options = plan, options
        self.devices = {(dp.device, dp.rank): _DeviceFold(dp, options.top) for dp in plan.devices}
        self.sections = {s.key: _Folding(s) for s in registry.SECTIONS if s.merge is not None}
        self.fallback: FallbackFold | None = None
        self.first: RankResult | None = None
        self.count = 0

    def add(self, part: RankResult) -> None:
        """The next slice's result (in time order)."""
        k = self.count
        self.count += 1
        if self.first is None:
            self.first = RankResult(part.rank, part.inputs, [], [], {}, part.synthetic)
        ids = np.fromiter({i for op in part.fallback_ops if op.charged for i in op.event_ids}, np.int64)
        self.fallback = fold_slices(self.fallback, part.fallback_ops)
        for d in part.devices:
            got = self.devices.get((d.device, d.rank))
            if got is not None:
                got.add(k, d, ids)
        for key, f in self.sections.items():
            if key in part.sections:
                f.add(part.sections[key])

    def finish(self, describer: _Describer) -> RankResult:
        """The rank's result from the slices folded in."""
        assert self.first is not None, "a rank of no slices"
        options = self.options
        devices = [self._device(f, describer) for f in self.devices.values()]
        left_out = [ds.key for ds in registry.DEVICE_SECTIONS if ds.merge is None]
        sections: dict[str, Any] = {}
        for s in registry.SECTIONS:
            f = self.sections.get(s.key)
            if f is None:
                left_out.append(s.key)
            elif f.any:
                value = f.finish()
                if value is not None:
                    sections[s.key] = value
        warned = sections.get(load_warnings.SECTION.key, load_warnings.LoadWarnings())
        warned = load_warnings.with_checks(warned, sections.get(malformed.SECTION.key))
        if left_out:
            warned.items.append(load_warnings.LoadWarning("diagnose", OUT_OF_CORE, (
                f"diagnosed out of core, {self.count} time slices: {', '.join(left_out)} cannot be computed slice "
                f"by slice yet and are left out (docs/scale.md, 'diagnose DATASET')")))
        if warned.items or load_warnings.SECTION.key in sections:
            sections[load_warnings.SECTION.key] = warned
        origin = options.origin_ns if options.window is not None and options.origin_ns is not None else \
            min((d.window[0] for d in devices), default=None)
        first = self.first
        return RankResult(first.rank, first.inputs, devices, finish_slices(self.fallback), sections,
                          first.synthetic, origin)

    def _device(self, f: _DeviceFold, describer: _Describer) -> DeviceAttribution:
        dp, options = f.dp, self.options
        window = options.window or dp.window.span
        detail = {k: f.detail[k] for k in sorted(f.detail, key=lambda k: detail_priority(*k.split(".", 1)))}
        rule = ("option", "--window", None, 0) if options.window else (dp.window.rule, dp.window.source,
                                                                       dp.window.lag_ns, dp.window.steps)
        out = DeviceAttribution(dp.device, dp.rank, window, rule[1], dict(f.causes), detail, window_rule=rule[0],
                                window_steps=rule[3], device_lag_ns=rule[2])
        out.top_stalls = f.stalls.finish(lambda members, s, e, c, owner, ids: describer(dp, members, s, e, c, owner,
                                                                                          ids))
        for key, sf in f.sections.items():
            if sf.any:
                value = sf.finish()
                if value is not None:
                    out.sections[key] = value
        out.check()
        return out
