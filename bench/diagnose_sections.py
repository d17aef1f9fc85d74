"""`neurontrace diagnose` end to end on one large trace: MB/s, peak RSS, and the time of every section.

Usage: python bench/diagnose_sections.py TRACE [--repeat 2] [--text] [--versus DIR]

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
- ``--versus DIR`` (another checkout, e.g. main before a change): its children run with ``PYTHONPATH=DIR`` (every
  child runs in the temporary folder, so the folder this is started from never shadows either tree),
  alternated with this tree's (this, other; then other, this; ...) on the same file, so both see the same
  load; it prints the ratios this / other (wall and CPU run by run, best against best, every stage, the
  peak) and checks that both trees print the same document byte for byte (exit 1 when they do not). Every
  tree's runs must also agree among themselves.
- ``--analysis N``: the per-rank analysis alone, less exposed to the load than a whole run: per tree,
  ``--repeat`` children (alternated) load the trace once and run ``diagnose_rank`` N times, timing every stage
  in wall and in the process's CPU seconds; the least of each over the runs is printed, with the ratios.
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET_MB_S = 100.0
TARGET_RSS_RATIO = 2.5


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float, int, subprocess.CompletedProcess[str]]:
    """Run one child: (wall s, its peak RSS MB, its CPU s, its page faults, the result); os.wait4's rusage is of
    that child alone."""
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
        return (wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime, usage.ru_minflt,
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


def _prepare(trace: Path, tmp: str) -> Path:
    """The raw JSON to read (a ``.gz`` decompressed into ``tmp``), read once into the page cache."""
    path = trace
    with path.open("rb") as f:  # two bytes only: what this process holds, its children inherit as a peak
        gz = f.read(2) == b"\x1f\x8b"
    if gz:
        path = Path(tmp) / trace.name.removesuffix(".gz")
        with gzip.open(trace, "rb") as src, path.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 24)
    with path.open("rb") as f:
        while f.read(1 << 24):
            pass
    return path


class _Tree:
    """One tree's runs: the fastest run's (wall, stages, CPU), the largest peak, the document of the first."""

    def __init__(self, root: Path, readonly: bool = False) -> None:
        self.env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        if readonly:  # another checkout: no __pycache__ written into it
            self.env["PYTHONDONTWRITEBYTECODE"] = "1"
        self.root = root
        self.best: tuple[float, dict[str, float], float] | None = None
        self.walls: list[float] = []
        self.cpus: list[float] = []
        self.faults: list[int] = []
        self.peak = 0.0
        self.doc: str | None = None

    def run(self, cmd: list[str], text: bool) -> None:
        wall, rss, cpu, faults, done = _run(cmd, self.env)
        if done.returncode not in (0, 3):
            sys.exit(f"diagnose ({self.root}) failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        if not text:
            doc = json.loads(done.stdout)
            assert doc["schema"] == "neurontrace.diagnose/1", doc.get("schema")
        if self.doc is None:
            self.doc = done.stdout
        elif self.doc != done.stdout:
            sys.exit(f"diagnose ({self.root}) gave two different documents for one trace")
        self.walls.append(wall)
        self.cpus.append(cpu)
        self.faults.append(faults)
        self.peak = max(self.peak, rss)
        if self.best is None or wall < self.best[0]:
            self.best = (wall, _stages(done.stderr), cpu)


def _report(tree: _Tree, label: str, mb: float, base_mb: float, repeat: int) -> None:
    assert tree.best is not None
    wall, stages, cpu = tree.best
    print(f"\n[{label}] {tree.root}, best of {repeat}")
    print(f"{'stage':<28} {'seconds':>8} {'share':>6} {'MB/s':>9}")
    timed = sum(stages.values())
    for name, sec in stages.items():
        shown = f"{mb / sec:9.0f}" if sec >= 0.001 else f"{'-':>9}"
        print(f"{name:<28} {sec:8.3f} {100 * sec / wall:5.1f}% {shown}")
    print(f"{'(start-up, imports, exit)':<28} {wall - timed:8.3f} {100 * (wall - timed) / wall:5.1f}%")
    analysis = _analysis(stages)
    print(f"\n{'figure':<40} {'measured':>10} {'target':>10}  verdict")
    rate = mb / wall
    print(f"{'end to end MB/s (wall, imports incl.)':<40} {rate:10.1f} {'>= 100':>10}  "
          f"{'PASS' if rate >= TARGET_MB_S else 'FAIL'}")
    print(f"{'  the same over CPU seconds (contention)':<40} {mb / cpu:10.1f}            "
          f"(CPU {cpu:.1f} s of {wall:.1f} s wall: under 1 when other work had the cores)")
    print(f"{'  load (parse) MB/s':<40} {mb / stages.get('load', wall):10.1f}")
    print(f"{'  analysis (every section) MB/s':<40} {mb / analysis if analysis else float('inf'):10.1f}"
          f"   ({analysis:.2f} s)")
    ratio = tree.peak / mb
    print(f"{'peak RSS / raw size':<40} {ratio:9.2f}x {'<= 2.5x':>10}  "
          f"{'PASS' if ratio <= TARGET_RSS_RATIO else 'FAIL'}")
    print(f"{'(peak - start-up RSS) / raw size':<40} {(tree.peak - base_mb) / mb:9.2f}x   "
          f"(peak {tree.peak:.0f} MB, start-up {base_mb:.0f} MB)")
    print(f"{'page faults (fewest run), per MB':<40} {min(tree.faults) / mb:10.0f}   (each a page the kernel "
          f"had to hand over: the system time, dear where the host backs memory lazily)")


def _analysis(stages: dict[str, float]) -> float:
    return sum(v for k, v in stages.items() if k not in ("load", "render", "compile_logs"))


def _versus(mine: _Tree, other: _Tree) -> None:
    """Ratios this tree / the other, run for run (the children alternated), and whether the documents agree."""
    assert mine.best is not None and other.best is not None
    print(f"\nthis tree / {other.root} (under 1: this tree is faster), the children interleaved")
    pairs = list(zip(mine.walls, other.walls, strict=True))
    print(f"{'wall, run by run':<40} " + " ".join(f"{a / b:5.2f}x" for a, b in pairs))
    print(f"{'CPU seconds, run by run':<40} " + " ".join(f"{a / b:5.2f}x" for a, b in
                                                       zip(mine.cpus, other.cpus, strict=True)))
    print(f"{'wall, best against best':<40} {mine.best[0] / other.best[0]:5.2f}x")
    print(f"{'CPU seconds, least against least':<40} {min(mine.cpus) / min(other.cpus):5.2f}x")
    print(f"{'peak RSS':<40} {mine.peak / other.peak:5.2f}x")
    print(f"{'page faults, fewest against fewest':<40} {min(mine.faults) / max(min(other.faults), 1):5.2f}x")
    a, b = mine.best[1], other.best[1]
    print(f"\n{'stage (fastest runs)':<28} {'this':>8} {'other':>8} {'ratio':>7}")
    for name in dict.fromkeys([*a, *b]):
        x, y = a.get(name, 0.0), b.get(name, 0.0)
        ratio = f"{x / y:6.2f}x" if y >= 0.005 else f"{'-':>7}"
        print(f"{name:<28} {x:8.3f} {y:8.3f} {ratio}")
    xa, ya = _analysis(a), _analysis(b)
    print(f"{'analysis (every section)':<28} {xa:8.3f} {ya:8.3f} {xa / ya if ya else float('nan'):6.2f}x")
    same = mine.doc == other.doc
    print(f"\nthe same document as {other.root}: {'yes, byte for byte' if same else 'NO'}")
    if not same:
        sys.exit("the documents differ")


# A child that loads the trace once and runs the per-rank analysis (everything after the load, before the
# combine and the rendering) several times, timing every stage in wall and in CPU seconds of the process.
_ANALYSIS_CHILD = """
import json, sys, time
from contextlib import contextmanager
from neurontrace._allocator import use_system_allocator
use_system_allocator()  # as the CLI does
from neurontrace.analysis import timings
from neurontrace.analysis.diagnose import diagnose_rank
from neurontrace.load import load

