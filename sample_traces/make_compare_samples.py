"""Regenerate the run-comparison pair in sample_traces/compare/ (run from the repository root).

    python sample_traces/make_compare_samples.py

Two *real* torch.profiler traces of the same small CPU training loop, made with the settings and
conventions of ``make_samples.py`` (record_shapes, with_stack, profile_memory, a schedule with
ProfilerStep markers; host names scrubbed):

- ``compare/baseline.pt.trace.json.gz``: every step runs ``augment`` (a ``record_function`` range
  that adds a little noise to the batch), then a training step of an MLP.
- ``compare/slowed.pt.trace.json.gz``: the same, except that ``augment`` is deliberately slowed: it
  sleeps 3 ms and multiplies the batch by an extra 256x256 projection (an added ``aten::matmul``).

``neurontrace diff compare/baseline... compare/slowed...`` must classify the ``augment`` range as
``slower`` and the extra matmul at ``augment`` as ``added`` (tests/test_diff_real.py checks it).
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path
from types import ModuleType

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

HERE = Path(__file__).resolve().parent
SLEEP_S = 0.003  # the deliberate slowdown of every augment() call in the slowed run
WIDTH = 256


def _samples() -> ModuleType:
    """make_samples.py beside this file (its model and its scrubbing writer)."""
    spec = importlib.util.spec_from_file_location("make_samples", HERE / "make_samples.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def augment(x: torch.Tensor, proj: torch.Tensor, *, slow: bool) -> torch.Tensor:
    """Input augmentation in a record_function range; ``slow`` adds a sleep and an extra matmul."""
    with record_function("augment"):
        x = x + 0.01 * torch.randn_like(x)
        if slow:
            time.sleep(SLEEP_S)
            x = (x.repeat(1, WIDTH // x.shape[1]) @ proj)[:, : x.shape[1]]
    return x


def compare_run(out: Path, *, slow: bool, steps: int = 5) -> None:
    samples = _samples()
    torch.manual_seed(0)
    model = samples.TinyMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    proj = torch.eye(WIDTH)
    sched = schedule(wait=1, warmup=1, active=steps - 2)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True,
                 profile_memory=True, schedule=sched) as prof:
        for _ in range(steps):
            batch = augment(x, proj, slow=slow)
            samples.train_step(model, opt, batch, y)
            prof.step()
    samples.write_scrubbed(prof, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "compare")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    compare_run(args.out / "baseline.pt.trace.json.gz", slow=False)
    compare_run(args.out / "slowed.pt.trace.json.gz", slow=True)


if __name__ == "__main__":
    main()
