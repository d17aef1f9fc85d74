"""`neurontrace diagnose` end to end on one large trace: MB/s, peak RSS, and the time of every section.

Usage: python bench/diagnose_sections.py TRACE [--repeat 2] [--text]

Method:
- Each run is a fresh child process: ``python -m neurontrace diagnose TRACE --json --timings`` (``--text``:
  the text report instead of ``--json``), exactly what a user runs, imports included. The child's stdout
  (the document) is checked to be a ``neurontrace.diagnose/1`` document; its stderr carries the stage
  table ``--timings`` prints (analysis/timings.py): ``load`` (parsing, file read included), every
  registered device section and section of analysis/registry.py (compile, memory, critical path, ops,
  ...), the core stages (sanitize, fallback, attribution), the findings and the rendering.
- Wall time is the child's whole run; MB/s is the raw (uncompressed) JSON size over it, MB = 10**6 bytes.
  A ``.gz`` argument is decompressed to a temporary file first, and that file is what the child reads.
- CPU seconds are the child's user + system time (os.wait4): on a shared machine, size / CPU seconds is the
  rate the run would have had with a core to itself (the wall figure is the one the target is about).
- Peak RSS is the child's ``ru_maxrss`` (this script imports nothing heavy, so the children's maximum is
  theirs). A baseline child that only imports the CLI gives the start-up RSS; both ratios are printed:
  peak / raw size (the target's) and (peak - baseline) / raw size.
- The file is read once first so every child finds it in the page cache. With ``--repeat N`` the table
  shows the fastest run's stages and the largest peak.
Targets (issue #28, item 2): >= 100 MB/s end to end with every section on; peak RSS <= 2.5x the raw JSON.
Make a large trace with ``bench/tile_trace.py`` (a tiled copy of a real one: say so when quoting figures).
Times are wall-clock on a shared machine: read the load average printed at the end, and rerun.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_MB_S = 100.0
TARGET_RSS_RATIO = 2.5


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float, subprocess.CompletedProcess[str]]:
    """Run one child: (wall s, its peak RSS MB, its CPU s, the result); os.wait4's rusage is of that child alone."""
    with tempfile.TemporaryFile("w+") as err:  # stderr to a file: no pipe to fill while stdout is read
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        out = p.stdout.read() if p.stdout else ""
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.stdout:
            p.stdout.close()
        err.seek(0)
        return (wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime,
                subprocess.CompletedProcess(cmd, p.returncode, out, err.read()))


def _stages(stderr: str) -> dict[str, float]:
    """The table ``diagnose --timings`` prints: ``  NAME   SECONDS s  (P%)`` lines after its header."""
    out: dict[str, float] = {}
    on = False
    for line in stderr.splitlines():
        if line.startswith("neurontrace diagnose: timings"):
            on = True
            continue
        parts = line.split()
        if on and len(parts) >= 3 and parts[2] == "s" and parts[0] != "total":
            out[parts[0]] = float(parts[1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--text", action="store_true", help="time the text report instead of --json")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with tempfile.TemporaryDirectory(prefix="nt-diag-bench-") as tmp:
        path = args.trace
        with path.open("rb") as f:  # two bytes only: what this process holds, its children inherit as a peak
            gz = f.read(2) == b"\x1f\x8b"
        if gz:
            plain = Path(tmp) / path.name.removesuffix(".gz")
            with gzip.open(path, "rb") as src, plain.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 24)
            path = plain
        size = path.stat().st_size
        with path.open("rb") as f:  # into the page cache
            while f.read(1 << 24):
                pass
        _, base_mb, _, _ = _run([sys.executable, "-c", "import neurontrace.cli.diagnose, neurontrace.analysis.diagnose"],
                             env)
        cmd = [sys.executable, "-m", "neurontrace", "diagnose", str(path), "--timings"] + ([] if args.text else ["--json"])
        best: tuple[float, dict[str, float], float] | None = None
        peak = 0.0
        for _ in range(args.repeat):
            wall, rss, cpu, done = _run(cmd, env)
            if done.returncode not in (0, 3):
                sys.exit(f"diagnose failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
            if not args.text:
                doc = json.loads(done.stdout)
                assert doc["schema"] == "neurontrace.diagnose/1", doc.get("schema")
            peak = max(peak, rss)
            if best is None or wall < best[0]:
                best = (wall, _stages(done.stderr), cpu)
    assert best is not None
    wall, stages, cpu = best
    mb = size / 1e6
    print(f"trace: {args.trace} ({mb:.0f} MB raw JSON)   run: {' '.join(cmd[1:3])} diagnose ... "
          f"{'' if args.text else '--json '}--timings, best of {args.repeat}")
    print(f"\n{'stage':<28} {'seconds':>8} {'share':>6} {'MB/s':>9}")
    timed = sum(stages.values())
    for name, sec in stages.items():
        rate = f"{mb / sec:9.0f}" if sec >= 0.001 else f"{'-':>9}"
        print(f"{name:<28} {sec:8.3f} {100 * sec / wall:5.1f}% {rate}")
    print(f"{'(start-up, imports, exit)':<28} {wall - timed:8.3f} {100 * (wall - timed) / wall:5.1f}%")
    analysis = sum(v for k, v in stages.items() if k not in ("load", "render", "compile_logs"))
    print(f"\n{'figure':<40} {'measured':>10} {'target':>10}  verdict")
    rate = mb / wall
    print(f"{'end to end MB/s (wall, imports incl.)':<40} {rate:10.1f} {'>= 100':>10}  "
          f"{'PASS' if rate >= TARGET_MB_S else 'FAIL'}")
    print(f"{'  the same over CPU seconds (contention)':<40} {mb / cpu:10.1f}            "
          f"(CPU {cpu:.1f} s of {wall:.1f} s wall: under 1 when other work had the cores)")
    print(f"{'  load (parse) MB/s':<40} {mb / stages.get('load', wall):10.1f}")
    print(f"{'  analysis (every section) MB/s':<40} {mb / analysis if analysis else float('inf'):10.1f}")
    ratio = peak / mb
    print(f"{'peak RSS / raw size':<40} {ratio:9.2f}x {'<= 2.5x':>10}  "
          f"{'PASS' if ratio <= TARGET_RSS_RATIO else 'FAIL'}")
    print(f"{'(peak - start-up RSS) / raw size':<40} {(peak - base_mb) / mb:9.2f}x   "
          f"(peak {peak:.0f} MB, start-up {base_mb:.0f} MB)")
    print(f"\nHTA 0.5.0 has no end-to-end equivalent of diagnose (its parse is compared in bench/parse_speed.py)."
          f"\nload average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
