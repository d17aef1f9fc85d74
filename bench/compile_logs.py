"""``neurontrace compile`` on a large TORCH_TRACE log against tlparse on the same file: time and peak RSS.

Usage: bench/compile_logs.py LOG [--size-mb 1000] [--repeat 1] [--keep PATH]

Method:
- LOG (a real TORCH_TRACE log, e.g. ../shared/corpus/compile/tlparse/cache_hit_miss.log) is tiled, whole, until
  the file reaches --size-mb (MB = 10**6 bytes); the tiled file is written once to a temporary folder (or
  --keep PATH) and read once before timing so both tools find it in the page cache.
- Each measurement is a fresh child process timed by the parent (wall) with its peak RSS from wait4's rusage:
  ``python -m neurontrace compile FILE --json`` (stdout to /dev/null) and ``tlparse FILE -o DIR --no-browser
  --overwrite``. A baseline child runs ``neurontrace compile`` on the untiled LOG (imports, interpreter).
- Printed: size, the largest payload in the file (the longest run of tab-indented payload lines, in bytes), per
  tool the best wall time over --repeat and the peak RSS, the ratio neurontrace / tlparse, and neurontrace's RSS
  above its baseline against the largest payload.
Targets (PASS/FAIL): neurontrace not slower than tlparse; RSS above baseline <= 1.5x the largest payload.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def tile(src: Path, dst: Path, size: int) -> None:
    data = src.read_bytes()
    if not data.endswith(b"\n"):
        data += b"\n"
    with dst.open("wb") as f:
        written = 0
        while written < size:
            f.write(data)
            written += len(data)


def largest_payload(path: Path) -> int:
    best = cur = 0
    with path.open("rb") as f:
        for line in f:
            if line.startswith(b"\t"):
                cur += len(line)
                best = max(best, cur)
            else:
                cur = 0
    return best


def measure(cmd: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of one child."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}: {proc.stderr.read().decode() if proc.stderr else ''}")
    return wall, usage.ru_maxrss * 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", type=Path)
    ap.add_argument("--size-mb", type=float, default=1000.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-tlparse", action="store_true", help="time neurontrace alone")
    ap.add_argument("--keep", type=Path, help="write the tiled log here (and keep it) instead of a temporary folder")
    args = ap.parse_args()
    tl = shutil.which("tlparse")
    tmp = Path(tempfile.mkdtemp(prefix="nt_compile_bench_"))
    try:
        big = args.keep or tmp / "tiled.log"
        if not big.exists() or big.stat().st_size < args.size_mb * 1e6:
            tile(args.log, big, int(args.size_mb * 1e6))
        size = big.stat().st_size
        with big.open("rb") as f:  # into the page cache
            while f.read(1 << 24):
                pass
        payload = largest_payload(big)
        nt = [sys.executable, "-m", "neurontrace", "compile"]
        base_wall, base_rss = measure([*nt, str(args.log), "--json"])
        runs = [measure([*nt, str(big), "--json"]) for _ in range(args.repeat)]
        nt_wall, nt_rss = min(r[0] for r in runs), max(r[1] for r in runs)
        print(f"file: {size / 1e6:.0f} MB (tiled {args.log.name}), largest payload {payload / 1e6:.2f} MB")
        print(f"neurontrace compile: {nt_wall:.1f} s, {size / 1e6 / nt_wall:.0f} MB/s, peak RSS {nt_rss / 1e6:.0f} MB "
              f"(baseline {base_rss / 1e6:.0f} MB, {base_wall:.1f} s; above it {(nt_rss - base_rss) / 1e6:.0f} MB)")
        ok_rss = nt_rss - base_rss <= 1.5 * max(payload, 1)
        print(f"RSS above baseline <= 1.5x largest payload: {'PASS' if ok_rss else 'FAIL'} "
              f"({(nt_rss - base_rss) / max(payload, 1):.2f}x)")
        if tl is None or args.no_tlparse:
            print("tlparse: not run" if args.no_tlparse else "tlparse: not installed (pip install tlparse); no comparison")
            return 0
        tl_runs = [measure([tl, str(big), "-o", str(tmp / "tl_out"), "--no-browser", "--overwrite"])
                   for _ in range(args.repeat)]
        tl_wall, tl_rss = min(r[0] for r in tl_runs), max(r[1] for r in tl_runs)
        print(f"tlparse: {tl_wall:.1f} s, {size / 1e6 / tl_wall:.0f} MB/s, peak RSS {tl_rss / 1e6:.0f} MB")
        print(f"neurontrace / tlparse time: {nt_wall / tl_wall:.2f}x -> not slower than tlparse: "
              f"{'PASS' if nt_wall <= tl_wall else 'FAIL'}; RSS ratio {nt_rss / tl_rss:.2f}x")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
