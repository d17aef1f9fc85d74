"""Load time and peak memory of a 10-million-row Neuron Explorer ``Instruction`` table vs pyarrow.

Usage: python bench/neuron_load.py [--rows 10000000] [--repeat 3] [--data DIR] [--full]

Method:
- Data (SYNTHETIC): ``neurontrace.testing.synthetic_neuron.instruction_table(rows)``, 5000 static instructions
  replayed, 17 columns (times, engine, opcode, operands, ids, HLO name, NKI source line, stack frame
  ids, semaphore waits on 5% of rows, bytes, FLOPs), strings dictionary-encoded as a compiled program
  repeats them. Written by pyarrow (1 Mi-row groups) as ``DIR/Instruction.parquet`` beside a one-row
  ``Metadata.parquet`` (schema 7.4.0, ``first_ts`` set, so device times are moved to the epoch clock).
  Made once per DIR (``--data`` reuses one); the file is read once before measuring (page cache).
- Every measurement runs in a fresh child interpreter. Imports (neurontrace, the parser, pyarrow,
  pandas) happen before the clock starts; peak RSS is the child's ``ru_maxrss``. Each repeat is a
  new child; the table shows the minimum time and the maximum RSS. CPU time (``process_time``, all
  threads) is shown beside wall time: on a shared machine it varies less.
- load: ``neurontrace.load(DIR)`` with default settings (``detail="auto"``: above 1M rows ``args``
  holds no copy of the unmapped columns, which stay in the Parquet files and are read back by
  ``neuron_explorer.source_columns``; see ``neurontrace/parsers/neuron_explorer.py``), i.e. a full ``Trace``
  with one ``device_events`` row per instruction plus the derived semaphore-wait rows. The child
  reports the columns the parser read (metadata ``neuron.columns_read``).
- baseline: ``pyarrow.parquet.read_table(DIR/Instruction.parquet, columns=<those columns>)``;
  "Arrow table size" is that table's ``nbytes``.
- Ratios: time = load / read_table; memory = load peak RSS / table size. Because a 10M-row table
  is not large next to the interpreter, the memory ratio is also shown net of an import-only child
  (peak - import RSS) / table size. Peak RSS is the child's ``VmHWM`` (Linux), which unlike
  ``ru_maxrss`` does not inherit the parent's peak; the data is generated in a child of its own.
- ``--full``: also ``detail="full"`` (every unmapped column copied into ``args`` as JSON) against
  ``read_table`` of all columns. Reported without a target.
Targets (issue "Speed and memory"): time ratio <= 2.0, memory ratio <= 1.5.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TARGET_TIME = 2.0
TARGET_RSS = 1.5
MARK = "BENCH_RESULT "

_PRELUDE = """
import json, resource, sys, time
import pandas, pyarrow, pyarrow.parquet as pq
import neurontrace
from neurontrace.parsers import neuron_explorer
def report(seconds, **extra):
    # VmHWM: this process image's peak RSS (ru_maxrss would carry the parent's peak across fork+exec).
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]
    rss = int(hwm[0].split()[1]) * 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("BENCH_RESULT " + json.dumps(dict(seconds=seconds, rss=rss, **extra)), flush=True)
"""
_IMPORTS = _PRELUDE + "report(0.0)\n"
_LOAD = _PRELUDE + """
c0, t0 = time.process_time(), time.perf_counter()
trace = neuron_explorer.parse(sys.argv[1], detail=sys.argv[2]) if sys.argv[2] != "auto" else neurontrace.load(sys.argv[1])
dt, cpu = time.perf_counter() - t0, time.process_time() - c0
report(dt, cpu=cpu, rows=trace.device_events.num_rows, columns=trace.meta("neuron.columns_read")["Instruction"],
       detail=trace.meta("neuron.args_detail")["tables"]["Instruction"])
"""
_READ = _PRELUDE + """
cols = json.loads(sys.argv[2])
c0, t0 = time.process_time(), time.perf_counter()
table = pq.read_table(sys.argv[1], columns=cols)
dt, cpu = time.perf_counter() - t0, time.process_time() - c0
report(dt, cpu=cpu, nbytes=table.nbytes, rows=table.num_rows)
"""

_MAKE = """
import sys
from pathlib import Path
from neurontrace.testing import synthetic_neuron as syn
d, rows = Path(sys.argv[1]), int(sys.argv[2])
syn.write_table(syn.instruction_table(rows), d, "Instruction")
syn.write_tables(d, {"Metadata": [{"profile_schema_version": "7.4.0", "neuroncore_idx": 0,
                                   "profile_name": "synthetic_bench",
                                   "first_ts": "2025-12-18 15:35:56.000000000 +0000 UTC"}]})
