"""Parse speed and peak memory of ``neurontrace.load`` on Kineto traces, side by side with HTA.

Usage: bench/parse_speed.py TRACE... [--repeat 3] [--no-hta] [--hta-python PY] [--decoders] [--reference]
                            [--profile N] [--versus DIR]

Method:
- Every measurement runs in a fresh child interpreter (``python -c``) that prints its own time and
  ``ru_maxrss`` back as JSON, so peak RSS is that measurement's alone. Each repeat is a new child;
  the table shows the min time and the max RSS over repeats.
- Sizes and speeds are of the raw (uncompressed) JSON: a ``.gz`` argument is first decompressed
  to a temporary file, and that file is what every tool reads. MB = 10**6 bytes.
- neurontrace: wall time of ``neurontrace.load(path)`` (file read included; imports excluded).
  A baseline child only imports neurontrace, pyarrow and the Kineto parser module; the net
  ratio (peak - baseline) / size is the memory the parse itself adds.
- HTA: wall time of ``TraceAnalysis(trace_dir=DIR)``, DIR holding only a symlink ``rank-0.json`` to
  the trace, run by ``--hta-python`` (HTA may live in its own virtualenv); skipped if not importable.
- The decoder that ran is printed: ``native`` (the compiled scanner, neurontrace/parsers/_kineto_scan.c) or
  ``python (why)``. ``--reference`` adds a row with the pure-Python decoder forced.
- ``--decoders``: reference rows for ``json.loads``, ``orjson.loads`` (when installed) and untyped
  ``msgspec.json.decode`` of the same bytes (file read not timed), and ``scanner alone``: the compiled scanner's
  pass over the same bytes into its column buffers, in chunks of the size ``neurontrace.load`` scans (no Arrow
  wrapping, no normalization; file read not timed): what the normalizer and the read add is the gap to the neurontrace row.
- ``--profile N``: one more neurontrace child under cProfile (a warm load: the child loads the trace once
  first); top N by own and cumulative time.
- The file is read once before measuring so every child finds it in the page cache.
- user/sys are the CPU seconds of the timed call in the fastest repeat: sys is mostly page faults,
  and wall time well above user+sys means other processes shared the CPUs (see load average).
- neurontrace's source is copied to a temporary folder and the children import that copy, so
  edits made while this runs do not mix versions; the copy's hash is printed.
- ``--versus DIR``: a second neurontrace (DIR holds its ``neurontrace`` package, e.g. a checkout of main with its
  built scanner), snapshotted the same way; each neurontrace row is then measured for both, their children
  interleaved (this tree, DIR, this tree, ...), and its rows and the CPU-time ratio (user + sys, fastest
  repeat: what a loaded machine changes least) are printed beside ours.
- ``neurontrace.load, CLI allocator``: the same call after ``_allocator.use_system_allocator()``, as the
  ``neurontrace`` command runs it (Arrow on malloc: one heap for the scanner's columns and Arrow's).
Targets (PASS/FAIL, issue #28): >= 300 MB/s, >= 20x HTA's speed, peak RSS growth (net of the baseline)
<= 2.0x the raw size, each for both neurontrace rows; the pure-Python decoder (``--reference``) >= 100 MB/s.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TARGET_MBPS = 300.0
TARGET_VS_HTA = 20.0
TARGET_RSS_RATIO = 2.0  # peak RSS growth over the baseline child's, per byte of raw JSON
TARGET_REFERENCE_MBPS = 100.0
MARK = "BENCH_RESULT "
CHILD_S = 3600
SUBPACKAGES = ("parsers", "app", "analysis")
Env = dict[str, str] | None
DECODERS = {"json": "json.loads", "orjson": "orjson.loads", "msgspec": "msgspec untyped"}

_REPORT = """
import json, resource, sys, time
def start():
    global T0, R0
    R0, T0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
def report(**extra):
    dt, r = time.perf_counter() - T0, resource.getrusage(resource.RUSAGE_SELF)
    out = dict(seconds=dt, user=r.ru_utime - R0.ru_utime, sys=r.ru_stime - R0.ru_stime,
               rss_mb=r.ru_maxrss * 1024 / 1e6, **extra)  # ru_maxrss: KiB on Linux
    print("BENCH_RESULT " + json.dumps(out), flush=True)
