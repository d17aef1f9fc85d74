"""Device activity that was launched but not recorded: kernel launches on the host, no kernel or copy on a device.

torch.profiler records device work through the accelerator's activity API (CUPTI on CUDA, roctracer/rocprofiler
on ROCm). When that is off (``activities`` without ``ProfilerActivity.CUDA``) or fails (CUPTI errors, a missing
driver permission), the trace still holds the host's launch calls, the launch flows' start markers and
``deviceProperties``, but no kernel or memcpy event. Attributing such a trace as a CPU-only run calls the host's
aten ops "compute" (77-99.7% on real traces): :func:`unrecorded` finds the case, attribution makes no device
verdict for it and the load warnings say how to record the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neurontrace import trace_facts
from neurontrace.analysis import names
from neurontrace.analysis.work import DEVICE_WORK
from neurontrace.columns import isin, matches, select
from neurontrace.trace import Trace

HOW_TO_RECORD = ("record it with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) "
                 "and check the profiler's own warnings for CUPTI / roctracer errors (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: "
                 "allow profiling for non-admin users, NVreg_RestrictProfilingToAdminUsers=0)")


@dataclass(frozen=True)
class Unrecorded:
    launches: int  # kernel launch / graph launch / async copy calls on the host
    flow_starts: int  # launch flows whose device end is missing
    devices: tuple[str, ...]  # from deviceProperties ("cuda:0 (NVIDIA A100-PG509-200)"), else the backend

    def message(self) -> str:
        where = ", ".join(self.devices) if len(self.devices) <= 2 else \
            f"{self.devices[0]} ... {self.devices[-1]} ({len(self.devices)} devices)"
        where = where or "the accelerator"
        flows = f" and {self.flow_starts} launch flows without a device end" if self.flow_starts else ""
        return (f"{self.launches} launches on {where} but no device activity was recorded (no kernel or memcpy "
                f"events{flows}): the device's activity tracing was off or failed, so no device verdict is made "
                f"from host events; {HOW_TO_RECORD}")


def unrecorded(trace: Trace) -> Unrecorded | None:
    """The launches of a trace with no device work at all (no kernel, copy, memset, collective or DMA; device-side
    sync records alone do not count), or None when device work was recorded or none was launched."""
    dev = trace.device_events
    if dev.num_rows and isin(dev["category"], list(DEVICE_WORK)).any():
        return None
    host = trace.system_events
    if not host.num_rows:
        return None
    calls = isin(host["category"], ["runtime", "driver"])
    calls &= matches(host["name"], names.DEVICE_LAUNCH) if calls.any() else calls
    launches = int(calls.sum())
    if not launches:
        return None
    launch_flows = select(trace.flows, "kind", "launch")
    flow_starts = int(np.sum(~launch_flows["dst_event_id"].is_valid().to_numpy(zero_copy_only=False)))
    return Unrecorded(launches, flow_starts, _devices(trace))


def _devices(trace: Trace) -> tuple[str, ...]:
    """The devices the inputs list, labelled with their names; else the backend."""
    backend = str(trace.meta("backend", "") or "")
    out = tuple(f"{d.id} ({d.name})" if d.name else d.id for d in trace_facts.devices(trace).values() if d.listed)
    return out or ((backend,) if backend and backend != "cpu" else ())
