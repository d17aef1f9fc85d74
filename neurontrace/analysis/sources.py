"""The line responsible for a stall: the innermost user frame active during it, and backward ops' forward source.

Two facts of torch.profiler's Python tracer shape this (docs/diagnose.md, "Sources"):

- a frame that was already running when profiling began is recorded at the line it was on then, which in a
  training loop is always the ``prof.step()`` line: the loop's own frame (``main``) says nothing about a stall.
  The frame that does is the innermost *user* frame active during the stall (a dataset's ``__getitem__``), so
  :class:`ActiveFrames` picks, among the user frames overlapping a stall, the deepest one that covers at least
  half as much of it as the frame covering most; a frame open since profiling began is shown without its line;
- backward ops run on the autograd engine with no Python stack of their own: their source is the forward op's,
  found through the forward→backward flows (:class:`BackwardSources`).

Never a frame of the profiler, of neurontrace's capture or of a benchmarking harness wrapping the model
(``names.OWN_FRAME``, ``names.HARNESS_FRAME``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from neurontrace.analysis import names
from neurontrace.analysis.labels import spans
from neurontrace.columns import codes, isin, row_codes, select
from neurontrace.trace import Trace

MIN_SHARE_OF_BEST = 0.5  # a deeper frame wins when it covers at least this share of what the best frame covers


def python_cutoff(py: pa.Table) -> int | None:
    """Where the stack already running when tracing began ends: the start of the first Python event (rows of
    ``py``) to end; None for fewer than two."""
    if py.num_rows <= 1:
        return None
    all_starts = py["ts_ns"].to_numpy()
    all_ends = all_starts + py["dur_ns"].to_numpy()
    return int(all_starts[int(np.argmin(all_ends))])


class ActiveFrames:
    """The user frames of a table of host events, to name the innermost one active in a time range."""

    def __init__(self, trace: Trace, table: pa.Table, cutoff: tuple[int | None] | None = None) -> None:
        """``cutoff``: on a time slice of a rank, (the whole rank's :func:`python_cutoff` of ``table``'s processes,)."""
        f = trace.frames
        ids = f["frame_id"].to_pylist()
        parent = dict(zip(ids, f["parent_id"].to_pylist(), strict=True))
        files = f["file"].cast(pa.string()).to_pylist()
        functions = f["function"].cast(pa.string()).to_pylist()
        self.text = {i: (f"{fl}:{ln} {fn}" if fl else str(fn)) for i, fl, ln, fn in zip(
            ids, files, f["line"].to_pylist(), functions, strict=True)}
        self.where = {i: (f"{fl} {fn}" if fl else str(fn)) for i, fl, fn in zip(ids, files, functions, strict=True)}
        ok = {i for i, user, fl in zip(ids, f["is_user"].to_pylist(), files, strict=True)
              if user and not (fl and (names.OWN_FRAME.search(fl) or names.HARNESS_FRAME.search(fl)))}
        self.depth = {i: _depth(i, parent) for i in ok}
        has_rows = table.num_rows and "frame_id" in table.column_names
        py = select(table, "category", "python") if has_rows else table.schema.empty_table()
        frame = py["frame_id"].fill_null(-1).to_numpy() if py.num_rows else np.zeros(0, np.int64)
        keep = np.isin(frame, np.fromiter(ok, np.int64, len(ok))) if ok else np.zeros(len(frame), bool)
        self.frame = frame[keep]
        self.start = py["ts_ns"].to_numpy()[keep] if py.num_rows else np.zeros(0, np.int64)
        self.end = self.start + (py["dur_ns"].to_numpy()[keep] if py.num_rows else 0)
        # The stack already running when tracing began is written first, before any call returns: the frames that
        # start before the first Python event to end (those are the calls made since).
        self.cutoff_ns: int | None = python_cutoff(py) if cutoff is None else cutoff[0]

    def innermost(self, lo: int, hi: int) -> str | None:
        """``file:line function`` of the innermost user frame active in [lo, hi), or None."""
        hit = np.flatnonzero((self.start < hi) & (self.end > lo))
        if not len(hit):
            return None
        overlap = np.minimum(self.end[hit], hi) - np.maximum(self.start[hit], lo)
        per: dict[int, int] = {}
        opened: dict[int, int] = {}
        for fid, ns, s in zip(self.frame[hit].tolist(), overlap.tolist(), self.start[hit].tolist(), strict=True):
            per[fid] = per.get(fid, 0) + ns
            opened[fid] = min(opened.get(fid, s), s)
        best = max(per.values())
        fid = max((f for f, ns in per.items() if ns >= MIN_SHARE_OF_BEST * best),
                  key=lambda f: (self.depth.get(f, 0), per[f]))
        if self.cutoff_ns is not None and opened[fid] < self.cutoff_ns:  # running before profiling began
            return f"{self.where[fid]} (running when profiling began: its recorded line is where it was then)"
        return self.text[fid]


def _depth(fid: int, parent: dict[int, int | None]) -> int:
    d, node = 0, parent.get(fid)
    while node is not None and d < 10_000:
        d, node = d + 1, parent.get(node)
    return d


class BackwardSources:
    """The forward op's frame for backward host events: the targets of forward→backward flows and the events
    nested in them on their thread. Built in a few vectorized passes; each query looks at the flow targets only."""

    def __init__(self, trace: Trace) -> None:
        host = trace.system_events
        self.ids = host["event_id"].to_numpy()
        self.order = np.argsort(self.ids, kind="stable")
        flows = select(trace.flows, "kind", "fwdbwd") if trace.flows.num_rows else trace.flows
        self.rows = np.zeros(0, dtype=np.int64)  # host rows of the backward ops (flow targets) ...
        self.fwd = np.zeros(0, dtype=np.int64)  # ... and the frame of their forward op
        if not flows.num_rows or not host.num_rows:
            return
        frame = host["frame_id"].fill_null(-1).to_numpy()
        src, dst = self._rows(flows["src_event_id"]), self._rows(flows["dst_event_id"])
        ok = (src >= 0) & (dst >= 0)
        ok[ok] &= frame[src[ok]] >= 0
        self.rows, self.fwd = dst[ok], frame[src[ok]]
        self.start, self.end = spans(host)
        self.thread = row_codes(codes(host["pid"])[0], codes(host["tid"])[0])
        self.python = isin(host["category"], ["python"])

    def _rows(self, col: pa.ChunkedArray) -> np.ndarray:
        want = col.fill_null(-1).to_numpy()
        if not len(self.ids):
            return np.full(len(want), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.ids[self.order], want), len(self.ids) - 1)
        found = self.ids[self.order][pos] == want
        return np.where(found, self.order[pos], -1).astype(np.int64)

    def frame_of(self, event_ids: list[int]) -> list[int | None]:
        """Per event id: its forward op's frame id when it is (inside) a backward op, else None."""
        if not len(self.rows):
            return [None] * len(event_ids)
        out: list[int | None] = []
        for r in self._rows(pa.chunked_array([pa.array(event_ids, pa.int64())])).tolist():
            if r < 0 or self.python[r]:
                out.append(None)
                continue
            b = self.rows
            around = np.flatnonzero((self.thread[b] == self.thread[r]) & (self.start[b] <= self.start[r])
                                    & (self.end[b] >= self.end[r]))
            out.append(int(self.fwd[around[np.argmax(self.start[b][around])]]) if len(around) else None)
        return out


def backward_frames(trace: Trace, event_ids: list[int]) -> dict[int, int]:
    """The forward op's frame id of each of ``event_ids`` that is (inside) a backward op."""
    found = BackwardSources(trace).frame_of(event_ids)
    return {e: f for e, f in zip(event_ids, found, strict=True) if f is not None}
