"""Make a large, realistic torch.profiler (Kineto) Chrome trace for parser benchmarks.

Usage: python bench/make_large_trace.py OUT_PATH [--target-mb 300] [--gzip]

Method: a small MLP (Linear/ReLU/LayerNorm blocks) is trained on the CPU through a few plain
Python functions (so ``with_stack`` gives user frames), with an SGD step and ``loss.item()`` per
iteration, under ``torch.profiler.profile(activities=[CPU], record_shapes=True, with_stack=True,
profile_memory=True)``; each iteration is one ``prof.step()`` so ProfilerStep# annotations appear.

The trace size grows linearly with the number of profiled iterations, so a short calibration run
is profiled and exported first; its bytes per iteration (after subtracting the size of a
zero-work export, i.e. the fixed header/metadata) set the iteration count of the real run. The
layers are tiny: the trace (events), not arithmetic, is what this produces. The profiler keeps
every event in memory until export, so peak RSS of this script is printed too.
"""

from __future__ import annotations

import argparse
import gzip
import resource
import shutil
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

WIDTH = 64
BATCH = 16
CALIBRATION_STEPS = 20
MAX_STEPS = 200_000


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(self.fc(x))) + x


def build_model(depth: int = 4) -> nn.Module:
    return nn.Sequential(*[Block(WIDTH) for _ in range(depth)], nn.Linear(WIDTH, 1))


def make_batch(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(BATCH, WIDTH, generator=gen)
    y = x.sum(dim=1, keepdim=True).tanh()
    return x, y


def compute_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    pred = model(x)
    return nn.functional.mse_loss(pred, y)


def train_step(model: nn.Module, opt: torch.optim.Optimizer, gen: torch.Generator) -> float:
    with record_function("data"):
        x, y = make_batch(gen)
    opt.zero_grad(set_to_none=True)
    loss = compute_loss(model, x, y)
    loss.backward()
    opt.step()
    return loss.item()


def profile_run(steps: int, out: Path) -> float:
    """Profile ``steps`` training iterations, export to ``out``; returns the export seconds."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    train_step(model, opt, gen)  # warm up outside the profiler
    with profile(
        activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True, profile_memory=True
    ) as prof:
        for _ in range(steps):
            train_step(model, opt, gen)
            prof.step()
    t0 = time.perf_counter()
    prof.export_chrome_trace(str(out))
    return time.perf_counter() - t0


def count_events(path: Path) -> int:
    """Events in the trace: every Kineto event has exactly one "ph" key (cheaper than json.load)."""
    key = b'"ph":'
    n = 0
    with path.open("rb") as f:
        tail = b""
        while chunk := f.read(64 << 20):
            buf = tail + chunk
            n += buf.count(key)
            tail = buf[1 - len(key):]  # too short to hold a whole key; completes one split by a read
    return n


def write_gzip(path: Path) -> Path:
    gz = path.with_name(path.name + ".gz")
    with path.open("rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst, 16 << 20)
    return gz


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="output .json path")
    ap.add_argument("--target-mb", type=float, default=300.0, help="approximate size in MB (default 300)")
    ap.add_argument("--gzip", action="store_true", help="also write OUT.gz")
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory(dir=args.out.parent) as tmp:
        probe = Path(tmp) / "calib.json"
        profile_run(1, probe)
        one = probe.stat().st_size
        profile_run(CALIBRATION_STEPS + 1, probe)
        per_step = (probe.stat().st_size - one) / CALIBRATION_STEPS
        fixed = one - per_step
    target = args.target_mb * 1e6
    if args.target_mb > 1500:  # measured: 2.3 GB peak RSS for a 300 MB trace
        gb = args.target_mb * 8 / 1e3
        print(f"warning: the profiler holds every event until export: expect ~{gb:.0f} GB RSS")
    steps = max(1, min(MAX_STEPS, round((target - fixed) / per_step)))
    print(f"calibration: {per_step / 1e3:.1f} kB/iteration, {fixed / 1e3:.1f} kB fixed -> {steps} iterations")

    t0 = time.perf_counter()
    export_s = profile_run(steps, args.out)
    total_s = time.perf_counter() - t0
    size = args.out.stat().st_size
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"path:   {args.out}")
    print(f"size:   {size / 1e6:.1f} MB ({size} bytes)")
    print(f"events: {count_events(args.out)}")
    print(f"time:   {total_s:.1f} s (export {export_s:.1f} s); peak RSS {peak_mb:.0f} MB")
    if args.gzip:
        gz = write_gzip(args.out)
        print(f"gzip:   {gz} ({gz.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
