"""Resource bounds on hostile input (docs/limits.md): each case made here, then read in a fresh child process
whose peak RSS (above its own baseline after the imports) is reported beside the input's size.

Cases (``--cases``; sizes scale with ``--scale``, 1.0 = the sizes issue #29 names):

- ``tiny``: a Kineto trace of 5 M tiny ``X`` events (about 60 bytes each): loaded whole;
- ``name``: the real CPU training-loop sample with one op renamed to 200 MB of text: ``diagnose`` on it;
- ``logline``: a real TORCH_TRACE compile log with a 2 GB line inside (an envelope that never ends): read;
- ``nesting``: ``args`` nested 10,000 deep: a named error;
- ``parquet``: a converted trace whose ``system_events`` part declares 40 M rows in a few MB: refused;
- ``gzip``: a gzip bomb (1 GiB members repeated; 10 MB compressed at scale 1): refused at its bound.

    python bench/hostile_bounds.py                        # every case at full size (needs ~3 GB free disk)
    python bench/hostile_bounds.py --scale 0.1 --cases tiny,name

Each line: case, input size, what happened (ok or the named error), seconds, peak RSS (the child's VmHWM above
its baseline after the imports) and RSS / input size.
Large files are written under ``--tmp`` and deleted after their case.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_traces" / "cpu_train_loop.pt.trace.json.gz"

CHILD = """
import json, os, sys, time, warnings
kind, path = sys.argv[1], sys.argv[2]
import neurontrace, neurontrace.parsers.kineto, neurontrace.cli
from neurontrace.errors import NeurontraceError
from neurontrace.parsers import compile_logs
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
base = rss()
t0 = time.perf_counter()
outcome = "ok"
try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "logline":
            log = compile_logs.read([path])
            outcome = f"ok: {len(log.rows)} rows, skipped {log.skipped}"
        elif kind == "name":
            import contextlib, io
            with contextlib.redirect_stdout(io.StringIO()):
                code = neurontrace.cli.main(["diagnose", path])
            outcome = f"diagnose exit {code}"
        else:
            trace = neurontrace.load(path)
            outcome = f"ok: {trace.num_events:,} events"
except NeurontraceError as exc:
    outcome = f"{type(exc).__name__} (exit {exc.exit_code})"
dt = time.perf_counter() - t0
with open("/proc/self/status") as f:  # VmHWM: this process's own peak (ru_maxrss keeps the parent's across exec)
    peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
print(json.dumps({"outcome": outcome, "seconds": dt, "peak": max(peak - base, 0)}))
"""


def tiny(path: Path, scale: float) -> None:
    n = int(5_000_000 * scale)
    with path.open("w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [\n')
        step = 100_000
        for lo in range(0, n, step):
            f.write(",\n".join(f'{{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": {i}, "dur": 1}}'
                               for i in range(lo, min(n, lo + step))))
            f.write(",\n" if lo + step < n else "\n")
        f.write("]}\n")


def name(path: Path, scale: float) -> None:
    doc = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    op = next(e for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    op["name"] = "n" * int(200_000_000 * scale)
    path.write_text(json.dumps(doc))


def logline(path: Path, scale: float) -> None:
    src = ROOT.parent / "shared" / "corpus" / "compile" / "tlparse" / "comp_metrics.log"
    lines = src.read_bytes().splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if b'"dynamo_start"' in ln)
    piece = b"y" * (1 << 24)
    with path.open("wb") as f:
        f.writelines(lines[:at])
        f.write(lines[at].split(b"] {", 1)[0] + b'] {"dynamo_start": {"stack": "')
        for _ in range(max(1, int(2_000_000_000 * scale) // len(piece))):
            f.write(piece)
        f.write(b'"}}\n')
        f.writelines(lines[at:])


def nesting(path: Path, scale: float) -> None:
    deep = "[" * 10_000 + "]" * 10_000
    path.write_text(f'{{"traceEvents": [{{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {{"x": {deep}}}}}]}}')


def parquet(path: Path, scale: float) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    import neurontrace

    neurontrace.load(SAMPLE).to_parquet(path)
    rows = int(40_000_000 * scale)
    pq.write_table(pa.table({f"c{i}": pa.nulls(rows, pa.int64()) for i in range(5)}),
                   path / "system_events.parquet", compression="zstd")


def gzip_bomb(path: Path, scale: float) -> None:
    member_bytes = 1 << 30
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    member = comp.compress(b'{"traceEvents": [') + b"".join(comp.compress(b" " * (1 << 24))
                                                             for _ in range(member_bytes >> 24)) + comp.flush()
    with path.open("wb") as f:
        for _ in range(max(1, round(10 * scale))):  # ten members at scale 1: ~10 MB inflating to 10 GiB
            f.write(member)


CASES = {"tiny": ("tiny.json", tiny), "name": ("name.json", name), "logline": ("x.log", logline),
         "nesting": ("deep.json", nesting), "parquet": ("bomb", parquet), "gzip": ("bomb.json.gz", gzip_bomb)}


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="size of every case against issue #29's (default 1)")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--tmp", type=Path, default=None, help="where the inputs are written (default: a temp dir)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for case in args.cases.split(","):
            file_name, make = CASES[case]
            path = Path(tmp) / file_name
            make(path, args.scale)
            size = size_of(path)
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            res = subprocess.run([sys.executable, "-c", CHILD, case, str(path)], cwd=ROOT, capture_output=True,
                                 text=True, env=env, check=False)
            subprocess.run(["rm", "-rf", str(path)], check=True)
            if res.returncode != 0:
                print(f"{case:>8}: {size / 1e6:,.1f} MB: child failed (exit {res.returncode}): {res.stderr[-600:]}")
                continue
            out = json.loads(res.stdout.strip().splitlines()[-1])
            print(f"{case:>8}: {size / 1e6:9,.1f} MB  {out['outcome']:<48} {out['seconds']:7.1f} s  "
                  f"peak RSS {out['peak'] / 1e6:8,.0f} MB = {out['peak'] / size:7.2f}x the input", flush=True)


if __name__ == "__main__":
    main()
