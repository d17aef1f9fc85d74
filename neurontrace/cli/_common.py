"""What every `neurontrace` command shares: the command base, the input options, progress, output and `run`.

A command is a :class:`Command` subclass in its own module of this package: its name comes from the class
(``DiagnoseCommand`` is ``diagnose``) and its help from the docstring (first line: the one-line help).
``neurontrace.cli`` lists the commands; :func:`run` builds the parser and turns every named error into one
line on stderr and its exit code (``neurontrace.errors``), never a traceback.

Output has one idiom: results go to stdout through :func:`out` (or a rich :func:`console` for reports),
messages about what was done go to stderr through :func:`note`, so ``--json`` output stays parseable.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import os
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from neurontrace import errors
from neurontrace._version import __version__
from neurontrace.analysis.window import WindowSpec, parse_window
from neurontrace.load import FORMATS, load_named
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import Trace

if TYPE_CHECKING:
    from rich.console import Console


class Command:
    """The base of every subcommand: ``add_arguments`` declares its options, ``run`` does the work."""

    name: ClassVar[str]  # the subcommand: the class name without "Command", lower case
    help: ClassVar[str]  # the docstring's first paragraph, the one line `neurontrace --help` lists
    description: ClassVar[str]  # the whole docstring, shown by `neurontrace NAME --help`

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        doc = inspect.cleandoc(cls.__doc__ or "")
        cls.name = cls.__name__.removesuffix("Command").lower()
        cls.help = " ".join(doc.split("\n\n")[0].split())
        cls.description = doc

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        raise NotImplementedError

    def run(self, args: argparse.Namespace) -> int:
        raise NotImplementedError


# -- output ---------------------------------------------------------------------------------------


def out(text: str) -> None:
    """A result line on stdout (what a pipe or ``--json`` consumer reads)."""
    sys.stdout.write(text + "\n")


def out_json(doc: Any) -> None:
    """A JSON document on stdout, written as it is encoded (``indent=2``): no whole-document string, nor the
    list of its pieces that ``json.dumps`` joins, is held (for a document of many records, several times its
    size)."""
    for chunk in json.JSONEncoder(indent=2).iterencode(doc):
        sys.stdout.write(chunk)
    sys.stdout.write("\n")


def note(text: str) -> None:
    """A message on stderr: what was saved, what to run next, warnings."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


PIPE_WIDTH = 200  # columns of a report written to a pipe or a CI log (COLUMNS overrides)


def console() -> Console:
    """The rich console reports render on (stdout, no syntax highlighting of numbers).

    On a terminal, its width. With no terminal (a pipe, a CI log) rich would assume 80 columns and cut names
    and headers to fit: reports are laid out PIPE_WIDTH wide there instead, and their tables fold what still
    does not fit onto more lines rather than cutting it (a name is never shortened); ``--json`` is for
    machines."""
    from rich.console import Console

    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console(highlight=False)
    return Console(highlight=False, width=PIPE_WIDTH)


# -- input options, declared once for every command that reads traces -----------------------------


def add_input_options(parser: argparse.ArgumentParser) -> None:
    """``--format`` and ``--neff``: how the inputs are read (defaults: detection and the Neuron naming rules)."""
    parser.add_argument("--format", choices=sorted(FORMATS), help="skip detection and use this format")
    parser.add_argument("--neff", type=Path, metavar="FILE",
                        help="the NEFF an NTFF profile ran (default: found by the Neuron naming rules)")


def add_input(parser: argparse.ArgumentParser, nargs: str | None = None) -> None:
    """The trace path(s) and the input options."""
    parser.add_argument("path", nargs=nargs, help="trace file or directory (format detected from content)")
    add_input_options(parser)


def load_options(args: argparse.Namespace) -> dict[str, Any]:
    """The parser options the user gave (only those: formats that take none stay unbothered)."""
    return {"neff": args.neff} if getattr(args, "neff", None) is not None else {}


def load_one(path: str | Path, args: argparse.Namespace, progress: Progress = no_progress) -> Trace:
    return load_one_named(path, args, progress)[0]


def load_one_named(path: str | Path, args: argparse.Namespace,
                   progress: Progress = no_progress) -> tuple[Trace, str]:
    """The trace and the name of the format that read it (detected once: load.load_named)."""
    return load_named(path, format=getattr(args, "format", None), progress=progress, **load_options(args))


@contextmanager
def naming_input(side: str | None, path: str | Path) -> Iterator[None]:
    """Errors raised inside say which input they are about: ``side`` (``"A (baseline)"``) and its path.

    A named error keeps its class and exit code; anything else (a bug on an input no rule covers yet) becomes
    an internal error (exit 1) naming the input, with the original chained for ``--traceback``."""
    if side is None:
        yield
        return
    label = f"input {side} ({path})"
    try:
        yield
    except errors.NeurontraceError as exc:
        if str(exc).startswith("input "):
            raise
        named = copy.copy(exc)
        named.args = (f"{label}: {exc}",)
        raise named from exc
    except Exception as exc:  # a bug: named by input all the same, never a bare traceback
        raise errors.NeurontraceError(f"{label}: internal error while reading it ({type(exc).__name__}: {exc}); "
                                      "please report it, with --traceback") from exc


