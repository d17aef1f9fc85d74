"""Memory stays bounded on many memory events: peak RSS and time of loading a trace that is mostly
``[memory]`` events and computing the memory section, against a trace of the same size made of cpu_op
events (the baseline), side by side, each in a fresh child process.

The memory-heavy trace is generated like torch.profiler writes it with profile_memory=True: ops on one
thread, each allocating a block (address, bytes, Total Allocated, Total Reserved) that a later op frees, a
steady leak every step, ProfilerStep#N markers. Peak RSS is reported above the child's baseline (after the
imports and a read of the file) as a multiple of the file's size; the ratio column divides the memory trace's
figure by the baseline's.

    python bench/memory_events.py --mb 100
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import os, resource, sys, time, warnings
from pathlib import Path
path = Path(sys.argv[1])
import neurontrace
import neurontrace.parsers.kineto  # imported before the clock starts, on both sides
from neurontrace.analysis.memory import memory
path.read_bytes()
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
base = rss()
t0 = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    trace = neurontrace.load(path)
    m = memory(trace)
dt = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(max(peak - base, 0), dt, trace.memory_events.num_rows, len(m.devices) if m else 0)
"""


def _write(path: Path, target: int, with_memory: bool) -> None:
    us, addr, total, step, n = 0.0, 1 << 40, 0, 0, 0
    live: list[tuple[int, int]] = []
    with path.open("w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [\n')
        first = True
        while f.tell() < target:
            if n % 1000 == 0:
                f.write(("" if first else ",\n") + json.dumps({"ph": "X", "cat": "user_annotation",
                        "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1, "ts": us, "dur": 999.0}))
                first, step = False, step + 1
            f.write(",\n" + json.dumps({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1,
                                        "ts": us + 0.1, "dur": 0.8, "args": {"External id": n}}))
            if with_memory:
                size = 4096 * (1 + n % 64)
                total += size
                live.append((addr, size))
                f.write(",\n" + json.dumps({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]",
                                            "pid": 1, "tid": 1, "ts": us + 0.2, "args": {
                                                "Total Reserved": 1 << 34, "Total Allocated": total, "Bytes": size,
                                                "Addr": addr, "Device Id": 0, "Device Type": 1}}))
                addr += size
                if len(live) > 8 and n % 1000 != 0:  # free the oldest block but one per step: a steady leak
                    a, s = live.pop(0)
                    total -= s
                    f.write(",\n" + json.dumps({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]",
                                                "pid": 1, "tid": 1, "ts": us + 0.5, "args": {
                                                    "Total Reserved": 1 << 34, "Total Allocated": total,
                                                    "Bytes": -s, "Addr": a, "Device Id": 0, "Device Type": 1}}))
            us += 1.0
            n += 1
        f.write("\n]}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=100.0, help="size of each generated trace (default 100)")
    args = ap.parse_args()
    root = Path(__file__).resolve().parent.parent
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("ops", "memory"):
            path = Path(tmp) / f"{kind}.json"
            _write(path, int(args.mb * 1e6), kind == "memory")
            out = subprocess.run([sys.executable, "-c", CHILD, str(path)], cwd=root, check=True, capture_output=True,
                                 text=True).stdout.split()
            size = path.stat().st_size
            rows[kind] = (int(out[0]) / size, float(out[1]), int(out[2]), size)
            path.unlink()
    for kind, (rss, dt, mem_rows, size) in rows.items():
        print(f"{kind:>7}: {size / 1e6:.0f} MB, {mem_rows} memory events, peak RSS {rss:.2f}x the file, {dt:.2f} s")
    print(f"  ratio memory/ops: peak RSS {rows['memory'][0] / rows['ops'][0]:.2f}x, "
          f"time {rows['memory'][1] / rows['ops'][1]:.2f}x")


if __name__ == "__main__":
    main()
