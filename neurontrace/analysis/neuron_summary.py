"""Per-NeuronCore reports from Neuron summary metrics: what a summary-json / summary-text (or the
Explorer ``Summary`` table) says, with the derived figures and the Neuron Explorer summary rules.

A summary is often all a user has, so it gets a real report, not an empty timeline. Facts it rests on
(formats/neuron.md §3.7 ``Summary``, §4 and its addendum):

- every metric is kept under the file's own key with its exact value (``*_percent`` are fractions
  0..1 in real files; times in seconds; bytes and counts integers);
- ``total_time`` includes about 2 ms of idle start-up (pantheonneuron ``docs/neuron_counters.md``),
  so shares use ``total_active_time`` as the denominator (or ``total_time * total_active_time_percent``
  when only the fraction is there);
- ``throttle_*`` keys are suffixed by the **physical** NeuronCore index (``..._nc<k>_...``), not the
  logical ``nc_idx`` of the profile (dstair/neuron-pytorch-native ``interpreting-metrics.md``).

Rules (:data:`RULES`; Neuron Explorer's "Performance Insights & Recommendations", aws-neuron-sdk
``tools/neuron-explorer/overview-summary-page.rst``, unless marked otherwise):

======================  =======================================================================
``low_model_flops``     model FLOPs below 50% of active FLOPs: ``mfu_estimated_percent`` /
                        ``tensor_engine_active_time_percent`` (both shares of ``total_time``)
``transpose_flops``     ``transpose_flops`` above 10% of ``hardware_flops``
``spill_reload``        ``spill_reload_bytes`` above 25% of ``hbm_read_bytes``
``throttling``          a per-physical-core throttle time (``throttle_active_nc<k>_time_ns``) above 0
``small_dma``           average DMA transfer below 4 KiB: "large payloads (>=4 KiB) are required
                        to saturate HBM bandwidth" (aws-neuron-sdk ``nki/deep-dives/nki-dma-bandwidth-guide.rst``)
``low_mfu``             MFU below 10% (neurontrace's own threshold; Neuron documents none)
======================  =======================================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from neurontrace import units
from neurontrace.analysis import engine_waits
from neurontrace.analysis.contract import Context, Finding, FindingFamily, Section
from neurontrace.trace import Trace

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
MODEL_VS_ACTIVE_FLOPS = 0.5
TRANSPOSE_SHARE = 0.10
SPILL_RELOAD_SHARE = 0.25
SMALL_DMA_BYTES = 4096
LOW_MFU = 0.10
# throttle_active_nc4_time_ns, throttle_avg_util_limit_nc4_percent,
# throttle_<type>_active_time_nc4_percent, throttle_<type>_avg_util_limit_nc4_percent (neuron.md §4.2)
THROTTLE_KEY = re.compile(
    r"^throttle_(?:(?P<type>[a-z0-9_]+?)_)?(?P<what>active_time|active|avg_util_limit)_nc(?P<core>\d+)"
    r"_(?P<unit>percent|time_ns)$"
)


@dataclass
class CoreSummary:
    """One device profile's summary: the file's metrics untouched, plus what neurontrace derives."""

    profile_id: str | None
    device: str | None
    metrics: dict[str, Any]
    derived: dict[str, Any] = field(default_factory=dict)
    throttling: dict[str, dict[str, Any]] = field(default_factory=dict)  # physical core -> figures
    findings: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"profile_id": self.profile_id, "device": self.device, "metrics": self.metrics,
                "derived": self.derived, "throttling_by_physical_core": self.throttling,
                "findings": self.findings}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CoreSummary:
        return cls(d.get("profile_id"), d.get("device"), dict(d["metrics"]), dict(d.get("derived") or {}),
                   dict(d.get("throttling_by_physical_core") or {}), list(d.get("findings") or []))


@dataclass
class NeuronSummary:
    """The section's value: every device profile's summary, in load (then rank) order. ``--json``: a list
    (``neuron_summary``), empty without Neuron summaries, so the document has one shape."""

    cores: list[CoreSummary] = field(default_factory=list)

    def as_list(self) -> list[dict[str, Any]]:
        return [c.as_dict() for c in self.cores]

    @classmethod
    def from_list(cls, items: list[dict[str, Any]]) -> NeuronSummary:
        return cls([CoreSummary.from_dict(c) for c in items])


def neuron_summaries(trace: Trace) -> list[CoreSummary]:
    """Every device-profile summary of a trace (``neuron.summary`` metadata), one per NeuronCore profile."""
    out = []
    for fact in trace.meta_all("neuron.summary"):
        for s in fact if isinstance(fact, list) else [fact]:
            if not isinstance(s, dict) or s.get("kind") == "system" or not isinstance(s.get("metrics"), dict):
                continue
            core = CoreSummary(s.get("profile_id"), s.get("device"), dict(s["metrics"]))
            core.derived = derive(core.metrics)
            core.throttling = throttling(core.metrics)
            core.findings = [f for rule in RULES if (f := rule(core)) is not None]
            out.append(core)
    return out


def _num(m: dict[str, Any], key: str) -> float | None:
    v = m.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def derive(m: dict[str, Any]) -> dict[str, Any]:
    """Figures computed from the metrics (seconds, bytes, fractions 0..1); None where an input is missing."""
    total = _num(m, "total_time")
    active = _num(m, "total_active_time")
    if active is None and total is not None and _num(m, "total_active_time_percent") is not None:
        active = total * float(m["total_active_time_percent"])
    d: dict[str, Any] = {
        "total_time_s": total, "active_time_s": active,
        "active_share_of_total": _ratio(active, total),
        "inactive_time_s": total - active if total is not None and active is not None else None,
        "mfu": _num(m, "mfu_estimated_percent"), "hfu": _num(m, "hfu_estimated_percent"),
        "mbu": _num(m, "mbu_estimated_percent"),
    }

    def busy_s(prefix: str) -> float | None:
        t = _num(m, f"{prefix}_active_time")
        pct = _num(m, f"{prefix}_active_time_percent")
        return t if t is not None else (pct * total if pct is not None and total is not None else None)

    d["engine_share_of_active"] = {e: _ratio(busy_s(f"{e}_engine"), active) for e in ENGINES
                                   if busy_s(f"{e}_engine") is not None}
    count, total_bytes = _num(m, "dma_transfer_count"), _num(m, "dma_transfer_total_bytes")
    d["dma"] = {"transfers": count, "bytes": total_bytes,
                "average_bytes": _num(m, "dma_transfer_average_bytes") or _ratio(total_bytes, count),
                "active_share_of_active": _ratio(busy_s("dma"), active)}
    read, write = _num(m, "hbm_read_bytes"), _num(m, "hbm_write_bytes")
    d["hbm"] = {"read_bytes": read, "write_bytes": write, "read_bytes_per_s": _ratio(read, active),
                "write_bytes_per_s": _ratio(write, active)}
    reload = _num(m, "spill_reload_bytes")
    d["spill"] = {"save_bytes": _num(m, "spill_save_bytes"), "reload_bytes": reload,
                  "reload_share_of_hbm_reads": _ratio(reload, read)}
    cc = busy_s("cc_op")
    if cc is None:
        cc = _num(m, "cc_op_time")
    d["collectives"] = {"count": _num(m, "cc_op_count"), "active_time_s": cc, "share_of_active": _ratio(cc, active)}
    d["flops"] = {"model": _num(m, "model_flops"), "hardware": _num(m, "hardware_flops"),
                  "transpose": _num(m, "transpose_flops"),
                  "transpose_share_of_hardware": _ratio(_num(m, "transpose_flops"), _num(m, "hardware_flops")),
                  "model_share_of_active": _ratio(d["mfu"], _num(m, "tensor_engine_active_time_percent"))}
    return d


def throttling(m: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Throttle figures per **physical** core, from the dynamic ``throttle_*_nc<k>_*`` keys."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in sorted(m.items()):
        hit = THROTTLE_KEY.match(key)
        if hit is None or _num(m, key) is None:
            continue
        core = out.setdefault(f"nc{hit.group('core')}", {})
        what = "active_time" if hit.group("what").startswith("active") else "avg_util_limit"
        name = f"{what}_{'ns' if hit.group('unit') == 'time_ns' else 'fraction'}"
        if hit.group("type"):
            core.setdefault("by_type", {}).setdefault(hit.group("type"), {})[name] = value
        else:
            core[name] = value
    return out


def _finding(rule: str, severity: str, title: str, evidence: str, advice: str, core: CoreSummary) -> dict[str, Any]:
    return {"id": rule, "severity": severity, "title": title, "evidence": evidence, "advice": advice,
            "device": core.device}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _raw(value: Any) -> str:
    """A summary key's value in a sentence: 4 significant digits (the exact value stays in --json)."""
    try:
        return f"{float(value):.4g}"
    except (TypeError, ValueError):
        return str(value)


