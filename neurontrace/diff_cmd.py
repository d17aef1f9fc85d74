"""``neurontrace diff``, ``neurontrace runs`` and ``diagnose --save-run``: comparing runs from the CLI.

Thin adapters over :mod:`neurontrace.analysis.diff` and :mod:`neurontrace.catalog`; the human
report is :mod:`neurontrace.diff_report`. JSON goes to stdout, messages about what was saved to
stderr (so ``--json`` output stays parseable).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from neurontrace import errors
from neurontrace._command import Command
from neurontrace.catalog import DIR_ENV, RunCatalog, RunRecord, default_directory
from neurontrace.trace import Trace

DEFAULT_THRESHOLD_PCT = 10.0
DEFAULT_MIN_DELTA_US = 10.0


class DiffUsageError(errors.NeurontraceError):
    """The command line names the runs to compare in a way the command cannot use."""

    exit_code = errors.EXIT_USAGE


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")


def _pct(text: str) -> float:
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage such as 5 or 2.5, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a percentage of at least 0, got {text!r}")
    return value


def _add_comparison_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the neurontrace.diff/1 JSON document")
    parser.add_argument("--fail-on-regression", type=_pct, metavar="PCT",
                        help=f"exit {errors.EXIT_REGRESSION} when a device's time per step (or window) grew by "
                             "more than PCT percent")
    parser.add_argument("--threshold", type=_pct, default=DEFAULT_THRESHOLD_PCT, metavar="PCT",
                        help=f"an op is faster/slower when its time changes by more than PCT percent "
                             f"(default {DEFAULT_THRESHOLD_PCT:g}) ...")
    parser.add_argument("--min-delta-us", type=_pct, default=DEFAULT_MIN_DELTA_US, metavar="US",
                        help=f"... and by more than US microseconds (default {DEFAULT_MIN_DELTA_US:g})")
    parser.add_argument("--top", type=int, default=15, help="how many changed ops the report lists (default 15)")


def _thresholds(args: argparse.Namespace) -> Any:
    from neurontrace.analysis.diff import Thresholds

    return Thresholds(relative=args.threshold / 100.0, absolute_ns=round(args.min_delta_us * 1000))


def _emit(diff: Any, args: argparse.Namespace) -> int:
    if args.json:
        _out(json.dumps(diff.as_dict(), indent=2))
    else:
        from rich.console import Console

        from neurontrace.diff_report import render

        render(diff, Console(highlight=False), top=args.top, fail_on_regression=args.fail_on_regression)
    if args.fail_on_regression is not None and diff.regressions(args.fail_on_regression):
        return errors.EXIT_REGRESSION
    return errors.EXIT_OK


class DiffCommand(Command):
    name = "diff"
    help = "compare two runs: what got faster or slower, and why (docs/diff.md)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.usage = ("neurontrace diff BASELINE CHANGE [options]\n"
                        "       neurontrace diff --baseline PATH [PATH...] --change PATH [PATH...] [options]")
        parser.add_argument("paths", nargs="*", metavar="BASELINE CHANGE",
                            help="two traces (files, directories of ranks, capture or Parquet directories)")
        parser.add_argument("--baseline", nargs="+", action="extend", default=[], metavar="PATH",
                            help="the baseline's traces, when it has several (e.g. one file per rank)")
        parser.add_argument("--change", nargs="+", action="extend", default=[], metavar="PATH",
                            help="the change's traces")
        parser.add_argument("--fallback-ops", metavar="OP[,OP...]", default="",
                            help="ops known to have fallen back to the CPU in either run")
        _add_comparison_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        from neurontrace.analysis.diagnose import diagnose
        from neurontrace.analysis.diff import diff

        baseline, change = _sides(args)
        explicit = [op.strip() for op in args.fallback_ops.split(",") if op.strip()]
        thresholds = _thresholds(args)
        ta, inputs_a = _load(baseline)
        tb, inputs_b = _load(change)
        da = diagnose(ta, inputs=inputs_a, fallback_ops=explicit)
        db = diagnose(tb, inputs=inputs_b, fallback_ops=explicit)
        result = diff(ta, tb, baseline_diagnosis=da, change_diagnosis=db, thresholds=thresholds,
                      baseline_label=" + ".join(baseline), change_label=" + ".join(change))
        return _emit(result, args)


def _sides(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    if args.baseline or args.change:
        if args.paths:
            raise DiffUsageError("give the runs either as BASELINE CHANGE or with --baseline/--change, not both")
        if not (args.baseline and args.change):
            raise DiffUsageError("--baseline and --change go together: name the traces of both runs")
        return list(args.baseline), list(args.change)
    if len(args.paths) != 2:
        raise DiffUsageError(f"expected two runs (BASELINE CHANGE), got {len(args.paths)} paths; for runs of "
                             "several files use --baseline PATH... --change PATH... or a directory of ranks")
    return [args.paths[0]], [args.paths[1]]


def _load(paths: list[str]) -> tuple[Trace, list[dict[str, Any]]]:
    from neurontrace.cli import progress_bar
    from neurontrace.load import detect, load

    for p in paths:  # validate every input before any work
        if not Path(p).exists():
            raise errors.InputNotFoundError(f"{p}: no such file or directory")
    with progress_bar() as progress:
        traces = [load(p, progress=progress) for p in paths]
    inputs = []
    for p in paths:
        try:
            fmt = detect(p).name
        except errors.UnknownFormatError:
            fmt = "a directory of traces"
        inputs.append({"path": str(p), "format": fmt})
    return Trace.concat(traces), inputs


# -- the run catalog ---------------------------------------------------------------------------


class RunsCommand(Command):
    name = "runs"
    help = "list, show and compare runs saved with `diagnose --save-run` (docs/diff.md)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
        lst = sub.add_parser("list", help="saved runs, newest first, filtered by tag, model, date or version")
        _add_dir(lst)
        lst.add_argument("--tag", action="append", default=[], help="only runs with this tag (repeatable: all)")
        lst.add_argument("--model", help="only runs of this model")
        lst.add_argument("--since", metavar="DATE", help="only runs on or after DATE (YYYY-MM-DD[THH:MM], UTC)")
        lst.add_argument("--until", metavar="DATE", help="only runs on or before DATE (a date includes the day)")
        lst.add_argument("--version", metavar="[NAME=]VALUE",
                         help="only runs with a version equal to or starting with VALUE (e.g. torch=2.13)")
        lst.add_argument("--limit", type=int, help="at most this many runs")
        lst.add_argument("--json", action="store_true", help="print the runs as JSON (without their diagnoses)")
        show = sub.add_parser("show", help="one saved run: its setup, versions and diagnosis")
        _add_dir(show)
        show.add_argument("run", metavar="RUN", help="a run id, latest, latest~N or tag:NAME")
        show.add_argument("--json", action="store_true", help="print the whole record as JSON")
        cmp = sub.add_parser("compare", help="diff two saved runs (op level too when their traces still exist)")
        _add_dir(cmp)
        cmp.add_argument("baseline", metavar="BASELINE", help="a run id, latest, latest~N or tag:NAME")
        cmp.add_argument("change", metavar="CHANGE", help="a run id, latest, latest~N or tag:NAME")
        cmp.add_argument("--no-traces", action="store_true",
                         help="compare the stored diagnoses only, without reloading the traces")
        _add_comparison_options(cmp)
        rm = sub.add_parser("delete", help="remove one saved run from the catalog (its traces are left alone)")
        _add_dir(rm)
        rm.add_argument("run", metavar="RUN", help="a run id")

    def run(self, args: argparse.Namespace) -> int:
        with RunCatalog(args.dir) as catalog:
            if args.runs_command == "list":
                return _list(catalog, args)
            if args.runs_command == "show":
                return _show(catalog.get(args.run), args)
            if args.runs_command == "compare":
                result = catalog.compare(args.baseline, args.change, thresholds=_thresholds(args),
                                         reload=not args.no_traces)
                return _emit(result, args)
            if not str(args.run).isdigit():
                raise DiffUsageError(f"runs delete takes a run id (a number), got {args.run!r}")
            record = catalog.delete(args.run)
            _err(f"deleted run {record.run_id} from {catalog.path}")
            return errors.EXIT_OK


def _add_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, default=default_directory(), metavar="DIR",
                        help=f"the catalog directory (default ${DIR_ENV}, else ./neurontrace-runs)")


def _list(catalog: RunCatalog, args: argparse.Namespace) -> int:
    records = catalog.runs(tags=args.tag, model=args.model, since=args.since, until=args.until,
                           version=args.version, limit=args.limit)
    if args.json:
        _out(json.dumps([r.as_dict(diagnosis=False) for r in records], indent=2))
        return errors.EXIT_OK
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from neurontrace.diff_report import fmt_ns

    console = Console(highlight=False)
    if not records:
        console.print(escape(f"no saved runs in {catalog.path} match" if catalog.runs(limit=1) else
                             f"no saved runs in {catalog.path} yet"))
        return errors.EXIT_OK
    table = Table(header_style="bold", title=escape(f"{len(records)} runs in {catalog.path}"), title_justify="left")
    for col in ("id", "run time (UTC)", "model", "tags", "device", "step", "compute", "worst"):
        table.add_column(col, justify="right" if col in ("id", "step", "compute") else "left",
                         no_wrap=col in ("id", "run time (UTC)", "step", "compute", "worst"))
    table.add_column("note", ratio=1)
    for r in records:
        s = r.summary()
        share = "-" if s["compute_share"] is None else f"{100 * s['compute_share']:.0f}%"
        label = (r.device_type or r.backend or "-") + (" SYNTHETIC" if r.synthetic else "")
        table.add_row(str(r.run_id), r.run_time.replace("T", " ")[:16], Text(r.model or "-"),
                      Text(", ".join(r.tags) or "-"), Text(label), fmt_ns(s["steady_median_ns"]), share,
                      s["worst_finding"] or "-", Text(r.note or ""))
    console.print(table)
    return errors.EXIT_OK


def _show(record: RunRecord, args: argparse.Namespace) -> int:
    if args.json:
        _out(json.dumps(record.as_dict(), indent=2, default=str))
        return errors.EXIT_OK
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False)
    console.print(f"[bold]run {record.run_id}[/] saved {record.saved_at}, ran {record.run_time}"
                  + (" [bold red]SYNTHETIC[/]" if record.synthetic else ""))
    for label, value in (("model", record.model), ("tags", ", ".join(record.tags)), ("note", record.note),
                         ("device", record.device_type), ("backend", record.backend),
                         ("formats", ", ".join(record.formats)), ("diagnosed by", f"neurontrace {record.neurontrace_version}")):
        if value:
            console.print(f"  {label:<13} {escape(value)}")
    for p in record.paths:
        console.print(f"  {'trace':<13} {escape(p)}" + ("" if Path(p).exists() else " [yellow](missing)[/]"))
    if record.versions:
        console.print("  versions      " + escape(", ".join(f"{k} {v}" for k, v in record.versions.items())))
    run = record.facts.get("run") or {}
    for failure in run.get("failures") or []:
        console.print(f"  [red]failure[/]       {escape(str(failure))}")
    _render_diagnosis(record.diagnosis, console)
    return errors.EXIT_OK


def _render_diagnosis(doc: dict[str, Any], console: Any) -> None:
    """The stored diagnosis in the diagnose report's form (rebuilt from its JSON)."""
    from rich.markup import escape

    from neurontrace.report import render

    try:
        diag = diagnosis_from_dict(doc)
    except (KeyError, TypeError, ValueError) as exc:  # a document from another neurontrace version
        console.print(f"[yellow]the stored diagnosis cannot be shown as a report ({escape(str(exc))}); use --json[/]")
        return
    render(diag, console)


