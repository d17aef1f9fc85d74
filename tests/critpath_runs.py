"""A real 4-process gloo job for the critical-path tests (run once per session in a subprocess).

    python tests/critpath_runs.py OUT

Each rank trains a small MLP under torch.profiler (CPU); every step all-reduces the gradients *asynchronously*
while the rank computes something independent (``overlap_compute``, OVERLAP_S of matmuls), then waits:
two independent branches, the collective and the compute, whichever is longer sets the step. Rank SLOW_RANK sleeps
SLEEP_S before backward (``sleep_before_backward``), so it arrives last at every all-reduce: the other ranks' comm
branch (waiting for it) is the longer one, its own is short. The marks are record_function ranges (annotations,
not work): the path goes through them only because of the dependencies. One Kineto file per rank under OUT.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function, schedule

WORLD = 4
SLOW_RANK = 2
SLEEP_S = 0.2
STEPS = 4  # wait 1, warmup 1, active 2
OVERLAP_S = 0.08  # longer than a transfer here (a few ms), shorter than the others' wait for SLOW_RANK


def _gloo_worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(128, 64), torch.randint(0, 10, (128,))
    w = torch.randn(128, 128) / 12
    path = Path(out) / f"rank-{rank}.pt.trace.json.gz"
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=STEPS - 2),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(STEPS):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            if rank == SLOW_RANK:
                with record_function("sleep_before_backward"):
                    time.sleep(SLEEP_S)
            loss.backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward has no annotations
            flat = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
            work = dist.all_reduce(flat, async_op=True)
            with record_function("overlap_compute"):
                z, until = w, time.perf_counter() + OVERLAP_S
                while time.perf_counter() < until:
                    z = torch.tanh(z @ w)
            work.wait()
            opt.step()
            opt.zero_grad()
            prof.step()
    dist.destroy_process_group()


def gloo(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(  # type: ignore[attr-defined,no-untyped-call]  # untyped in torch's stubs
        _gloo_worker, args=(WORLD, port, str(out)), nprocs=WORLD, start_method="fork")


if __name__ == "__main__":
    gloo(Path(sys.argv[1]))