def load_traces(paths: Sequence[str | Path], args: argparse.Namespace, side: str | None = None,
                ) -> tuple[Trace, list[dict[str, Any]]]:
    """Every path loaded (all checked to exist first) as one trace, and the ``inputs`` a diagnosis records;
    with ``side`` (``diff``'s "A (baseline)"), an error names that side and the path it came from."""
    for p in paths:
        if not Path(p).exists():
            with naming_input(side, p):
                raise errors.InputNotFoundError(f"{p}: no such file or directory")
    with progress_bar() as progress:
        loaded = []
        for p in paths:
            with naming_input(side, p):
                loaded.append(load_one_named(p, args, progress))
    inputs = [{"path": str(p), "format": name} for p, (_, name) in zip(paths, loaded, strict=True)]
    return Trace.concat([t for t, _ in loaded]), inputs


def load_warnings(trace: Trace) -> list[str]:
    """Every warning of every input's accounting, in load order (what each report shows, text and --json)."""
    return [w for acct in trace.accounting for w in acct.warnings]


def print_accounting(trace: Trace) -> None:
    for acct in trace.accounting:
        kept = ", ".join(f"{n} {t}" for t, n in sorted(acct.kept.items()))
        skipped = ", ".join(f"{n} {r}" for r, n in sorted(acct.skipped.items())) or "none"
        if acct.events_read or acct.kept:  # (a dataset's own entry reads no events: only its warnings)
            out(f"  {acct.source}: read {acct.events_read} events; kept {kept}; skipped {skipped}")
        for w in acct.warnings:
            out(f"  warning: {w}")


def fallback_ops(text: str) -> list[str]:
    """``--fallback-ops OP[,OP...]`` as a list."""
    return [op.strip() for op in text.split(",") if op.strip()]


def add_fallback_ops(parser: argparse.ArgumentParser, meaning: str) -> None:
    parser.add_argument("--fallback-ops", metavar="OP[,OP...]", default="", type=fallback_ops, help=meaning)


# -- argument types -------------------------------------------------------------------------------


def _finite_at_least_0(number: str, text: str, what: str, example: str) -> float:
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what} such as {example}, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected {what} of at least 0, got {text!r}")
    return value


def percentage(text: str) -> float:
    return _finite_at_least_0(text.rstrip("%"), text, "a percentage", "5 or 2.5")


def microseconds(text: str) -> float:
    return _finite_at_least_0(text.removesuffix("us"), text, "a duration in microseconds", "10 or 2.5")


def window(text: str) -> WindowSpec:
    """``--window START:END`` (analysis.window's syntax), as an argparse type."""
    try:
        return parse_window(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


WINDOW_HELP = ("offsets from the report's time 0, the analysis window start it prints (e.g. 120ms:340ms; a unit "
               "ns, us, ms or s is required; --window=-5ms:10ms before it), or abs:START_NS:END_NS on the trace "
               "clock")


def resolve_window(spec: WindowSpec | None, trace: Trace) -> tuple[tuple[int, int] | None, int | None]:
    """(``--window`` on the trace clock, the report's time 0 it counts from); a window cut to the trace is
    said on stderr. (None, None) without ``--window``: the analysis finds both itself."""
    if spec is None:
        return None, None
    from neurontrace.analysis.attribution import default_origin
    from neurontrace.analysis.window import resolve, trace_span

    origin = default_origin(trace)
    if origin is None:
        origin = trace_span(trace)[0]
    cut, warning = resolve(spec, trace, origin)
    if warning:
        note(f"neurontrace: warning: {warning}")
    return cut, origin


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {text!r}")
    return value


# -- progress -------------------------------------------------------------------------------------


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


# -- the entry ------------------------------------------------------------------------------------


def build_parser(commands: Sequence[Command]) -> argparse.ArgumentParser:
    epilog = errors.exit_codes_help()
    parser = argparse.ArgumentParser(
        prog="neurontrace",
        description="Where did the time go? Stall attribution for AWS Neuron and torch.profiler traces.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"neurontrace {__version__}")
    parser.add_argument("--traceback", action="store_true",
                        help="also print the traceback of an error (debugging); the exit code stays the same")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in commands:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.description, epilog=epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        cmd.add_arguments(p)
        p.set_defaults(handler=cmd)
    return parser


def run(commands: Sequence[Command], argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the command, and map what it raises to an exit code (README, "Exit codes")."""
    args = build_parser(commands).parse_args(argv)
    try:
        with warnings.catch_warnings():
            # Trace warnings reach the user through the accounting lines printed after loading.
            warnings.simplefilter("ignore", errors.TraceWarning)
            code = int(args.handler.run(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        return code
    except errors.NeurontraceError as exc:
        if args.traceback:  # for debugging: the traceback too, and still the documented exit code
            traceback.print_exc(file=sys.stderr)
        note(f"neurontrace {args.command}: error: {exc}")
        return exc.exit_code
    except BrokenPipeError:
        # The reader left (`... | head`): stop quietly. Python would report the failed flush of stdout
        # at exit, so stdout is pointed at the null device first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return errors.EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        note(f"neurontrace {args.command}: interrupted")
        return errors.EXIT_INTERRUPTED
