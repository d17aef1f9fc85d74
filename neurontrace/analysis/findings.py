"""Findings: plain-language diagnoses with evidence and a suggested action.

Every rule and its threshold is listed here (and in docs/diagnose.md). A finding has a severity:
``info`` (worth knowing), ``warning`` (costs real time), ``error`` (the run is mostly wasted or
not on the accelerator). ``neurontrace diagnose --fail-on SEVERITY`` exits non-zero when any
finding reaches that severity.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from neurontrace import units
from neurontrace.analysis import cross_rank, dominant, graph_replay, names, phases
from neurontrace.analysis.attribution import DeviceAttribution
from neurontrace.analysis.contract import SEVERITIES, Context, Finding, FindingFamily
from neurontrace.analysis.dominant import Dominant
from neurontrace.analysis.fallback import FallbackOp
from neurontrace.analysis.phases import Phases

__all__ = ["SEVERITIES", "Finding", "worst"]

FALLBACK_WARN = 0.01  # host fallback above 1% of a device's window
FALLBACK_ERROR = 0.10
EXPOSED_COLLECTIVES = 0.15  # collectives not hidden behind compute
EXPOSED_DATA_MOVEMENT = 0.15
HOST_BOUND = 0.30  # launch + dispatch + Python above this share of the window ...
HOST_BOUND_COMPUTE = 0.50  # ... while compute is below this share
STARTUP_SHARE = 0.10  # start-up (context creation, module loading) above this share of the window
INPUT_BOUND = 0.10  # the device idle while the host waits on the input pipeline, above this share
STEP_OUTLIER = 2.0  # a steady-state step longer than this multiple of the steady median ...
STEP_OUTLIER_MIN_STEPS = 4  # ... among at least this many steady-state steps
HOST_WAIT_SHARE = 0.10  # the host sleeping or blocked (time.sleep, Event.wait) while the device idles
SYNC_SHARE = 0.10  # host synchronizations (.item(), cudaStreamSynchronize) stalling the device
IDLE_SHARE = 0.30  # unexplained idle time
COMPILE_DOMINATES = 0.50  # compile + load above half of the profiled time
FIRST_STEP_SLOW = 3.0  # first step slower than this multiple of the steady-state median
COLLECTIVE_OUTLIER = 1.5  # a collective slower than this multiple of its group's median
# Neuron summary rules and throttling: analysis/neuron_summary.py.


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def device_findings(a: DeviceAttribution, graphs: bool = False, waiting: str | None = None) -> list[Finding]:
    """The rules over one device's causes; ``graphs``: the host replays CUDA/HIP graphs; ``waiting``: the
    advice for exposed collectives when most of their time is ranks waiting for a straggler
    (:func:`cross_rank.waiting_advice`), given by the caller so that this family's advice is decided here,
    once, never rewritten after."""
    out = []
    f = a.fraction
    detail = a.detail_ns
    win = a.window_ns or 1
    if f("host_fallback") > FALLBACK_WARN:
        out.append(Finding(
            "host_fallback", "error" if f("host_fallback") > FALLBACK_ERROR else "warning",
            "Ops fell back to the CPU while the device waited",
            f"{_pct(f('host_fallback'))} of {a.device}'s window is host fallback",
            "Replace or rewrite the fallback ops listed below with device-supported ones; on TorchNeuron "
            "set TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1 and check the fallback log.", a.device))
    if f("collectives") > EXPOSED_COLLECTIVES:
        out.append(Finding(
            "exposed_collectives", "warning", "Communication is not hidden behind compute",
            f"{_pct(f('collectives'))} of {a.device}'s window is collectives with no compute running",
            waiting or "Overlap communication with compute (bucketed/async all-reduce, FSDP prefetch), or reduce "
            "message volume (gradient compression, larger buckets).", a.device))
    if f("data_movement") > EXPOSED_DATA_MOVEMENT:
        top = max((k for k in detail if k.startswith("data_movement.")), key=detail.__getitem__, default="")
        out.append(Finding(
            "exposed_data_movement", "warning", "The device waits on data movement",
            f"{_pct(f('data_movement'))} of {a.device}'s window is copies/DMA with no compute ({top} largest)",
            "Use pinned memory and non_blocking copies, prefetch the next batch, keep tensors on the device; "
            "on Neuron, check DMA sizes and spills.", a.device))
    feeding = sum(detail.get(f"host_overhead.{k}", 0) for k in ("launch", "dispatch", "python"))
    if feeding / win > HOST_BOUND and f("compute") < HOST_BOUND_COMPUTE:
        advice = ("Batch more work per launch: torch.compile / CUDA graphs, larger batches, fewer small ops."
                  if not graphs else "The trace already replays CUDA/HIP graphs: move the remaining per-step "
                  "Python and op dispatch into the graph (or torch.compile), batch more work per step.")
        out.append(Finding(
            "host_bound", "warning", "The host cannot feed the device fast enough (launch/dispatch bound)",
            f"{_pct(feeding / win)} of {a.device}'s window is the host launching, dispatching ops or running "
            f"Python while the device idles, against {_pct(f('compute'))} compute", advice, a.device))
    startup = detail.get("host_overhead.startup", 0) + detail.get("host_overhead.load", 0)
    if startup / win > STARTUP_SHARE:
        out.append(Finding(
            "startup_overhead", "warning", "Start-up (context creation, module loading) is inside the profile",
            f"{_pct(startup / win)} of {a.device}'s window is start-up: runtime calls over "
            f"{names.STARTUP_CALL_NS / 1e6:.0f} ms (the first CUDA/HIP call, first launches) and module/NEFF loading",
            "Profile steady-state steps (torch.profiler schedule with wait/warmup), warm the device up before "
            "profiling; it is not per-step cost.", a.device))
    pipeline = detail.get("host_overhead.input_pipeline", 0)
    if pipeline / win > INPUT_BOUND:
        out.append(Finding(
            "input_bound", "warning", "The device waits for input data",
            f"{_pct(pipeline / win)} of {a.device}'s window is the host in the data loader while the device idles",
            "Load data in the background: DataLoader(num_workers>0, pin_memory=True, persistent_workers=True, "
            "prefetch_factor), move decoding/augmentation off the training loop or onto the device.", a.device))
    sync = detail.get("host_overhead.sync", 0)
    if sync / win > SYNC_SHARE:
        out.append(Finding(
            "host_sync", "warning", "Host synchronizations stall the device",
            f"{_pct(sync / win)} of {a.device}'s window is the host waiting in synchronizing calls "
            "(.item(), .cpu(), cudaStreamSynchronize)",
            "Avoid reading device values on the host every step; log metrics every N steps.", a.device))
    wait = detail.get("host_overhead.wait", 0)
    if wait / win > HOST_WAIT_SHARE:
        out.append(Finding(
            "host_wait", "warning", "The host sleeps or blocks while the device idles",
            f"{_pct(wait / win)} of {a.device}'s window is the host in sleeps or blocking waits (time.sleep, "
            "Event.wait, Lock.acquire, select)",
            "Take the sleep or wait out of the step or move it off the training thread; if the host waits on "
            "another process (a loader, a server, a peer rank), look at that one. Not launch overhead: "
            "torch.compile or CUDA graphs will not help.", a.device))
    unrecorded = detail.get("host_overhead.unrecorded", 0)
    if unrecorded / win > IDLE_SHARE:
        out.append(Finding(
            "host_unrecorded", "info", "The device waits for host work the trace did not record",
            f"{_pct(unrecorded / win)} of {a.device}'s window are gaps closed by work whose launch began inside "
            "the gap, on a host with no CPU ops recorded",
            "Profile the CPU too (activities=[ProfilerActivity.CPU, ...], with_stack=True) to see what the host "
            "did before each launch.", a.device))
    if f("idle") > IDLE_SHARE:
        out.append(Finding(
            "unexplained_idle", "info", "The device is idle and nothing recorded explains why",
            f"{_pct(f('idle'))} of {a.device}'s window has no device work and no host work recorded",
            "Profile with with_stack=True and the CPU activity to see what the host was doing.", a.device))
    _name_what_ran(a, out)
    return out


# What each finding's evidence names from the dominant section: the device's kernels, or the host's ops/ranges.
_WHAT_RAN: dict[str, tuple[str, ...]] = {"exposed_collectives": ("kernel",), "exposed_data_movement": ("kernel",),
                                         "host_wait": ()}  # a sleep is a Python frame, not an op: named already


def _name_what_ran(a: DeviceAttribution, found: list[Finding]) -> None:
    """Append to each finding's evidence what ran most in the window (analysis/dominant.py)."""
    value: Dominant | None = a.sections.get(dominant.SECTION.key)
    if value is None:
        return
    for f in found:
        kinds = _WHAT_RAN.get(f.id, ("op", "annotation"))
        if not kinds:
            continue
        what = value.describe(*kinds) or value.describe("op", "annotation")
        if what:
            f.evidence += f"; what ran most: {what}"


