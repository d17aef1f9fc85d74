"""``neurontrace ops``: per op name and kernel class, FLOPs, bytes, achieved throughput and the roofline bound."""

from __future__ import annotations

import argparse
import json
from typing import Any

from neurontrace import errors
from neurontrace.cli import _common as common


class OpsCommand(common.Command):
    """show per-op efficiency: FLOPs, bytes, achieved TFLOP/s and TB/s, share of the device's peak

    One row per device, op name and kernel class: kernels, device time, FLOPs and bytes from the ops'
    recorded shapes (profile with record_shapes=True), achieved TFLOP/s and TB/s, arithmetic intensity,
    percent of the device's roofline bound and whether that bound is compute or memory (docs/ops.md). Over
    each device's analysis window, the one diagnose reports, unless --window is given; a trace without device
    kernels shows its CPU ops.
    """

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        common.add_input(parser, nargs="+")
        parser.add_argument("--json", action="store_true", help="print the neurontrace.ops/1 JSON document")
        parser.add_argument("--window", metavar="START:END", type=common.window,
                            help=f"only kernels starting in this window: {common.WINDOW_HELP}")
        parser.add_argument("--device", metavar="D", help="only this device (cuda:0, rocm:1, neuron:nc0, cpu)")
        parser.add_argument("--top", type=common.positive_int, default=30,
                            help="rows per device in the text report (default 30; --json has all)")

    def run(self, args: argparse.Namespace) -> int:
        from neurontrace.analysis.ops import op_table
        from neurontrace.analysis.ops_window import default_op_table

        trace, _ = common.load_traces(args.path, args)
        if args.device is not None:
            known = {d for d in trace.device_events["device"].cast("string").to_pylist() if d} or {"cpu"}
            if args.device not in known:
                raise errors.UsageError(f"no device {args.device!r} in the trace; it has {', '.join(sorted(known))}")
        window, _ = common.resolve_window(args.window, trace)
        if window is None:  # diagnose's windows: one table of shares for both commands
            report, used = default_op_table(trace, device=args.device)
            windows: list[dict[str, Any]] = [{"device": u.device, "rank": u.rank, "start_ns": u.span[0], "end_ns": u.span[1],
                        "source": u.source} for u in used]
        else:
            report = op_table(trace, window=window, device=args.device)
            windows = [{"device": args.device, "rank": None, "start_ns": window[0], "end_ns": window[1],
                        "source": "--window"}]
        warned = common.load_warnings(trace)
        if args.json:
            common.out(json.dumps({**report.as_dict(), "windows": windows, "load_warnings": warned}, indent=2))
        else:
            from neurontrace.render.ops_report import render
            from neurontrace.units import duration

            console = common.console()
            for w in windows:
                who = w["device"] or "every device"
                rank = "" if w["rank"] is None else f" rank {w['rank']}"
                console.print(f"{who}{rank}: window {duration(w['end_ns'] - w['start_ns'])} ({w['source']})"
                              + ("" if args.window else ", the analysis window diagnose reports; --window for another"))
            render(report, console, top=args.top)
            for message in warned:
                console.print(f"warning: {message}", markup=False, highlight=False)
        return errors.EXIT_OK
