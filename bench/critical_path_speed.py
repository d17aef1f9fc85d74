"""Critical-path speed and memory: the path of a 2M-event trace against the targets of issue #26.

    python bench/critical_path_speed.py [--events 250000,500000,1000000,2000000] [--source TRACE]

A real GPU trace of the corpus (HTA's simple_add by default: CPU ops, launches, kernels, copies, syncs) is tiled
end to end in time until it holds N events, as bench/tile_trace.py does to the JSON, but on the loaded tables
(copy k shifted by k spans; event ids, correlation ids and flow ends by k times their largest value), so the
parser's time and memory stay out of the figures. For each N it times ``critical_path.analyse`` (build the graph,
pick binding edges, walk the window and every step: best of --repeat) and samples the process's RSS while it
runs: the peak above the RSS before, against the Trace's own size (the sum of its tables' Arrow buffers).
Targets: <= 5 s and <= 2x the Trace's memory at 2M events, linear in events (time per event at 2M against
the smallest N). Beside it, as a baseline run on the same trace in the same process, stall attribution
(``attribute``): the ratio says what the machine's load does not. Prints one line per N and PASS/NOT MET per
target.
"""

from __future__ import annotations

import argparse
import gc
import os
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import neurontrace
from neurontrace import Trace
from neurontrace.analysis.attribution import attribute
from neurontrace.analysis.critical_path import analyse

TARGET_S = 5.0
TARGET_MEMORY = 2.0
TARGET_EVENTS = 2_000_000
DEFAULT = "HolisticTraceAnalysis/tests/data/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz"


def _shift(t: pa.Table, cols: dict[str, int]) -> pa.Table:
    out = t
    for name, by in cols.items():
        if name in t.column_names and by:
            out = out.set_column(out.column_names.index(name), name,
                                 pc.add(out[name], pa.scalar(by, t.schema.field(name).type)))
    return out.cast(t.schema)


def tile(trace: Trace, n: int) -> Trace:
    """``trace`` repeated end to end until it holds ``n`` host + device events."""
    host, dev, flows = trace.system_events, trace.device_events, trace.flows
    per = host.num_rows + dev.num_rows
    copies = max(1, -(-n // per))
    lo = min(int(pc.min(t["ts_ns"]).as_py()) for t in (host, dev))
    hi = max(int(pc.max(pc.add(t["ts_ns"], t["dur_ns"])).as_py()) for t in (host, dev))
    span = hi - lo + 1000
    ids = max(int(pc.max(t["event_id"]).as_py()) for t in (host, dev)) + 1
    corr = max(int(pc.max(t["correlation"]).as_py() or 0) for t in (host, dev)) + 1
    hs, ds, fs = [], [], []
    for k in range(copies):
        hs.append(_shift(host, {"ts_ns": k * span, "event_id": k * ids, "correlation": k * corr}))
        ds.append(_shift(dev, {"ts_ns": k * span, "event_id": k * ids, "correlation": k * corr}))
        fs.append(_shift(flows, {"src_event_id": k * ids, "dst_event_id": k * ids, "src_ts_ns": k * span,
                                 "dst_ts_ns": k * span}))
    return Trace(system_events=pa.concat_tables(hs).combine_chunks(), device_events=pa.concat_tables(ds).combine_chunks(),
                 flows=pa.concat_tables(fs).combine_chunks())


def _rss() -> int:
    return int(Path(f"/proc/{os.getpid()}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Sampler(threading.Thread):
    """The peak RSS while it runs, sampled every 5 ms."""

    def __init__(self) -> None:
        super().__init__()
        self.peak, self.done = 0, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, _rss())
            time.sleep(0.005)


def measure(trace: Trace, repeat: int) -> tuple[float, int]:
    best, peak_extra = float("inf"), 0
    for _ in range(repeat):
        gc.collect()
        base, sampler = _rss(), _Sampler()
        sampler.start()
        t0 = time.perf_counter()
        result = analyse(trace)
        best = min(best, time.perf_counter() - t0)
        sampler.done.set()
        sampler.join()
        peak_extra = max(peak_extra, sampler.peak - base)
        assert result is not None
        result.check()
        del result
    return best, peak_extra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="250000,500000,1000000,2000000")
    parser.add_argument("--source", type=Path, help="a Kineto trace to tile (default: HTA's simple_add in the corpus)")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    source = args.source or Path(os.environ.get("NEURONTRACE_CORPUS", "../shared/corpus/kineto")) / DEFAULT
    base = neurontrace.load(source)
    rows = []
    for n in (int(x) for x in args.events.split(",")):
        trace = tile(base, n)
        events = trace.system_events.num_rows + trace.device_events.num_rows
        size = sum(t.nbytes for t in trace.tables.values())
        secs, extra = measure(trace, args.repeat)
        t0 = time.perf_counter()
        attribute(trace)  # the baseline, side by side: stall attribution of the same trace
        base_s = time.perf_counter() - t0
        rows.append((events, secs, extra, size))
        print(f"{events:>9} events  {secs:6.2f} s  {events / secs / 1e6:5.2f} M events/s  peak +{extra / 2**20:7.1f} MiB"
              f"  trace {size / 2**20:7.1f} MiB  ratio {extra / size:4.2f}x  attribution {base_s:5.2f} s "
              f"(path / attribution {secs / base_s:4.2f})", flush=True)
        del trace
    big = max(rows)
    small = min(rows)
    linear = (big[1] / big[0]) / (small[1] / small[0])
    print(f"time at {big[0]} events: {big[1]:.2f} s (target <= {TARGET_S} s): "
          f"{'PASS' if big[1] <= TARGET_S and big[0] >= TARGET_EVENTS else 'NOT MET'}")
    print(f"memory at {big[0]} events: {big[2] / big[3]:.2f}x the Trace (target <= {TARGET_MEMORY}x): "
          f"{'PASS' if big[2] <= TARGET_MEMORY * big[3] else 'NOT MET'}")
    print(f"time per event at {big[0]} / at {small[0]}: {linear:.2f} (linear: about 1)")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