start()
"""
_BASELINE = _REPORT + """
import neurontrace, pyarrow, neurontrace.parsers.kineto
report()
"""
_NEURONTRACE = _REPORT + """
import neurontrace, pyarrow, neurontrace.parsers.kineto
start()
trace = neurontrace.load(sys.argv[1])
report(rows=sum(t.num_rows for t in trace.tables.values()), src=neurontrace.__file__,
       decoder=trace.meta("decoder"))
"""
_NEURONTRACE_CLI = _NEURONTRACE.replace("start()\ntrace =", "from neurontrace._allocator import use_system_allocator\n"
                                        "use_system_allocator()\nstart()\ntrace =")
_HTA = _REPORT + """
import logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
start()
ta = TraceAnalysis(trace_dir=sys.argv[1])
report(rows=sum(len(df) for df in ta.t.traces.values()))
"""
_HTA_IMPORT = _REPORT + "import hta.trace_analysis\nreport()"
_DECODER = _REPORT + """
import importlib
mod = importlib.import_module(sys.argv[2])
fn = mod.json.decode if sys.argv[2] == "msgspec" else mod.loads
with open(sys.argv[1], "rb") as f:
    data = f.read()
start()
obj = fn(data)
report()
"""
_SCANNER = _REPORT + """
from neurontrace.parsers import _kineto_native
scanner = _kineto_native.scanner()
with open(sys.argv[1], "rb") as f:
    data = bytearray(f.read())
start()
pos, rows, closed = scanner.find_events(memoryview(data)) + 1, 0, False
while not closed:
    pos, n, parts, closed = scanner.scan(data, pos, len(data), _kineto_native.CHUNK_BYTES, rows, (), False)
    rows += n
report(rows=rows)
"""
_PROFILE = """
import cProfile, pstats, sys, neurontrace, neurontrace.parsers.kineto
neurontrace.load(sys.argv[1])  # warm: the profile is of the second load (first-call costs aside)
prof = cProfile.Profile()
prof.runcall(neurontrace.load, sys.argv[1])
stats = pstats.Stats(prof).strip_dirs()
for key in ("tottime", "cumulative"):
    stats.sort_stats(key).print_stats(int(sys.argv[2]))
"""


def run_child(python: str, code: str, args: list[str], env: Env) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; its BENCH_RESULT line as a dict, or {"error": ...}."""
    cmd = [python, "-c", code, *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, timeout=CHILD_S)
    except (subprocess.TimeoutExpired, OSError) as exc:  # OSError: no such interpreter
        return {"error": str(exc)}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARK):
            return dict(json.loads(line[len(MARK):]))
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}


def measure(python: str, code: str, args: list[str], repeat: int, env: Env = None) -> dict[str, Any]:
    """Min time and max RSS over ``repeat`` fresh children (the first error stops it)."""
    runs = []
    for _ in range(repeat):
        r = run_child(python, code, args, env)
        if "error" in r:
            return r
        runs.append(r)
    best = min(runs, key=lambda r: r["seconds"])
    return {**best, "rss_mb": max(r["rss_mb"] for r in runs)}


def measure_pair(python: str, code: str, args: list[str], repeat: int, env: Env,
                 other: Env) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`measure` of ``code`` under two environments, their children interleaved (one each per repeat)."""
    mine: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for _ in range(repeat):
        for runs, e in ((mine, env), (theirs, other)):
            r = run_child(python, code, args, e)
            if "error" in r:
                return r, r
            runs.append(r)
    def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
        fastest = min(runs, key=lambda r: r["seconds"])
        return {**fastest, "rss_mb": max(r["rss_mb"] for r in runs),
                "cpu": min(r["user"] + r["sys"] for r in runs)}
    return best(mine), best(theirs)


def raw_copy(path: Path, tmp: Path) -> Path:
    """The trace as raw JSON: ``path`` itself, or a decompressed copy in ``tmp``."""
    with path.open("rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return path
    out = tmp / path.name.removesuffix(".gz")
    with gzip.open(path, "rb") as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst, 16 << 20)
    return out


def snapshot_source(tmp: Path) -> tuple[Path, str]:
    """Freeze neurontrace's source (others may edit it meanwhile) in ``tmp``: (PYTHONPATH, hash)."""
    spec = importlib.util.find_spec("neurontrace")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("neurontrace is not importable here (pip install -e .)")
    root = tmp / "src"
    pkg = root / "neurontrace"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(spec.submodule_search_locations[0], pkg, ignore=skip)
    for sub in SUBPACKAGES:  # the editable install maps these from folders outside neurontrace/
        sub_spec = importlib.util.find_spec(f"neurontrace.{sub}")
        if sub_spec and sub_spec.submodule_search_locations and not (pkg / sub).exists():
            shutil.copytree(sub_spec.submodule_search_locations[0], pkg / sub, ignore=skip)
    h = hashlib.sha1()
    for f in sorted([*pkg.rglob("*.py"), *pkg.rglob("*.c")]):
        h.update(str(f.relative_to(pkg)).encode() + f.read_bytes())
    return root, h.hexdigest()[:12]


