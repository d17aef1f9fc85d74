"""Who drives a device: the host process(es) that launched its work, and each device event's launching call.

Kineto writes device events under the device's own pid, not the launcher's, and correlation ids repeat
across ranks and processes: links are launch flows first (exact event ids), then correlation ids within
the rank and, where known, the launching process.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis.table_memo import per_table
from neurontrace.columns import codes, isin, keep, of_rank, row_codes, select
from neurontrace.trace import Trace

LINK_SAMPLE = 4096  # correlation ids sampled to find the processes driving a device


def driving_host_events(trace: Trace, dev: pa.Table) -> pa.Table:
    """Host events of the process(es) that launched this device's work.

    Found through correlation ids (runtime call ↔ device op). Without any link, the host events of
    the same rank stand in (a CPU-side profile of a Neuron device, a GPU-only trace). Without the
    ``args`` column: the analyses read names, times and links, and a copy of ``args`` is most of a rank.
    """
    host = trace.system_events.drop_columns(["args"])
    rank = _first(dev["rank"])
    if rank is not None:  # correlation ids repeat across ranks: look only at this rank's host events
        host = of_rank(host, rank)
    src = launch_sources(trace, dev)  # launch flows name their host end exactly (no id collisions)
    if len(src):
        linked = host.filter(pa.array(np.isin(host["event_id"].to_numpy(), src)))
        pids = [p for p in pc.unique(linked["pid"].cast(pa.string())).to_pylist() if p is not None]
        if pids:
            return _of_pids(trace, host, rank, pids)
    corr = dev["correlation"].drop_null()
    if len(corr) > LINK_SAMPLE:  # a few thousand links name the driving processes as well as all do
        corr = corr.take(pa.array(np.linspace(0, len(corr) - 1, LINK_SAMPLE).astype(np.int64)))
    if len(corr):
        linked = host.filter(pc.fill_null(pc.is_in(host["correlation"], pc.unique(corr)), False))
        pids = [p for p in pc.unique(linked["pid"].cast(pa.string())).to_pylist() if p is not None]
        if pids:
            return _of_pids(trace, host, rank, pids)
    return host


def _of_pids(trace: Trace, host: pa.Table, rank: int | None, pids: list[str]) -> pa.Table:
    """The rows of ``host`` (the trace's host events of ``rank``, no args) of ``pids``: filtered once per trace
    for every section that asks for the same rank and processes (attribution, dominant, overlap)."""
    key = f"driving host events {rank!r} {sorted(set(pids))!r}"
    return per_table(trace.system_events, key, lambda: keep(host, isin(host["pid"], pids)))


def launch_sources(trace: Trace, dev: pa.Table) -> np.ndarray:
    """Host event ids of the launch flows that end on an event of ``dev`` (empty without flows)."""
    flows = trace.flows
    if flows.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    launch = select(flows, "kind", "launch")
    dst = launch["dst_event_id"].fill_null(-1).to_numpy()
    hit = np.isin(dst, dev["event_id"].to_numpy())
    return np.asarray(launch["src_event_id"].fill_null(-1).to_numpy()[hit], dtype=np.int64)


def correlation_calls(host: pa.Table, flows: pa.Table, dev: pa.Table, calls: np.ndarray) -> np.ndarray:
    """Per row of ``dev``, the row of ``host`` among ``calls`` with its correlation id, or -1.

    Correlation ids repeat across ranks, and across processes of one rank when files are merged without
    ranks, so the key is (rank, pid, correlation) where the device row's launching process is known, else
    (rank, correlation). Kineto writes device events under the device's own pid, not the launcher's: the
    process is known only through launch flows, the row's own or, for a row without one, those of the other
    work on its device when they all come from one process (``launching_pids``)."""
    out = np.full(dev.num_rows, -1, dtype=np.int64)
    if dev.num_rows == 0 or len(calls) == 0:
        return out
    pid_h, pid_d = launching_pids(host, flows, dev)

    def ints(t: pa.Table, col: str) -> np.ndarray:
        return np.asarray(pc.fill_null(t[col], -1).to_numpy(zero_copy_only=False), dtype=np.int64)

    hc, hr, dc, dr = ints(host, "correlation")[calls], ints(host, "rank")[calls], ints(dev, "correlation"), ints(
        dev, "rank")
    for known in (True, False):
        q = np.flatnonzero((pid_d >= 0) == known)
        if not len(q):
            continue
        by_pid = np.r_[pid_h[calls], pid_d[q]] if known else np.zeros(len(calls) + len(q), np.int64)
        key = row_codes(np.r_[hr, dr[q]], by_pid, np.r_[hc, dc[q]])
        src, qk = key[:len(calls)], key[len(calls):]
        order = np.argsort(src, kind="stable")  # the first call of a key wins, as before
        pos = np.minimum(np.searchsorted(src[order], qk), len(order) - 1)
        hit = (src[order][pos] == qk) & (dc[q] >= 0) & (hc[order][pos] >= 0)
        out[q[hit]] = calls[order[pos[hit]]]
    return out


def device_groups(dev: pa.Table) -> np.ndarray:
    """One code per (rank, device) of each row of ``dev``: the devices of a job, every rank's cuda:0 its own."""
    return row_codes(pc.fill_null(dev["rank"], -1).to_numpy(zero_copy_only=False).astype(np.int64),
                     codes(dev["device"])[0].astype(np.int64))


def launching_pids(host: pa.Table, flows: pa.Table, dev: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(a code per ``host`` row for its pid, the code of the launching process per ``dev`` row or -1).

    A device row's process: the host end of its own launch flow; else the one process whose launch flows end
    on its (rank, device), when there is exactly one; else unknown."""
    pid_h = codes(host["pid"])[0].astype(np.int64) if host.num_rows else np.zeros(0, np.int64)
    pid_d = np.full(dev.num_rows, -1, dtype=np.int64)
    if flows.num_rows == 0 or dev.num_rows == 0 or host.num_rows == 0:
        return pid_h, pid_d
    launch = select(flows, "kind", "launch")
    src = launch["src_event_id"].fill_null(-1).to_numpy()
    dst = launch["dst_event_id"].fill_null(-1).to_numpy()
    h_ids, d_ids = host["event_id"].to_numpy(), dev["event_id"].to_numpy()
    h_order, d_order = np.argsort(h_ids, kind="stable"), np.argsort(d_ids, kind="stable")
    hp = np.minimum(np.searchsorted(h_ids[h_order], src), len(h_order) - 1)
    dp = np.minimum(np.searchsorted(d_ids[d_order], dst), len(d_order) - 1)
    ok = (h_ids[h_order][hp] == src) & (d_ids[d_order][dp] == dst)
    pid_d[d_order[dp[ok]]] = pid_h[h_order[hp[ok]]]
    group = device_groups(dev)
    for g in np.unique(group[pid_d < 0]).tolist():  # one pass per device without a flow on every row
        pids = np.unique(pid_d[(group == g) & (pid_d >= 0)])
        if len(pids) == 1:
            pid_d[(group == g) & (pid_d < 0)] = pids[0]
    return pid_h, pid_d


def _first(col: pa.ChunkedArray) -> int | None:
    vals = col.drop_null()
    return int(vals[0].as_py()) if len(vals) else None


# -- which CPU op launched each device event ---------------------------------------------------------------


AGREEMENT = 0.5  # External ids are trusted for the rows time cannot link only when they agree this often


@dataclass
class OpLinks:
    """Per device row: the host row of the CPU op that launched it (-1: none found), and how it was found."""

    op: np.ndarray
    by: np.ndarray  # LINKED_BY index per row
    agree: int  # rows whose External id names the op time found ...
    disagree: int  # ... and rows whose External id names another op (renumbered ids: time wins)

    def counts(self) -> dict[str, int]:
        """Rows per way of linking, and the External id checks (the ops report's ``links``)."""
        out = {name: int((self.by == i).sum()) for i, name in enumerate(LINKED_BY)}
        out["external id agreed"], out["external id disagreed"] = self.agree, self.disagree
        return out


LINKED_BY = ("unlinked", "time", "external id")


def launching_ops(host: pa.Table, flows: pa.Table, dev: pa.Table) -> OpLinks:
    """The CPU op that launched each row of ``dev``.

    A device row is tied to its launch call by correlation within its process (``correlation_calls``), and the
    call to the innermost CPU op enclosing it on the launching thread by time. ``External id`` is a
    cross-check: profilers renumber the CPU ops' ids, or give kernels their correlation id as External id,
    and then it names the wrong op. It links a row only where time cannot (no call recorded, or no op
    encloses the call), when the op it names began before the launch, and when, on the rows both link, it
    names the op time found at least ``AGREEMENT`` of the time."""
    n = dev.num_rows
    op = np.full(n, -1, dtype=np.int64)
    by = np.zeros(n, dtype=np.int64)
    if n == 0 or host.num_rows == 0:
        return OpLinks(op, by, 0, 0)
    cat = host["category"]
    calls = np.flatnonzero(isin(cat, ["runtime", "driver"]))
    ops = np.flatnonzero(isin(cat, ["framework_op"]))
    call = correlation_calls(host, flows, dev, calls)
    has = call >= 0
    thread = host_threads(host)
    ts = host["ts_ns"].to_numpy()
    end = ts + host["dur_ns"].to_numpy()
    timed = np.full(n, -1, dtype=np.int64)
    if has.any() and len(ops):
        c = call[has]
        timed[has] = innermost_enclosing(thread, ts, end, ops, thread[c], ts[c], end[c])
    rank_h = _ints(host, "rank")
    ext_h = _ints(host, "external_id")
    ext = np.where(has, ext_h[np.maximum(call, 0)], _ints(dev, "external_id"))
    named = _lookup(np.c_[rank_h[ops], ext_h[ops]], ops,
                    np.c_[np.where(has, rank_h[np.maximum(call, 0)], _ints(dev, "rank")), ext])
    both = (timed >= 0) & (named >= 0)
    agree = int((timed[both] == named[both]).sum())
    disagree = int(both.sum()) - agree
    op[timed >= 0], by[timed >= 0] = timed[timed >= 0], 1
    if agree >= AGREEMENT * (agree + disagree):
        launch_ts = np.where(has, ts[np.maximum(call, 0)], dev["ts_ns"].to_numpy())
        extra = (timed < 0) & (named >= 0)
        extra &= ts[np.maximum(named, 0)] <= launch_ts
        op[extra], by[extra] = named[extra], 2
    return OpLinks(op, by, agree, disagree)


def host_threads(host: pa.Table) -> np.ndarray:
    """One code per (rank, pid, tid) of each host row."""
    return row_codes(_ints(host, "rank"), codes(host["pid"])[0], codes(host["tid"])[0])


def innermost_enclosing(thread: np.ndarray, ts: np.ndarray, end: np.ndarray, rows: np.ndarray,
                        q_thread: np.ndarray, q_ts: np.ndarray, q_end: np.ndarray) -> np.ndarray:
    """Per query interval, the row among ``rows`` on the query's thread that encloses it most tightly, or -1.

    Host ops nest on a thread: each row's depth is the number of rows open when it starts, and on each
    depth level the candidate for a query is the last row to start at or before it. The deepest candidate
    that encloses the query is the innermost (rows that overlap without nesting cannot make it pick a row
    that does not enclose the query: every pick is checked)."""
    out = np.full(len(q_ts), -1, dtype=np.int64)
    for th in np.unique(q_thread).tolist():  # the launching threads: a few
        mine = rows[thread[rows] == th]
        q = np.flatnonzero(q_thread == th)
        if not len(mine):
            continue
        mine = mine[np.lexsort((-end[mine], ts[mine]))]
        s, e = ts[mine], end[mine]
        depth = np.maximum(np.arange(len(mine)) - np.searchsorted(np.sort(e), s, side="right"), 0)
        qs, qe = q_ts[q], q_end[q]
        for level in range(int(depth.max()) + 1):
            at = np.flatnonzero(depth == level)
            pos = np.searchsorted(s[at], qs, side="right") - 1
            cand = at[np.maximum(pos, 0)]
            inside = (pos >= 0) & (e[cand] >= qe)
            out[q[inside]] = mine[cand[inside]]
    return out


def _ints(t: pa.Table, col: str) -> np.ndarray:
    return np.asarray(pc.fill_null(t[col], -1).to_numpy(zero_copy_only=False), dtype=np.int64)


def _lookup(src: np.ndarray, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Per query key (rank, id), the row among ``rows`` with that key (the first), or -1 (ids below 0: none)."""
    out = np.full(len(query), -1, dtype=np.int64)
    valid = src[:, 1] >= 0
    if not valid.any() or not len(query):
        return out
    key = row_codes(np.r_[src[valid, 0], query[:, 0]], np.r_[src[valid, 1], query[:, 1]])
    sk, qk, r = key[:int(valid.sum())], key[int(valid.sum()):], rows[valid]
    order = np.argsort(sk, kind="stable")
    pos = np.minimum(np.searchsorted(sk[order], qk), len(order) - 1)
    hit = (sk[order][pos] == qk) & (query[:, 1] >= 0)
    out[hit] = r[order[pos[hit]]]
    return out
