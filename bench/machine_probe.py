"""What this machine charges for two things the speed targets depend on: fresh memory, and a second core.

    python bench/machine_probe.py [--mb 1024] [--repeat 3] [--trace TRACE] [--loops 4]

- Fresh pages: a child process maps ``--mb`` MB of anonymous memory and writes one byte a page (4 KiB pages, no
  huge-page advice), ``--repeat`` times; it prints the system seconds per GB of each (``ru_stime``: the kernel
  handing the pages over). A parse faults in more memory than its input, so this cost is in every load.
- A second core: ``--loops`` times ``neurontrace.load`` + ``diagnose`` of TRACE (default: the corpus ResNet-50
  trace) in one child alone, then in two children at once; each of the two's speed as a fraction of the lone
  one's (after one run not counted). ``--workers 2`` (issue #28 item 5) can give at most the sum of the two fractions, before Dask's own cost.
MB = 10**6 bytes. Run it beside a benchmark to read that benchmark's figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from scale import ROOT, SOURCE  # the corpus ResNet-50 trace bench/scale.py tiles into ranks (item 5)

_TOUCH = """
import mmap, resource, sys
n = int(sys.argv[1]) * 10**6
before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for i in range(0, n, 4096):
    m[i] = 1
print((resource.getrusage(resource.RUSAGE_SELF).ru_stime - before) / n * 1e9)
"""

_WORK = """
import sys, neurontrace
from neurontrace.analysis.diagnose import diagnose
for _ in range(int(sys.argv[2])):
    diagnose(neurontrace.load(sys.argv[1]))
"""


def _timed(cmds: list[list[str]]) -> list[float]:
    """Wall seconds of each command, all started at once."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(c, cwd=ROOT) for c in cmds]
    walls = []
    for p in procs:
        if p.wait() != 0:
            sys.exit(f"child failed (exit {p.returncode}): {' '.join(p.args)}")
        walls.append(time.perf_counter() - t0)
    return walls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=1000, help="fresh memory touched per child")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trace", type=Path, default=SOURCE)
    ap.add_argument("--loops", type=int, default=4, help="load + diagnose rounds per child")
    args = ap.parse_args()
    costs = []
    for _ in range(args.repeat):
        out = subprocess.run([sys.executable, "-c", _TOUCH, str(args.mb)], capture_output=True, text=True, check=True)
        costs.append(float(out.stdout))
    print(f"fresh 4 KiB pages, {args.mb} MB a child: " + ", ".join(f"{c:.2f}" for c in costs)
          + " s of system time per GB")
    if not args.trace.exists():
        print(f"a second core: skipped ({args.trace} not found; pass --trace)")
        return
    cmd = [sys.executable, "-c", _WORK, str(args.trace), str(args.loops)]
    _timed([cmd])  # a first run, not counted: the file into the page cache, the bytecode compiled
    for _ in range(args.repeat):
        alone = _timed([cmd])[0]
        pair = _timed([cmd, cmd])
        print(f"a second core: alone {alone:.2f} s, two at once {pair[0]:.2f} / {pair[1]:.2f} s: each at "
              f"{alone / pair[0]:.2f}x / {alone / pair[1]:.2f}x its lone speed, {alone / pair[0] + alone / pair[1]:.2f}x "
              f"in all (load average {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