def verdict(ok: bool, what: str) -> None:
    print(f"{'PASS' if ok else 'FAIL'}  {what}")


def bench_one(path: Path, args: argparse.Namespace, tmp: Path) -> None:
    raw = raw_copy(path, tmp)
    size = raw.stat().st_size
    mb = size / 1e6
    with raw.open("rb") as f:  # into the page cache
        while f.read(64 << 20):
            pass
    print(f"\n== {path}  (raw JSON {mb:.1f} MB{', decompressed to ' + str(raw) if raw != path else ''})")
    me = sys.executable
    load0 = os.getloadavg()[0]
    base = measure(me, _BASELINE, [], args.repeat, args.env)
    versus: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

    def ours(label: str, code: str, env: Env) -> dict[str, Any]:
        if args.versus_env is None:
            return measure(me, code, [str(raw)], args.repeat, env)
        other = {**args.versus_env, **{k: v for k, v in (env or {}).items() if k.startswith("NEURONTRACE_")}}
        mine, theirs = measure_pair(me, code, [str(raw)], args.repeat, env, other)
        versus.append((label, mine, theirs))
        return mine

    nt = ours("neurontrace.load", _NEURONTRACE, args.env)
    if not str(nt.get("src", args.src)).startswith(str(args.src)):
        print(f"WARNING: the child imported {nt['src']}, not the source snapshot")
    print(f"neurontrace decoder: {nt.get('decoder')}")
    cli = ours("CLI allocator", _NEURONTRACE_CLI, args.env)
    rows: list[tuple[str, dict[str, Any]]] = [("neurontrace.load", nt), ("  CLI allocator", cli)]
    ref: dict[str, Any] | None = None
    if args.reference:
        ref_env = {**(args.env or os.environ), "NEURONTRACE_KINETO_DECODER": "python"}
        ref = ours("reference decoder", _NEURONTRACE, ref_env)
        rows.append(("  reference decoder", ref))
    hta: dict[str, Any] | None = None
    hta_ok = args.hta and "error" not in run_child(args.hta_python, _HTA_IMPORT, [], None)
    if hta_ok:
        hta_dir = Path(tempfile.mkdtemp(dir=tmp))
        (hta_dir / "rank-0.json").symlink_to(raw.resolve())
        hta = measure(args.hta_python, _HTA, [str(hta_dir)], args.repeat)
        rows.append(("HTA TraceAnalysis", hta))
    elif args.hta:
        print(f"HTA: not importable with {args.hta_python} (pip install holistictraceanalysis); skipped")
    if args.decoders:
        for name, label in DECODERS.items():
            r = measure(me, _DECODER, [str(raw), name], args.repeat)
            if not (name == "orjson" and "No module named" in r.get("error", "")):
                rows.append((label, r))
        if nt.get("decoder") == "native":
            rows.append(("scanner alone", measure(me, _SCANNER, [str(raw)], args.repeat, args.env)))

    base_mb = base.get("rss_mb", float("nan"))
    print(f"baseline RSS (import neurontrace+pyarrow+kineto parser): {base_mb:.0f} MB; "
          f"repeats: {args.repeat}; neurontrace source snapshot {args.code}; "
          f"load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after (2+ = contended on 2 cores)")
    head = (f"{'tool':<20}{'time s':>8}{'MB/s':>8}{'user s':>8}{'sys s':>7}{'peak RSS MB':>13}"
            f"{'RSS/size':>10}{'net/size':>10}{'rows':>10}")
    print(head + "\n" + "-" * len(head))
    for label, r in rows:
        if "error" in r:
            print(f"{label:<20}  ERROR {r['error']}")
            continue
        net = f"{(r['rss_mb'] - base_mb) * 1e6 / size:>10.2f}" if r is not hta else " " * 10
        print(f"{label:<20}{r['seconds']:>8.2f}{mb / r['seconds']:>8.1f}{r['user']:>8.2f}{r['sys']:>7.2f}"
              f"{r['rss_mb']:>13.0f}{r['rss_mb'] * 1e6 / size:>10.2f}{net}{r.get('rows', ''):>10}")
    for label, mine, theirs in versus:
        if "error" in mine or "error" in theirs:
            print(f"versus {args.versus}: {label}: ERROR {mine.get('error') or theirs.get('error')}")
            continue
        print(f"versus {args.versus} ({label}): {theirs['seconds']:.2f} s, {mb / theirs['seconds']:.1f} MB/s, "
              f"peak RSS {theirs['rss_mb']:.0f} MB (growth {(theirs['rss_mb'] - base_mb) * 1e6 / size:.2f}x); CPU "
              f"{mine['cpu']:.3f} s here against {theirs['cpu']:.3f} s there: {mine['cpu'] / theirs['cpu']:.2f}x")
    for label, r in (("neurontrace.load", nt), ("CLI allocator", cli)):
        if "error" in r:
            print(f"FAIL  {label} did not finish")
            continue
        speed = mb / r["seconds"]
        verdict(speed >= TARGET_MBPS, f"{label}: speed {speed:.1f} MB/s (target >= {TARGET_MBPS:.0f} MB/s)")
        if hta is not None and "error" not in hta:
            x = hta["seconds"] / r["seconds"]
            verdict(x >= TARGET_VS_HTA, f"{label}: {x:.1f}x HTA's speed (target >= {TARGET_VS_HTA:.0f}x)")
        else:
            print(f"SKIP  {label}: vs HTA (target >= {TARGET_VS_HTA:.0f}x): HTA not measured")
        ratio = r["rss_mb"] * 1e6 / size
        net_ratio = (r["rss_mb"] - base_mb) * 1e6 / size
        verdict(net_ratio <= TARGET_RSS_RATIO, f"{label}: peak RSS growth {net_ratio:.2f}x raw size (peak "
                f"{ratio:.2f}x; target: growth <= {TARGET_RSS_RATIO}x)")
    if ref is not None and "error" not in ref:
        speed = mb / ref["seconds"]
        verdict(speed >= TARGET_REFERENCE_MBPS, f"reference decoder: speed {speed:.1f} MB/s (target >= "
                f"{TARGET_REFERENCE_MBPS:.0f} MB/s)")
    if args.profile:
        cmd = [me, "-c", _PROFILE, str(raw), str(args.profile)]
        out = subprocess.run(cmd, capture_output=True, text=True, env=args.env, check=False)
        print(f"cProfile of neurontrace.load (one warm run):\n{out.stdout.strip()}{out.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+", type=Path, help="Kineto .json or .json.gz traces")
    ap.add_argument("--repeat", type=int, default=3, help="fresh child runs per measurement (default 3)")
    ap.add_argument("--no-hta", dest="hta", action="store_false", help="skip the HTA comparison")
    ap.add_argument("--hta-python", default=sys.executable, help="interpreter with HTA installed")
    ap.add_argument("--decoders", action="store_true", help="add json/orjson/msgspec reference rows")
    ap.add_argument("--reference", action="store_true",
                    help="add a neurontrace row forced onto the pure-Python decoder (NEURONTRACE_KINETO_DECODER=python)")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="print cProfile's top N functions")
    ap.add_argument("--versus", type=Path, default=None, metavar="DIR",
                    help="a folder holding another neurontrace package, measured beside this one, interleaved")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="parse_speed."))
    try:
        args.src, args.code = snapshot_source(tmp)
        paths = [str(args.src), os.environ.get("PYTHONPATH", "")]
        args.env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        args.versus_env = None
        if args.versus is not None:
            other = tmp / "versus"
            shutil.copytree(args.versus.resolve() / "neurontrace", other / "neurontrace",
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            args.versus_env = {**os.environ, "PYTHONPATH": str(other)}
        traces = [t.resolve() for t in args.traces]
        os.chdir(tmp)  # `python -c` puts the working folder first on sys.path: not the live checkout
        for path in traces:
            bench_one(path, args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