"""


def child(code: str, *args: str) -> dict[str, Any]:
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)
    for line in res.stdout.splitlines():
        if line.startswith(MARK):
            out: dict[str, Any] = json.loads(line[len(MARK):])
            return out
    raise RuntimeError(f"benchmark child failed:\n{res.stdout}\n{res.stderr}")


def best(code: str, args: list[str], repeat: int) -> dict[str, Any]:
    runs = [child(code, *args) for _ in range(repeat)]
    out = dict(runs[0])
    out["seconds"] = min(r["seconds"] for r in runs)
    if "cpu" in out:
        out["cpu"] = min(r["cpu"] for r in runs)
    out["rss"] = max(r["rss"] for r in runs)
    return out


def make_data(directory: Path, rows: int) -> Path:
    target = directory / "Instruction.parquet"
    if target.is_file() and (directory / "rows.txt").is_file() and (directory / "rows.txt").read_text() == str(rows):
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    print(f"writing a synthetic {rows:,}-row Instruction table to {directory} ...", flush=True)
    subprocess.run([sys.executable, "-c", _MAKE, str(directory), str(rows)], check=True)
    (directory / "rows.txt").write_text(str(rows))
    return directory


def measure(data: Path, detail: str, repeat: int, base_rss: int) -> dict[str, Any]:
    load = best(_LOAD, [str(data), detail], repeat)
    cols = load["columns"] if detail != "full" else None
    if cols is None:
        import pyarrow.parquet as pq

        cols = pq.read_schema(data / "Instruction.parquet").names
    read = best(_READ, [str(data / "Instruction.parquet"), json.dumps(cols)], repeat)
    return {
        "detail": load["detail"], "columns": len(cols), "rows": load["rows"],
        "load_s": load["seconds"], "read_s": read["seconds"], "time_ratio": load["seconds"] / read["seconds"],
        "load_cpu": load["cpu"], "read_cpu": read["cpu"], "cpu_ratio": load["cpu"] / read["cpu"],
        "load_rss": load["rss"], "read_rss": read["rss"], "table_bytes": read["nbytes"],
        "rss_ratio": load["rss"] / read["nbytes"], "net_rss_ratio": (load["rss"] - base_rss) / read["nbytes"],
        "read_rss_ratio": read["rss"] / read["nbytes"],
    }


def verdict(value: float, target: float | None) -> str:
    if target is None:
        return ""
    return "PASS" if value <= target else "FAIL"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data", type=Path, help="directory for the generated table (kept for reuse)")
    ap.add_argument("--full", action="store_true", help="also measure detail='full' (slow)")
    args = ap.parse_args(argv)
    tmp = None
    if args.data is None:
        tmp = tempfile.TemporaryDirectory(prefix="neurontrace-bench-")
        args.data = Path(tmp.name)
    data = make_data(args.data, args.rows)
    (data / "Instruction.parquet").read_bytes()  # warm the page cache
    base = best(_IMPORTS, [], 1)["rss"]
    results = [measure(data, "auto", args.repeat, base)]
    if args.full:
        results.append(measure(data, "full", 1, base))
    mb = 1e6
    print(f"\nSYNTHETIC Instruction table, {args.rows:,} rows; import-only child RSS {base / mb:.0f} MB; "
          f"best of {args.repeat} (full: 1)")
    for r in results:
        target_t = TARGET_TIME if r["detail"] == "lean" or len(results) == 1 else None
        target_m = TARGET_RSS if target_t is not None else None
        print(f"\n  detail={r['detail']}: {r['rows']:,} device_events rows from {r['columns']} columns")
        print(f"  (a) load {r['load_s']:.2f} s / read_table {r['read_s']:.2f} s = {r['time_ratio']:.2f}x "
              f"(target <= {TARGET_TIME}) {verdict(r['time_ratio'], target_t)}")
        print(f"      CPU time (all threads, less sensitive to a busy machine): {r['load_cpu']:.2f} s / "
              f"{r['read_cpu']:.2f} s = {r['cpu_ratio']:.2f}x")
        print(f"  (b) peak RSS {r['load_rss'] / mb:.0f} MB / Arrow table {r['table_bytes'] / mb:.0f} MB = "
              f"{r['rss_ratio']:.2f}x (target <= {TARGET_RSS}) {verdict(r['rss_ratio'], target_m)}")
        print(f"      net of imports: ({r['load_rss'] / mb:.0f} - {base / mb:.0f}) MB / {r['table_bytes'] / mb:.0f} MB"
              f" = {r['net_rss_ratio']:.2f}x {verdict(r['net_rss_ratio'], target_m)}; read_table's own peak RSS is "
              f"{r['read_rss_ratio']:.2f}x its table")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
