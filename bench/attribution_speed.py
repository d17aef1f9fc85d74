"""Attribution speed: device events per second, and `neurontrace diagnose` end to end.

    python bench/attribution_speed.py [--events 2000000] [--repeat 3] [--trace BIG.json ...]

1. Builds an in-memory Trace with N device events (kernels on 4 streams, copies both ways, NCCL
   kernels) and N/2 host events (ops, launches, Python frames) with a realistic mix of overlaps,
   then times `attribute(trace)` alone (best of --repeat) and prints device events per second.
   Target (issue "Stall attribution"): >= 2,000,000 device events/s on one core.
2. For each --trace, times `neurontrace diagnose TRACE --json` as a whole process (load + analysis
   + report), best of --repeat, and prints it against the target of <= 15 s for a 500 MB trace.

Timings are wall-clock minima on this machine; the machine is shared, so read ratios and minima,
not single runs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from neurontrace import Trace
from neurontrace.analysis.attribution import attribute

TARGET_EVENTS_PER_S = 2_000_000
TARGET_DIAGNOSE_S = 15.0


def synthetic_trace(n: int, seed: int = 0) -> Trace:
    """A GPU-like timeline: the device is busy about 60% of the time, host work fills gaps."""
    rng = np.random.default_rng(seed)
    gap = rng.integers(200, 3000, n)
    dur = rng.integers(500, 5000, n)
    ts = np.cumsum(gap + dur // 2)  # overlapping streams
    kinds = rng.choice(["kernel", "h2d", "d2h", "nccl"], n, p=[0.85, 0.06, 0.04, 0.05])
    cat = np.where(kinds == "kernel", "compute", np.where(kinds == "nccl", "collective", "memcpy"))
    name = np.where(kinds == "kernel", "volta_sgemm_128x64_nn",
                    np.where(kinds == "nccl", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "Memcpy"))
    direction = np.where(kinds == "h2d", "h2d", np.where(kinds == "d2h", "d2h", None))
    dev = pa.table({
        "event_id": pa.array(np.arange(n, dtype=np.int64)),
        "ts_ns": pa.array(ts), "dur_ns": pa.array(dur),
        "name": pa.array(name), "category": pa.array(cat), "device": pa.array(["cuda:0"] * n),
        "track": pa.array(np.char.add("stream ", (np.arange(n) % 4).astype(str))),
        "direction": pa.array(direction, pa.string()),
        "correlation": pa.array(np.arange(n, dtype=np.int64)),
        "pid": pa.array(["0"] * n), "rank": pa.array([0] * n, pa.int32()),
    })
    m = n // 2
    hts = np.sort(rng.integers(0, int(ts[-1]), m))
    hcat = rng.choice(["framework_op", "runtime", "python"], m, p=[0.5, 0.3, 0.2])
    host = pa.table({
        "event_id": pa.array(np.arange(n, n + m, dtype=np.int64)),
        "ts_ns": pa.array(hts), "dur_ns": pa.array(rng.integers(1000, 20000, m)),
        "name": pa.array(np.where(hcat == "runtime", "cudaLaunchKernel", "aten::mm")), "category": pa.array(hcat),
        "correlation": pa.array(np.where(hcat == "runtime", rng.integers(0, n, m), -1)),
        "pid": pa.array(["100"] * m), "rank": pa.array([0] * m, pa.int32()),
    })
    host = host.set_column(host.schema.get_field_index("correlation"), "correlation",
                           pa.array(host["correlation"].to_numpy(), mask=host["correlation"].to_numpy() < 0))
    return Trace(device_events=dev, system_events=host)


def bench_attribution(n: int, repeat: int) -> None:
    trace = synthetic_trace(n)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        (result,) = attribute(trace)
        best = min(best, time.perf_counter() - t0)
    rate = n / best
    print(f"attribution: {n:,} device events + {n // 2:,} host events in {best:.3f} s "
          f"= {rate:,.0f} device events/s (target >= {TARGET_EVENTS_PER_S:,}): "
          f"{'PASS' if rate >= TARGET_EVENTS_PER_S else 'FAIL'}")
    shares = ", ".join(f"{k} {100 * result.fraction(k):.1f}%" for k in result.causes_ns)
    print(f"  causes: {shares}")


def bench_diagnose(path: Path, repeat: int) -> None:
    size_mb = path.stat().st_size / 1e6
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "neurontrace", "diagnose", str(path), "--json"],
                             capture_output=True, text=True, check=False)
        best = min(best, time.perf_counter() - t0)
        if res.returncode != 0:
            print(f"diagnose failed on {path}: {res.stderr.strip()}")
            return
    scaled = best * 500 / size_mb
    print(f"diagnose end to end: {path.name} ({size_mb:,.0f} MB) in {best:.2f} s; scaled to 500 MB: "
          f"{scaled:.1f} s (target <= {TARGET_DIAGNOSE_S:.0f} s): {'PASS' if scaled <= TARGET_DIAGNOSE_S else 'FAIL'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--trace", type=Path, nargs="*", default=[])
    args = parser.parse_args()
    bench_attribution(args.events, args.repeat)
    for path in args.trace:
        bench_diagnose(path, args.repeat)


if __name__ == "__main__":
    main()
