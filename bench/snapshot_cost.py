"""What reading a plain trace into a private snapshot costs against memory-mapping it, side by side.

neurontrace copies a plain file into anonymous memory (neurontrace/_io.py, ``Snapshot``) instead of
mapping it, so a file truncated by another process cannot kill the reader with SIGBUS. This script
parses one trace both ways in alternating fresh child processes and prints the minimum wall time
and the peak RSS of each, and their ratios (snapshot / map).

    python bench/snapshot_cost.py TRACE.json [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CHILD = """
import json, mmap, resource, sys, time, warnings
from pathlib import Path
from neurontrace import _io
from neurontrace.parsers import kineto
path, mode = Path(sys.argv[1]), sys.argv[2]
path.read_bytes()  # in the page cache for both
if mode == "map":  # the former reader: a read-only shared map of the file itself
    def mapped(p, progress=None, snapshot=False):
        f = p.open("rb")
        populate = getattr(mmap, "MAP_POPULATE", 0)
        return _io.Content(mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED | populate, prot=mmap.PROT_READ))
    kineto.read_content = mapped
start = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    trace = kineto.parse(path)
took = time.perf_counter() - start
print(json.dumps({"s": took, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "events": trace.num_events}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path, help="a plain (not gzip'd) Kineto JSON trace")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    best: dict[str, dict[str, float]] = {}
    for _ in range(args.repeat):
        for mode in ("map", "snapshot"):
            out = subprocess.run([sys.executable, "-c", CHILD, str(args.trace), mode], capture_output=True,
                                 text=True, check=True)
            r = json.loads(out.stdout)
            b = best.setdefault(mode, {"s": r["s"], "rss": r["rss"]})
            b["s"], b["rss"] = min(b["s"], r["s"]), max(b["rss"], r["rss"])
    size = args.trace.stat().st_size
    for mode, b in best.items():
        print(f"{mode:9} {b['s']:7.3f} s  {size / b['s'] / 1e6:7.1f} MB/s  peak RSS {b['rss'] / size:5.2f}x the file")
    print(f"snapshot / map: time {best['snapshot']['s'] / best['map']['s']:.2f}x, "
          f"peak RSS {best['snapshot']['rss'] / best['map']['rss']:.2f}x")


if __name__ == "__main__":
    main()
