"""Parse speed and peak memory of ``neurontrace.load`` on Kineto traces, side by side with HTA.

Usage: python bench/parse_speed.py TRACE... [--repeat 3] [--no-hta] [--hta-python PY] [--decoders]

Method:
- Every measurement runs in its own fresh child interpreter (``python -c``), so peak RSS
  (``ru_maxrss`` of the child, read by the child itself and printed back as JSON) belongs to that
  measurement alone. Each repeat is a new child; the table shows the min time and max RSS.
- Sizes and speeds are of the raw (uncompressed) JSON: a ``.gz`` argument is first decompressed
  to a temporary file, and that file is what every tool reads. MB = 10**6 bytes.
- neurontrace: wall time of ``neurontrace.load(path)`` (file read included; imports excluded).
  A baseline child only imports neurontrace, pyarrow and the Kineto parser module; the net
  ratio (peak - baseline) / size is the memory the parse itself adds.
- HTA: wall time of ``TraceAnalysis(trace_dir=DIR)`` where DIR holds only a symlink
  ``rank-0.json`` to the trace (HTA reads a directory). It runs under ``--hta-python`` (default:
  this interpreter), so HTA can live in its own virtualenv; skipped when not importable there.
- ``--decoders``: reference rows for plain ``json.loads``, ``orjson.loads`` (when installed) and
  msgspec's untyped ``msgspec.json.decode`` of the same bytes (file read not timed).
- The file is read once before measuring so every child finds it in the page cache.
Targets (PASS/FAIL): >= 150 MB/s, >= 10x HTA's speed, peak RSS <= 2.5x the raw size.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

TARGET_MBPS = 150.0
TARGET_VS_HTA = 10.0
TARGET_RSS_RATIO = 2.5
MARK = "BENCH_RESULT "

_REPORT = """
import json, resource, sys
def report(seconds, **extra):
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6  # Linux: KiB
    print("BENCH_RESULT " + json.dumps(dict(seconds=seconds, rss_mb=rss, **extra)), flush=True)
"""
_BASELINE = _REPORT + """
import neurontrace, pyarrow, neurontrace.parsers.kineto
report(0.0)
"""
_NEURONTRACE = _REPORT + """
import time, neurontrace, pyarrow, neurontrace.parsers.kineto
t0 = time.perf_counter()
trace = neurontrace.load(sys.argv[1])
dt = time.perf_counter() - t0
report(dt, rows=sum(t.num_rows for t in trace.tables.values()))
"""
_HTA = _REPORT + """
import logging, time
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
dt = time.perf_counter() - t0
report(dt, rows=sum(len(df) for df in ta.t.traces.values()))
"""
_DECODER = _REPORT + """
import time
name = sys.argv[2]
if name == "json":
    import json as mod; fn = mod.loads
elif name == "orjson":
    import orjson as mod; fn = mod.loads
else:
    import msgspec as mod; fn = mod.json.decode
with open(sys.argv[1], "rb") as f:
    data = f.read()
t0 = time.perf_counter()
obj = fn(data)
report(time.perf_counter() - t0)
"""


def run_child(python: str, code: str, *args: str, timeout: float = 3600) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; its BENCH_RESULT line as a dict, or {"error": ...}."""
    try:
        proc = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARK):
            return dict(json.loads(line[len(MARK):]))
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}


def measure(python: str, code: str, args: list[str], repeat: int) -> dict[str, Any]:
    """Min time and max RSS over ``repeat`` fresh children (the first error stops it)."""
    runs = []
    for _ in range(repeat):
        r = run_child(python, code, *args)
        if "error" in r:
            return r
        runs.append(r)
    best = min(runs, key=lambda r: r["seconds"])
    return {**best, "rss_mb": max(r["rss_mb"] for r in runs)}


def raw_copy(path: Path, tmp: Path) -> Path:
    """The trace as raw JSON: ``path`` itself, or a decompressed copy in ``tmp``."""
    with path.open("rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    if not gz:
        return path
    out = tmp / path.name.removesuffix(".gz")
    d = zlib.decompressobj(wbits=31)
    with path.open("rb") as src, out.open("wb") as dst:
        while chunk := src.read(16 << 20):
            dst.write(d.decompress(chunk))
        dst.write(d.flush())
    return out


def code_fingerprint() -> str:
    """A hash of neurontrace's source, to flag code edited while a measurement ran."""
    h = hashlib.sha1()
    for mod in ("neurontrace", "neurontrace.parsers"):
        spec = importlib.util.find_spec(mod)
        for d in (spec.submodule_search_locations or []) if spec else []:
            for f in sorted(Path(d).rglob("*.py")):
                h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:12]


