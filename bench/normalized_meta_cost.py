"""What deriving the normalized metadata keys (parsers/_normalized_meta.py) costs next to the parse it ends.

    python bench/normalized_meta_cost.py TRACE [TRACE ...] [--repeat 5]

For each trace: loads it once (the whole parse, normalized keys included), then times
``with_normalized`` alone on that trace with its normalized rows removed (what a parse pays for them),
best of --repeat, and prints it with its share of the parse. No target: a cost, read as a ratio; the
machine is shared, so read minima.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

import neurontrace
from neurontrace.parsers._normalized_meta import with_normalized
from neurontrace.schema import NORMALIZED_KEYS
from neurontrace.trace import Trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    for path in args.traces:
        t0 = time.perf_counter()
        trace = neurontrace.load(path)
        parse_s = time.perf_counter() - t0
        meta = trace.metadata
        keep = pc.invert(pc.is_in(meta["key"], pa.array([k.key for k in NORMALIZED_KEYS])))
        bare = Trace(**{**trace.tables, "metadata": meta.filter(keep)})
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            with_normalized(bare)
            best = min(best, time.perf_counter() - t0)
        events = trace.num_events
        print(f"{path.name}: {events:,} events; load {parse_s:.2f} s; with_normalized {best * 1e3:.2f} ms "
              f"(best of {args.repeat}) = {best / parse_s:.4%} of the load")


if __name__ == "__main__":
    main()
