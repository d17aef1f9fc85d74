"""A micro-trace pair whose differences are known exactly (times in µs in, ns out).

Two profiled steps of a tiny GPU program. Baseline, per step of 100 µs::

    aten::mm      model.py(12): forward    launches volta_sgemm (20 µs; the kernel inherits the source)
    aten::relu    model.py(20): act        launches relu_kernel (10 µs)
    aten::add     a.py(1): f               5 µs
    aten::add     b.py(2): g               5 µs

The change, per step of 150 µs: volta_sgemm takes 40 µs (slower), aten::relu and its kernel are gone
(removed), aten::mm and its kernel moved to model.py(14) (matched by name), aten::add at b.py:2 takes 50 µs (slower;
the one at a.py:1 is unchanged), and aten::nonzero at model.py(30): mask is new (added; a fallback op
when named as one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.micro import write, x

US = 1000


def _kernel(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    return x("kernel", name, ts, dur, pid=0, tid=7, device=0, correlation=corr, **{"External id": corr})


def _op(name: str, ts: float, dur: float, stack: str, **args: Any) -> dict[str, Any]:
    return x("cpu_op", name, ts, dur, **{"Call stack": stack}, **args)


def baseline_events() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for i, s in enumerate((0, 100)):
        c = 10 * i
        events += [
            x("user_annotation", f"ProfilerStep#{i + 1}", s, 100),
            _op("aten::mm", s, 8, "model.py(12): forward", **{"External id": c + 1}),
            x("cuda_runtime", "cudaLaunchKernel", s + 1, 3, correlation=c + 1),
            _kernel("volta_sgemm_128x64", s + 10, 20, c + 1),
            _op("aten::relu", s + 40, 5, "model.py(20): act", **{"External id": c + 2}),
            x("cuda_runtime", "cudaLaunchKernel", s + 41, 3, correlation=c + 2),
            _kernel("relu_kernel", s + 50, 10, c + 2),
            _op("aten::add", s + 70, 5, "a.py(1): f"),
            _op("aten::add", s + 80, 5, "b.py(2): g"),
        ]
    return events


def change_events() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for i, s in enumerate((0, 150)):
        c = 10 * i
        events += [
            x("user_annotation", f"ProfilerStep#{i + 1}", s, 150),
            _op("aten::mm", s, 8, "model.py(14): forward", **{"External id": c + 1}),
            x("cuda_runtime", "cudaLaunchKernel", s + 1, 3, correlation=c + 1),
            _kernel("volta_sgemm_128x64", s + 10, 40, c + 1),
            _op("aten::add", s + 55, 5, "a.py(1): f"),
            _op("aten::add", s + 62, 50, "b.py(2): g"),
            _op("aten::nonzero", s + 120, 20, "model.py(30): mask"),
        ]
    return events


def write_pair(directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    a = write(directory, baseline_events(), "baseline.json", distributedInfo={"rank": 0})
    b = write(directory, change_events(), "change.json", distributedInfo={"rank": 0})
    return a, b