def _low_model_flops(c: CoreSummary) -> dict[str, Any] | None:
    share = c.derived["flops"]["model_share_of_active"]
    if share is None or share >= MODEL_VS_ACTIVE_FLOPS:
        return None
    return _finding("low_model_flops", "warning", "The tensor engine is active but does little model work",
                    f"model FLOPs are {_pct(share)} of active FLOPs (mfu_estimated_percent "
                    f"{_raw(c.metrics['mfu_estimated_percent'])} / tensor_engine_active_time_percent "
                    f"{_raw(c.metrics['tensor_engine_active_time_percent'])}, fractions as Neuron writes them; "
                    "Neuron flags below 50%)",
                    "Make instructions use the whole tensor engine (larger tiles) and pipeline them.", c)


def _transpose(c: CoreSummary) -> dict[str, Any] | None:
    share = c.derived["flops"]["transpose_share_of_hardware"]
    if share is None or share <= TRANSPOSE_SHARE:
        return None
    return _finding("transpose_flops", "warning", "Transposes take a large share of tensor-engine FLOPs",
                    f"transpose_flops {_raw(c.metrics['transpose_flops'])} are {_pct(share)} of hardware_flops "
                    f"{_raw(c.metrics['hardware_flops'])} (Neuron flags above 10%)",
                    "Improve the memory layout to avoid transposes (keep the contraction dim on partitions).", c)


