"""How diagnose scales with the number of ranks: single process against Dask workers.

    python bench/scale.py [--source TRACE] [--rank-mb 8] [--ranks 8 32 128] [--workers 2]
    python bench/scale.py --reduce-ranks 1024     # the cross-rank reduce alone

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
import contextlib
import gc
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
# the real ResNet-50 GPU trace: its tiled copies pass the one-run check as ranks of one job (the BERT trace's
# host and device processes never overlap in time, so runs_check refuses a job of its copies)
SOURCE = ROOT.parent / "shared/corpus/kineto/kineto-tb_plugin/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


def _peak_mb() -> float:
    """This process's peak RSS: Linux's VmHWM (of this address space; ru_maxrss would carry the peak of
    the process that exec'd it, here the parent that built the job)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _reset_peak() -> float:
    """Start a new peak at the current RSS (Linux: ``5 > /proc/self/clear_refs``); returns that RSS."""
    gc.collect()
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
    return _peak_mb()


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


def _warm(source: str) -> None:
    """A worker's start-up: its imports and first-call costs, on the untiled source (not the job's ranks)."""
    from neurontrace.analysis.contract import Options
    from neurontrace.distributed import diagnose_one

    diagnose_one(source, Options())


def measure(mode: str, job: Path, workers: int, source: Path) -> dict[str, Any]:
    """One configuration, in this (fresh) process; peaks are VmHWM growth over the RSS after start-up."""
    import neurontrace
    from neurontrace._allocator import use_system_allocator
    from neurontrace.analysis.diagnose import diagnose

    if mode != "dask":
        use_system_allocator()  # as the neurontrace command does; the Dask workers start with it
    if mode == "single":
        _warm(str(source))  # warmed as the workers are (the one-rank baseline stays cold: what a user sees)
    base = _reset_peak()
    t0 = time.perf_counter()
    if mode == "one":
        doc = diagnose(neurontrace.load(job / "rank-0.pt.trace.json")).as_dict()
    elif mode == "single":
        doc = diagnose(neurontrace.load(job), inputs=[{"path": str(job), "format": "a directory of traces"}]).as_dict()
    else:
        from neurontrace import distributed

        start = time.perf_counter()
        with distributed.local_cluster(workers, dashboard=None) as client:  # the cluster --workers starts
            started = time.perf_counter() - start
            # Imports and first calls are start-up, not analysis: a warm-up task on each worker, in the
            # thread that runs tasks (its own malloc arena and caches), not client.run's event-loop thread.
            client.gather([client.submit(_warm, str(source), workers=[w], pure=False, key=f"warm-{w}")
                           for w in client.scheduler_info()["workers"]])
            distributed.rank_inputs([job])  # the driver's imports (format probes) are start-up too
            idle = client.run(_reset_peak)
            t0 = time.perf_counter()
            doc = distributed.diagnose(job, client=client).as_dict()
            wall = time.perf_counter() - t0
            peak = client.run(_peak_mb)
        return {"wall_s": wall, "cluster_start_s": started, "driver_base_mb": base, "driver_peak_mb": _peak_mb(),
                "worker_peak_mb": max(peak.values()), "worker_growth_mb": max(peak[w] - idle[w] for w in peak),
                "doc": json.dumps(doc, sort_keys=True)}
    return {"wall_s": time.perf_counter() - t0, "driver_base_mb": base, "driver_peak_mb": _peak_mb(),
            "worker_peak_mb": None, "worker_growth_mb": None, "doc": json.dumps(doc, sort_keys=True)}


def _run(mode: str, job: Path, workers: int, source: Path) -> dict[str, Any]:
    res = subprocess.run([sys.executable, __file__, "--measure", mode, str(job), "--workers", str(workers),
                          "--source", str(source)], capture_output=True, text=True, check=True, cwd=ROOT)
    result: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return result


def reduce_cost(ranks: int, repeats: int) -> None:
    """The cross-rank reduce alone on ``ranks`` ranks: the real 8-rank gloo job's collective records
    (sample_traces/gloo_8rank) tiled to that many ranks and repeated ``repeats`` times per rank."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    import neurontrace
    from neurontrace.analysis import cross_rank as xr

    rec = xr.rank_collectives(neurontrace.load(ROOT / "sample_traces/gloo_8rank"))
    world = len(set(rec["rank"].to_pylist()))
    rank, ordinal = rec.schema.get_field_index("rank"), rec.schema.get_field_index("ordinal")
    parts = [rec.set_column(rank, rec.schema.field(rank),
                            pc.add(rec["rank"], world * block).cast(rec.schema.field(rank).type))
             .set_column(ordinal, rec.schema.field(ordinal),
                         pc.add(rec["ordinal"], 1000 * k).cast(rec.schema.field(ordinal).type))
             for block in range(max(1, ranks // world)) for k in range(repeats)]
    job = pa.concat_tables(parts)
    size = job.schema.get_field_index("group_size")
    job = job.set_column(size, job.schema.field(size), pa.array(np.full(job.num_rows, ranks), job.schema.field(size).type))
    t0 = time.perf_counter()
    cr = xr.cross_rank(job)
    secs = time.perf_counter() - t0
    doc = len(json.dumps(cr.as_dict()))
    print(f"reduce: {job.num_rows} collective rows of {len(cr.ranks)} ranks ({len(cr.collectives)} collectives) "
          f"matched in {secs:.2f} s ({job.num_rows / secs:,.0f} rows/s); cross_rank JSON {doc / 1e6:.2f} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=SOURCE)
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 32, 128])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rank-mb", type=float, default=None, help="tile the source in time to this size per rank")
    ap.add_argument("--reduce-ranks", type=int, metavar="N",
                    help="only time the cross-rank reduce on N ranks (the gloo job's records, tiled)")
    ap.add_argument("--measure", nargs=2, metavar=("MODE", "JOB"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reduce_ranks:
        reduce_cost(args.reduce_ranks, repeats=12)
        return
    if args.measure:
        print(json.dumps(measure(args.measure[0], Path(args.measure[1]), args.workers, args.source)))
        return
    print(f"source: {args.source.name} (every rank is a tiled copy of this one real trace)")
    print("peaks are VmHWM. driver +MB: over the driver's RSS after importing neurontrace (first-call costs and, "
          "for Dask, the in-process scheduler included); worker +MB: over each worker's RSS after a warm-up "
          "diagnose of the untiled source, the largest of the workers. Timing: the single path and the workers "
          "are warmed up by that diagnose before it starts; the one-rank baseline is cold")
    print(f"{'ranks':>5} {'path':<10} {'wall s':>8} {'MB/s':>7} {'driver peak MB':>15} {'driver +MB':>10} "
          f"{'worker peak MB':>15} {'worker +MB':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.ranks:
            job = Path(tmp) / f"job{n}"
            size = make_job(args.source, n, job, args.rank_mb)
            rank_mb = size / n / 1e6
            one = _run("one", job, args.workers, args.source)
            single = _run("single", job, args.workers, args.source)
            dask = _run("dask", job, args.workers, args.source)
            one_growth = one["driver_peak_mb"] - one["driver_base_mb"]
            for name, r in (("one rank", one), ("single", single), (f"dask x{args.workers}", dask)):
                mb = (rank_mb if r is one else size / 1e6) / r["wall_s"]
                worker = f"{r['worker_peak_mb']:.0f}" if r["worker_peak_mb"] else "-"
                worker_plus = f"{r['worker_growth_mb']:.0f}" if r["worker_growth_mb"] is not None else "-"
                print(f"{n:>5} {name:<10} {r['wall_s']:>8.2f} {mb:>7.1f} {r['driver_peak_mb']:>15.0f} "
                      f"{r['driver_peak_mb'] - r['driver_base_mb']:>10.0f} {worker:>15} {worker_plus:>10}")
            growth = dask["driver_peak_mb"] - dask["driver_base_mb"]
            speedup = single["wall_s"] / dask["wall_s"]
            worker_growth = dask["worker_growth_mb"]
            checks = [
                ("identical JSON", single["doc"] == dask["doc"]),
                (f"driver RSS growth {growth:.0f} MB <= 1.5 x one rank's {one_growth:.0f} MB", growth <= 1.5 * one_growth),
                (f"worker peak {dask['worker_peak_mb']:.0f} MB <= 2.5 x rank JSON {rank_mb:.1f} MB",
                 dask["worker_peak_mb"] <= 2.5 * rank_mb),
                (f"  (growth over the warmed-up worker: {worker_growth:.0f} MB <= {2.5 * rank_mb:.0f} MB)",
                 worker_growth <= 2.5 * rank_mb),
                (f"dask x{args.workers} throughput {speedup:.2f}x single >= 1.7x", speedup >= 1.7),
            ]
            for text, ok in checks:
                print(f"      {'met    ' if ok else 'NOT MET'} {text}")
            print(f"      (starting the LocalCluster took {dask['cluster_start_s']:.1f} s, outside the timing)")


if __name__ == "__main__":
    main()
