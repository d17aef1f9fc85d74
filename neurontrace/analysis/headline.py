"""The one-line verdict at the top of every ``diagnose`` report, in words.

"the GPU cuda:0 is busy 91% of the window; elementwise kernels are 55% of that: fuse them". The same line
is ``headline`` in ``diagnose --json``, the ``runs list`` column and the viewer's title bar; it is
computed here only, from the attributed devices and the findings (never from a renderer).

The rule, on the device the report is about (the longest analysis window; among equal windows the least
busy, the one a user waits for):

- busy (compute) at least half the window: the largest class of its compute time
  (``compute.<class>`` of the attribution; where that names no class, as on a CPU device, the op
  table's largest class of kernel time) and what to do about that class;
- otherwise: the largest cause that is not compute, its share, and what to do about that cause;
- a job of several ranks with a straggler (cross_rank's finding) starts with it: which rank the others
  wait for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from neurontrace.analysis import ops
from neurontrace.analysis.attribution import DeviceAttribution
from neurontrace.analysis.contract import Finding
from neurontrace.causes import CAUSES, LABELS

BUSY = 0.5  # compute at least this share of the window: the device is busy, its work is the story

# What to do about the largest class of compute time (the classes of names.KERNEL_CLASSES and cpu_ops).
CLASS_ADVICE = {
    "elementwise": "fuse them (torch.compile)",
    "reduce": "fuse them with their neighbours (torch.compile)",
    "norm": "use fused norm kernels (torch.compile)",
    "triton": "tune the generated kernels (torch.compile mode=max-autotune)",
    "gemm": "see their % of peak with `neurontrace ops`",
    "conv": "see their % of peak with `neurontrace ops` (layout, dtype, cuDNN benchmark mode)",
    "attention": "use a fused attention kernel (scaled_dot_product_attention)",
    "cpu_ops": "see the ops behind it with `neurontrace ops`",
}
DEFAULT_CLASS_ADVICE = "see the ops behind them with `neurontrace ops`"
UNNAMED = ("cpu_ops", "other", "unknown")  # classes that say nothing about the work

# What to do when a cause other than compute holds the window.
CAUSE_ADVICE = {
    "collectives": "overlap communication with compute, or shrink it",
    "data_movement": "overlap copies with compute (pinned memory, non_blocking) or avoid them",
    "host_fallback": "move the fallback ops onto the device",
    "host_overhead": "the host is the bottleneck: launch more work per step (CUDA graphs, torch.compile, larger batches)",
    "idle": "nothing recorded explains the gap: profile the host too (CPU activity, with_stack)",
}
CPU_HOST_ADVICE = "Python and op dispatch hold the CPU: the top stalls name the lines"


def _op_class(d: DeviceAttribution) -> tuple[str, float] | None:
    """The largest named op class of the device's kernel time, from its op-efficiency section."""
    value: Any = d.sections.get(ops.SECTION.key)
    doc = value.as_dict() if hasattr(value, "as_dict") else value  # a dict now; a dataclass once converted
    classes = doc.get("classes") if isinstance(doc, dict) else None
    named = [c for c in classes or [] if c.get("op_class") not in UNNAMED and c.get("share")]
    if not named:
        return None
    top = max(named, key=lambda c: float(c["share"]))
    return str(top["op_class"]), float(top["share"])


def _device_words(d: DeviceAttribution) -> str:
    kind = d.device.split(":", 1)[0]
    what = {"cuda": "the GPU", "hip": "the GPU", "rocm": "the GPU", "neuron": "the NeuronCore", "cpu": "the CPU",
            "mtia": "the MTIA device"}.get(kind, "the device")
    name = "" if what == "the CPU" and d.device == "cpu" else f" {d.device}"
    rank = "" if d.rank is None else f" of rank {d.rank}"
    return f"{what}{name}{rank}"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def headline(devices: Sequence[DeviceAttribution], findings: Sequence[Finding]) -> str:
    """The verdict in one line (see the module's rule)."""
    timed = [d for d in devices if d.window_ns > 0]
    if not timed:
        worst = findings[0].title if findings else None
        return "no device timeline to attribute" + (f"; {worst}" if worst else "")
    d = max(timed, key=lambda x: (x.window_ns, -x.causes_ns.get("compute", 0), -(x.rank or 0)))
    busy = d.fraction("compute")
    who = _device_words(d)
    if busy >= BUSY:
        classes = sorted(((k.split(".", 1)[1], v) for k, v in d.detail_ns.items()
                          if k.startswith("compute.") and v > 0), key=lambda kv: -kv[1])
        line = f"{who} is busy {_pct(busy)} of the window"
        unit = "ops" if d.device.startswith("cpu") else "kernels"
        share = None
        if classes and classes[0][0] not in UNNAMED and d.causes_ns["compute"]:
            share = classes[0][0], classes[0][1] / d.causes_ns["compute"]
        else:  # the attribution names no class (a CPU device's cpu_ops): the op table's classes
            share = _op_class(d)
        if share is not None:
            cls, frac = share
            line += f"; {cls} {unit} are {_pct(frac)} of that: {CLASS_ADVICE.get(cls, DEFAULT_CLASS_ADVICE)}"
    else:
        cause = max((c for c in CAUSES if c != "compute"), key=lambda c: d.causes_ns.get(c, 0))
        advice = CPU_HOST_ADVICE if cause == "host_overhead" and d.device.startswith("cpu") else CAUSE_ADVICE[cause]
        line = (f"{who} is busy only {_pct(busy)} of the window; the largest share is {LABELS[cause]}, "
                f"{_pct(d.fraction(cause))}: {advice}")
    straggler = next((f for f in findings if f.id == "straggler"), None)
    if straggler is not None:  # a job-level verdict comes first
        line = f"{straggler.title}; {line}"
    return line
