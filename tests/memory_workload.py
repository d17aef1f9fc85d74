"""The real CPU workload of tests/test_memory.py: profile_memory=True over 5 recorded steps.

Each step allocates a 64 MiB temporary and frees it with ``del``; with ``leak`` it also keeps an 8 MiB
tensor alive in a list (a leak of known size), without it the tensor is dropped at once. Run as a script,
``python tests/memory_workload.py DIR``, it writes both runs: ``DIR/leak.pt.trace.json`` and
``DIR/noleak.pt.trace.json`` (one process: torch is imported once).
"""

from __future__ import annotations

import sys

import torch
from torch.profiler import ProfilerActivity, profile, schedule

MIB = 1024 * 1024
TEMP_BYTES = 64 * MIB
LEAK_BYTES = 8 * MIB
STEPS = 5
kept: list[torch.Tensor] = []


def train_step(x: torch.Tensor, w: torch.Tensor, leak: bool) -> torch.Tensor:
    tmp = torch.empty(TEMP_BYTES // 4, dtype=torch.float32)  # the temporary ...
    tmp.fill_(1.0)
    y = (x @ w).sum() + tmp[:8].sum()
    del tmp  # ... freed here
    kept_now = torch.ones(LEAK_BYTES // 4, dtype=torch.float32)
    if leak:
        kept.append(kept_now)  # kept alive every step: the leak
    return y


def main(out: str, leak: bool) -> None:
    torch.manual_seed(0)
    x, w = torch.randn(64, 64), torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True,
                 schedule=schedule(wait=0, warmup=1, active=STEPS, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
        for _ in range(STEPS + 2):
            train_step(x, w, leak)
            prof.step()


if __name__ == "__main__":
    for kind in ("noleak", "leak"):  # the clean run first: CPU totals carry what an earlier run left
        main(f"{sys.argv[1]}/{kind}.pt.trace.json", kind == "leak")
        kept.clear()
