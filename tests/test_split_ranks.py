"""Trace.split_ranks: one Trace per rank, by slices when the rows already come rank by rank."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import neurontrace
from tests.conftest import SAMPLES


def test_split_ranks_whether_or_not_the_rows_come_rank_by_rank() -> None:
    """A job loaded rank file by rank file holds each rank's rows together (in whatever order the files
    came), and is sliced without a copy; interleaved ranks are sorted first: either way each part is exactly
    that rank's rows, in trace order."""
    job = neurontrace.load(SAMPLES / "gloo_8rank")
    order = np.argsort(job.system_events["ts_ns"].to_numpy(), kind="stable")  # ranks interleaved in time
    shuffled = neurontrace.Trace(system_events=job.system_events.take(pa.array(order)),
                                 device_events=job.device_events, flows=job.flows, counters=job.counters,
                                 frames=job.frames, metadata=job.metadata)
    rank = job.system_events["rank"].to_numpy()
    blocks = np.argsort(-rank, kind="stable")  # each rank's rows together, the ranks in reverse (rank-10 before rank-2)
    reversed_ = neurontrace.Trace(system_events=job.system_events.take(pa.array(blocks)),
                                  device_events=job.device_events, flows=job.flows, counters=job.counters,
                                  frames=job.frames, metadata=job.metadata)
    for trace in (job, shuffled, reversed_):
        parts = trace.split_ranks()
        assert len(parts) == 8
        for rank, part in enumerate(parts):
            want = trace.system_events.filter(pc.equal(trace.system_events["rank"], rank))
            assert part.system_events.equals(want)
