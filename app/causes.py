"""Where each attribution cause holds, as intervals: what the timeline's cause row draws.

``diagnose`` reports totals per cause; the viewer also needs *where* each cause held, to draw a
per-device attribution row and to highlight a cause's intervals when its part of the summary bar is
clicked. The intervals come from the same labels and priority order as the totals (the label
builders of :mod:`neurontrace.analysis.attribution`) cut by one :func:`~neurontrace.analysis.intervals.sweep`
of the window, so per cause they add up to exactly the totals ``diagnose`` reports
(tests/test_app_model.py checks it on every sample).

Pure numpy/Arrow; no Dash.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis import attribution as attr
from neurontrace.analysis._columns import select
from neurontrace.analysis.intervals import NONE, sweep
from neurontrace.trace import Trace

CAUSES: tuple[str, ...] = attr.CAUSES


@dataclass
class CauseRuns:
    """Maximal runs of one (cause, detail) over a device's window, sorted and disjoint."""

    device: str
    rank: int | None
    window: tuple[int, int]  # absolute ns
    starts: np.ndarray  # int64 absolute ns
    ends: np.ndarray
    cause: np.ndarray  # int16 index into CAUSES
    detail: np.ndarray  # int16 index into details
    details: list[str]  # "cause.detail"
    _by_cause: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    def total_ns(self) -> dict[str, int]:
        per = np.zeros(len(CAUSES), dtype=np.int64)
        np.add.at(per, self.cause.astype(np.int64), self.ends - self.starts)  # exact integer sums
        return {c: int(v) for c, v in zip(CAUSES, per.tolist(), strict=True)}

    def of_cause(self, cause: str) -> tuple[np.ndarray, np.ndarray]:
        """The runs of one cause (sorted, disjoint); computed once per cause."""
        if cause not in self._by_cause:
            keep = self.cause == CAUSES.index(cause)
            self._by_cause[cause] = (self.starts[keep], self.ends[keep])
        return self._by_cause[cause]


def cause_runs(trace: Trace, device: str, rank: int | None, window: tuple[int, int],
               fallback_event_ids: Sequence[int] = ()) -> CauseRuns:
    """The runs of every cause over ``window`` for ``device`` of ``rank`` (as ``attribute`` selects them;
    ``"cpu"`` for a trace without a device)."""
    fallback = np.asarray(list(fallback_event_ids), dtype=np.int64)
    dev_table = trace.device_events
    if device == attr.CPU_DEVICE and not select(dev_table, "device", device).num_rows:
        host = _of_rank(trace.system_events, rank)
        ops = select(host, "category", "framework_op")
        s = ops["ts_ns"].to_numpy()
        labels = [attr._Label("compute", "cpu_ops", s, s + ops["dur_ns"].to_numpy(), ops, np.arange(ops.num_rows))]
        labels += attr._host_labels(host, fallback)
    else:
        dev = _of_rank(select(dev_table, "device", device), rank)
        host = attr.driving_host_events(trace, dev)
        labels = attr._device_labels(dev) + attr._host_labels(host, fallback)
    labels = attr._ordered(labels)
    result = sweep(window, [(lb.starts, lb.ends) for lb in labels])
    starts, ends, label = result.runs()
    details = [f"{lb.cause}.{lb.detail}" for lb in labels] + ["idle.unexplained"]
    label = np.where(label == NONE, len(labels), label)
    cause_of_label = np.array([CAUSES.index(lb.cause) for lb in labels] + [CAUSES.index("idle")], dtype=np.int16)
    # Neighbouring runs of different labels but the same detail text (two labels can share one) merge.
    detail_names = list(dict.fromkeys(details))
    detail_of_label = np.array([detail_names.index(d) for d in details], dtype=np.int16)
    det = detail_of_label[label]
    if len(det):
        new = np.r_[True, det[1:] != det[:-1]]
        first = np.flatnonzero(new)
        last = np.r_[first[1:], len(det)] - 1
        starts, ends, label = starts[first], ends[last], label[first]
    return CauseRuns(device, rank, window, starts.astype(np.int64), ends.astype(np.int64),
                     cause_of_label[label], detail_of_label[label], detail_names)


def _of_rank(table: pa.Table, rank: int | None) -> pa.Table:
    """Rows of ``rank`` (rows without a rank when ``rank`` is None), as ``attribute`` splits devices."""
    mask = pc.is_null(table["rank"]) if rank is None else pc.fill_null(pc.equal(table["rank"], rank), False)
    return table.filter(mask)
