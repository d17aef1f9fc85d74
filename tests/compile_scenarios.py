"""Real torch.compile runs on the CPU for tests/test_compile.py, all in one process (run as a script).

    TORCH_TRACE=OUT/compile/torch_trace TORCH_LOGS=recompiles,graph_breaks python tests/compile_scenarios.py OUT \
        2> OUT/compile/torch_logs.txt    [SALT]

(SALT makes the Inductor graph new to a cache directory kept between test sessions, so its first compile misses
and only the kernel is compiled cold, not Inductor's headers.)

Scenarios (tiny graphs: torch.compile on the CPU is slow, so only the cache scenario uses Inductor's C++
backend): a function fed new shapes with dynamic=False, profiled step by step (recompiles); the same function
profiled again once compiled, with stacks (a steady state that compiles nothing); a function with .item() and print
inside (graph breaks); a backend that raises (a failure); a frame past a recompile limit of 2; an Inductor compile
with a cold FX graph cache, then after torch._dynamo.reset() the same one again (a warm cache: hits); and a
run profiled with stacks (runtime.pt.trace.json) that calls, every step, a tiny function eagerly and compiled
(compile loses: guards and wrappers cost more than `x + 1`), a chain of pointwise ops on a large tensor eagerly
and compiled by Inductor (compile wins: one fused loop), the graph-breaking function compiled, and a compiled
function trained through its backward (CompiledFunction / CompiledFunctionBackward).
Dynamo's own counters and compile_times() are dumped to OUT/dynamo.json for the assertions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch._dynamo
from torch._dynamo.utils import compile_times, counters
from torch.profiler import ProfilerActivity, profile, schedule

SHAPES = (8, 16, 32, 8, 8, 8, 8, 8)


def mlp(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ x.T).sum(dim=1) * 2.0


def breaks(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    if y.sum().item() > 0:  # graph break: .item()
        y = y + 1
    print("inside the compiled function")  # graph break: print
    return y.relu()


def raising_backend(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> None:
    raise RuntimeError("this backend always fails")


def fails(x: torch.Tensor) -> torch.Tensor:
    return x.sin() + 1


def limited(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def tiny(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def pointwise(x: torch.Tensor) -> torch.Tensor:
    for _ in range(16):
        x = x * 1.01 + 0.5
    return x


def trained(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x @ w).relu().sum()


RUNTIME_STEPS = 4
TINY_CALLS = 5  # eager and compiled calls of tiny per step


def runtime(out: Path, broken: object) -> None:
    """Compiled code running (nothing compiles inside the profile: every function is compiled before it)."""
    small, big = torch.ones(4), torch.randn(1_000_000)
    w = torch.randn(4, 4, requires_grad=True)
    ctiny = torch.compile(tiny, backend="aot_eager", dynamic=False)
    cpoint = torch.compile(pointwise, dynamic=False)  # Inductor's C++ backend
    ctrained = torch.compile(trained, backend="aot_eager", dynamic=False)
    ctiny(small), cpoint(big)
    ctrained(small.reshape(1, 4), w).backward()  # type: ignore[no-untyped-call]  # torch's has no annotations
    with profile(activities=[ProfilerActivity.CPU], with_stack=True,
                 schedule=schedule(wait=0, warmup=0, active=RUNTIME_STEPS, repeat=1)) as prof:
        for _ in range(RUNTIME_STEPS):
            for _ in range(TINY_CALLS):
                tiny(small)
                ctiny(small)
            pointwise(big)
            cpoint(big)
            broken(small)  # type: ignore[operator]
            ctrained(small.reshape(1, 4), w).backward()  # type: ignore[no-untyped-call]
            prof.step()
    prof.export_chrome_trace(str(out / "runtime.pt.trace.json"))


SALT = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0  # a new constant: a new graph, whatever the cache holds


def cached(x: torch.Tensor) -> torch.Tensor:
    return (x * SALT).cos()


def dump(path: Path) -> dict[str, object]:
    head, values = compile_times(repr="csv")
    return {"counters": {k: dict(v) for k, v in counters.items()},
            "compile_times": {h: [float(x) for x in str(v).split(", ") if x] for h, v in zip(head, values, strict=True)}}


def main(out: Path) -> None:
    f = torch.compile(mlp, backend="aot_eager", dynamic=False)
    sched = schedule(wait=0, warmup=0, active=len(SHAPES), repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched) as prof:
        for n in SHAPES:
            f(torch.randn(n, 4))
            prof.step()
    prof.export_chrome_trace(str(out / "recompile.pt.trace.json"))
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=0, active=5, repeat=1),
                 with_stack=True) as prof:
        for _ in range(5):
            f(torch.randn(8, 4))
            prof.step()
    prof.export_chrome_trace(str(out / "steady.pt.trace.json"))
    broken = torch.compile(breaks, backend="aot_eager")
    broken(torch.ones(4))  # the same values every call: the resumed code's guards hold
    try:
        torch.compile(fails, backend=raising_backend)(torch.randn(4))
    except Exception as e:  # BackendCompilerFailed
        print(f"expected failure: {type(e).__name__}", file=sys.stderr)
    torch._dynamo.config.recompile_limit = 2
    g = torch.compile(limited, backend="eager", dynamic=False)
    for n in (1, 2, 3, 4):
        g(torch.randn(n))
    torch._dynamo.config.recompile_limit = 8
    runtime(out, broken)
    torch.compile(cached, dynamic=False)(torch.randn(8, 4))  # Inductor, a cold FX graph cache: a miss
    first = dump(out)
    torch._dynamo.reset()
    torch.compile(cached, dynamic=False)(torch.randn(8, 4))  # the same graph, the cache warm: a hit
    (out / "dynamo.json").write_text(json.dumps({"before_reset": first, "after_reset": dump(out)}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