def _spill(c: CoreSummary) -> dict[str, Any] | None:
    share = c.derived["spill"]["reload_share_of_hbm_reads"]
    if share is None or share <= SPILL_RELOAD_SHARE:
        return None
    return _finding("spill_reload", "warning", "Spill reloads are a large share of HBM reads",
                    f"spill_reload_bytes {units.size(float(c.metrics['spill_reload_bytes']))} are {_pct(share)} of "
                    f"hbm_read_bytes {units.size(float(c.metrics['hbm_read_bytes']))} (Neuron flags above 25%)",
                    "Check data dependencies that keep tensors live; smaller tiles or recompute avoid SBUF spills.",
                    c)


def _throttle(c: CoreSummary) -> dict[str, Any] | None:
    """Only a non-zero ``throttle_active_nc<k>_time_ns`` is evidence of throttling: a 2.32 summary-json on
    trn3 wrote ``throttle_active_nc4_time_ns`` 0 and ``throttle_avg_util_limit_nc4_percent`` 1 (no limit)
    beside per-type shares that are not zero, whose meaning Neuron does not document (neuron.md addendum 2);
    those shares are shown as the file names them, never turned into a finding."""
    hot = {core: (f["active_time_ns"], f.get("avg_util_limit_fraction")) for core, f in c.throttling.items()
           if isinstance(f.get("active_time_ns"), int | float) and f["active_time_ns"] > 0}
    if not hot:
        return None
    parts = []
    for core, (ns, limit) in hot.items():
        total = c.derived.get("total_time_s")
        share = f" ({_pct(ns / 1e9 / total)} of total_time)" if total else ""
        cap = f", average utilisation limit {_pct(limit)}" if isinstance(limit, int | float) else ""
        parts.append(f"physical {core}: {units.duration(ns)}{share}{cap}")
    return _finding("throttling", "warning", "The device was throttled",
                    "throttle_active_nc<k>_time_ns is non-zero on " + "; ".join(parts)
                    + " (throttle_* keys name physical cores)",
                    "Investigate the cause (power or thermal limits of the instance); compare with an "
                    "unthrottled run.", c)


def _small_dma(c: CoreSummary) -> dict[str, Any] | None:
    avg = c.derived["dma"]["average_bytes"]
    if avg is None or avg >= SMALL_DMA_BYTES:
        return None
    return _finding("small_dma", "info", "DMA transfers are small",
                    f"average DMA transfer {avg:,.0f} B over {c.derived['dma']['transfers']:,.0f} transfers "
                    "(HBM bandwidth needs payloads of 4 KiB or more)",
                    "Move larger contiguous blocks per DMA (bigger tiles, contiguous layouts).", c)


def _low_mfu(c: CoreSummary) -> dict[str, Any] | None:
    mfu = c.derived["mfu"]
    if mfu is None or mfu >= LOW_MFU:
        return None
    return _finding("low_mfu", "info", "Model FLOPs utilization is low",
                    f"MFU {_pct(mfu)} (mfu_estimated_percent {_raw(c.metrics['mfu_estimated_percent'])}, a "
                    "fraction as Neuron writes it; neurontrace flags below 10%)",
                    "See the engine shares and DMA figures above for where the active time went.", c)


RULES = (_low_model_flops, _transpose, _spill, _throttle, _small_dma, _low_mfu)


# -- the diagnose plug-ins (contract: analysis/contract.py) --------------------------------------


def _compute(ctx: Context) -> NeuronSummary:
    # Always present in --json (an empty list without Neuron summaries), so the schema has one shape.
    return NeuronSummary(neuron_summaries(ctx.trace))


