"""Regenerate the real 8-rank sample job in sample_traces/gloo_8rank/ (run from the repository root).

    python sample_traces/make_multirank.py [--ranks 8]

A *real* distributed run: N processes on this machine join a gloo process group and train the same
small MLP data-parallel under torch.profiler (record_shapes, a schedule with ProfilerStep markers).
Each step all-reduces the flattened gradients and all-gathers the loss, as a data-parallel trainer
does. The workload has one known feature the cross-rank tests check for: the last rank's shard is
``IMBALANCE`` times larger (uneven data: it runs that many times more micro-batches), so it computes
longer before every all-reduce and the other ranks wait for it. Everything else (scheduling noise of N processes on a few cores, gloo's
own timing) is whatever the machine did. One file per rank, ``rank-<r>.pt.trace.json.gz``,
scrubbed like the other samples (``make_samples.write_scrubbed``).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_samples import TinyMLP, write_scrubbed

HERE = Path(__file__).resolve().parent
BATCH = 256
MICRO_BATCHES = 2
IMBALANCE = 6  # the last rank runs this many times more micro-batches


def _worker(rank: int, world: int, port: int, out: str, steps: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = TinyMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    micro = MICRO_BATCHES * (IMBALANCE if rank == world - 1 else 1)
    gen = torch.Generator().manual_seed(rank)
    x, y = torch.randn(BATCH, 64, generator=gen), torch.randint(0, 10, (BATCH,), generator=gen)
    path = Path(out) / f"rank-{rank}.pt.trace.json.gz"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=1, warmup=1, active=steps - 2),
                 on_trace_ready=lambda p: write_scrubbed(p, path)) as prof:
        for _ in range(steps):
            for _ in range(micro):  # forward/backward per micro-batch, gradients accumulate
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
            flat = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
            dist.all_reduce(flat)
            losses = [torch.zeros(1) for _ in range(world)]
            dist.all_gather(losses, loss.detach().reshape(1))
            opt.step()
            opt.zero_grad()
            prof.step()
    dist.destroy_process_group()


def make(out: Path, ranks: int = 8, steps: int = 6) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(ranks, port, str(out), steps), nprocs=ranks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "gloo_8rank")
    parser.add_argument("--ranks", type=int, default=8)
    args = parser.parse_args()
    make(args.out, args.ranks)


if __name__ == "__main__":
    main()
