"""What storing the viewer's index adds to ``neurontrace convert --dataset``: time and peak RSS.

Usage: python bench/convert_viewer_index.py TRACE [TRACE ...] [--part-mb 128]

For each trace (make large ones with bench/tile_trace.py; label them tiled), side by side, each in a fresh
process: the baseline ``convert TRACE -o DATASET --dataset --no-viewer-index``, then the index stored from
that dataset (``app/index_convert.store_dataset``: its event columns read back, the index built and saved) as
``convert`` does it after the parts are written. Prints the convert's wall time and peak RSS, the index's
added wall time (and its ratio to the convert) and its peak RSS, in total and per million events above the
process's RSS once imported: the figure behind ``index_convert.PEAK_BYTES_PER_EVENT`` (docs/viewer.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CONVERT = """
import resource, sys
from neurontrace.cli import main
rc = main(["convert", sys.argv[1], "-o", sys.argv[2], "--dataset", "--no-viewer-index", "--part-mb", sys.argv[3]])
print("RSS", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, file=sys.stderr)
sys.exit(rc)
"""

_INDEX = """
import json, resource, sys, time

from neurontrace.app import index_convert
import neurontrace.app.model, neurontrace.dataset  # imported before the baseline RSS is read
base = int(open("/proc/self/statm").read().split()[1]) * 4096
t0 = time.perf_counter()
where, line = index_convert.store_dataset(sys.argv[1], max_events=1 << 62)
seconds = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "peak": peak, "base": base, "stored": where is not None, "line": line}))
"""


def _events(ds: Path) -> int:
    doc = json.loads((ds / "neurontrace-dataset.json").read_text())
    return sum(int(e["rows"]["system_events"]) + int(e["rows"]["device_events"]) for e in doc["ranks"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", type=Path, nargs="+")
    ap.add_argument("--part-mb", default="128")
    args = ap.parse_args()
    for trace in args.traces:
        with tempfile.TemporaryDirectory(prefix="nt-convert-index-") as tmp:
            ds = Path(tmp) / "ds"
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", _CONVERT, str(trace), str(ds), args.part_mb],
                                  capture_output=True, text=True, check=True)
            convert_s = time.perf_counter() - t0
            convert_rss = int(next(ln for ln in done.stderr.splitlines() if ln.startswith("RSS ")).split()[1])
            n = _events(ds)
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", _INDEX, str(ds)], capture_output=True, text=True, check=True)
            index_wall = time.perf_counter() - t0
            r = json.loads(out.stdout.strip().splitlines()[-1])
            per_m = (r["peak"] - r["base"]) / (n / 1e6)
            print(f"{trace.name}: {n:,} events; convert --dataset --no-viewer-index {convert_s:.1f} s wall, peak RSS "
                  f"{convert_rss / 1e6:.0f} MB (baseline)")
            print(f"  + viewer index: {r['seconds']:.1f} s ({index_wall:.1f} s with the process start) = "
                  f"{r['seconds'] / convert_s:.2f}x the convert's time; peak RSS {r['peak'] / 1e6:.0f} MB "
                  f"({r['base'] / 1e6:.0f} MB once imported): {per_m / 1e6:.0f} bytes per event (MB per M events) "
                  f"above the imports; {r['line']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
