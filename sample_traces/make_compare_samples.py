"""Regenerate the run-comparison pair in sample_traces/compare/ (run from the repository root).

    python sample_traces/make_compare_samples.py

Two *real* torch.profiler traces of the same small CPU training loop, made with the settings and
conventions of ``make_samples.py`` (record_shapes, with_stack, profile_memory, a schedule with
ProfilerStep markers; host names scrubbed):

- ``compare/baseline.pt.trace.json.gz``: every step runs ``augment`` (a ``record_function`` range
  that adds a little noise to the batch), then a training step of an MLP.
- ``compare/slowed.pt.trace.json.gz``: the same, except that ``augment`` is deliberately slowed: it
  sleeps 30 ms and multiplies the batch by an extra 256x256 projection (an added ``aten::matmul``).

Both runs do two unprofiled warm-up iterations first (the first calls of an op, the allocator and the
profiler's start-up cost tens of ms, more than the slowdown), so the slowed run is slower in *every*
profiled step: its mean time per step, steady median step and first step all grow (tests/test_cli_story.py).
On a loaded machine a baseline step can still take longer than a slowed one, or another op can be
starved of the CPU for longer than ``augment`` sleeps (the scheduler, not the code); the script then
says so and records the pair again, up to ``--attempts`` times.

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
SLEEP_S = 0.030  # the deliberate slowdown of every augment() call in the slowed run
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


def compare_run(out: Path, *, slow: bool, steps: int = 5, warmup: int = 2) -> None:
    samples = _samples()
    torch.set_num_threads(1)  # no intra-op pool to wake after each sleep: on a shared machine that costs 100s of ms
    torch.manual_seed(0)
    model = samples.TinyMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    proj = torch.eye(WIDTH)
    for _ in range(warmup):  # not profiled: first-call costs would dwarf the slowdown in step 0
        samples.train_step(model, opt, augment(x, proj, slow=slow), y)
    sched = schedule(wait=1, warmup=1, active=steps - 2)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True,
                 profile_memory=True, schedule=sched) as prof:
        for _ in range(steps):
            batch = augment(x, proj, slow=slow)
            samples.train_step(model, opt, batch, y)
            prof.step()
    samples.write_scrubbed(prof, out)


def step_durations(path: Path) -> list[int]:
    """The profiled steps' durations in ns, as ``diagnose`` reads them."""
    import neurontrace
    from neurontrace.analysis.phases import phases

    return [s["dur_ns"] for s in phases(neurontrace.load(path)).steps]


def augment_leads(baseline: Path, slowed: Path) -> bool:
    """Whether ``augment`` is the diff's largest change (what the viewer's table and the tests open on)."""
    import neurontrace
    from neurontrace.analysis.diff import diff

    rows = diff(neurontrace.load(baseline), neurontrace.load(slowed)).changed_ops().to_pylist()
    return bool(rows) and rows[0]["kind"] == "annotation" and rows[0]["name"] == "augment"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "compare")
    parser.add_argument("--attempts", type=int, default=5)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, args.attempts + 1):
        compare_run(args.out / "baseline.pt.trace.json.gz", slow=False)
        compare_run(args.out / "slowed.pt.trace.json.gz", slow=True)
        a, b = (step_durations(args.out / f"{n}.pt.trace.json.gz") for n in ("baseline", "slowed"))
        pair = (args.out / "baseline.pt.trace.json.gz", args.out / "slowed.pt.trace.json.gz")
        if len(a) == len(b) and a and all(y > x for x, y in zip(a, b, strict=True)) and augment_leads(*pair):
            print(f"every slowed step is longer than the same baseline step (attempt {attempt}): "
                  f"baseline {[round(x / 1e6, 1) for x in a]} ms, slowed {[round(y / 1e6, 1) for y in b]} ms")
            return
        print(f"attempt {attempt}: a baseline step outlasted a slowed one, or another op's change outgrew "
              "augment's (machine noise), recording again")
    raise SystemExit(f"no clean pair in {args.attempts} attempts: run it on a quieter machine")


if __name__ == "__main__":
    main()
