"""What cross_rank's time slices keep for its merge (analysis/cross_rank_slices.py), next to the events.

    python bench/cross_rank_carry.py TRACE [TRACE ...] [--slices N]

Cuts each trace (one rank) at N - 1 even instants, computes the cross_rank section on each slice with
``Options.owned`` set and prints the bytes the slices' carries hold (their rows' Arrow buffers and their tails'
name totals as JSON) against the Arrow bytes of the rank's event tables.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import neurontrace
from neurontrace.analysis import cross_rank
from neurontrace.analysis.contract import Context, Options
from neurontrace.analysis.sliced import slices_of
from neurontrace.analysis.slices import slice_of
from neurontrace.analysis.window import trace_span


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--slices", type=int, default=10)
    args = ap.parse_args()
    for path in args.traces:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trace = neurontrace.load(path)
        lo, hi = trace_span(trace)
        n = args.slices
        carried = 0
        for owned in slices_of((lo, hi), [lo + (hi - lo) * i // n for i in range(1, n)]):
            part = cross_rank.SECTION.compute(Context(slice_of(trace, owned), [], [], {}, Options(owned=owned)))
            for _, carry in part.carries or []:
                for kind in carry.kinds.values():
                    carried += kind.rows.nbytes + len(json.dumps(kind.tail.names))
        events = trace.system_events.num_rows + trace.device_events.num_rows
        table_bytes = trace.system_events.nbytes + trace.device_events.nbytes
        print(f"{path.name}: {events} events ({table_bytes / 1e6:.2f} MB of event tables), "
              f"{cross_rank.rank_collectives(trace).num_rows} collectives; the carries of {n} slices "
              f"{carried / 1e3:.1f} kB ({100 * carried / max(1, table_bytes):.2f}% of the event tables)")


if __name__ == "__main__":
    main()
