"""Top stalls and their sources: the longest stretches of one non-compute cause, the events that explain
each, and the user's line behind them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from neurontrace import units
from neurontrace.analysis import names
from neurontrace.analysis.intervals import NONE, gaps, sweep, union, within
from neurontrace.analysis.labels import Label
from neurontrace.analysis.sources import ActiveFrames, BackwardSources
from neurontrace.causes import CAUSES
from neurontrace.trace import Trace

MAX_GAPS_PER_STALL = 20  # how many compute gaps per requested stall the stall search examines at most
MIN_STALL_NS = 1_000  # shorter stretches are the seams between back-to-back kernels, not stalls
TOP_STALLS = 10  # the longest stalls each device reports unless asked for another number
HOST_CAUSES = ("host_fallback", "host_overhead")  # stalls whose line is the innermost user frame then active


@dataclass
class Stall:
    cause: str
    detail: str
    start_ns: int
    dur_ns: int
    evidence: list[str]
    source: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"cause": self.cause, "detail": self.detail, "start_ns": self.start_ns, "dur_ns": self.dur_ns,
                "evidence": self.evidence, "source": self.source}


def top_stalls(trace: Trace, win: tuple[int, int], labels: list[Label],
                unions: list[tuple[np.ndarray, np.ndarray]], top: int,
                frames: dict[int, str] | None = None, cutoff: tuple[int | None] | None = None) -> list[Stall]:
    """The longest stretches of one non-compute cause, with the events that explain them.

    Stalls live in the gaps between compute. Gaps are visited longest first and cut into runs of
    one cause by an exact sweep of the gaps alone. The visit stops once no remaining gap can hold
    a run longer than the shortest of the ``top`` runs found (then the answer is exact), or after
    ``MAX_GAPS_PER_STALL * top`` gaps (then they are the longest runs within the longest gaps).
    """
    gs, ge = compute_gaps(win, labels, unions)
    runs: list[tuple[int, int, int, str]] = []  # (length, start, label index or NONE, cause)
    longest = _longest(ge - gs, MAX_GAPS_PER_STALL * top)
    for gi, found in _gap_runs(longest, gs, ge, labels, unions, top):
        if len(runs) >= top and ge[gi] - gs[gi] <= runs[top - 1][0]:
            break
        runs += [r for r in found if r[0] >= MIN_STALL_NS]
        runs.sort(key=lambda r: (-r[0], r[1]))
        del runs[top:]
    return describe(trace, labels, runs, frames, cutoff)


def compute_gaps(win: tuple[int, int], labels: list[Label], unions: list[tuple[np.ndarray, np.ndarray]]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The gaps of ``win`` between compute (the labels of cause compute), where stalls live."""
    compute = [u for lb, u in zip(labels, unions, strict=True) if lb.cause == "compute" and len(u[0])]
    if len(compute) == 1:  # a single label's union is already the union of compute
        cs, ce = compute[0]
    else:
        empty = [np.zeros(0, dtype=np.int64)]
        cs, ce = union(np.concatenate([u[0] for u in compute] + empty),
                       np.concatenate([u[1] for u in compute] + empty))
    return gaps(win, cs, ce)


def describe(trace: Trace, labels: list[Label], runs: list[tuple[int, int, int, str]],
             frames: dict[int, str] | None = None, cutoff: tuple[int | None] | None = None) -> list[Stall]:
    """The stalls of ``runs`` ((length, start, label index or NONE, cause), in report order): each with the
    events of its label that explain it and the user's line behind them. ``cutoff``: on a time slice of a rank,
    (the whole rank's sources.python_cutoff,)."""
    frames = frame_sources(trace) if frames is None else frames
    active: dict[int, ActiveFrames] = {}  # per host table (one per device): its user frames
    backward = BackwardSources(trace) if runs else None
    out = []
    for length, start, k, cause in runs:
        lb = labels[k] if k != NONE else None
        evidence, source, from_backward = _evidence(lb, start, start + length, frames, backward)
        own = bool(evidence) and bool(names.OWN_FRAME.search(evidence[0]))  # the profiler's own step(): no line
        if lb is not None and lb.cause in HOST_CAUSES and not from_backward and not own:
            table = active.setdefault(id(lb.table), ActiveFrames(trace, lb.table, cutoff))
            source = table.innermost(start, start + length) or source
        out.append(Stall(cause, lb.detail if lb else "unexplained", start, length, evidence, source))
    return out