def diagnosis_from_dict(doc: dict[str, Any]) -> Any:
    """A Diagnosis rebuilt from its ``neurontrace.diagnose/1`` JSON (for reports of stored runs)."""
    from neurontrace.analysis.diagnose import Diagnosis

    return Diagnosis.from_dict(doc)


# -- diagnose --save-run -------------------------------------------------------------------------


def add_save_run_arguments(parser: argparse.ArgumentParser) -> None:
    """``--save-run DIR`` and what to keep with the run: ``--tag`` (repeatable), ``--note``, ``--model``."""
    group = parser.add_argument_group("run catalog (docs/diff.md)")
    group.add_argument("--save-run", type=_catalog_dir, metavar="DIR",
                       help="keep this run (diagnosis, versions, setup) in the catalog DIR/runs.sqlite, for "
                            "`neurontrace runs list/show/compare`")
    group.add_argument("--tag", action="append", default=[], metavar="TAG",
                       help="a label kept with the saved run (repeatable), e.g. baseline, sdk-2.33")
    group.add_argument("--note", metavar="TEXT", help="free text kept with the saved run")
    group.add_argument("--model", metavar="NAME", help="the model this run profiled (a filter for `runs list`)")


def _catalog_dir(text: str) -> Path:
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a directory")
    return path


