"""What the ops, overlap and launch sections add to `diagnose`: time with and without them, same process.

    python bench/ops_cost.py TRACE [--repeat 3]

Make a large GPU-shaped trace first, e.g. ``python bench/tile_trace.py CORPUS_H100_TRACE big.json --target-mb 200``.
Prints best-of-N wall times of ``diagnose`` with every registered section and with the three removed, and
``op_table`` alone. The machine is shared: read the ratio and the minima, not single runs.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import neurontrace
from neurontrace.analysis import launch, ops, overlap, registry
from neurontrace.analysis.diagnose import diagnose
from neurontrace.analysis.ops import op_table


def best(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    trace = neurontrace.load(args.trace)
    print(f"{args.trace.name}: {trace.device_events.num_rows} device events, {trace.system_events.num_rows} host events")
    with_all = best(lambda: diagnose(trace), args.repeat)
    mine = {ops.SECTION.key, overlap.SECTION.key, launch.SECTION.key}
    full = registry.DEVICE_SECTIONS
    registry.DEVICE_SECTIONS = tuple(s for s in full if s.key not in mine)
    try:
        without = best(lambda: diagnose(trace), args.repeat)
    finally:
        registry.DEVICE_SECTIONS = full
    table = best(lambda: op_table(trace), args.repeat)
    print(f"diagnose with ops/overlap/launch {with_all:.2f} s, without {without:.2f} s "
          f"(x{with_all / without:.2f}); op_table alone {table:.2f} s")


if __name__ == "__main__":
    main()
