"""How diagnose scales with the number of ranks: single process against Dask workers.

    python bench/scale.py [--source TRACE] [--rank-mb 8] [--ranks 8 32 128] [--workers 2]

Makes N rank files from one real corpus trace (default: the TraceLens H100 BERT trace): **tiled
copies** of that one trace (repeated end to end in time up to ``--rank-mb`` by bench/tile_trace.py,
then ``distributedInfo.rank`` / ``world_size`` rewritten per file), so the job is N identical ranks,
not a real N-rank run. For each N it runs, each in a fresh process so peaks are its
own: the single-process path (``diagnose DIR --json``'s code: load every rank, diagnose), the Dask path
(``neurontrace.distributed.diagnose`` on a LocalCluster of ``--workers`` processes), and, as the
baseline, loading and diagnosing one rank. It prints wall time, raw JSON MB/s across the job, the
driver's peak RSS and the largest worker's peak RSS, checks the two paths give identical JSON, and
compares against the targets of issue #16. Timings on a shared machine vary: run it twice.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT.parent / "shared/corpus/kineto/TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def make_job(source: Path, n: int, out: Path, rank_mb: float | None = None) -> int:
    """N tiled rank files (raw JSON); returns their total size in bytes."""
    if rank_mb:
        tiled = out.parent / f"tiled-{rank_mb}.json"
        if not tiled.exists():
            subprocess.run([sys.executable, str(ROOT / "bench/tile_trace.py"), str(source), str(tiled),
                            "--target-mb", str(rank_mb)], check=True, capture_output=True)
        source = tiled
    raw = source.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    out.mkdir(parents=True, exist_ok=True)
    total = 0
    for r in range(n):
        doc["distributedInfo"] = {**(doc.get("distributedInfo") or {}), "rank": r, "world_size": n,
                                  "note": "tiled copy of one real trace (bench/scale.py)"}
        f = out / f"rank-{r}.pt.trace.json"
        f.write_text(json.dumps(doc))
        total += f.stat().st_size
    return total


def _warm() -> None:
    import neurontrace.analysis.diagnose
    import neurontrace.parsers.kineto  # noqa: F401


def measure(mode: str, job: Path, workers: int) -> dict[str, Any]:
    """One configuration, in this (fresh) process."""
    import neurontrace
    from neurontrace.analysis.diagnose import diagnose

    base = _peak_mb()
    t0 = time.perf_counter()
    worker_peak = None
    if mode == "one":
        doc = diagnose(neurontrace.load(job / "rank-0.pt.trace.json")).as_dict()
    elif mode == "single":
        doc = diagnose(neurontrace.load(job), inputs=[{"path": str(job), "format": "a directory of traces"}]).as_dict()
    else:
        import logging

        import distributed as dd

        from neurontrace import distributed

        with dd.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                             silence_logs=logging.ERROR) as cluster, dd.Client(cluster) as client:
            client.run(_warm)  # the workers' first imports are start-up, not analysis
            idle = max(client.run(_peak_mb).values())
            t0 = time.perf_counter()
            doc = distributed.diagnose(job, client=client)
            wall = time.perf_counter() - t0
            worker_peak = max(client.run(_peak_mb).values())
        return {"wall_s": wall, "driver_base_mb": base, "driver_peak_mb": _peak_mb(), "worker_peak_mb": worker_peak,
                "worker_idle_mb": idle, "doc": json.dumps(doc, sort_keys=True)}
    return {"wall_s": time.perf_counter() - t0, "driver_base_mb": base, "driver_peak_mb": _peak_mb(),
            "worker_peak_mb": None, "doc": json.dumps(doc, sort_keys=True)}


def _run(mode: str, job: Path, workers: int) -> dict[str, Any]:
    res = subprocess.run([sys.executable, __file__, "--measure", mode, str(job), "--workers", str(workers)],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    result: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=SOURCE)
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 32, 128])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rank-mb", type=float, default=None, help="tile the source in time to this size per rank")
    ap.add_argument("--measure", nargs=2, metavar=("MODE", "JOB"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure[0], Path(args.measure[1]), args.workers)))
        return
    print(f"source: {args.source.name} (every rank is a tiled copy of this one real trace)")
    print("the single-process path's and the one-rank baseline's imports are in their 'driver' peaks; "
          "the workers are warmed up (imports done) before the Dask timing starts")
    print(f"{'ranks':>5} {'path':<10} {'wall s':>8} {'MB/s':>7} {'driver peak MB':>15} {'driver +MB':>10} "
          f"{'worker peak MB':>15}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.ranks:
            job = Path(tmp) / f"job{n}"
            size = make_job(args.source, n, job, args.rank_mb)
            rank_mb = size / n / 1e6
            one = _run("one", job, args.workers)
            single = _run("single", job, args.workers)
            dask = _run("dask", job, args.workers)
            one_growth = one["driver_peak_mb"] - one["driver_base_mb"]
            for name, r in (("one rank", one), ("single", single), (f"dask x{args.workers}", dask)):
                mb = (rank_mb if r is one else size / 1e6) / r["wall_s"]
                worker = f"{r['worker_peak_mb']:.0f}" if r["worker_peak_mb"] else "-"
                print(f"{n:>5} {name:<10} {r['wall_s']:>8.2f} {mb:>7.1f} {r['driver_peak_mb']:>15.0f} "
                      f"{r['driver_peak_mb'] - r['driver_base_mb']:>10.0f} {worker:>15}")
            growth = dask["driver_peak_mb"] - dask["driver_base_mb"]
            speedup = single["wall_s"] / dask["wall_s"]
            worker_growth = dask["worker_peak_mb"] - dask["worker_idle_mb"]
            checks = [
                ("identical JSON", single["doc"] == dask["doc"]),
                (f"driver RSS growth {growth:.0f} MB <= 1.5 x one rank's {one_growth:.0f} MB", growth <= 1.5 * one_growth),
                (f"worker peak {dask['worker_peak_mb']:.0f} MB <= 2.5 x rank JSON {rank_mb:.1f} MB",
                 dask["worker_peak_mb"] <= 2.5 * rank_mb),
                (f"  (growth over the warmed-up idle worker: {worker_growth:.0f} MB <= {2.5 * rank_mb:.0f} MB)",
                 worker_growth <= 2.5 * rank_mb),
                (f"dask x{args.workers} throughput {speedup:.2f}x single >= 1.7x", speedup >= 1.7),
            ]
            for text, ok in checks:
                print(f"      {'met    ' if ok else 'NOT MET'} {text}")


if __name__ == "__main__":
    main()
