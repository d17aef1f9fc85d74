"""Unrelated runs loaded together: refused, never stitched into one timeline.

Files of one job carry ranks, and the processes of one run overlap in time (a training process and its
data-loader workers, a launcher and its worker). Several inputs whose processes form time-disjoint groups and
that carry no rank are separate runs (two profiles dropped in one directory, on different clock bases): one
analysis would stitch their steps into one device. So are two captures of the same rank made by different
processes at different times (two ``neurontrace record`` runs into one directory: both rank 0), which would be
merged into one "rank 0". :func:`check_one_run` raises :class:`MixedRunsError` naming the files; diagnose each on
its own, or load them as ranks of one job. Recording windows of one process (a capture's start-up and steady
files) share its pid and are one run.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow.compute as pc

from neurontrace.columns import of_rank, select
from neurontrace.errors import MixedRunsError
from neurontrace.trace import Trace
from neurontrace.units import duration

WORK = ("framework_op", "runtime", "driver", "python", "compile", "load")


def process_groups(trace: Trace, rank: int | None = None) -> list[tuple[int, int, list[str]]]:
    """(start, end, pids) of each group of processes whose host activity overlaps in time, in time order
    (of one rank's events when ``rank`` is given)."""
    # Work events only: Kineto's pseudo-processes ("Spans", "Traces") hold markers of every file's recording.
    host = select(trace.system_events if rank is None else of_rank(trace.system_events, rank), "category", *WORK)
    if host.num_rows == 0:
        return []
    spans = host.group_by("pid").aggregate([("ts_ns", "min"), ("ts_ns", "max")]).to_pylist()
    spans.sort(key=lambda r: r["ts_ns_min"])
    groups: list[tuple[int, int, list[str]]] = []
    for r in spans:
        lo, hi, pid = int(r["ts_ns_min"]), int(r["ts_ns_max"]), str(r["pid"])
        if groups and lo <= groups[-1][1]:
            glo, ghi, pids = groups[-1]
            groups[-1] = (glo, max(ghi, hi), [*pids, pid])
        else:
            groups.append((lo, hi, [pid]))
    return groups


def check_one_run(trace: Trace) -> None:
    """Raise MixedRunsError when several rank-less inputs hold time-disjoint groups of processes."""
    sources = [a.source for a in trace.accounting]
    if len(set(sources)) < 2:
        return
    ranks = np.concatenate([pc.drop_null(t["rank"]).to_numpy() for t in (trace.system_events, trace.device_events)])
    if len(ranks):
        for rank in np.unique(ranks).tolist():
            _check_one_rank(trace, int(rank), sources)
        return
    groups = process_groups(trace)
    if len(groups) < 2:
        return
    gaps = ", ".join(f"processes {'/'.join(g[2][:3])} at +{duration(g[0] - groups[0][0])}" for g in groups[:4])
    raise MixedRunsError(
        f"the inputs hold {len(groups)} unrelated runs (no ranks; {gaps}: their processes never overlap in "
        f"time, so their clocks or runs differ) in {len(set(sources))} files: {', '.join(sorted(set(sources))[:6])}. "
        "One analysis would stitch their steps into one device: diagnose each file on its own, or give the files "
        "ranks (torch.distributed writes distributedInfo) if they are one job")


def _check_one_rank(trace: Trace, rank: int, sources: list[str]) -> None:
    """One rank's events from processes that never overlap in time and share no pid: two runs of that rank."""
    groups = process_groups(trace, rank)
    for a, b in itertools.pairwise(groups):
        if not set(a[2]) & set(b[2]):
            raise MixedRunsError(
                f"rank {rank} comes from two unrelated runs: processes {'/'.join(a[2][:3])} and then, "
                f"{duration(b[0] - a[1])} after they end, processes {'/'.join(b[2][:3])}, which never overlap "
                f"in time (in {len(set(sources))} files: {', '.join(sorted(set(sources))[:6])}). Two captures of "
                "one rank (two `neurontrace record` runs into one directory, say) would be merged into one rank: "
                "diagnose each capture directory on its own")
