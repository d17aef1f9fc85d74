"""Regenerate the real torch.profiler samples in sample_traces/ (run from the repository root).

    python sample_traces/make_samples.py

Each sample is a *real* trace: a small PyTorch training loop run on the CPU under torch.profiler
with the settings neurontrace's analyses rely on (record_shapes, with_stack, profile_memory, a
schedule with ProfilerStep markers). The workload has known features the tests check for:

- ``cpu_train_loop.pt.trace.json.gz``: an MLP trained for a few steps; every step ends with a
  deliberate host round trip (``loss.item()``), and a user function ``host_side_metric`` does
  work on the CPU with NumPy between steps.

Run from the repository root so the recorded Python file names are relative
(``sample_traces/make_samples.py``), and host names are replaced by ``sample-host`` so the files
carry nothing of the machine that made them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

HERE = Path(__file__).resolve().parent


class TinyMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.LayerNorm(128), nn.Linear(128, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def host_side_metric(logits: torch.Tensor) -> float:
    """A deliberate host round trip: pull the logits to NumPy and compute on the CPU."""
    values = logits.detach().numpy()
    return float((values.argmax(axis=1) == 0).mean())


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    host_side_metric(logits)
    return float(loss.item())


def cpu_train_loop(out: Path, steps: int = 5) -> None:
    torch.manual_seed(0)
    model = TinyMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    sched = schedule(wait=1, warmup=1, active=steps - 2)
    # torch 2.13 with with_stack: the first record_function of a process imports a module whose
    # frame name can carry an unescaped quote into the trace (invalid JSON). Warm it up first.
    with record_function("warm-up"):
        pass
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True,
                 profile_memory=True, schedule=sched) as prof:
        for _ in range(steps):
            train_step(model, opt, x, y)
            prof.step()
    write_scrubbed(prof, out)


def write_scrubbed(prof: profile, out: Path) -> None:
    """Export, blank the host name and temp path textually (the rest stays byte for byte), gzip."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        text = raw.read_text()
    text = re.sub(r'"host_name": "[^"]*"', '"host_name": "sample-host"', text)
    text = re.sub(r'"traceName": "[^"]*"', f'"traceName": "{out.name}"', text)
    out.write_bytes(gzip.compress(text.encode(), mtime=0))
    events = len(json.loads(text)["traceEvents"])
    print(f"wrote {out} ({out.stat().st_size} bytes, {events} events)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    cpu_train_loop(args.out / "cpu_train_loop.pt.trace.json.gz")


if __name__ == "__main__":
    main()
