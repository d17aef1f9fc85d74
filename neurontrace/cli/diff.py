"""``neurontrace diff``: two runs compared, what got faster or slower and why (docs/diff.md).

A thin adapter over :mod:`neurontrace.analysis.diff`; the human report is
:mod:`neurontrace.render.diff_report`. ``runs compare`` shares the comparison options declared here.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from neurontrace import errors
from neurontrace.analysis.diff import Thresholds
from neurontrace.cli import _common as common
from neurontrace.render.diff_report import TOP_OPS


class DiffCommand(common.Command):
    """compare two runs: what got faster or slower, and why (docs/diff.md)

    Each run is one trace, a directory of ranks, a capture or a Parquet directory; a run of several
    files is given with --baseline PATH... --change PATH....
    """

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.usage = ("neurontrace diff BASELINE CHANGE [options]\n"
                        "       neurontrace diff --baseline PATH [PATH...] --change PATH [PATH...] [options]")
        parser.add_argument("paths", nargs="*", metavar="BASELINE CHANGE",
                            help="two traces (files, directories of ranks, capture or Parquet directories)")
        parser.add_argument("--baseline", nargs="+", action="extend", default=[], metavar="PATH",
                            help="the baseline's traces, when it has several (e.g. one file per rank)")
        parser.add_argument("--change", nargs="+", action="extend", default=[], metavar="PATH",
                            help="the change's traces")
        common.add_input_options(parser)
        common.add_fallback_ops(parser, "ops known to have fallen back to the CPU in either run")
        add_comparison_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        from neurontrace.analysis.diagnose import diagnose
        from neurontrace.analysis.diff import diff

        baseline, change = _sides(args)
        thresholds = thresholds_of(args)
        ta, inputs_a = common.load_traces(baseline, args, side="A (baseline)")
        tb, inputs_b = common.load_traces(change, args, side="B (change)")
        with common.naming_input("A (baseline)", " + ".join(baseline)):
            da = diagnose(ta, inputs=inputs_a, fallback_ops=args.fallback_ops)
        with common.naming_input("B (change)", " + ".join(change)):
            db = diagnose(tb, inputs=inputs_b, fallback_ops=args.fallback_ops)
        result = diff(ta, tb, baseline_diagnosis=da, change_diagnosis=db, thresholds=thresholds,
                      baseline_label=" + ".join(baseline), change_label=" + ".join(change))
        return emit(result, args)


def add_comparison_options(parser: argparse.ArgumentParser) -> None:
    """How a comparison is judged and shown (``diff`` and ``runs compare``); defaults are the library's."""
    default = Thresholds()
    parser.add_argument("--json", action="store_true", help="print the neurontrace.diff/1 JSON document")
    parser.add_argument("--fail-on-regression", type=common.percentage, metavar="PCT",
                        help=f"exit {errors.EXIT_REGRESSION} when a device's time per step (or window) grew by "
                             "more than PCT percent")
    parser.add_argument("--threshold", type=common.percentage, default=100 * default.relative, metavar="PCT",
                        help=f"an op is faster/slower when its time changes by more than PCT percent "
                             f"(default {100 * default.relative:g}) ...")
    parser.add_argument("--min-delta-us", type=common.microseconds, default=default.absolute_ns / 1000, metavar="US",
                        help=f"... and by more than US microseconds (default {default.absolute_ns / 1000:g})")
    parser.add_argument("--top", type=common.positive_int, default=TOP_OPS,
                        help=f"how many changed ops the report lists (default {TOP_OPS})")


def thresholds_of(args: argparse.Namespace) -> Thresholds:
    return Thresholds(relative=args.threshold / 100.0, absolute_ns=round(args.min_delta_us * 1000))


def emit(diff: Any, args: argparse.Namespace) -> int:
    """The comparison as JSON or a report, and the regression gate's exit code."""
    if args.json:
        common.out(json.dumps(diff.as_dict(), indent=2))
    else:
        from neurontrace.render.diff_report import render

        render(diff, common.console(), top=args.top, fail_on_regression=args.fail_on_regression)
    if args.fail_on_regression is not None and diff.regressions(args.fail_on_regression):
        return errors.EXIT_REGRESSION
    return errors.EXIT_OK


def _sides(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    if args.baseline or args.change:
        if args.paths:
            raise errors.UsageError("give the runs either as BASELINE CHANGE or with --baseline/--change, not both")
        if not (args.baseline and args.change):
            raise errors.UsageError("--baseline and --change go together: name the traces of both runs")
        return list(args.baseline), list(args.change)
    if len(args.paths) != 2:
        raise errors.UsageError(f"expected two runs (BASELINE CHANGE), got {len(args.paths)} paths; for runs of "
                                "several files use --baseline PATH... --change PATH... or a directory of ranks")
    return [args.paths[0]], [args.paths[1]]
