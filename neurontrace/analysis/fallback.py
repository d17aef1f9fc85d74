"""Host fallback: ops that ran on the CPU while the accelerator waited.

Found two ways (DESIGN.md, "Host fallback"), and each reported op says which (``found_by``):

- ``explicit``: the ops are named. The primary source is the capture's ``run.json``: ``neurontrace
  record`` stores ``torch_neuronx.get_fallback_ops()`` (``fallback_ops``) and ``get_executed_ops()``
  (``neuron.executed_ops``). In the released TorchNeuron source that is the only record: the
  fallback log lines are compiled but never printed (``NeuronLogger::log`` returns early for
  ``OPERATOR_FALLBACK``) and no profiler marker is recorded; the sets have no counts and no timing
  (formats/neuron.md §9.3 and its addendum). ``--fallback-ops`` and ``--fallback-log`` (for builds
  whose log prints ``Operator '<op>' executed via CPU fallback`` / ``... fell back to CPU``) add names;
- ``signature`` (a documented heuristic): a device→host copy, then framework ops on the host that
  launch no device work while the device sits idle, then a host→device copy. The ops between the
  two copies are the suspects. Ops that merely move or view data (``aten::to``, ``aten::copy_``,
  ``aten::item``, views, allocations) are never suspects.

Named ops are joined to the CPU-side framework ops of the trace (name, or name without ``aten::``),
which gives them calls, time and a source line. Each op carries an ``evidence`` state (the words of
Tilebench's ``neuron_diag/schema.py`` vocabulary, adapted):

=====================  =================================================================================
``confirmed``          named as a fallback and seen running on the CPU in the framework trace
``host_scalar_read``   ``aten::item`` / ``aten::_local_scalar_dense``: a ``.item()``-like read of a device
                       value, a host round trip rather than CPU compute; reported, but its time is the
                       host waiting, not host fallback
``signature_only``     not named by anything; found by the copy/idle signature alone
``named_not_seen``     named as a fallback but absent from the framework trace (not profiled, or recorded
                       under another name); no time to charge
=====================  =================================================================================

``also_executed_on_device`` is True when ``get_executed_ops()`` names the op too (it ran on Neuron
at other times: a fallback after an execution error, or for some inputs only).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis import names
from neurontrace.analysis.intervals import union
from neurontrace.analysis.slices import clip
from neurontrace.columns import lean, matches, select
from neurontrace.trace import Trace

NOT_SUSPECT = names.NOT_FALLBACK_SUSPECT  # data-movement and view ops are never suspects (names.py)
MAX_DEVICE_BUSY_FRACTION = 0.1  # a suspect op may overlap device work for at most this share of its time
EVIDENCE = ("confirmed", "host_scalar_read", "signature_only", "named_not_seen")


@dataclass
class FallbackOp:
    name: str
    calls: int
    host_ns: int
    device_idle_ns: int
    found_by: str
    source: str | None
    event_ids: list[int]
    evidence: str = ""  # one of EVIDENCE; set by find_fallback
    named_by: list[str] = field(default_factory=list)  # run.json get_fallback_ops(), --fallback-ops, ...
    also_executed_on_device: bool | None = None  # in get_executed_ops() too (None: not recorded)
    # calls per source line (``source`` is the most common): what merging the time slices of a rank needs
    sources: dict[str | None, int] = field(default_factory=dict, repr=False, compare=False)

    @property
    def charged(self) -> bool:
        """Whether its time counts as ``host_fallback`` (a scalar read is the host waiting instead)."""
        return self.evidence != "host_scalar_read"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "calls": self.calls, "host_ns": self.host_ns,
                "device_idle_ns": self.device_idle_ns, "found_by": self.found_by, "source": self.source,
                "evidence": self.evidence, "named_by": self.named_by,
                "also_executed_on_device": self.also_executed_on_device}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FallbackOp:
        return cls(d["name"], d["calls"], d["host_ns"], d["device_idle_ns"], d["found_by"], d.get("source"), [],
                   d.get("evidence", ""), list(d.get("named_by") or []), d.get("also_executed_on_device"))


LOG_PIECE_BYTES = 1 << 20  # a log is scanned a line at a time, a longer line in pieces of this size


def ops_from_log(path: str | Path) -> list[str]:
    """Op names from a TorchNeuron log (formats/neuron.md §9.3).

    Read a line at a time, and a line longer than ``LOG_PIECE_BYTES`` (a 2 GB line of junk) a piece at a time,
    so memory stays about one piece (bytes, and its text up to four times that) whatever the file holds; a
    message cut by a piece boundary of such a line is not found. Bytes that are not UTF-8 read as U+FFFD."""
    found: set[str] = set()
    with Path(path).open("rb") as f:
        while piece := f.readline(LOG_PIECE_BYTES):
            found.update(m.group("op") for m in names.FALLBACK_LOG.finditer(piece.decode("utf-8", "replace")))
    return sorted(found)


def recorded_ops(trace: Trace) -> tuple[list[str], list[str] | None]:
    """(fallback ops, executed ops) a capture's run.json recorded (metadata ``run``; executed: None if absent)."""
    fallen: list[str] = []
    executed: list[str] | None = None
    for run in trace.meta_all("run"):
        if not isinstance(run, dict):
            continue
        fallen += [str(op) for op in run.get("fallback_ops") or []]
        ran = (run.get("neuron") or {}).get("executed_ops") if isinstance(run.get("neuron"), dict) else None
        if isinstance(ran, list):
            executed = [*(executed or []), *map(str, ran)]
    return fallen, executed


