"""``neurontrace diagnose``: where device time went, why the device waited, which line is responsible."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from neurontrace import errors
from neurontrace.analysis.attribution import TOP_STALLS
from neurontrace.analysis.findings import SEVERITIES
from neurontrace.cli import _common as common
from neurontrace.cli.runs import add_save_run_arguments, check_save_run_arguments, save_run


class DiagnoseCommand(common.Command):
    """report where device time went, why the device waited, and which line is responsible

    The report (or with --json the neurontrace.diagnose/1 document, docs/diagnose.md) covers every
    device: its window split into six causes, the longest stalls with their source lines, CPU
    fallback ops, phases and findings. Several paths are diagnosed as one run (e.g. one file per rank).
    """

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        common.add_input(parser, nargs="+")
        parser.add_argument("--json", action="store_true", help="print the neurontrace.diagnose/1 JSON document")
        parser.add_argument("--window", metavar="START_NS:END_NS", type=_window,
                            help="analyse this window (trace clock, ns) instead of the profiled steps")
        common.add_fallback_ops(parser, "ops known to have fallen back to the CPU (e.g. aten::nonzero)")
        parser.add_argument("--fallback-log", metavar="FILE", type=Path,
                            help="a TorchNeuron log whose fallback lines name the ops")
        parser.add_argument("--top", type=common.positive_int, default=TOP_STALLS,
                            help=f"how many top stalls per device (default {TOP_STALLS})")
        parser.add_argument("--fail-on", choices=SEVERITIES, metavar="SEVERITY",
                            help=f"exit {errors.EXIT_FINDINGS} when a finding reaches SEVERITY "
                                 f"({', '.join(SEVERITIES)})")
        add_save_run_arguments(parser)

    def run(self, args: argparse.Namespace) -> int:
        from neurontrace.analysis.diagnose import diagnose
        from neurontrace.analysis.fallback import ops_from_log

        check_save_run_arguments(args)
        explicit = list(args.fallback_ops)
        if args.fallback_log is not None:
            if not args.fallback_log.is_file():
                raise errors.InputNotFoundError(f"{args.fallback_log}: no such fallback log")
            explicit += ops_from_log(args.fallback_log)
        trace, inputs = common.load_traces(args.path, args)
        diag = diagnose(trace, inputs=inputs, window=args.window, fallback_ops=explicit, top=args.top)
        if args.json:
            common.out(json.dumps(diag.as_dict(), indent=2))
        else:
            from neurontrace.render.report import render

            render(diag, common.console())
        save_run(args, trace, diag)
        if args.fail_on and diag.worst_severity is not None and \
                SEVERITIES.index(diag.worst_severity) >= SEVERITIES.index(args.fail_on):
            return errors.EXIT_FINDINGS
        return errors.EXIT_OK


def _window(text: str) -> tuple[int, int]:
    try:
        start, end = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START_NS:END_NS (integers), got {text!r}") from None
    if end <= start:
        raise argparse.ArgumentTypeError(f"the window must end after it starts, got {text!r}")
    return start, end