class Both(timings.Timings):
    def __init__(self):
        super().__init__()
        self.cpu = {}

    @contextmanager
    def stage(self, name):
        w, c = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self[name] = self.get(name, 0.0) + time.perf_counter() - w
            self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - c

trace = load(sys.argv[1])
runs = []
for _ in range(int(sys.argv[2])):
    t = Both()
    diagnose_rank(trace, timings=t)
    runs.append({"wall": dict(t), "cpu": t.cpu})
print(json.dumps(runs))
"""


def _analysis_runs(trees: list[_Tree], path: Path, rounds: int, each: int) -> dict[str, list[dict[str, Any]]]:
    """Per tree, every analysis run of ``rounds`` children (trees alternated) of ``each`` runs."""
    out: dict[str, list[dict[str, Any]]] = {str(t.root): [] for t in trees}
    for k in range(rounds):
        for tree in trees if k % 2 == 0 else trees[::-1]:
            _, _, _, _, done = _run([sys.executable, "-c", _ANALYSIS_CHILD, str(path), str(each)], tree.env)
            if done.returncode != 0:
                sys.exit(f"the analysis child ({tree.root}) failed:\n{done.stderr[-3000:]}")
            out[str(tree.root)] += json.loads(done.stdout)
    return out


def _analysis_report(runs: dict[str, list[dict[str, Any]]], mine: str, other: str | None, each: int) -> None:
    """The least wall and CPU seconds of every stage over the runs, per tree, and this tree's / the other's."""
    def least(tree: str, kind: str) -> dict[str, float]:
        stages = dict.fromkeys(k for r in runs[tree] for k in r[kind])
        return {k: min(r[kind].get(k, 0.0) for r in runs[tree]) for k in stages}

    def total(tree: str, kind: str) -> float:
        return float(min(sum(r[kind].values()) for r in runs[tree]))

    n = len(runs[mine])
    print(f"\nthe per-rank analysis alone (load once, diagnose_rank {n} times per tree in alternated children): "
          "least seconds per stage")
    head = f"{'stage':<28} {'wall':>7} {'CPU':>7}"
    if other is not None:
        head += f" {'other wall':>10} {'other CPU':>9} {'wall x':>7} {'CPU x':>7}"
    print(head)
    a_w, a_c = least(mine, "wall"), least(mine, "cpu")
    b_w, b_c = (least(other, "wall"), least(other, "cpu")) if other is not None else ({}, {})
    for k in dict.fromkeys([*a_w, *b_w]):
        line = f"{k:<28} {a_w.get(k, 0.0):7.3f} {a_c.get(k, 0.0):7.3f}"
        if other is not None:
            rw = f"{a_w.get(k, 0.0) / b_w[k]:6.2f}x" if b_w.get(k, 0.0) >= 0.005 else f"{'-':>7}"
            rc = f"{a_c.get(k, 0.0) / b_c[k]:6.2f}x" if b_c.get(k, 0.0) >= 0.005 else f"{'-':>7}"
            line += f" {b_w.get(k, 0.0):10.3f} {b_c.get(k, 0.0):9.3f} {rw} {rc}"
        print(line)
    line = f"{'total (least run)':<28} {total(mine, 'wall'):7.3f} {total(mine, 'cpu'):7.3f}"
    if other is not None:
        line += (f" {total(other, 'wall'):10.3f} {total(other, 'cpu'):9.3f} "
                 f"{total(mine, 'wall') / total(other, 'wall'):6.2f}x {total(mine, 'cpu') / total(other, 'cpu'):6.2f}x")
    print(line)
    for tree in (mine, other) if other is not None else (mine,):
        print(f"{'  every run, wall / CPU s':<28} {tree}: " + ", ".join(
            f"{sum(r['wall'].values()):.2f}/{sum(r['cpu'].values()):.2f}" for r in runs[tree])
            + f"  (each child's first run is its first after the load: {each} per child)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--text", action="store_true", help="time the text report instead of --json")
    ap.add_argument("--versus", type=Path, metavar="DIR",
                    help="another checkout (main): its children run interleaved with this tree's, same file")
    ap.add_argument("--analysis", type=int, default=0, metavar="N",
                    help="also time the per-rank analysis alone: per tree, --repeat children that load once and "
                         "run it N times (wall and CPU seconds per stage)")
    args = ap.parse_args()
    mine = _Tree(ROOT)
    other = _Tree(args.versus.resolve(), readonly=True) if args.versus else None
    with tempfile.TemporaryDirectory(prefix="nt-diag-bench-") as tmp:
        path = _prepare(args.trace, tmp)
        size = path.stat().st_size
        here = Path.cwd()
        os.chdir(tmp)  # `python -m`/`-c` put the working folder first on sys.path: run from a checkout, both trees
        # would import that checkout, whatever PYTHONPATH says
        _, base_mb, _, _, _ = _run([sys.executable, "-c", "import neurontrace.cli.diagnose, neurontrace.analysis.diagnose"],
                                mine.env)
        cmd = [sys.executable, "-m", "neurontrace", "diagnose", str(path), "--timings"] + ([] if args.text else ["--json"])
        for k in range(args.repeat):
            order = [mine] if other is None else [mine, other] if k % 2 == 0 else [other, mine]
            for tree in order:
                tree.run(cmd, args.text)
        runs = _analysis_runs([mine] if other is None else [mine, other], path, args.repeat, args.analysis) \
            if args.analysis else None
        os.chdir(here)
    mb = size / 1e6
    print(f"trace: {args.trace} ({mb:.0f} MB raw JSON)   run: {' '.join(cmd[1:3])} diagnose ... "
          f"{'' if args.text else '--json '}--timings, best of {args.repeat}")
    _report(mine, "this tree", mb, base_mb, args.repeat)
    if other is not None:
        _report(other, "versus", mb, base_mb, args.repeat)
        _versus(mine, other)
    if runs is not None:
        _analysis_report(runs, str(mine.root), str(other.root) if other is not None else None, args.analysis)
    print(f"\nHTA 0.5.0 has no end-to-end equivalent of diagnose (its parse is compared in bench/parse_speed.py)."
          f"\nload average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