def fallback_findings(ops: Iterable[FallbackOp]) -> list[Finding]:
    out = []
    for op in ops:
        if op.found_by == "signature" and op.device_idle_ns > 0:
            out.append(Finding(
                "fallback_suspect", "info", f"{op.name} may be running on the CPU",
                f"{op.calls} call(s) between a device→host and a host→device copy while the device idled "
                f"{units.duration(op.device_idle_ns)}",
                "Check whether this op is supported on the device; pass --fallback-ops or --fallback-log "
                "to confirm.", None))
    return out


def phase_findings(p: Phases) -> list[Finding]:
    out = []
    span = max(1, p.trace_end_ns - p.trace_start_ns)
    if (p.compile_ns + p.load_ns) / span > COMPILE_DOMINATES:
        out.append(Finding(
            "compile_dominates", "warning", "Compilation and loading dominate the profiled time",
            f"compile {units.duration(p.compile_ns)} + load {units.duration(p.load_ns)} of {units.duration(span)}",
            "Profile steady-state steps (a schedule with warmup), cache compiled graphs (Neuron persistent "
            "cache, torch.compile cache), and avoid shape changes that trigger recompiles.", None))
    first, steady = p.first_step_ns, p.steady_median_ns
    if first and steady and first > FIRST_STEP_SLOW * steady:
        out.append(Finding(
            "slow_first_step", "info", "The first step is much slower than the steady state",
            f"first step {units.duration(first)} vs median {units.duration(steady)} of the following steps",
            "Expected with compilation or warm-up; exclude it from throughput numbers.", None))
    return out


