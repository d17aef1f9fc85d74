"""``neurontrace convert``: a trace normalized into the Parquet tables of docs/schema.md."""

from __future__ import annotations

import argparse
from pathlib import Path

from neurontrace import errors
from neurontrace.cli import _common as common


class ConvertCommand(common.Command):
    """normalize a trace into Parquet tables (docs/schema.md)

    The output directory holds one Parquet file per table; neurontrace.load() reads it back equal. A
    directory of traces (one file per rank) becomes a hive-partitioned dataset instead,
    DATASET/<table>/rank=<r>/part-0.parquet, written one rank at a time (neurontrace.open_dataset reads
    it lazily; docs/scale.md).
    """

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        common.add_input(parser)
        parser.add_argument("-o", "--output", required=True, type=Path, help="output directory")
        parser.add_argument("--force", action="store_true", help="replace the output directory if it exists")
        parser.add_argument("--workers", type=common.positive_int, metavar="N",
                            help="convert a directory of ranks on a local Dask cluster of N worker processes")
        parser.add_argument("--scheduler", metavar="ADDRESS",
                            help="convert a directory of ranks on an existing Dask cluster (paths readable by "
                                 "its workers)")

    def run(self, args: argparse.Namespace) -> int:
        out: Path = args.output
        _check_output(out, Path(args.path), force=args.force)
        if _is_rank_directory(Path(args.path), args):
            return _convert_dataset(args, out)
        if args.workers is not None or args.scheduler is not None:
            raise errors.UsageError("--workers/--scheduler convert a directory of ranks; this input is one trace")
        with common.progress_bar() as progress:
            trace = common.load_one(args.path, args, progress)
        trace.to_parquet(out, force=args.force)
        common.out(f"wrote {out}/ ({trace.num_events} events)")
        common.print_accounting(trace)
        common.out(f"next: python -c \"import neurontrace; print(neurontrace.load('{out}'))\"")
        return errors.EXIT_OK


def _is_rank_directory(path: Path, args: argparse.Namespace) -> bool:
    from neurontrace.load import Probe, claiming

    return getattr(args, "format", None) is None and path.is_dir() and claiming(Probe(path)) is None


def _convert_dataset(args: argparse.Namespace, out: Path) -> int:
    from neurontrace.distributed import convert

    if args.workers is not None and args.scheduler is not None:
        raise errors.UsageError("give --workers N (a local cluster) or --scheduler ADDRESS, not both")
    with common.progress_bar() as progress:
        path, entries, failures = convert(
            args.path, out, force=args.force, workers=args.workers, scheduler=args.scheduler,
            local=args.workers is None and args.scheduler is None, progress=progress,
            load_options=common.load_options(args))
    events = sum(e["rows"]["system_events"] + e["rows"]["device_events"] for e in entries)
    common.out(f"wrote dataset {path}/ ({len(entries)} ranks, {events} events)")
    for e in entries:
        common.out(f"  {e['partition']}: {', '.join(e['sources'])}")
        for w in e["warnings"]:
            common.out(f"  warning: {w}")
    for f in failures:
        common.note(f"neurontrace convert: warning: {f.warning()}")
    common.out(f"next: python -c \"import neurontrace; print(neurontrace.open_dataset('{path}').ranks)\"")
    return errors.EXIT_PARTIAL if failures else errors.EXIT_OK


def _check_output(out: Path, source: Path, *, force: bool) -> None:
    """Refuse, before any loading, an output that cannot be a directory of tables."""
    for parent in out.absolute().parents:
        if parent.exists() and not parent.is_dir():
            raise errors.OutputUnusableError(f"{out}: {parent} is a file, so no directory can be made there; "
                                           "choose another --output")
    resolved = out.resolve()
    if resolved == Path.cwd().resolve() or resolved in Path.cwd().resolve().parents or \
            (source.exists() and (resolved == source.resolve() or resolved in source.resolve().parents)):
        raise errors.OutputUnusableError(f"{out} is the current directory, the input or a directory above them; "
                                       "--force would delete it: choose a new directory for --output")
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise errors.OutputExistsError(f"{out} already exists and is not empty; pass --force to replace it")
