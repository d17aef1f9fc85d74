"""The `neurontrace` command: a thin adapter over the public API.

One class per subcommand; user mistakes become one line on stderr and a documented exit code
(`neurontrace.errors`), never a traceback. Progress bars show only on a terminal.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from neurontrace import __version__, errors
from neurontrace._command import Command
from neurontrace.analysis.findings import SEVERITIES
from neurontrace.load import FORMATS, detect, load
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import Trace

EXIT_CODES_HELP = """exit codes:
  0  success
  1  internal error (a bug: please report it with the traceback)
  2  bad command-line usage
  3  input path not found
  4  unknown or empty input format
  5  malformed or truncated input that could not be salvaged
  6  output exists (pass --force to replace it)
  7  an optional dependency is missing (the message names the extra to install)
  8  reserved (a command whose engine is not built yet; none at present)
  9  an external tool is missing or failed (neuron-explorer: the message shows the command to run)
  10 diagnose --fail-on: a finding reached the given severity
  11 diff / runs compare --fail-on-regression: a device's time per step grew by more than PCT%
"""


def _add_input(parser: argparse.ArgumentParser, nargs: str | None = None) -> None:
    parser.add_argument("path", nargs=nargs, help="trace file or directory (format detected from content)")
    parser.add_argument("--format", choices=sorted(FORMATS), help="skip detection and use this format")
    parser.add_argument("--neff", type=Path, metavar="FILE",
                        help="the NEFF an NTFF profile ran (default: found by the Neuron naming rules)")


class ConvertCommand(Command):
    name = "convert"
    help = "normalize a trace into Parquet tables (docs/schema.md)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        _add_input(parser)
        parser.add_argument("-o", "--output", required=True, type=Path, help="output directory")
        parser.add_argument("--force", action="store_true", help="replace the output directory if it exists")

    def run(self, args: argparse.Namespace) -> int:
        out: Path = args.output
        if out.exists() and (not out.is_dir() or any(out.iterdir())) and not args.force:
            raise errors.OutputExistsError(f"{out} already exists and is not empty; pass --force to replace it")
        with progress_bar() as progress:
            trace = load(args.path, format=args.format, progress=progress, **_load_options(args))
        trace.to_parquet(out, force=args.force)
        print(f"wrote {out}/ ({trace.num_events} events)")
        _print_accounting(trace)
        print(f"next: python -c \"import neurontrace; print(neurontrace.load('{out}'))\"")
        return errors.EXIT_OK


class InfoCommand(Command):
    name = "info"
    help = "show the detected format, table sizes and what parsing kept and skipped"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        _add_input(parser)

    def run(self, args: argparse.Namespace) -> int:
        fmt = args.format or _format_name(Path(args.path))
        with progress_bar() as progress:
            trace = load(args.path, format=args.format, progress=progress, **_load_options(args))
        print(f"{args.path}: {fmt}")
        for name, table in trace.tables.items():
            print(f"  {name:<14} {table.num_rows:>10} rows")
        _print_accounting(trace)
        return errors.EXIT_OK


class DiagnoseCommand(Command):
    name = "diagnose"
    help = "report where device time went, why the device waited, and which line is responsible"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        _add_input(parser, nargs="+")
        parser.add_argument("--json", action="store_true", help="print the neurontrace.diagnose/1 JSON document")
        parser.add_argument("--window", metavar="START_NS:END_NS", type=_window,
                            help="analyse this window (trace clock, ns) instead of the profiled steps")
        parser.add_argument("--fallback-ops", metavar="OP[,OP...]", default="",
                            help="ops known to have fallen back to the CPU (e.g. aten::nonzero)")
        parser.add_argument("--fallback-log", metavar="FILE", type=Path,
                            help="a TorchNeuron log whose fallback lines name the ops")
        parser.add_argument("--top", type=int, default=10, help="how many top stalls per device (default 10)")
        parser.add_argument("--fail-on", choices=SEVERITIES, metavar="SEVERITY",
                            help=f"exit {errors.EXIT_FINDINGS} when a finding reaches SEVERITY "
                                 f"({', '.join(SEVERITIES)})")
        from neurontrace.diff_cmd import add_save_run_arguments

        add_save_run_arguments(parser)

    def run(self, args: argparse.Namespace) -> int:
        from neurontrace.analysis.diagnose import diagnose
        from neurontrace.analysis.fallback import ops_from_log
        from neurontrace.diff_cmd import check_save_run_arguments, save_run

        check_save_run_arguments(args)

        explicit = [op.strip() for op in args.fallback_ops.split(",") if op.strip()]
        if args.fallback_log is not None:
            if not args.fallback_log.is_file():
                raise errors.InputNotFoundError(f"{args.fallback_log}: no such fallback log")
            explicit += ops_from_log(args.fallback_log)
        with progress_bar() as progress:
            traces = [load(p, format=args.format, progress=progress, **_load_options(args)) for p in args.path]
        trace = Trace.concat(traces)
        inputs = [{"path": str(p), "format": args.format or _format_name(Path(p))} for p in args.path]
        diag = diagnose(trace, inputs=inputs, window=args.window, fallback_ops=explicit, top=args.top)
        if args.json:
            print(json.dumps(diag.as_dict(), indent=2))
        else:
            from rich.console import Console

            from neurontrace.report import render

            render(diag, Console(highlight=False))
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


def commands() -> tuple[Command, ...]:
    """Every subcommand, in help order. Command modules outside this file are imported here, when
    the parser is built, so they can import this module's helpers without a cycle."""
    from neurontrace.diff_cmd import DiffCommand, RunsCommand
    from neurontrace.record_cmd import RecordCommand
    from neurontrace.view_cmd import ViewCommand

    return (DiagnoseCommand(), ConvertCommand(), InfoCommand(), RecordCommand(), ViewCommand(), DiffCommand(),
            RunsCommand())


