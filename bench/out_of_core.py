"""One trace larger than memory: ``convert TRACE -o DATASET --dataset`` and ``diagnose DATASET`` (issue #28 item 3).

    python bench/out_of_core.py [--source TRACE] [--gb 1 4] [--part-mb 128] [--dir DIR] [--keep]
                                [--convert-only] [--out DATASET] [--compare-mb 300]
    python bench/out_of_core.py --diagnose DATASET [--json-mb MB]

Tiles a real corpus trace (default: the tb_plugin ResNet-50 GPU trace) end to end in time to each size of
``--gb`` with ``bench/tile_trace.py --fast`` (a **tiled** trace, not a real run of that size), then runs,
each as a child process so its peak RSS is its own (``os.wait4``): the streaming convert into a dataset of
time-ordered parts and, unless ``--convert-only``, ``diagnose DATASET --json``. It prints MB/s of raw JSON
and peak RSS beside the targets: peak RSS <= 2 GB whatever the size, and flat in the size (each step's peak at
the largest size at most 5% over its peak at the smallest, with two sizes or more). ``--compare-mb`` runs, on one tiled trace
of that size, side by side in turn: the in-memory ``convert`` (the tables), ``neurontrace.load``, the
streaming convert (and with ``--baseline CHECKOUT`` that checkout's streaming convert), and prints the
streaming convert's speed as a ratio of theirs, in wall and in CPU time.

``--out DATASET`` keeps the dataset of the (last) size there, with ``DATASET.bench.json`` beside it (the
JSON's size and the convert's figures); ``--diagnose DATASET`` later runs only ``diagnose DATASET`` on it
(MB/s of the JSON it was converted from, read from that file, or ``--json-mb``); ``diagnose DATASET``
reads a streamed rank slice by slice (docs/scale.md). Needs free disk for the
JSON plus the dataset (about 1.2x the JSON at the peak): it skips with a message when there is not enough.
Tiled JSON files are deleted after their convert (and the datasets unless ``--keep``/``--out``).
"""

from __future__ import annotations

import argparse
import json
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
FLAT = 0.05  # the largest size's peak RSS at most this much over the smallest's
DISK_FACTOR = 1.25  # the JSON, plus the spill (lz4) and the dataset's parts while they are written


def _corpus() -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import corpus_root

    root = corpus_root()
    if root is None:
        raise SystemExit("no corpus found (tests/conftest.py corpus_root); pass --source")
    return root / SOURCE