def _text(summary: NeuronSummary) -> list[str]:
    out = []
    for c in summary.cores:
        m, d = c.metrics, c.derived
        where = c.device or c.profile_id or "device profile"
        pid = f" ({c.profile_id})" if c.profile_id else ""
        out.append(f"{where}{pid}: total {units.seconds(d['total_time_s'])}, active "
                   f"{units.seconds(d['active_time_s'])} ({units.share(d['active_share_of_total'])} of total; "
                   "shares below are of active time)")
        out.append(f"  MFU {units.share(d['mfu'])}, HFU {units.share(d['hfu'])}, MBU {units.share(d['mbu'])}; "
                   "engines " + (", ".join(f"{e} {units.share(v)}" for e, v in d["engine_share_of_active"].items())
                                 or "-"))
        dma = d["dma"]
        if dma["transfers"] is not None or dma["bytes"] is not None:
            out.append(f"  DMA {dma['transfers'] or 0:,.0f} transfers, {units.size(dma['bytes'])} (average "
                       f"{units.size(dma['average_bytes'])}), active {units.share(dma['active_share_of_active'])}")
        hbm, spill = d["hbm"], d["spill"]
        if hbm["read_bytes"] is not None or hbm["write_bytes"] is not None:
            out.append(f"  HBM read {units.size(hbm['read_bytes'])} ({units.rate(hbm['read_bytes_per_s'])}), write "
                       f"{units.size(hbm['write_bytes'])} ({units.rate(hbm['write_bytes_per_s'])}); spill save "
                       f"{units.size(spill['save_bytes'])}, reload {units.size(spill['reload_bytes'])}")
        cc = d["collectives"]
        if cc["count"] or cc["active_time_s"]:
            out.append(f"  collectives {cc['count'] or 0:,.0f} ops, active {units.seconds(cc['active_time_s'])} "
                       f"({units.share(cc['share_of_active'])})")
        for core, t in c.throttling.items():
            kinds = ", ".join(f"{k} {units.share(v.get('active_time_fraction'))}" for k, v in t.get("by_type", {}).items())
            ns = t.get("active_time_ns")
            out.append(f"  throttling on physical {core}: " + "; ".join(
                x for x in (f"active {units.duration(ns)}" if ns is not None else "",
                            f"util limit {units.share(t.get('avg_util_limit_fraction'))}"
                            if "avg_util_limit_fraction" in t else "", kinds) if x))
        versions = [f"{k.removesuffix('_version')} {m[k]}" for k in ("profiler_version", "runtime_version",
                                                                    "compiler_version") if k in m]
        if "instance_type" in m or versions:
            out.append(f"  {m.get('instance_type', '')} " + ", ".join(versions))
        ultra = [f"{k.removeprefix('ultraserver_')} {m[k]}" for k in ("ultraserver_type", "ultraserver_id",
                 "ultraserver_size", "ultraserver_instance_index") if k in m]
        if ultra:  # trn3 UltraServer placement (2.32 summary-json, neuron.md addendum 2)
            out.append("  UltraServer " + ", ".join(ultra))
        out.append(f"  {len(m)} metrics as written in the file: `diagnose --json` → neuron_summary[].metrics")
    return out


def _findings(ctx: Context) -> list[Finding]:
    summary: NeuronSummary | None = ctx.sections.get(SECTION.key)
    out = [Finding.from_dict(f) for c in (summary.cores if summary else []) for f in c.findings]
    # Throttling seen as Throttle rows of a device profile, where no summary key already said so.
    said = {f.device for f in out if f.id == "throttling"}
    for d in ctx.devices:
        w = engine_waits.of_device(d)
        if w is not None and w.throttled_ns > 0 and d.device not in said:
            out.append(Finding("throttling", "warning", "The device was throttled",
                               f"throttled for {units.duration(w.throttled_ns)} "
                               f"({units.share(w.throttled_ns / max(1, d.window_ns))}) of {d.device}'s window "
                               "(Throttle rows)",
                               "Investigate the cause (power or thermal limits of the instance); compare with an "
                               "unthrottled run.", d.device, d.rank))
    return out


def merge(parts: list[NeuronSummary]) -> NeuronSummary:
    """One rank's summaries from its time slices': Neuron's per-NeuronCore figures are whole-run summaries read
    from the metadata (``neuron.summary``), which every slice of the rank carries whole: the first slice's."""
    return parts[0]


SECTION = Section("neuron_summary", "Neuron summary", _compute, to_json=lambda v: v.as_list(),
                  from_json=NeuronSummary.from_list, text=_text,
                  combine=lambda parts: NeuronSummary([c for p in parts for c in p.cores]),  # every rank's cores
                  merge=merge)
FINDINGS = FindingFamily("Neuron summary rules (Neuron Explorer) and throttling", _findings)