def _load_options(args: argparse.Namespace) -> dict[str, object]:
    """Parser options the user gave (only those: formats that take none stay unbothered)."""
    return {"neff": args.neff} if getattr(args, "neff", None) is not None else {}


def _format_name(path: Path) -> str:
    try:
        return detect(path).name
    except errors.UnknownFormatError:
        if path.is_dir():
            return "a directory of traces"
        raise


def _print_accounting(trace: Trace) -> None:
    for acct in trace.accounting:
        kept = ", ".join(f"{n} {t}" for t, n in sorted(acct.kept.items()))
        skipped = ", ".join(f"{n} {r}" for r, n in sorted(acct.skipped.items())) or "none"
        print(f"  {acct.source}: read {acct.events_read} events; kept {kept}; skipped {skipped}")
        for w in acct.warnings:
            print(f"  warning: {w}")


@contextmanager
def progress_bar() -> Iterator[Progress]:
    """A transient rich progress bar on a terminal; silence otherwise (pipes, CI, tests)."""
    if not sys.stderr.isatty():
        yield no_progress
        return
    from rich.progress import BarColumn, DownloadColumn, TextColumn
    from rich.progress import Progress as RichProgress

    with RichProgress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), transient=True) as bar:
        tasks: dict[str, int] = {}

        def report(stage: str, done: int, total: int | None) -> None:
            if stage not in tasks:
                tasks[stage] = int(bar.add_task(stage, total=total))
            bar.update(tasks[stage], completed=done, total=total)  # type: ignore[arg-type]

        yield report


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neurontrace",
        description="Where did the time go? Stall attribution for AWS Neuron and torch.profiler traces.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"neurontrace {__version__}")
    parser.add_argument("--traceback", action="store_true", help="show tracebacks of errors (debugging)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in commands():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help, epilog=EXIT_CODES_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        cmd.add_arguments(p)
        p.set_defaults(handler=cmd)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            # Trace warnings reach the user through the accounting lines printed after loading.
            warnings.simplefilter("ignore", errors.TraceWarning)
            return int(args.handler.run(args))
    except errors.NeurontraceError as exc:
        if args.traceback:
            raise
        print(f"neurontrace {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"neurontrace {args.command}: interrupted", file=sys.stderr)
        return 130