def _child(cmd: list[str], root: Path = ROOT) -> tuple[float, float, float, int]:
    """Wall seconds, CPU seconds (user + system), peak RSS in MB and exit status of one child process
    (running ``root``'s neurontrace)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=root,
                            env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")  # drained while it runs: a full pipe would block it
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 10):
        print(f"  {' '.join(cmd[2:4])} exited {proc.returncode}: {err.strip()[-400:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode


def _tile(source: Path, out: Path, mb: float) -> float:
    subprocess.run([sys.executable, str(ROOT / "bench" / "tile_trace.py"), str(source), str(out),
                    "--target-mb", str(mb), "--fast"], check=True, stdout=subprocess.DEVNULL)
    return out.stat().st_size / 1e6


def _row(what: str, mb: float, wall: float, cpu: float, rss: float, target: str = "") -> None:
    print(f"  {what:<28} {mb:9.0f} MB {wall:8.1f} s {mb / wall:7.1f} MB/s (cpu {cpu:7.1f} s, {mb / cpu:6.1f} MB/s)"
          f"  peak RSS {rss:6.0f} MB  {target}")


def _rss_target(rss: float) -> str:
    return f"(target <= {TARGET_RSS_MB} MB: {'met' if rss <= TARGET_RSS_MB else 'NOT MET'})"


def _convert(py: str, json_path: Path, ds: Path, part_mb: int) -> tuple[float, float, float, int]:
    return _child([py, "-m", "neurontrace", "convert", str(json_path), "-o", str(ds), "--dataset", "--force",
                   "--part-mb", str(part_mb)])


def _diagnose(py: str, ds: Path, mb: float) -> float | None:
    """``diagnose DATASET`` as a child: its row printed; its peak RSS (MB), None when it failed."""
    wall, cpu, rss, rc = _child([py, "-m", "neurontrace", "diagnose", str(ds), "--json"])
    if rc not in (0, 10):
        return None
    _row("diagnose DATASET", mb, wall, cpu, rss, _rss_target(rss))
    return rss


def _disk_ok(folder: Path, mb: float) -> bool:
    need = mb * 1e6 * DISK_FACTOR
    free = shutil.disk_usage(folder).free
    if free < need:
        print(f"SKIPPED {mb / 1e3:g} GB: {folder} has {free / 1e9:.1f} GB free; a tiled trace of that size needs "
              f"about {need / 1e9:.1f} GB (the JSON plus its spill and dataset). Pass a smaller --gb or another --dir.")
        return False
    return True


def _sizes(args: argparse.Namespace, source: Path, py: str) -> None:
    peaks: dict[str, list[tuple[float, float]]] = {"convert TRACE --dataset": [], "diagnose DATASET": []}
    for gb in args.gb:
        if not _disk_ok(args.dir, gb * 1e3):
            continue
        big = args.dir / f"tiled-{gb:g}gb.pt.trace.json"
        last = gb == args.gb[-1]
        ds = args.out if (last and args.out is not None) else args.dir / f"tiled-{gb:g}gb.dataset"
        try:
            t0 = time.perf_counter()
            mb = _tile(source, big, gb * 1e3)
            print(f"{mb:.0f} MB tiled trace ({time.perf_counter() - t0:.0f} s to tile), parts of {args.part_mb} MB:")
            wall, cpu, rss, rc = _convert(py, big, ds, args.part_mb)
            big.unlink()
            if rc != 0:
                continue
            _row("convert TRACE --dataset", mb, wall, cpu, rss, _rss_target(rss))
            parquet = sum(f.stat().st_size for f in ds.rglob("*.parquet")) / 1e6
            parts = len(json.loads((ds / "neurontrace-dataset.json").read_text())["ranks"])
            print(f"  dataset: {parts} parts, {parquet:.0f} MB of Parquet ({parquet / mb:.3f}x the JSON)")
            peaks["convert TRACE --dataset"].append((mb, rss))
            figures = {"json_mb": mb, "source": source.name, "tiled": True, "part_mb": args.part_mb,
                       "convert": {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "peak_rss_mb": round(rss),
                                   "mb_per_s": round(mb / wall, 1)}, "parquet_mb": round(parquet), "parts": parts}
            if args.out is not None and ds == args.out:
                Path(f"{ds}.bench.json").write_text(json.dumps(figures, indent=1) + "\n")
            if not args.convert_only and (diagnosed := _diagnose(py, ds, mb)) is not None:
                peaks["diagnose DATASET"].append((mb, diagnosed))
        finally:
            big.unlink(missing_ok=True)
            if not args.keep and ds != args.out:
                shutil.rmtree(ds, ignore_errors=True)
    for step, sizes in peaks.items():  # each step's own peaks: a step may not grow with the size
        if len(sizes) >= 2:
            (mb0, rss0), (mb1, rss1) = sizes[0], sizes[-1]
            grow = rss1 / rss0 - 1
            print(f"flatness of {step}: peak RSS {rss0:.0f} MB at {mb0:.0f} MB, {rss1:.0f} MB at {mb1:.0f} MB: "
                  f"{grow:+.1%} (target: at most {FLAT:.0%} more: {'met' if grow <= FLAT else 'NOT MET'})")


def _compare(args: argparse.Namespace, source: Path, py: str) -> None:
    small = args.dir / "compare.pt.trace.json"
    out = args.dir / "compare.out"
    try:
        mb = _tile(source, small, args.compare_mb)
        print(f"side by side on one {mb:.0f} MB tiled trace (each in turn, {args.repeat} rounds; the least CPU "
              "time of each: on a shared machine wall time is mostly other jobs'):")
        cmds: dict[str, list[str]] = {"convert TRACE (tables)": [py, "-m", "neurontrace", "convert", str(small), "-o", str(out), "--force"],
                "neurontrace.load": [py, "-c", f"import neurontrace; neurontrace.load({str(small)!r})"],
                "convert TRACE --dataset": [py, "-m", "neurontrace", "convert", str(small), "-o", str(out), "--force",
                                            "--dataset", "--part-mb", str(args.part_mb)]}
        roots = dict.fromkeys(cmds, ROOT)
        if args.baseline is not None:
            cmds["baseline convert --dataset"] = cmds["convert TRACE --dataset"]
            roots["baseline convert --dataset"] = args.baseline.resolve()
        best: dict[str, tuple[float, float, float]] = {}
        for _ in range(args.repeat):
            for what, cmd in cmds.items():
                wall, cpu, rss, rc = _child(cmd, roots[what])
                if rc == 0 and (what not in best or cpu < best[what][1]):
                    best[what] = (wall, cpu, rss)
        for what, (wall, cpu, rss) in best.items():
            _row(what, mb, wall, cpu, rss)
        if "convert TRACE --dataset" in best:
            s = best["convert TRACE --dataset"]
            for what in ("convert TRACE (tables)", "neurontrace.load", "baseline convert --dataset"):
                if what in best:
                    b = best[what]
                    print(f"  streaming convert vs {what}: {b[0] / s[0]:.2f}x the speed (wall), "
                          f"{b[1] / s[1]:.2f}x (cpu)")
    finally:
        small.unlink(missing_ok=True)
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path)
    ap.add_argument("--gb", type=float, nargs="*", default=[30.0], help="sizes of the tiled traces streamed")
    ap.add_argument("--compare-mb", type=float, default=0.0,
                    help="size of the side-by-side comparison with the in-memory paths (0: none)")
    ap.add_argument("--repeat", type=int, default=2, help="rounds of the side-by-side comparison")
    ap.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                    help="with --compare-mb: also the streaming convert of another checkout (e.g. main)")
    ap.add_argument("--part-mb", type=int, default=128)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "neurontrace-out-of-core")
    ap.add_argument("--keep", action="store_true", help="keep the datasets")
    ap.add_argument("--convert-only", action="store_true", help="run the streaming convert only, not diagnose")
    ap.add_argument("--out", type=Path, help="keep the last size's dataset here (and DATASET.bench.json)")
    ap.add_argument("--diagnose", type=Path, metavar="DATASET", help="only diagnose this existing dataset")
    ap.add_argument("--json-mb", type=float, help="with --diagnose: the size of the JSON it was converted from")
    args = ap.parse_args()
    py = sys.executable
    if args.diagnose is not None:
        info = Path(f"{args.diagnose}.bench.json")
        mb = args.json_mb or (json.loads(info.read_text())["json_mb"] if info.is_file() else None)
        if mb is None:
            raise SystemExit(f"pass --json-mb: {info} is not there")
        print(f"diagnose of {args.diagnose} ({mb:.0f} MB of JSON):")
        _diagnose(py, args.diagnose, mb)
        return
    source = args.source or _corpus()
    args.dir.mkdir(parents=True, exist_ok=True)
    sizes = f"; tiled traces of {', '.join(f'{g:g}' for g in args.gb)} GB" if args.gb else ""
    print(f"source: {source.name} (real){sizes}")
    if args.compare_mb:
        _compare(args, source, py)
    if args.gb:
        _sizes(args, source, py)


if __name__ == "__main__":
    main()
