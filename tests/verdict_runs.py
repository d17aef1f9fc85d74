"""Real CPU runs with one injected, independently timed cause each, for the verdict tests (tests/test_verdict_causes.py).

    python tests/verdict_runs.py OUT_DIR

Writes, under OUT_DIR:

- ``train.pt.trace.json.gz``: one process training a small MLP with Adam for 4 steps (3 profiled, with_stack,
  record_shapes); its data loader's ``Slow.__getitem__`` sleeps ``ITEM_SLEEP_S`` per sample (num_workers=0, so the
  sleep is on the training thread, inside the profiled steps);
- ``ddp/rank-{0,1}.pt.trace.json.gz``: a 2-process DistributedDataParallel job over gloo whose gradients fill two
  buckets (two bucket all-reduces per step); rank 1 sleeps ``RANK_SLEEP_S`` before every forward pass;
- ``facts.json``: what each run measured itself with ``time.perf_counter_ns`` (the sleeps, the forward / backward /
  optimizer spans of every step) and the ``file:line function`` of ``__getitem__``, so tests compare the
  diagnosis with clocks the profiler does not own.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function, schedule

ITEM_SLEEP_S = 0.004  # per sample: 8 samples per batch, 32 ms per step
BATCH = 8
RANK_SLEEP_S = 0.15  # rank 1, before every forward pass
STEPS = 4  # warmup 1, active 3
PROFILED_FROM = 1  # the first profiled step (schedule wait=0, warmup=1)
WIDTH = 512  # two WIDTH x WIDTH layers: ~1 MiB of gradients each, one bucket each with bucket_cap_mb=1


class Slow(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self) -> None:
        self.slept_ns: list[int] = []

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        t0 = time.perf_counter_ns()
        time.sleep(ITEM_SLEEP_S)
        self.slept_ns.append(time.perf_counter_ns() - t0)
        return torch.full((64,), float(i % 7)), torch.tensor(i % 10)


class Net(torch.nn.Module):
    """A model whose forward is user code (its ops' source is this file), so backward ops map back to it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(64, 256), torch.nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(torch.relu(self.fc1(x)))
        return out


def _train(out: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = Slow()
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, num_workers=0)
    spans: list[dict[str, int]] = []
    with record_function("warm-up"):  # torch 2.13 with_stack: see sample_traces/make_samples.py
        pass
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True,
                 schedule=schedule(wait=0, warmup=1, active=STEPS - PROFILED_FROM, repeat=1)) as prof:
        for step, (x, y) in enumerate(loader):
            if step == STEPS:
                break
            t0 = time.perf_counter_ns()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            t1 = time.perf_counter_ns()
            loss.backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward has no annotations
            t2 = time.perf_counter_ns()
            opt.step()
            opt.zero_grad()
            t3 = time.perf_counter_ns()
            spans.append({"forward_ns": t1 - t0, "backward_ns": t2 - t1, "optimizer_ns": t3 - t2})
            prof.step()
    prof.export_chrome_trace(str(out / "train.pt.trace.json.gz"))
    def where(fn: Any) -> dict[str, Any]:
        code = fn.__code__
        return {"file": Path(code.co_filename).name, "line": code.co_firstlineno, "function": code.co_name}

    return {"item_sleep_ns": data.slept_ns, "batch": BATCH, "steps": spans, "profiled_from": PROFILED_FROM,
            "getitem": where(Slow.__getitem__),
            "forward": where(Net.forward)}


def _rank(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    body = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Linear(WIDTH, WIDTH))
    model = torch.nn.parallel.DistributedDataParallel(body, bucket_cap_mb=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, WIDTH)
    slept: list[int] = []
    with record_function("warm-up"):
        pass
    with profile(activities=[ProfilerActivity.CPU], with_stack=True, record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=STEPS - PROFILED_FROM, repeat=1)) as prof:
        for _ in range(STEPS):
            if rank == 1:
                t0 = time.perf_counter_ns()
                time.sleep(RANK_SLEEP_S)
                slept.append(time.perf_counter_ns() - t0)
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    prof.export_chrome_trace(str(Path(out) / f"rank-{rank}.pt.trace.json.gz"))
    (Path(out) / f"rank-{rank}.slept.json").write_text(json.dumps(slept))
    dist.destroy_process_group()


def _start_ddp(out: Path) -> Any:
    ddp = out / "ddp"
    ddp.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # fork: the children share this process's imported torch (spawn would import it again in each, ~10 s here)
    return mp.start_processes(  # type: ignore[attr-defined,no-untyped-call]  # untyped in torch's stubs
        _rank, args=(2, port, str(ddp)), nprocs=2, start_method="fork", join=False)


def _ddp_facts(out: Path) -> dict[str, Any]:
    ddp = out / "ddp"
    slept = json.loads((ddp / "rank-1.slept.json").read_text())
    for r in (0, 1):
        (ddp / f"rank-{r}.slept.json").unlink()
    return {"rank_sleep_ns": slept, "sleeping_rank": 1, "steps": STEPS, "profiled_from": PROFILED_FROM}


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    job = _start_ddp(out)  # the two ranks run beside the training loop (each run times itself)
    train = _train(out)
    while not job.join():
        pass
    facts = {"train": train, "ddp": _ddp_facts(out)}
    (out / "facts.json").write_text(json.dumps(facts, indent=1))


if __name__ == "__main__":
    main()