def _short(name: str) -> str:
    return name.split("::", 1)[-1]


def find_fallback(trace: Trace, explicit: Iterable[str] = (), frames: dict[int, str] | None = None,
                  recorded: tuple[list[str], list[str] | None] | None = None,
                  owned: tuple[int, int] | None = None) -> list[FallbackOp]:
    """Named fallback ops (run.json's get_fallback_ops() first, then ``explicit``), then signature suspects
    not already named; each with its evidence state (module docstring). ``recorded``: the trace's
    :func:`recorded_ops` where the caller has them (read here otherwise). With ``owned`` (a time slice,
    analysis/slices.py) an op's calls and host time count the calls starting in the slice, its idle time the
    part inside it; ``event_ids`` keep every call the slice holds (attribution labels them all)."""
    ops = select(lean(trace.system_events), "category", "framework_op")  # its args are never read here
    busy_s, busy_e = _device_busy(trace)
    frames = frames or {}
    recorded_names, executed = recorded_ops(trace) if recorded is None else recorded
    named_by: dict[str, list[str]] = {}
    for n in recorded_names:
        named_by.setdefault(n, []).append("run.json get_fallback_ops()")
    for n in explicit:
        if n and "run.json get_fallback_ops()" not in named_by.get(n, []):
            named_by.setdefault(n, []).append("given (--fallback-ops / --fallback-log)")
    out: list[FallbackOp] = []
    if named_by:
        name = ops["name"].cast(pa.string())
        short = pc.replace_substring_regex(name, r"^.*::", "")  # "aten::nonzero" also matches "nonzero"
        hit = pc.or_(pc.is_in(name, pa.array(sorted(named_by))), pc.is_in(short, pa.array(sorted(named_by))))
        hit = pc.fill_null(hit, False).to_numpy(zero_copy_only=False)
        out += _summarize(ops, np.flatnonzero(hit), "explicit", busy_s, busy_e, frames, owned)
        seen_short = {_short(op.name) for op in out}
        for n in sorted(named_by):
            if _short(n) not in seen_short:
                out.append(FallbackOp(n, 0, 0, 0, "explicit", None, [], "named_not_seen"))
        for op in out:
            op.named_by = sorted({w for n, ws in named_by.items() if _short(n) == _short(op.name) for w in ws})
            if not op.evidence:
                op.evidence = "host_scalar_read" if names.HOST_SCALAR_READ.match(op.name) else "confirmed"
    seen = {i for op in out for i in op.event_ids}
    rows = _signature_rows(trace, ops, busy_s, busy_e)
    suspects = rows[~np.isin(ops["event_id"].to_numpy()[rows], np.fromiter(seen, np.int64, len(seen)))]
    for op in _summarize(ops, suspects.astype(np.int64), "signature", busy_s, busy_e, frames, owned):
        op.evidence = "signature_only"
        out.append(op)
    if executed is not None:
        ran = {_short(n) for n in executed}
        for op in out:
            op.also_executed_on_device = _short(op.name) in ran
    return sorted(out, key=_idle_first)


