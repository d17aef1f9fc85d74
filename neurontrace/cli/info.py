"""``neurontrace info``: the detected format, table sizes and what parsing kept and skipped."""

from __future__ import annotations

import argparse

from neurontrace import errors
from neurontrace.cli import _common as common


class InfoCommand(common.Command):
    """show the detected format, table sizes and what parsing kept and skipped"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        common.add_input(parser)

    def run(self, args: argparse.Namespace) -> int:
        with common.progress_bar() as progress:
            trace, fmt = common.load_one_named(args.path, args, progress)
        common.out(f"{args.path}: {fmt}")
        for name, table in trace.tables.items():
            common.out(f"  {name:<14} {table.num_rows:>10} rows")
        common.print_accounting(trace)
        return errors.EXIT_OK
