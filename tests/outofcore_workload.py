"""The real CPU run of tests/test_dataset_stream.py: a small training loop profiled with everything on.

``python tests/outofcore_workload.py DIR`` writes ``DIR/train.pt.trace.json``: 6 recorded steps of an MLP
with ``with_stack`` (python_function frames), ``profile_memory`` (memory instants) and ``record_shapes``,
so streaming it into many parts crosses frames, ops, memory events and steps over part boundaries.
"""

from __future__ import annotations

import sys

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

STEPS = 6


def main(out: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True, record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=STEPS, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
        for _ in range(STEPS + 2):
            with record_function("forward"):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward has no annotations
            opt.step()
            prof.step()


if __name__ == "__main__":
    main(f"{sys.argv[1]}/train.pt.trace.json")
