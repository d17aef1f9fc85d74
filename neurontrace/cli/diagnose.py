"""``neurontrace diagnose``: where device time went, why the device waited, which line is responsible."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from neurontrace import errors
from neurontrace.analysis.findings import SEVERITIES
from neurontrace.analysis.stalls import TOP_STALLS
from neurontrace.analysis.timings import Timings, stage
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
        parser.add_argument("--window", metavar="START:END", type=common.window,
                            help=f"analyse this window instead of the default one: {common.WINDOW_HELP}")
        common.add_fallback_ops(parser, "ops known to have fallen back to the CPU (e.g. aten::nonzero)")
        parser.add_argument("--fallback-log", metavar="FILE", type=Path,
                            help="a TorchNeuron log whose fallback lines name the ops")
        parser.add_argument("--compile-log", metavar="PATH", type=Path, action="append", default=[],
                            help="a compile log (TORCH_TRACE log or directory, TORCH_LOGS text, Neuron compiler "
                                 "lines, a NEFF cache); repeatable. Logs in compile/ or torch_trace/ beside the "
                                 "trace are read without it (docs/compile.md)")
        parser.add_argument("--top", type=common.positive_int, default=TOP_STALLS,
                            help=f"how many top stalls per device (default {TOP_STALLS})")
        parser.add_argument("--ranks", choices=("summary", "all"), default="summary",
                            help="a job of several ranks: one line per rank (summary, the default) or every "
                                 "rank's cause table, top stalls and op classes too (all)")
        parser.add_argument("--fail-on", choices=SEVERITIES, metavar="SEVERITY",
                            help=f"exit {errors.EXIT_FINDINGS} when a finding reaches SEVERITY "
                                 f"({', '.join(SEVERITIES)})")
        parser.add_argument("--workers", type=common.positive_int, metavar="N",
                            help="analyse rank by rank on a local Dask cluster of N worker processes "
                                 "(needs neurontrace[distributed]; docs/scale.md)")
        parser.add_argument("--scheduler", metavar="ADDRESS",
                            help="analyse rank by rank on an existing Dask cluster (e.g. tcp://host:8786); the "
                                 "trace paths must be readable by its workers")
        parser.add_argument("--slice-events", type=common.positive_int, metavar="N", default=None,
                            help="a dataset rank streamed by `convert --dataset` is diagnosed out of core, one "
                                 "time slice of about N host + device events at a time (default 200,000; "
                                 "docs/scale.md)")
        parser.add_argument("--timings", action="store_true",
                            help="print on stderr the seconds each stage took: loading, every registered "
                                 "section, the findings, the rendering (docs/diagnose.md)")
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
        if args.workers is not None or args.scheduler is not None:
            return self._run_distributed(args, explicit)
        from neurontrace.dataset_slices import streamed

        if len(args.path) == 1 and streamed(args.path[0]):
            return self._run_out_of_core(args, explicit)
        timings = Timings() if args.timings else None
        with stage(timings, "load"):
            trace, inputs = common.load_traces(args.path, args)
        window, origin = common.resolve_window(args.window, trace)
        with stage(timings, "compile_logs"):
            compiles, compile_warnings = _compile_logs(args)
        diag = diagnose(trace, inputs=inputs, window=window, fallback_ops=explicit, top=args.top, origin_ns=origin,
                        compiles=compiles, compile_warnings=compile_warnings, timings=timings)
        with stage(timings, "render"):
            self._print(args, diag)
        save_run(args, trace, diag)
        if timings is not None:
            common.note("neurontrace diagnose: timings\n" + "\n".join(timings.lines()))
        return self._exit_code(args, diag)

    def _run_out_of_core(self, args: argparse.Namespace, explicit: list[str]) -> int:
        """A dataset holding a streamed rank: slice by slice, in bounded memory (neurontrace.dataset_slices)."""
        from neurontrace._allocator import use_arrow_pool
        from neurontrace.dataset_slices import SLICE_EVENTS, diagnose_dataset

        if getattr(args, "save_run", None) is not None:
            raise errors.UsageError("--save-run stores the whole trace; a dataset is diagnosed slice by slice "
                                    "without holding it: run --save-run on the original trace")
        timings = Timings() if args.timings else None
        compiles, compile_warnings = _compile_logs(args)
        use_arrow_pool()  # slice after slice, mimalloc's peak stays lower than the heap's (neurontrace._allocator)
        with stage(timings, "diagnose"), common.progress_bar() as progress:
            diag, cut = diagnose_dataset(args.path[0], window=args.window, fallback_ops=explicit, top=args.top,
                                         compiles=compiles, compile_warnings=compile_warnings, progress=progress,
                                         slice_events=args.slice_events or SLICE_EVENTS)
        if cut:
            common.note(f"neurontrace: warning: {cut}")
        diag.inputs = [{"path": str(args.path[0]), "format": "neurontrace-dataset"}]
        with stage(timings, "render"):
            self._print(args, diag)
        if timings is not None:
            common.note("neurontrace diagnose: timings\n" + "\n".join(timings.lines()))
        return self._exit_code(args, diag)

    def _run_distributed(self, args: argparse.Namespace, explicit: list[str]) -> int:
        from neurontrace.distributed import diagnose as distributed_diagnose

        if args.workers is not None and args.scheduler is not None:
            raise errors.UsageError("give --workers N (a local cluster) or --scheduler ADDRESS, not both")
        if getattr(args, "save_run", None) is not None:
            raise errors.UsageError("--save-run needs the whole trace in one process; run it without "
                                    "--workers/--scheduler")
        if args.window is not None and not args.window.absolute:
            raise errors.WindowError("--window offsets count from the whole job's time 0, which needs every rank; "
                                     "with --workers/--scheduler give abs:START_NS:END_NS")
        compiles, compile_warnings = _compile_logs(args)  # read here (small rows); each rank takes its own
        with common.progress_bar() as progress:
            job = distributed_diagnose(args.path, workers=args.workers, scheduler=args.scheduler, progress=progress,
                                       format=args.format, load_options=common.load_options(args),
                                       window=None if args.window is None else
                                       (args.window.start_ns, args.window.end_ns), fallback_ops=explicit, top=args.top,
                                       compiles=compiles, compile_warnings=compile_warnings)
        self._print(args, job.diagnosis)
        for f in job.failed:
            common.note(f"neurontrace diagnose: warning: {f.warning()}")
        code = self._exit_code(args, job.diagnosis)
        return errors.EXIT_PARTIAL if job.failed and code == errors.EXIT_OK else code

    @staticmethod
    def _print(args: argparse.Namespace, diag: Any) -> None:
        if args.json:
            common.out(json.dumps(diag.as_dict(), indent=2))
        else:
            from neurontrace.render.report import render

            render(diag, common.console(), ranks_all=args.ranks == "all")

    @staticmethod
    def _exit_code(args: argparse.Namespace, diag: Any) -> int:
        if args.fail_on and diag.worst_severity is not None and \
                SEVERITIES.index(diag.worst_severity) >= SEVERITIES.index(args.fail_on):
            return errors.EXIT_FINDINGS
        return errors.EXIT_OK


def _compile_logs(args: argparse.Namespace) -> tuple[Any, list[str]]:
    """The compile logs named with --compile-log (strict) and those beside the traces (passed over if not logs)."""
    from neurontrace.parsers.compile_logs import beside, read

    found = beside(Path(p) for p in args.path)
    if not args.compile_log and not found:
        return None, []
    log = read(args.compile_log)
    log.extend(read(found, strict=False))
    return log.table(), log.warnings()