def _longest(values: np.ndarray, n: int) -> np.ndarray:
    """Positions of the ``n`` largest values, largest first, ties in position order (as a stable sort
    of all of them would give), without sorting all of them."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    candidates = np.arange(len(values))
    if n < len(values):  # keep those at least as large as the n-th largest, ties included
        candidates = np.flatnonzero(values >= np.partition(values, len(values) - n)[len(values) - n])
    return candidates[np.argsort(-values[candidates], kind="stable")][:n]


def _gap_runs(order: np.ndarray, gs: np.ndarray, ge: np.ndarray, labels: list[Label],
              unions: list[tuple[np.ndarray, np.ndarray]], batch: int
              ) -> Iterator[tuple[int, list[tuple[int, int, int, str]]]]:
    """(gap index, its runs) for the gaps in ``order``. Gaps are cut in batches of doubling size:
    one sweep per batch rather than per gap, while a visit that stops early cuts few gaps it did not need."""
    done = 0
    while done < len(order):
        visit = order[done:done + batch]
        yield from zip(visit.tolist(), _runs_in(gs[visit], ge[visit], labels, unions), strict=True)
        done += len(visit)
        batch *= 2


def _runs_in(lo: np.ndarray, hi: np.ndarray, labels: list[Label],
             unions: list[tuple[np.ndarray, np.ndarray]]) -> list[list[tuple[int, int, int, str]]]:
    """Runs of one cause inside each gap [lo[i], hi[i]); each named after the label owning most of it.

    One sweep cuts all the gaps: each label is cut to the gaps, and the gaps themselves come last,
    as the idle label, so time outside every gap stays NONE and no run crosses a gap's edge.
    """
    at = np.argsort(lo)  # the gaps (disjoint, never touching) in time order
    los, his = lo[at], hi[at]
    idle = len(labels)
    cut = [within(us, ue, los, his) for us, ue in unions] + [(los, his)]
    start, end, label = sweep((int(los[0]), int(his[-1])), cut).runs()
    inside = label != NONE
    start, end, label = start[inside], end[inside], label[inside]
    gap = np.searchsorted(los, start, side="right") - 1  # the gap (in time order) of each run
    cause = np.array([CAUSES.index(lb.cause) for lb in labels] + [CAUSES.index("idle")])[label]
    # A run: consecutive sweep runs of one gap and one cause.
    new = np.r_[True, (gap[1:] != gap[:-1]) | (cause[1:] != cause[:-1])]
    first = np.flatnonzero(new)
    last = np.r_[first[1:], len(new)] - 1
    # Its owner: the label with the most time in it; a tie goes to the label appearing first.
    run = np.cumsum(new) - 1
    pair, seen, which = np.unique(run * (idle + 1) + label, return_index=True, return_inverse=True)
    total = np.zeros(len(pair), dtype=np.int64)  # time per (run, label)
    np.add.at(total, which.reshape(-1), end - start)
    pair_run, pair_label = np.divmod(pair, idle + 1)
    best = np.lexsort((seen, -total, pair_run))  # per run: most time first, then first seen
    owner = pair_label[best[np.r_[True, np.diff(pair_run[best]) != 0]]]
    out: list[list[tuple[int, int, int, str]]] = [[] for _ in range(len(lo))]
    for g, s, e, k, c in zip(gap[first].tolist(), start[first].tolist(), end[last].tolist(), owner.tolist(),
                             cause[first].tolist(), strict=True):  # the runs found (a handful per gap)
        out[int(at[g])].append((e - s, s, NONE if k == idle else k, CAUSES[c]))
    return out


def _evidence(lb: Label | None, lo: int, hi: int, frames: dict[int, str],
              backward: BackwardSources | None) -> tuple[list[str], str | None, bool]:
    """(the events explaining [lo, hi), the source of the best of them, whether that source is a backward op's
    forward source)."""
    if lb is None:
        return ["no device or host activity recorded"], None, False
    hit = np.flatnonzero((lb.starts < hi) & (lb.ends > lo))
    if not len(hit):
        return [], None, False
    overlap = np.minimum(lb.ends[hit], hi) - np.maximum(lb.starts[hit], lo)
    # Score overlap²/duration: events that cover much of the stall and little else are the most
    # specific (an innermost Python frame beats <module>, which covers everything).
    score = overlap.astype(np.float64) ** 2 / np.maximum(lb.ends[hit] - lb.starts[hit], 1)
    best = hit[np.argsort(-score, kind="stable")[:3]]
    picked = lb.table.select(["name", "frame_id", "event_id"]).take(pa.array(lb.rows[best]))
    evidence = [f"{n} ({units.duration(int(e - s))})" for n, s, e in
                zip(picked["name"].cast(pa.string()).to_pylist(), lb.starts[best], lb.ends[best], strict=True)]
    if names.OWN_FRAME.search(evidence[0]):  # inside capture.step() / torch.profiler: not the user's line
        return evidence, None, False
    # A backward op's line is its forward op's (forward→backward flows): the autograd engine has no stack.
    ids = picked["event_id"].to_pylist()
    forward = [f for f in (backward.frame_of(ids) if backward and lb.cause in HOST_CAUSES else []) if f is not None]
    if forward and forward[0] in frames:
        return evidence, frames[forward[0]], True
    source = next((frames[f] for f in picked["frame_id"].to_pylist() if f is not None and f in frames), None)
    return evidence, source, False


def frame_sources(trace: Trace) -> dict[int, str]:
    """Per frame id: "file:line function" of its nearest user-code frame (itself, or a caller)."""
    f = trace.frames
    parent = dict(zip(f["frame_id"].to_pylist(), f["parent_id"].to_pylist(), strict=True))
    user = dict(zip(f["frame_id"].to_pylist(), f["is_user"].to_pylist(), strict=True))
    text = {fid: (f"{file_}:{line} {fn}" if file_ else str(fn)) for fid, file_, line, fn in zip(
        f["frame_id"].to_pylist(), f["file"].cast(pa.string()).to_pylist(), f["line"].to_pylist(),
        f["function"].cast(pa.string()).to_pylist(), strict=True)}
    out = {}
    for fid, own in text.items():
        node: int | None = fid
        while node is not None and not user.get(node):
            node = parent.get(node)
        out[fid] = text[node] if node is not None else own
    return out
