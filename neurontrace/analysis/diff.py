"""Run comparison: what got faster or slower between a baseline and a change, and why.

:func:`diff` compares two traces (any formats, one rank or many): per device, how each stall cause
changed; per op / kernel / engine opcode, how count and time changed (added, removed, faster,
slower, unchanged); which host-fallback ops appeared or disappeared; compile and load time versus
execution; and the step time distribution. :func:`diff_diagnoses` does everything but the op level
from two stored ``neurontrace.diagnose/1`` documents (the run catalog uses it when the traces are
gone).

The JSON form (:meth:`Diff.as_dict`) is the documented ``neurontrace.diff/1`` schema
(docs/diff.md). Times are integers in nanoseconds. Analyses return tables and never plot:
:mod:`neurontrace.render.plots` draws them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis import load_warnings, phases, step_stats
from neurontrace.analysis._diff_memory import memory_deltas
from neurontrace.analysis._diff_ops import COMPARED_SCHEMA, STATUSES, compare_ops, op_table
from neurontrace.analysis.step_stats import FIRST_STEP, MEAN_PER_STEP, STEADY_MEDIAN
from neurontrace.causes import CAUSES
from neurontrace.trace import Trace

__all__ = ["CAUSES", "SCHEMA", "STATUSES", "DeviceDelta", "Diff", "Thresholds", "change", "compare_ops",
           "diff", "diff_diagnoses", "match_devices", "op_table"]

SCHEMA = "neurontrace.diff/1"
DEFAULT_RELATIVE = 0.10  # an op's total time must change by more than 10% of its baseline ...
DEFAULT_ABSOLUTE_NS = 10_000  # ... and by more than 10 µs to count as faster or slower
PHASE_KEYS = ("compile_ns", "load_ns", "execution_ns", "time_to_first_step_ns", FIRST_STEP.key)
# From the compile section (docs/compile.md), under phases with a "compile." name.
PREPARATION_KEYS = ("recompiles", "graph_breaks", "cache_hits", "cache_misses", "failed")


@dataclass(frozen=True)
class Thresholds:
    """When an op counts as faster or slower (docs/diff.md, "Thresholds").

    A matched op is ``slower`` when its total time grew by more than
    ``max(relative * baseline_ns, absolute_ns)``, ``faster`` when it shrank by more than that.
    """

    relative: float = DEFAULT_RELATIVE
    absolute_ns: int = DEFAULT_ABSOLUTE_NS

    def __post_init__(self) -> None:
        if self.relative < 0 or self.absolute_ns < 0:
            raise ValueError(f"thresholds must not be negative, got relative={self.relative}, "
                             f"absolute_ns={self.absolute_ns}")

    def as_dict(self) -> dict[str, Any]:
        return {"relative": self.relative, "absolute_ns": self.absolute_ns}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Thresholds:
        return cls(relative=float(d["relative"]), absolute_ns=int(d["absolute_ns"]))


def change(baseline: float | None, new: float | None) -> dict[str, Any]:
    """``{"baseline", "change", "delta", "pct"}`` for one figure; ``pct`` is relative to the baseline."""
    delta = None if baseline is None or new is None else new - baseline
    pct = None if delta is None or not baseline else round(100.0 * delta / baseline, 3)
    return {"baseline": baseline, "change": new, "delta": delta, "pct": pct}


@dataclass
class DeviceDelta:
    """One device of the baseline matched with one of the change, and how its time was spent in each."""

    baseline_device: str
    baseline_rank: int | None
    change_device: str
    change_rank: int | None
    matched_by: str  # "name+rank", "name" (ranks differ) or "order" (names differ: another format)
    window_ns: tuple[int, int]
    steps: tuple[int, int]  # profiled steps inside each window (0: the run marks no steps)
    causes_ns: dict[str, tuple[int, int]]
    detail_ns: dict[str, tuple[int, int]]

    @property
    def label(self) -> str:
        a = _device_label(self.baseline_device, self.baseline_rank)
        b = _device_label(self.change_device, self.change_rank)
        return a if a == b else f"{a} ↔ {b}"

    @property
    def time_per_step_ns(self) -> tuple[float, float]:
        """Window time per profiled step (the window itself when a side marks no steps)."""
        (wa, wb), (sa, sb) = self.window_ns, self.steps
        if sa and sb:
            return wa / sa, wb / sb
        return float(wa), float(wb)

    @property
    def regression_pct(self) -> float | None:
        """How much longer each step (or the window) took in the change, in percent of the baseline."""
        a, b = self.time_per_step_ns
        return None if a <= 0 else 100.0 * (b - a) / a

    def share(self, cause: str) -> tuple[float, float]:
        a, b = self.causes_ns[cause]
        wa, wb = self.window_ns
        return (a / wa if wa else 0.0), (b / wb if wb else 0.0)

    def as_dict(self) -> dict[str, Any]:
        causes = {}
        for cause in CAUSES:
            a, b = self.causes_ns[cause]
            sa, sb = self.share(cause)
            causes[cause] = {**change(a, b), "baseline_share": round(sa, 6), "change_share": round(sb, 6),
                             "delta_share": round(sb - sa, 6)}
        tps_a, tps_b = self.time_per_step_ns
        reg = self.regression_pct
        return {
            "baseline": {"device": self.baseline_device, "rank": self.baseline_rank},
            "change": {"device": self.change_device, "rank": self.change_rank},
            "matched_by": self.matched_by,
            "window_ns": change(*self.window_ns),
            "steps": {"baseline": self.steps[0], "change": self.steps[1]},
            MEAN_PER_STEP.key: change(round(tps_a), round(tps_b)),
            "regression_pct": None if reg is None else round(reg, 3),
            "causes_ns": causes,
            "detail_ns": {k: change(a, b) for k, (a, b) in sorted(self.detail_ns.items())},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeviceDelta:
        """The inverse of :meth:`as_dict` (shares and time per step are computed again from the sums)."""
        def pair(c: Mapping[str, Any]) -> tuple[int, int]:
            return int(c["baseline"]), int(c["change"])

        return cls(d["baseline"]["device"], d["baseline"]["rank"], d["change"]["device"], d["change"]["rank"],
                   d["matched_by"], pair(d["window_ns"]), (int(d["steps"]["baseline"]), int(d["steps"]["change"])),
                   {c: pair(v) for c, v in d["causes_ns"].items()}, {k: pair(v) for k, v in d["detail_ns"].items()})


@dataclass
class Diff:
    """Baseline versus change. ``ops`` is a pyarrow Table (None when only diagnoses were compared)."""

    baseline: dict[str, Any]  # {"label", "inputs", "synthetic"}
    change: dict[str, Any]
    thresholds: Thresholds
    devices: list[DeviceDelta]
    unmatched_devices: dict[str, list[dict[str, Any]]]
    fallback: dict[str, list[dict[str, Any]]]
    phases: dict[str, dict[str, Any]]
    steps: dict[str, Any]
    findings: dict[str, list[dict[str, Any]]]
    ops: pa.Table | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)  # each side's load warnings, with "side"
    memory: list[dict[str, Any]] = field(default_factory=list)  # per device: peak and growth of both (_diff_memory)

    @property
    def synthetic(self) -> bool:
        return bool(self.baseline.get("synthetic") or self.change.get("synthetic"))

    def ops_summary(self) -> dict[str, int]:
        """How many op rows have each status (all zero without op tables)."""
        counts = dict.fromkeys(STATUSES, 0)
        if self.ops is not None and self.ops.num_rows:
            for row in self.ops.group_by("status", use_threads=False).aggregate([("status", "count")]).to_pylist():
                counts[row["status"]] = int(row["status_count"])
        return counts

    def changed_ops(self, statuses: Iterable[str] = ("added", "removed", "slower", "faster")) -> pa.Table:
        """The op rows with one of ``statuses``, largest time change first."""
        if self.ops is None:
            return COMPARED_SCHEMA.empty_table()
        return self.ops.filter(pc.is_in(self.ops["status"], value_set=pa.array(list(statuses), pa.string())))

    @property
    def worst_regression(self) -> DeviceDelta | None:
        """The matched device whose time per step grew the most (None when no device matched)."""
        scored = [d for d in self.devices if d.regression_pct is not None]
        return max(scored, key=lambda d: d.regression_pct or 0.0) if scored else None

    def regressions(self, pct: float) -> list[DeviceDelta]:
        """Devices whose time per step (or window) grew by more than ``pct`` percent."""
        return [d for d in self.devices if d.regression_pct is not None and d.regression_pct > pct]

    def as_dict(self, *, top_ops: int | None = None) -> dict[str, Any]:
        ops: list[dict[str, Any]] | None = None
        if self.ops is not None:
            rows = self.ops if top_ops is None else self.ops.slice(0, top_ops)
            ops = [_op_dict(r) for r in rows.to_pylist()]
        worst = self.worst_regression
        return {
            "schema": SCHEMA,
            "synthetic": self.synthetic,
            "baseline": self.baseline,
            "change": self.change,
            "thresholds": self.thresholds.as_dict(),
            "notes": self.notes,
            "warnings": self.warnings,
            "devices": [d.as_dict() for d in self.devices],
            "unmatched_devices": self.unmatched_devices,
            "regression": {
                "metric": MEAN_PER_STEP.key,
                "worst_device": worst.label if worst else None,
                "worst_pct": None if worst is None or worst.regression_pct is None else round(worst.regression_pct, 3),
            },
            "ops_summary": self.ops_summary() if self.ops is not None else None,
            "ops": ops,
            "fallback": self.fallback,
            "phases": self.phases,
            "steps": self.steps,
            "findings": self.findings,
            "memory": self.memory,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Diff:
        """The inverse of :meth:`as_dict`: ``Diff.from_dict(d.as_dict()).as_dict() == d.as_dict()``. The op
        table holds the rows the document lists (all of them unless it was written with ``top_ops``)."""
        ops = None
        if doc.get("ops") is not None:
            rows = [{"status": o["status"], "kind": o["kind"], "unit": o["unit"], "name": o["name"],
                     "source": o["source"], "shapes": o.get("shapes"), "change_source": o["change_source"],
                     "matched_by": o["matched_by"],
                     "baseline_count": o["count"]["baseline"], "change_count": o["count"]["change"],
                     "baseline_ns": o["total_ns"]["baseline"], "change_ns": o["total_ns"]["change"],
                     "delta_ns": o["total_ns"]["delta"], "delta_pct": o["total_ns"]["pct"]} for o in doc["ops"]]
            ops = pa.Table.from_pylist(rows, schema=COMPARED_SCHEMA)
        return cls(baseline=dict(doc["baseline"]), change=dict(doc["change"]),
                   thresholds=Thresholds.from_dict(doc["thresholds"]),
                   devices=[DeviceDelta.from_dict(d) for d in doc["devices"]],
                   unmatched_devices=dict(doc["unmatched_devices"]), fallback=dict(doc["fallback"]),
                   phases=dict(doc["phases"]), steps=dict(doc["steps"]), findings=dict(doc["findings"]), ops=ops,
                   notes=list(doc.get("notes") or []), warnings=list(doc.get("warnings") or []),
                   memory=list(doc.get("memory") or []))


def _op_dict(r: Mapping[str, Any]) -> dict[str, Any]:
    pct = r["delta_pct"]
    return {"status": r["status"], "kind": r["kind"], "unit": r["unit"], "name": r["name"], "source": r["source"],
            "shapes": r["shapes"], "change_source": r["change_source"], "matched_by": r["matched_by"],
            "count": change(r["baseline_count"], r["change_count"]),
            "total_ns": {"baseline": r["baseline_ns"], "change": r["change_ns"], "delta": r["delta_ns"],
                         "pct": None if pct is None or np.isnan(pct) else round(float(pct), 3)}}


# -- entry points --------------------------------------------------------------------------------


def diff(
    baseline: Trace,
    new: Trace,
    *,
    baseline_diagnosis: Any = None,
    change_diagnosis: Any = None,
    thresholds: Thresholds | None = None,
    baseline_label: str | None = None,
    change_label: str | None = None,
    fallback_ops: Iterable[str] = (),
) -> Diff:
    """Compare two traces (each may hold several ranks): the baseline first, then the change.

    The diagnoses (a :class:`~neurontrace.analysis.diagnose.Diagnosis` or its ``as_dict()`` JSON)
    are computed when not given; pass stored ones to reuse them (the run catalog does).
    ``fallback_ops`` names ops known to fall back to the CPU in either run.
    """
    from neurontrace.analysis.diagnose import diagnose

    named = list(fallback_ops)
    da = _as_dict(baseline_diagnosis) if baseline_diagnosis is not None else \
        diagnose(baseline, fallback_ops=named).as_dict()
    db = _as_dict(change_diagnosis) if change_diagnosis is not None else diagnose(new, fallback_ops=named).as_dict()
    th = thresholds or Thresholds()
    out = _compare_diagnoses(da, db, th, baseline_label, change_label)
    out.ops = compare_ops(op_table(baseline), op_table(new), relative=th.relative, absolute_ns=th.absolute_ns)
    if out.ops.num_rows and pc.all(pc.is_null(out.ops["source"])).as_py():
        out.notes.append("no source locations in either trace (capture with with_stack=True): ops were "
                         "matched by name only")
    return out


def diff_diagnoses(
    baseline: Mapping[str, Any],
    new: Mapping[str, Any],
    *,
    thresholds: Thresholds | None = None,
    baseline_label: str | None = None,
    change_label: str | None = None,
) -> Diff:
    """Everything but the op level, from two ``neurontrace.diagnose/1`` documents."""
    out = _compare_diagnoses(baseline, new, thresholds or Thresholds(), baseline_label, change_label)
    out.notes.append("op-level comparison needs the traces (only the diagnoses were compared)")
    return out


def _compare_diagnoses(baseline: Mapping[str, Any], new: Mapping[str, Any], thresholds: Thresholds,
                       baseline_label: str | None, change_label: str | None) -> Diff:
    for side, d in (("baseline", baseline), ("change", new)):
        schema = str(d.get("schema", ""))
        if not schema.startswith("neurontrace.diagnose/"):
            raise ValueError(f"the {side} is not a neurontrace.diagnose document (schema {schema!r})")
    notes: list[str] = []
    pairs, unmatched = match_devices(baseline.get("devices", []), new.get("devices", []))
    if any(how == "order" for _, _, how in pairs):
        renamed = ", ".join(f"{_device_label(a['device'], a.get('rank'))} ↔ {_device_label(b['device'], b.get('rank'))}"
                            for a, b, how in pairs if how == "order")
        notes.append(f"devices matched by order because their names differ (as between formats): {renamed}")
    for side in ("baseline", "change"):
        if unmatched[side]:
            names = ", ".join(_device_label(d["device"], d.get("rank")) for d in unmatched[side])
            notes.append(f"devices only in the {side}: {names}")
    steps_a, steps_b = _steps(baseline), _steps(new)
    devices = [_device_delta(a, b, how, steps_a, steps_b) for a, b, how in pairs]
    fmt_a, fmt_b = _formats(baseline), _formats(new)
    if fmt_a != fmt_b:
        notes.append(f"the runs come from different formats ({', '.join(fmt_a) or '?'} versus "
                     f"{', '.join(fmt_b) or '?'}); op names differ between backends, so ops only match where "
                     "the names agree")
    if len(steps_a) != len(steps_b) and steps_a and steps_b:
        notes.append(f"the runs profiled {len(steps_a)} and {len(steps_b)} steps: op totals are not directly "
                     "comparable; time per step, shares and step statistics are")
    side_a = _side(baseline, baseline_label)
    side_b = _side(new, change_label)
    for side, info in (("baseline", side_a), ("change", side_b)):
        if info["synthetic"]:
            notes.append(f"the {side} is SYNTHETIC (a generated profile): its figures are not measurements")
    device_map = {(b["device"], b.get("rank")): (a["device"], a.get("rank")) for a, b, _ in pairs}
    steps = _step_stats(steps_a, steps_b)
    worst = max((d for d in devices if d.regression_pct is not None and all(d.steps)),
                key=lambda d: d.regression_pct or 0.0, default=None)
    steps["why_they_differ"] = step_stats.why_they_differ(
        None if worst is None else worst.regression_pct, steps[STEADY_MEDIAN.key]["pct"],
        steps["durations_ns"]["baseline"], steps["durations_ns"]["change"])
    return Diff(
        baseline=side_a, change=side_b, thresholds=thresholds, devices=devices,
        unmatched_devices=unmatched, fallback=_fallback(baseline, new), phases=_phases(baseline, new),
        steps=steps, findings=_findings(baseline, new, device_map), notes=notes,
        warnings=[{"side": side, **w} for side, d in (("baseline", baseline), ("change", new))
                  for w in d.get(load_warnings.SECTION.key) or []],
        memory=memory_deltas(baseline, new, change),
    )


def _as_dict(diag: Any) -> dict[str, Any]:
    if isinstance(diag, Mapping):
        return dict(diag)
    as_dict = getattr(diag, "as_dict", None)
    if as_dict is None:
        raise TypeError(f"expected a Diagnosis or its as_dict() document, got {type(diag).__name__}")
    return dict(as_dict())


def _side(d: Mapping[str, Any], label: str | None) -> dict[str, Any]:
    inputs = list(d.get("inputs") or [])
    default = ", ".join(str(i.get("path")) for i in inputs) or "?"
    return {"label": label or default, "inputs": inputs, "synthetic": bool(d.get("synthetic"))}


def _formats(d: Mapping[str, Any]) -> list[str]:
    return sorted({str(i.get("format")) for i in d.get("inputs") or [] if i.get("format")})


def _device_label(device: str, rank: int | None) -> str:
    return device if rank is None else f"{device} rank {rank}"


# -- devices -------------------------------------------------------------------------------------


def match_devices(
    baseline: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]],
) -> tuple[list[tuple[Mapping[str, Any], Mapping[str, Any], str]], dict[str, list[dict[str, Any]]]]:
    """Pair devices: same name and rank first, then same name, then what is left by order.

    Order pairing is how a CUDA run meets a Neuron run (``cuda:0`` ↔ ``neuron:nc0``); the result
    says ``order`` so the report can say so.
    """
    left = list(baseline)
    right = list(new)
    pairs: list[tuple[Mapping[str, Any], Mapping[str, Any], str]] = []
    for how, key in (("name+rank", lambda d: (d["device"], d.get("rank"))), ("name", lambda d: d["device"])):
        for a in list(left):
            hits = [b for b in right if key(b) == key(a)]
            if len(hits) == 1 or (hits and how == "name+rank"):
                pairs.append((a, hits[0], how))
                left.remove(a)
                right.remove(hits[0])
    for a, b in zip(sorted(left, key=_order), sorted(right, key=_order), strict=False):
        pairs.append((a, b, "order"))
    n = min(len(left), len(right))
    unmatched = {"baseline": [{"device": d["device"], "rank": d.get("rank")} for d in sorted(left, key=_order)[n:]],
                 "change": [{"device": d["device"], "rank": d.get("rank")} for d in sorted(right, key=_order)[n:]]}
    return pairs, unmatched


def _order(d: Mapping[str, Any]) -> tuple[int, str]:
    rank = d.get("rank")
    return (-1 if rank is None else int(rank)), str(d["device"])


def _steps(d: Mapping[str, Any]) -> list[dict[str, int]]:
    return list((d.get(phases.SECTION.key) or {}).get("steps") or [])


def _steps_in(device: Mapping[str, Any], window: tuple[int, int], steps: list[dict[str, int]]) -> int:
    """The profiled steps a device's window covers: as the window rule counted them, else (documents
    without ``window_steps``) the steps starting inside the window."""
    if isinstance(device.get("window_steps"), int):
        return int(device["window_steps"])
    lo, hi = window
    return sum(1 for s in steps if lo <= int(s["start_ns"]) < hi)  # a handful of steps, not events


def _device_delta(a: Mapping[str, Any], b: Mapping[str, Any], how: str, steps_a: list[dict[str, int]],
                  steps_b: list[dict[str, int]]) -> DeviceDelta:
    wa = (int(a["window"]["start_ns"]), int(a["window"]["end_ns"]))
    wb = (int(b["window"]["start_ns"]), int(b["window"]["end_ns"]))
    ca, cb = a.get("causes_ns") or {}, b.get("causes_ns") or {}
    da, db = a.get("detail_ns") or {}, b.get("detail_ns") or {}
    return DeviceDelta(
        baseline_device=str(a["device"]), baseline_rank=a.get("rank"),
        change_device=str(b["device"]), change_rank=b.get("rank"), matched_by=how,
        window_ns=(wa[1] - wa[0], wb[1] - wb[0]),
        steps=(_steps_in(a, wa, steps_a), _steps_in(b, wb, steps_b)),
        causes_ns={c: (int(ca.get(c, 0)), int(cb.get(c, 0))) for c in CAUSES},
        detail_ns={k: (int(da.get(k, 0)), int(db.get(k, 0))) for k in sorted(set(da) | set(db))},
    )


# -- fallback, phases, steps, findings -----------------------------------------------------------


def _fallback(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    # An op named as a fallback but not seen running (evidence named_not_seen) did not happen in that run.
    fa = {op["name"]: op for op in a.get("fallback_ops") or [] if op.get("evidence") != "named_not_seen"}
    fb = {op["name"]: op for op in b.get("fallback_ops") or [] if op.get("evidence") != "named_not_seen"}
    persisted = []
    for name in sorted(set(fa) & set(fb)):
        x, y = fa[name], fb[name]
        persisted.append({"name": name, "calls": change(x.get("calls"), y.get("calls")),
                          "host_ns": change(x.get("host_ns"), y.get("host_ns")),
                          "device_idle_ns": change(x.get("device_idle_ns"), y.get("device_idle_ns")),
                          "found_by": {"baseline": x.get("found_by"), "change": y.get("found_by")},
                          "source": y.get("source") or x.get("source")})
    return {"appeared": [fb[n] for n in sorted(set(fb) - set(fa))],
            "disappeared": [fa[n] for n in sorted(set(fa) - set(fb))],
            "persisted": persisted}


def _phases(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    pa_, pb = a.get(phases.SECTION.key) or {}, b.get(phases.SECTION.key) or {}
    out = {k: change(pa_.get(k), pb.get(k)) for k in PHASE_KEYS}

    def span(p: Mapping[str, Any]) -> int | None:
        s, e = p.get("trace_start_ns"), p.get("trace_end_ns")
        return None if s is None or e is None else int(e) - int(s)

    out["trace_span_ns"] = change(span(pa_), span(pb))
    # preparation (the compile section): "the second run was fast because the cache was warm"
    ca, cb = a.get("compile") or {}, b.get("compile") or {}
    for key in PREPARATION_KEYS:
        out[f"compile.{key}"] = change(ca.get(key), cb.get(key))
    out["compile_steps"] = change(pa_.get("compile_steps"), pb.get("compile_steps"))
    return out


def _stats(durations: list[int]) -> dict[str, int | None]:
    if not durations:
        return {"median_ns": None, "p90_ns": None}
    arr = np.asarray(durations, dtype=np.float64)
    return {"median_ns": int(np.median(arr)), "p90_ns": int(np.percentile(arr, 90))}


def _step_stats(steps_a: list[dict[str, int]], steps_b: list[dict[str, int]]) -> dict[str, Any]:
    """Step time distribution: all steps, and the steady state (every step after the first that compiles
    nothing: compile steps are preparation, docs/compile.md)."""
    da = [int(s["dur_ns"]) for s in steps_a]
    db = [int(s["dur_ns"]) for s in steps_b]
    all_a, all_b = _stats(da), _stats(db)
    st_a = _stats([int(s["dur_ns"]) for s in steps_a[1:] if not s.get("compile_ns")])
    st_b = _stats([int(s["dur_ns"]) for s in steps_b[1:] if not s.get("compile_ns")])
    return {
        "count": change(len(da), len(db)),
        "median_ns": change(all_a["median_ns"], all_b["median_ns"]),
        "p90_ns": change(all_a["p90_ns"], all_b["p90_ns"]),
        STEADY_MEDIAN.key: change(st_a["median_ns"], st_b["median_ns"]),
        "steady_p90_ns": change(st_a["p90_ns"], st_b["p90_ns"]),
        FIRST_STEP.key: change(da[0] if da else None, db[0] if db else None),
        "durations_ns": {"baseline": da, "change": db},
    }


def _findings(a: Mapping[str, Any], b: Mapping[str, Any],
              device_map: Mapping[tuple[str, int | None], tuple[str, int | None]]) -> dict[str, list[dict[str, Any]]]:
    """Findings (by id and device) present in only one run: new problems and resolved ones."""
    names = {dev: a_dev for (dev, _), (a_dev, _) in device_map.items()}

    def key(f: Mapping[str, Any], rename: bool) -> tuple[str, str | None]:
        dev = f.get("device")
        return str(f["id"]), (names.get(dev, dev) if rename and dev is not None else dev)

    fa = {key(f, False): f for f in a.get("findings") or []}
    fb = {key(f, True): f for f in b.get("findings") or []}

    def brief(f: Mapping[str, Any]) -> dict[str, Any]:
        return {k: f.get(k) for k in ("id", "severity", "title", "device", "evidence")}

    return {"appeared": [brief(fb[k]) for k in fb if k not in fa],
            "resolved": [brief(fa[k]) for k in fa if k not in fb]}
