"""``neurontrace whatif``: re-time the trace's dependency graph with an op made faster; the new step time."""

from __future__ import annotations

import argparse
import json

import numpy as np

from neurontrace import errors
from neurontrace.cli import _common as common
from neurontrace.units import duration, share


class WhatifCommand(common.Command):
    """re-time the trace with an op, kernel class or annotation made faster: the new step time

    Builds the dependency graph (docs/critical_path.md: threads, streams, launches, syncs, collectives across
    ranks), divides the own time of what --speedup names by its factor, lets everything after it happen as soon
    as its dependencies allow, and prints the window's and each step's new time, and how much of the op's own
    saving the step keeps (100%: the op was the critical path; 0%: it was not on it).
    """

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        common.add_input(parser, nargs="+")
        parser.add_argument("--speedup", required=True, metavar="OP=FACTOR",
                            help="the op name, kernel class or annotation to speed up and by how much "
                                 "(aten::mm=2x, gemm=1.5x, sleep_before_backward=2x)")
        parser.add_argument("--window", metavar="START:END", type=common.window,
                            help="offsets from the report's time 0 (120ms:340ms) or abs:START_NS:END_NS; "
                                 "default: the profiled steps")
        parser.add_argument("--json", action="store_true", help="print the neurontrace.whatif/1 JSON document")

    def run(self, args: argparse.Namespace) -> int:
        from neurontrace.analysis.malformed import sanitize
        from neurontrace.analysis.whatif import default_window, job_graph, parse_speedup, what_if

        op, factor = parse_speedup(args.speedup)
        trace, _ = common.load_traces(args.path, args)
        trace, _checks = sanitize(trace)
        g = job_graph(trace)
        if not g.n_events:
            raise errors.SpeedupError("the trace holds no events to re-time")
        window = common.resolve_window(args.window, trace)[0] or default_window(g)
        result = what_if(g, op, factor, window)
        if args.json:
            common.out(json.dumps({"schema": "neurontrace.whatif/1", **result.as_dict(),
                                   "window": {"start_ns": window[0], "end_ns": window[1]}}, indent=2))
            return errors.EXIT_OK
        d = result.as_dict()
        common.out(f"{op} {factor:g}x faster ({result.events} events; their own time in the window "
                   f"{duration(result.own_ns)})")
        common.out(f"  window   {duration(result.old_ns)} -> {duration(result.new_ns)} "
                   f"({duration(-result.gain_ns, sign='+') if result.gain_ns else 'unchanged'})")
        if result.steps:
            old = float(np.median([s["old_ns"] for s in result.steps]))
            new = float(np.median([s["new_ns"] for s in result.steps]))
            common.out(f"  step     median {duration(old)} -> {duration(new)} over {len(result.steps)} steps")
        if d["kept"] is not None:
            common.out(f"  the op itself saves {duration(result.saved_ns)}; the window keeps "
                       f"{duration(result.gain_ns)} of it ({share(d['kept'])})")
        return errors.EXIT_OK