def check_save_run_arguments(args: argparse.Namespace) -> None:
    """Refuse ``--tag``/``--note``/``--model`` without ``--save-run`` (call before any work)."""
    if getattr(args, "save_run", None) is None:
        extra = [f"--{k}" for k in ("tag", "note", "model") if getattr(args, k, None)]
        if extra:
            raise DiffUsageError(f"{', '.join(extra)} only apply to a saved run; add --save-run DIR")


def save_run(args: argparse.Namespace, trace: Trace, diagnosis: Any) -> RunRecord | None:
    """Save the diagnosed run when ``--save-run`` was given; says on stderr what was written."""
    check_save_run_arguments(args)
    directory = getattr(args, "save_run", None)
    if directory is None:
        return None
    paths = [str(p) for p in (args.path if isinstance(args.path, list) else [args.path])]
    with RunCatalog(directory, create=True) as catalog:
        record = catalog.save(trace, diagnosis, paths=paths, tags=args.tag, note=args.note, model=args.model)
        previous = catalog.previous(record)
    tags = f" (tags: {', '.join(record.tags)})" if record.tags else ""
    _err(f"saved run {record.run_id} to {catalog.path}{tags}")
    if previous is not None:
        _err(f"next: neurontrace runs compare {previous.run_id} {record.run_id} --dir {directory}")
    else:
        _err(f"next: neurontrace runs show {record.run_id} --dir {directory}")
    return record
