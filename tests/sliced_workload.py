"""The real CPU run of tests/test_sliced_sections.py (run once per session, in a subprocess of its own).

    python tests/sliced_workload.py OUT.pt.trace.json

Six profiled steps (torch.profiler with profile_memory=True and stacks, one ProfilerStep each): each step runs
a small function compiled with ``torch.compile(backend="eager", dynamic=False)``, fed a new shape in the first
three steps (Dynamo recompiles) and the last shape after, an 8 MiB tensor kept alive every step (a leak) and a
16 MiB temporary freed inside the step, and a matmul: a trace with steps, compiles, recompiles, compiled code
running, guard checks and allocator events, as the sections read them. The function is compiled once for
another shape before profiling, so the modules Dynamo imports on its first compile are imported outside the
trace (torch's export writes a module-level frame named ``<file>(0): "cpp.cxx"`` with its quotes unescaped: JSON
no parser reads).
"""

from __future__ import annotations

import sys

import torch
from torch.profiler import ProfilerActivity, profile, schedule

MIB = 1024 * 1024
STEPS = 6
SHAPES = (2, 3, 4, 4, 4, 4)
kept: list[torch.Tensor] = []


def scaled(x: torch.Tensor) -> torch.Tensor:
    return (x * 2.0).sin() + 1.0


def main(out: str) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    f = torch.compile(scaled, backend="eager", dynamic=False)
    f(torch.randn(1, 8))  # Dynamo's first compile, outside the trace
    w = torch.randn(128, 128)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True,
                 schedule=schedule(wait=0, warmup=0, active=STEPS, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
        for n in SHAPES:
            f(torch.randn(n, 8))
            tmp = torch.ones(16 * MIB // 4)
            y = (w @ w).sum() + tmp[:4].sum()
            del tmp
            kept.append(torch.ones(8 * MIB // 4))
            float(y)
            prof.step()


if __name__ == "__main__":
    main(sys.argv[1])