def warm_cache(path: Path) -> None:
    with path.open("rb") as f:
        while f.read(64 << 20):
            pass


def hta_importable(python: str) -> bool:
    try:
        proc = subprocess.run([python, "-c", "import hta.trace_analysis"], capture_output=True, timeout=300,
                              check=False)
    except OSError:  # no such interpreter
        return False
    return proc.returncode == 0


def bench_one(path: Path, args: argparse.Namespace, tmp: Path) -> None:
    raw = raw_copy(path, tmp)
    size = raw.stat().st_size
    mb = size / 1e6
    warm_cache(raw)
    print(f"\n== {path}  (raw JSON {mb:.1f} MB{', decompressed to ' + str(raw) if raw != path else ''})")
    me = sys.executable
    code = code_fingerprint()
    rows: list[tuple[str, dict[str, Any]]] = []
    base = measure(me, _BASELINE, [], args.repeat)
    nt = measure(me, _NEURONTRACE, [str(raw)], args.repeat)
    rows.append(("neurontrace.load", nt))
    hta: dict[str, Any] | None = None
    if args.hta:
        if hta_importable(args.hta_python):
            hta_dir = Path(tempfile.mkdtemp(dir=tmp))
            (hta_dir / "rank-0.json").symlink_to(raw.resolve())
            hta = measure(args.hta_python, _HTA, [str(hta_dir)], args.repeat)
            rows.append(("HTA TraceAnalysis", hta))
        else:
            print(f"HTA: not importable with {args.hta_python} (pip install holistictraceanalysis); skipped")
    if args.decoders:
        for name, label in (("json", "json.loads"), ("orjson", "orjson.loads"), ("msgspec", "msgspec untyped")):
            r = measure(me, _DECODER, [str(raw), name], args.repeat)
            if name == "orjson" and "No module named" in r.get("error", ""):
                continue
            rows.append((label, r))

    base_mb = base.get("rss_mb", float("nan"))
    print(f"baseline RSS (import neurontrace+pyarrow+kineto parser): {base_mb:.0f} MB; repeats: {args.repeat}; "
          f"neurontrace source {code}")
    if code_fingerprint() != code:
        print("WARNING: neurontrace's source changed during these measurements; rerun for consistent figures")
    head = f"{'tool':<20}{'time s':>9}{'MB/s':>9}{'peak RSS MB':>13}{'RSS/size':>10}{'net/size':>10}{'rows':>12}"
    print(head)
    print("-" * len(head))
    for label, r in rows:
        if "error" in r:
            print(f"{label:<20}  ERROR {r['error']}")
            continue
        is_nt = label == "neurontrace.load"
        net_s = f"{(r['rss_mb'] - base_mb) * 1e6 / size:>10.2f}" if is_nt else f"{'':>10}"
        rows_s = str(r.get("rows", ""))
        print(f"{label:<20}{r['seconds']:>9.2f}{mb / r['seconds']:>9.1f}{r['rss_mb']:>13.0f}"
              f"{r['rss_mb'] * 1e6 / size:>10.2f}{net_s}{rows_s:>12}")
    if "error" in nt:
        print("FAIL  neurontrace.load did not finish")
        return
    speed = mb / nt["seconds"]
    ratio = nt["rss_mb"] * 1e6 / size
    net = (nt["rss_mb"] - base_mb) * 1e6 / size
    verdict(speed >= TARGET_MBPS, f"speed {speed:.1f} MB/s (target >= {TARGET_MBPS:.0f} MB/s)")
    if hta is not None and "error" not in hta:
        x = hta["seconds"] / nt["seconds"]
        verdict(x >= TARGET_VS_HTA, f"{x:.1f}x HTA's speed (target >= {TARGET_VS_HTA:.0f}x)")
    else:
        print(f"SKIP  vs HTA (target >= {TARGET_VS_HTA:.0f}x): HTA not measured")
    verdict(ratio <= TARGET_RSS_RATIO,
            f"peak RSS {ratio:.2f}x raw size, net of baseline {net:.2f}x (target <= {TARGET_RSS_RATIO}x)")


def verdict(ok: bool, what: str) -> None:
    print(f"{'PASS' if ok else 'FAIL'}  {what}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+", type=Path, help="Kineto .json or .json.gz traces")
    ap.add_argument("--repeat", type=int, default=3, help="fresh child runs per measurement (default 3)")
    ap.add_argument("--no-hta", dest="hta", action="store_false", help="skip the HTA comparison")
    ap.add_argument("--hta-python", default=sys.executable, help="interpreter with HTA installed")
    ap.add_argument("--decoders", action="store_true", help="add json/orjson/msgspec reference rows")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="parse_speed."))
    try:
        for path in args.traces:
            bench_one(path, args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
