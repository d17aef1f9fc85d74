"""Device activity that was not recorded: the one rule for an accelerator trace without device work.

torch.profiler records device work through the accelerator's activity API (CUPTI on CUDA, roctracer/rocprofiler
on ROCm). When that is off (``activities`` without ``ProfilerActivity.CUDA``) or fails (CUPTI errors, a missing
driver permission), the trace still holds the host's launch calls, the launch flows' start markers and the
device list, but no kernel or memcpy event. TorchNeuron's eager mode writes no device events into its Kineto
trace at all. :func:`unrecorded` finds both shapes, and says what follows:

- **launches without device work** (#24): attributing such a trace as a CPU-only run calls the host's aten ops
  "compute" (77-99.7% on real traces), so attribution makes no device verdict for it;
- **an accelerator trace without device events and without launches** (#30; the parser records the fact,
  ``schema.DEVICE_ACTIVITY``, and files the ``aten::to`` ops that move tensors to the device as transfers): the
  host side is all there is, and the verdict is the host's.

Either way the load warnings say it once, with how to record the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neurontrace import schema, trace_facts
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
    devices: tuple[str, ...]  # the listed devices ("cuda:0 (NVIDIA A100-PG509-200)"), else the backend
    backend: str = ""
    transfers: int | None = None  # aten::to ops the parser filed as moves to the device (None: no parser fact)
    shapes: bool = True  # op inputs were recorded (telling a move from a cast needs them)

    @property
    def no_verdict(self) -> bool:
        """Device work was launched and not recorded: no verdict is made from host events."""
        return self.launches > 0

    def message(self) -> str:
        where = ", ".join(self.devices) if len(self.devices) <= 2 else \
            f"{self.devices[0]} ... {self.devices[-1]} ({len(self.devices)} devices)"
        where = where or "the accelerator"
        if self.transfers:
            moved = (f"; {self.transfers} aten::to op(s) that move tensors to the device are counted as transfers, "
                     "not CPU compute")
        elif self.transfers == 0 and not self.shapes:
            moved = "; record_shapes=True would let aten::to ops that move tensors to the device be told from casts"
        else:
            moved = ""
        if self.backend in ("neuron", "privateuse1"):
            how = ("TorchNeuron's eager mode writes none into the Kineto trace: capture the device profile too "
                   "(NeuronConfig or NEURON_RT_INSPECT_ENABLE=1) and load the capture folder")
        else:
            how = HOW_TO_RECORD
        if self.no_verdict:
            flows = f" and {self.flow_starts} launch flows without a device end" if self.flow_starts else ""
            return (f"{self.launches} launches on {where} but no device activity was recorded (no kernel or memcpy "
                    f"events{flows}): the device's activity tracing was off or failed, so no device verdict is made "
                    f"from host events{moved}; {how}")
        return (f"a {self.backend or 'device'} trace with no device activity recorded (no device events){moved}: "
                f"the report covers the host side; {how}")


def unrecorded(trace: Trace) -> Unrecorded | None:
    """What was not recorded, or None when device work was recorded (a kernel, copy, memset, collective or DMA;
    device-side sync records alone do not count) or the trace says of no device: launches of device work on the
    host, or a parser's fact that an accelerator trace holds no device events (schema.DEVICE_ACTIVITY)."""
    dev = trace.device_events
    if dev.num_rows and isin(dev["category"], list(DEVICE_WORK)).any():
        return None
    host = trace.system_events
    if not host.num_rows:
        return None
    calls = isin(host["category"], ["runtime", "driver"])
    calls &= matches(host["name"], names.DEVICE_LAUNCH) if calls.any() else calls
    launches = int(calls.sum())
    facts = [f for f in trace.meta_all(schema.DEVICE_ACTIVITY.key) if isinstance(f, dict) and not f.get("recorded")]
    if not launches and not facts:
        return None
    launch_flows = select(trace.flows, "kind", "launch")
    flow_starts = int(np.sum(~launch_flows["dst_event_id"].is_valid().to_numpy(zero_copy_only=False)))
    backend = str(trace.meta("backend", "") or "")
    transfers = sum(int(f.get("transfers") or 0) for f in facts) if facts else None
    shapes = any(bool(f.get("shapes")) for f in facts) if facts else True
    return Unrecorded(launches, flow_starts, _devices(trace, backend), backend, transfers, shapes)


def _devices(trace: Trace, backend: str) -> tuple[str, ...]:
    """The devices the inputs list, labelled with their names; else the backend."""
    out = tuple(f"{d.id} ({d.name})" if d.name else d.id for d in trace_facts.devices(trace).values() if d.listed)
    return out or ((backend,) if backend and backend != "cpu" else ())
