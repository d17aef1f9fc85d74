"""``neurontrace runs`` and ``diagnose --save-run``: the run catalog from the command line (docs/diff.md).

A thin adapter over :mod:`neurontrace.catalog`. JSON and reports go to stdout, what was saved or
deleted to stderr.
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from neurontrace import errors
from neurontrace.catalog import DIR_ENV, CatalogWarning, RunCatalog, RunRecord, default_directory
from neurontrace.cli import _common as common
from neurontrace.cli.diff import add_comparison_options, emit, thresholds_of
from neurontrace.trace import Trace


class RunsCommand(common.Command):
    """list, show and compare runs saved with `diagnose --save-run` (docs/diff.md)"""

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
        add_comparison_options(cmp)
        rm = sub.add_parser("delete", help="remove one saved run from the catalog (its traces are left alone)")
        _add_dir(rm)
        rm.add_argument("run", metavar="RUN", help="a run id")

    def run(self, args: argparse.Namespace) -> int:
        with _catalog_warnings(), RunCatalog(args.dir) as catalog:
            if args.runs_command == "list":
                return _list(catalog, args)
            if args.runs_command == "show":
                return _show(catalog.get(args.run), args)
            if args.runs_command == "compare":
                result = catalog.compare(args.baseline, args.change, thresholds=thresholds_of(args),
                                         reload=not args.no_traces)
                return emit(result, args)
            if not str(args.run).isdigit():
                raise errors.UsageError(f"runs delete takes a run id (a number), got {args.run!r}")
            run_id = catalog.delete(args.run)
            common.note(f"deleted run {run_id} from {catalog.path}")
            return errors.EXIT_OK


@contextmanager
def _catalog_warnings() -> Iterator[None]:
    """Rows the catalog left out, told on stderr in one line each (after the command's output)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CatalogWarning)
        try:
            yield
        finally:
            for w in caught:
                if issubclass(w.category, CatalogWarning):
                    common.note(f"neurontrace runs: warning: {w.message}")
                else:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _add_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, default=default_directory(), metavar="DIR",
                        help=f"the catalog directory (default ${DIR_ENV}, else ./neurontrace-runs)")


def _list(catalog: RunCatalog, args: argparse.Namespace) -> int:
    records = catalog.runs(tags=args.tag, model=args.model, since=args.since, until=args.until,
                           version=args.version, limit=args.limit)
    if args.json:
        common.out(json.dumps([r.as_dict(diagnosis=False) for r in records], indent=2))
        return errors.EXIT_OK
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from neurontrace.analysis.step_stats import FIRST_STEP, MEAN_PER_STEP
    from neurontrace.render.diff_report import fmt_ns

    console = common.console()
    if not records:
        console.print(escape(f"no saved runs in {catalog.path} match" if catalog.runs(limit=1) else
                             f"no saved runs in {catalog.path} yet"))
        return errors.EXIT_OK
    table = Table(header_style="bold", title=escape(f"{len(records)} runs in {catalog.path}"), title_justify="left")
    # The declared step statistics (analysis/step_stats.py): the figure diff and runs compare compare, and the
    # first step ("step" used to be the steady median, and "first step" the time to the first step's end).
    per_step, first = MEAN_PER_STEP.label, FIRST_STEP.label
    for col in ("id", "run time (UTC)", "model", "tags", "device", per_step, first, "compute", "worst"):
        table.add_column(col, justify="right" if col in ("id", per_step, first, "compute") else "left",
                         no_wrap=col in ("id", "run time (UTC)", "compute", "worst"), overflow="fold")
    table.add_column("headline", ratio=2, overflow="fold")
    table.add_column("note", ratio=1, overflow="fold")
    for r in records:
        s = r.summary()
        share = "-" if s["compute_share"] is None else f"{100 * s['compute_share']:.0f}%"
        label = (r.device_type or r.backend or "-") + (" SYNTHETIC" if r.synthetic else "")
        table.add_row(str(r.run_id), r.run_time.replace("T", " ")[:16], Text(r.model or "-"),
                      Text(", ".join(r.tags) or "-"), Text(label), fmt_ns(s[MEAN_PER_STEP.key]),
                      fmt_ns(s[FIRST_STEP.key]), share,
                      s["worst_finding"] or "-", Text(s["headline"] or _headline_of(r.diagnosis)), Text(r.note or ""))
    console.print(table)
    return errors.EXIT_OK


def _headline_of(doc: dict[str, Any]) -> str:
    """The verdict of a run saved before diagnoses carried their headline: computed from the stored document."""
    from neurontrace.analysis.diagnose import Diagnosis

    try:
        return Diagnosis.from_dict(doc).headline
    except (KeyError, TypeError, ValueError):  # a document from another neurontrace version
        return "-"


def _show(record: RunRecord, args: argparse.Namespace) -> int:
    if args.json:
        common.out(json.dumps(record.as_dict(), indent=2, default=str))
        return errors.EXIT_OK
    from rich.markup import escape

    console = common.console()
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

    from neurontrace.analysis.diagnose import Diagnosis
    from neurontrace.render.report import render

    try:
        diag = Diagnosis.from_dict(doc)
    except (KeyError, TypeError, ValueError) as exc:  # a document from another neurontrace version
        console.print(f"[yellow]the stored diagnosis cannot be shown as a report ({escape(str(exc))}); use --json[/]")
        return
    render(diag, console)


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
            raise errors.UsageError(f"{', '.join(extra)} only apply to a saved run; add --save-run DIR")


def save_run(args: argparse.Namespace, trace: Trace, diagnosis: Any) -> RunRecord | None:
    """Save the diagnosed run when ``--save-run`` was given; says on stderr what was written."""
    check_save_run_arguments(args)
    directory = getattr(args, "save_run", None)
    if directory is None:
        return None
    paths = [str(p) for p in (args.path if isinstance(args.path, list) else [args.path])]
    with _catalog_warnings(), RunCatalog(directory, create=True) as catalog:
        record = catalog.save(trace, diagnosis, paths=paths, tags=args.tag, note=args.note, model=args.model)
        previous = catalog.previous(record)
    tags = f" (tags: {', '.join(record.tags)})" if record.tags else ""
    common.note(f"saved run {record.run_id} to {catalog.path}{tags}")
    if previous is not None:
        common.note(f"next: neurontrace runs compare {previous.run_id} {record.run_id} --dir {directory}")
    else:
        common.note(f"next: neurontrace runs show {record.run_id} --dir {directory}")
    return record