def step_outliers(p: Phases) -> list[Finding]:
    """Steady-state steps (after the first) longer than STEP_OUTLIER x their median."""
    steady = p.steady_steps  # compile steps are not steady state (the compile section reports them)
    if len(steady) < STEP_OUTLIER_MIN_STEPS:
        return []
    med = p.steady_median_ns or 0
    slow = [s for s in steady if med and s["dur_ns"] > STEP_OUTLIER * med]
    if not slow:
        return []
    worst_step = max(slow, key=lambda s: s["dur_ns"])
    return [Finding(
        "step_outliers", "info", "Some steps take much longer than the others",
        f"{len(slow)} of {len(steady)} steady-state steps took more than {STEP_OUTLIER:g}x the median "
        f"({med / 1e6:.2f} ms); slowest: step {worst_step['step']} at {worst_step['dur_ns'] / 1e6:.2f} ms",
        "Look at what that step did differently: a recompile, a checkpoint or evaluation, garbage collection, a "
        "data-loader stall, or another process on the machine.", None)]


def collective_outliers(groups: dict[str, list[int]]) -> list[Finding]:
    """Collectives slower than COLLECTIVE_OUTLIER x their group's median (same op and size)."""
    out = []
    for key, durs in groups.items():
        if len(durs) < 3:
            continue
        med = sorted(durs)[len(durs) // 2]
        slow = [d for d in durs if med and d > COLLECTIVE_OUTLIER * med]
        if slow:
            out.append(Finding(
                "collective_outliers", "info", f"Some {key} collectives are much slower than their peers",
                f"{len(slow)} of {len(durs)} took more than {COLLECTIVE_OUTLIER}x the median "
                f"({units.duration(med)}); slowest {units.duration(max(slow))}",
                "Look for stragglers: rank skew, a slow link, or a rank arriving late (see cross-rank skew).",
                None))
    return out


def collective_groups(cross_rank: Any) -> dict[str, list[int]]:
    """Durations of every rank's collectives (the cross_rank section), grouped by name and message size."""
    groups: dict[str, list[int]] = defaultdict(list)
    for c in cross_rank.collectives if cross_rank is not None else []:
        key = c["name"].split("(")[0] + (f" ({c['bytes']} bytes)" if c["bytes"] is not None else "")
        groups[key] += c["dur_ns"]
    return dict(groups)


# The finding families of this module (registered in analysis/registry.py).
def _devices(ctx: Context) -> list[Finding]:
    # Exposed collectives that are mostly waiting for a late rank get advice about that rank, not the transfer.
    waiting = cross_rank.waiting_advice(ctx.sections.get(cross_rank.SECTION.key))
    out = []
    for d in ctx.devices:
        for f in device_findings(d, graph_replay.replays(d), waiting):
            f.rank = d.rank  # which rank's device, in a job (the report names it)
            out.append(f)
    return out


DEVICE = FindingFamily("device causes", _devices)
FALLBACK = FindingFamily("fallback suspects", lambda ctx: fallback_findings(ctx.fallback))
PHASES = FindingFamily("phases", lambda ctx: phase_findings(ctx.sections[phases.SECTION.key])
                       + step_outliers(ctx.sections[phases.SECTION.key]))
COLLECTIVES = FindingFamily("collective outliers", lambda ctx: collective_outliers(
    collective_groups(ctx.sections.get(cross_rank.SECTION.key))))


def worst(findings: Iterable[Finding]) -> str | None:
    ranks = [SEVERITIES.index(f.severity) for f in findings]
    return SEVERITIES[max(ranks)] if ranks else None
