"""One trace larger than memory: ``convert TRACE -o DATASET --dataset`` and ``diagnose DATASET`` (issue #28 item 3).

    python bench/out_of_core.py [--source TRACE] [--gb 30] [--compare-mb 200] [--part-mb 128] [--dir DIR]

Tiles a real corpus trace (default: the tb_plugin ResNet-50 GPU trace) end to end in time up to ``--gb``
with bench/tile_trace.py (a **tiled** trace, not a real run of that size), then runs, each as a child
process so its peak RSS is its own (``os.wait4``): the streaming convert into a dataset of time-ordered
parts, and ``diagnose DATASET --json``. It prints MB/s of raw JSON and peak RSS of both beside the
target (peak RSS <= 2 GB whatever the size), and, for comparison, the in-memory path (``diagnose TRACE``
and the plain ``convert``) on a tiled trace of ``--compare-mb`` that fits. Needs free disk for the JSON
plus the dataset and its spill files (about 1.6x the JSON): it skips with a message when there is not
enough. Files are deleted afterwards unless ``--keep``.
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

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "kineto-tb_plugin/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
TARGET_RSS_MB = 2048
WHOLE_RANK_FACTOR = 2.5  # diagnose DATASET's peak RSS per MB of JSON, measured at 0.5 GB: 2.3x
DISK_FACTOR = 1.6  # the JSON, plus the dataset's parts and spill files while it is written


def _corpus() -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import corpus_root

    root = corpus_root()
    if root is None:
        raise SystemExit("no corpus found (tests/conftest.py corpus_root); pass --source")
    return root / SOURCE


def _child(cmd: list[str], stdout: int | None = subprocess.DEVNULL) -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MB and exit status of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        print(f"  {' '.join(cmd[2:4])} exited {proc.returncode}: {err.strip()[-400:]}")
    return wall, usage.ru_maxrss / 1024, proc.returncode


def _available_mb() -> float:
    info = Path("/proc/meminfo")
    for line in info.read_text().splitlines() if info.is_file() else []:
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


def _tile(source: Path, out: Path, mb: float) -> float:
    subprocess.run([sys.executable, str(ROOT / "bench" / "tile_trace.py"), str(source), str(out),
                    "--target-mb", str(mb)], check=True, stdout=subprocess.DEVNULL)
    return out.stat().st_size / 1e6


def _row(what: str, mb: float, wall: float, rss: float, target: bool) -> None:
    verdict = ("PASS" if rss <= TARGET_RSS_MB else "FAIL") if target else "-"
    print(f"  {what:<34} {mb:9.0f} MB {wall:8.1f} s {mb / wall:8.1f} MB/s  peak RSS {rss:8.0f} MB  "
          f"(target <= {TARGET_RSS_MB} MB: {verdict})" if target else
          f"  {what:<34} {mb:9.0f} MB {wall:8.1f} s {mb / wall:8.1f} MB/s  peak RSS {rss:8.0f} MB  "
          f"({rss / mb:.2f}x the JSON)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path)
    ap.add_argument("--gb", type=float, default=30.0, help="size of the tiled trace streamed (default 30)")
    ap.add_argument("--compare-mb", type=float, default=200.0, help="size of the in-memory comparison (default 200)")
    ap.add_argument("--part-mb", type=int, default=128)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "neurontrace-out-of-core")
    ap.add_argument("--keep", action="store_true", help="keep the tiled trace and the dataset")
    args = ap.parse_args()
    source = args.source or _corpus()
    args.dir.mkdir(parents=True, exist_ok=True)
    need = args.gb * 1e9 * DISK_FACTOR + args.compare_mb * 1e6 * 2
    free = shutil.disk_usage(args.dir).free
    if free < need:
        print(f"SKIPPED: {args.dir} has {free / 1e9:.1f} GB free; a {args.gb:g} GB tiled trace needs about "
              f"{need / 1e9:.1f} GB (the JSON plus its dataset). Pass a smaller --gb or another --dir.")
        return
    py = sys.executable
    big, ds = args.dir / "tiled.pt.trace.json", args.dir / "tiled.dataset"
    small, small_out = args.dir / "small.pt.trace.json", args.dir / "small.tables"
    try:
        print(f"source: {source.name} (real); tiling to {args.gb:g} GB and {args.compare_mb:g} MB (tiled traces)")
        mb = _tile(source, big, args.gb * 1000)
        print(f"streaming path, {mb:.0f} MB tiled trace, parts of {args.part_mb} MB:")
        wall, rss, rc = _child([py, "-m", "neurontrace", "convert", str(big), "-o", str(ds), "--dataset",
                                "--force", "--part-mb", str(args.part_mb)])
        if rc == 0:
            _row("convert TRACE --dataset", mb, wall, rss, True)
            parquet = sum(f.stat().st_size for f in ds.rglob("*.parquet")) / 1e6
            print(f"  dataset: {parquet:.0f} MB of Parquet ({parquet / mb:.2f}x the JSON)")
            big.unlink()
            avail = _available_mb()
            if mb * WHOLE_RANK_FACTOR > avail / 2:  # it reads the rank whole (docs/scale.md): do not exhaust RAM
                print(f"  diagnose DATASET                   NOT RUN: it reads a streamed rank whole (not out of "
                      f"core yet), about {mb * WHOLE_RANK_FACTOR / 1e3:.0f} GB here, over half the "
                      f"{avail / 1e3:.0f} GB available (target <= {TARGET_RSS_MB} MB: NOT MET)")
            else:
                wall, rss, rc = _child([py, "-m", "neurontrace", "diagnose", str(ds), "--json"])
                if rc in (0, 10):
                    _row("diagnose DATASET", mb, wall, rss, True)
        small_mb = _tile(source, small, args.compare_mb)
        print(f"in-memory path, {small_mb:.0f} MB tiled trace (for comparison):")
        for what, cmd in (("convert TRACE (tables)", ["convert", str(small), "-o", str(small_out), "--force"]),
                          ("diagnose TRACE", ["diagnose", str(small), "--json"]),
                          ("convert TRACE --dataset", ["convert", str(small), "-o", str(small_out), "--force",
                                                       "--dataset", "--part-mb", str(args.part_mb)]),
                          ("diagnose DATASET", ["diagnose", str(small_out), "--json"])):
            wall, rss, rc = _child([py, "-m", "neurontrace", *cmd])
            if rc in (0, 10):
                _row(what, small_mb, wall, rss, False)
    finally:
        if not args.keep:
            for p in (big, small):
                p.unlink(missing_ok=True)
            for p in (ds, small_out):
                shutil.rmtree(p, ignore_errors=True)


if __name__ == "__main__":
    main()
