"""``neurontrace convert``: a trace normalized into the Parquet tables of docs/schema.md."""

from __future__ import annotations

import argparse
from pathlib import Path

from neurontrace import errors
from neurontrace.cli import _common as common


class ConvertCommand(common.Command):
    """normalize a trace into Parquet tables (docs/schema.md)

    The output directory holds one Parquet file per table; neurontrace.load() reads it back equal.
    """

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        common.add_input(parser)
        parser.add_argument("-o", "--output", required=True, type=Path, help="output directory")
        parser.add_argument("--force", action="store_true", help="replace the output directory if it exists")

    def run(self, args: argparse.Namespace) -> int:
        out: Path = args.output
        _check_output(out, Path(args.path), force=args.force)
        with common.progress_bar() as progress:
            trace = common.load_one(args.path, args, progress)
        trace.to_parquet(out, force=args.force)
        common.out(f"wrote {out}/ ({trace.num_events} events)")
        common.print_accounting(trace)
        common.out(f"next: python -c \"import neurontrace; print(neurontrace.load('{out}'))\"")
        return errors.EXIT_OK


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