def _device_busy(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    dev = trace.device_events
    d = select(dev, "category", "compute", "collective", "memcpy", "memset", "dma")
    s = d["ts_ns"].to_numpy()
    return union(s, s + d["dur_ns"].to_numpy())


def _signature_rows(trace: Trace, ops: pa.Table, busy_s: np.ndarray, busy_e: np.ndarray) -> np.ndarray:
    dev = trace.device_events
    copies = select(dev, "category", "memcpy")
    direction = copies["direction"].cast(pa.string()).to_numpy(zero_copy_only=False)
    cs = copies["ts_ns"].to_numpy()
    ce = cs + copies["dur_ns"].to_numpy()
    d2h_end = np.sort(ce[direction == "d2h"])
    h2d_start = np.sort(cs[direction == "h2d"])
    if not len(d2h_end) or not len(h2d_start) or ops.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    s = ops["ts_ns"].to_numpy()
    e = s + ops["dur_ns"].to_numpy()
    # The round trip around each op: the last d2h copy finished before it, the next h2d after it.
    prev = np.searchsorted(d2h_end, s, side="right") - 1
    nxt = np.searchsorted(h2d_start, e, side="left")
    between = (prev >= 0) & (nxt < len(h2d_start))
    # ... with no other h2d copy between the d2h and the op (the pair belongs together).
    if between.any():
        last_h2d_before = np.searchsorted(h2d_start, s, side="right") - 1
        paired = last_h2d_before < 0
        paired |= h2d_start[np.maximum(last_h2d_before, 0)] < d2h_end[np.maximum(prev, 0)]
        between &= paired
    launches_nothing = ~np.isin(ops["external_id"].fill_null(-1).to_numpy(),
                                dev["external_id"].drop_null().to_numpy())
    names_ok = ~matches(ops["name"], NOT_SUSPECT)
    cand = np.flatnonzero(between & launches_nothing & names_ok & (e > s))
    if not len(cand):
        return cand
    busy = _overlap(s[cand], e[cand], busy_s, busy_e)
    cand = cand[busy <= MAX_DEVICE_BUSY_FRACTION * (e[cand] - s[cand])]
    return _outermost(ops, cand)


def _outermost(ops: pa.Table, rows: np.ndarray) -> np.ndarray:
    """Drop suspects nested inside another suspect on the same thread (the outer one owns the time)."""
    if len(rows) < 2:
        return rows
    tid = ops["tid"].cast(pa.string()).to_numpy(zero_copy_only=False)[rows].astype(str)
    s = ops["ts_ns"].to_numpy()[rows]
    e = s + ops["dur_ns"].to_numpy()[rows]
    order = np.lexsort((-e, s, tid))
    t, eo = tid[order], e[order]
    new_thread = np.r_[True, t[1:] != t[:-1]]
    reach = eo.copy()
    # Running max of ends within each thread: an op ending before it is nested in an earlier one.
    for i in range(1, len(reach)):  # loops over suspects only (few)
        if not new_thread[i]:
            reach[i] = max(reach[i - 1], eo[i])
    nested = np.r_[False, (~new_thread[1:]) & (eo[1:] <= reach[:-1])]
    return np.sort(rows[order][~nested])


def _overlap(s: np.ndarray, e: np.ndarray, us: np.ndarray, ue: np.ndarray) -> np.ndarray:
    """Per interval [s, e): nanoseconds covered by the disjoint sorted union (us, ue)."""
    if not len(us):
        return np.zeros(len(s), dtype=np.int64)
    covered = np.r_[0, np.cumsum(ue - us)]

    def upto(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(us, t, side="right")  # intervals starting at or before t
        partial = np.where(i > 0, np.minimum(t, ue[np.maximum(i - 1, 0)]) - us[np.maximum(i - 1, 0)], 0)
        return np.asarray(covered[np.maximum(i - 1, 0)] * (i > 0) + np.maximum(partial, 0))

    return np.asarray(upto(e) - upto(s))


def _most_common(counts: dict[str | None, int]) -> str | None:
    """The source with the most calls; of several tied, the first by name (not the order they were met in, which
    differs between a whole rank and its slices)."""
    if not counts:
        return None
    return min(counts, key=lambda src: (-counts[src], src is None, src or ""))


def _idle_first(op: FallbackOp) -> tuple[int, str, str]:
    return (-op.device_idle_ns, op.name, op.found_by)


def _summarize(ops: pa.Table, rows: np.ndarray, how: str, busy_s: np.ndarray, busy_e: np.ndarray,
               frames: dict[int, str], owned: tuple[int, int] | None = None) -> list[FallbackOp]:
    if not len(rows):
        return []
    name = ops["name"].cast(pa.string()).to_numpy(zero_copy_only=False)[rows]
    s = ops["ts_ns"].to_numpy()[rows]
    e = s + ops["dur_ns"].to_numpy()[rows]
    ids = ops["event_id"].to_numpy()[rows]
    frame = ops["frame_id"].to_numpy(zero_copy_only=False)[rows]
    own = np.ones(len(rows), dtype=bool) if owned is None else (s >= owned[0]) & (s < owned[1])
    out = []
    for op in sorted(set(name)):
        m = name == op
        us, ue = union(*clip(s[m], e[m], owned))
        idle = int((ue - us).sum() - _overlap(us, ue, busy_s, busy_e).sum())
        srcs = [frames.get(int(f)) for f in frame[m & own] if f is not None and not np.isnan(f)]
        counts: dict[str | None, int] = {}
        for src in srcs:
            counts[src] = counts.get(src, 0) + 1
        source = _most_common(counts)
        out.append(FallbackOp(str(op), int((m & own).sum()), int((e[m & own] - s[m & own]).sum()), idle, how,
                              source, [int(i) for i in ids[m]], sources=counts))
    return out


FallbackFold = dict[tuple[str, str, str], tuple[FallbackOp, dict[int, None]]]  # key -> (op so far, its event ids)


def fold_slices(state: FallbackFold | None, ops: list[FallbackOp]) -> FallbackFold:
    """``state`` with one more time slice's fallback ops folded in (the slices in time order): calls, times
    and sources summed, event ids once each (in the order first seen)."""
    merged: FallbackFold = {} if state is None else state
    for op in ops:
        key = (op.found_by, (op.evidence == "named_not_seen" and "unseen") or "seen", op.name)
        got = merged.get(key)
        if got is None:
            merged[key] = (FallbackOp(op.name, op.calls, op.host_ns, op.device_idle_ns, op.found_by, op.source, [],
                                      op.evidence, list(op.named_by), op.also_executed_on_device, dict(op.sources)),
                           dict.fromkeys(op.event_ids))
            continue
        cur, ids = got
        cur.calls, cur.host_ns, cur.device_idle_ns = (cur.calls + op.calls, cur.host_ns + op.host_ns,
                                                      cur.device_idle_ns + op.device_idle_ns)
        ids.update(dict.fromkeys(op.event_ids))
        for src, n in op.sources.items():
            cur.sources[src] = cur.sources.get(src, 0) + n
    return merged


def merge_slices(parts: list[list[FallbackOp]]) -> list[FallbackOp]:
    """One rank's fallback ops from its time slices' (each computed with ``owned``), as :func:`find_fallback`
    gives them on the whole rank: calls, times and sources summed, event ids once each, a named op "not seen"
    only where no slice saw it, in the whole rank's order."""
    state: FallbackFold | None = None
    for ops in parts:
        state = fold_slices(state, ops)
    return finish_slices(state)


def finish_slices(folded: FallbackFold | None) -> list[FallbackOp]:
    """The rank's fallback ops from the folded state (:func:`merge_slices`)."""
    merged: dict[tuple[str, str, str], FallbackOp] = {}
    for key, (op, ids) in (folded or {}).items():
        op.event_ids = list(ids)
        merged[key] = op
    seen = {_short(op.name) for op in merged.values() if op.found_by == "explicit" and op.evidence != "named_not_seen"}
    out = []
    for kind in (("explicit", "seen"), ("explicit", "unseen"), ("signature", "seen")):
        for (how, state, name), op in sorted(merged.items(), key=lambda kv: kv[0][2]):
            if (how, state) != kind or (state == "unseen" and _short(name) in seen):
                continue
            if op.sources:
                op.source = _most_common(op.sources)
            out.append(op)
    return sorted(out, key=_idle_first)
