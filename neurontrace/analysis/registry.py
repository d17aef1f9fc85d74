"""The registry of analyses ``diagnose`` runs beyond the core attribution (contract: analysis/contract.py).

To add a section or a finding family: write its module, then add one line below. Order matters:
sections may read the sections listed before them; findings run after every section.
"""

from __future__ import annotations

from neurontrace.analysis import (
    compile,
    compile_findings,
    critical_path,
    cross_rank,
    dominant,
    engine_waits,
    findings,
    graph_replay,
    launch,
    load_warnings,
    malformed,
    memory,
    memory_findings,
    neuron_summary,
    ops,
    overlap,
    phases,
)
from neurontrace.analysis.contract import DeviceSection, FindingFamily, Section

DEVICE_SECTIONS: tuple[DeviceSection, ...] = (
    dominant.SECTION,  # the ops, annotations and kernels that cover most of the window
    engine_waits.SECTION,  # Neuron: what engine waits were waiting for
    ops.SECTION,  # per-op FLOPs, bytes and % of the device's peak
    overlap.SECTION,  # how much communication and copying runs under compute
    launch.SECTION,  # launch-to-start delay and queue depth
    graph_replay.SECTION,  # CUDA/HIP graph launches of the driving host
)

SECTIONS: tuple[Section, ...] = (
    malformed.SECTION,  # malformed events found before attribution, and the rule applied to each kind
    load_warnings.SECTION,  # what loading warned about (undecoded profiles, skipped events, malformed), first
    phases.SECTION,  # compile/load vs execution, steps
    compile.SECTION,  # compile attempts, recompiles, graph breaks, caches, failures (trace ranges and compile logs)
    cross_rank.SECTION,  # collectives matched across ranks: arrival skew, waits, bandwidth; step skew
    critical_path.SECTION,  # the chain of dependent work that sets the step time (reads cross_rank's records)
    neuron_summary.SECTION,  # Neuron: per-NeuronCore summary metrics, derived figures
    memory.SECTION,  # allocator peaks, live at the peak, growth per step, OOMs (docs/memory.md)
)

FINDINGS: tuple[FindingFamily, ...] = (
    findings.DEVICE,
    findings.FALLBACK,
    findings.PHASES,
    findings.COLLECTIVES,
    cross_rank.FINDINGS,  # straggler, low_bus_bandwidth
    neuron_summary.FINDINGS,  # Neuron Explorer's summary rules, throttling
    ops.FINDINGS,  # low_efficiency
    launch.FINDINGS,  # launch_bound
    memory_findings.FINDINGS,  # memory_growth, large_temporary, memory_near_capacity, _fragmentation, out_of_memory
    critical_path.FINDINGS,  # path_small_kernels, path_sync, job_waits_on
    compile_findings.FINDINGS,  # recompiles, recompile_limit, graph_breaks, compile_failed, neuron_*, divergence
)
