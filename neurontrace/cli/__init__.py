"""The `neurontrace` command: a thin adapter over the public API, one module per subcommand.

Adding a command is one module here with a :class:`~neurontrace.cli._common.Command` subclass and one
line in :data:`COMMANDS` (help order). The shared machinery (input options, progress, output, the
error-to-exit-code mapping) is in :mod:`neurontrace.cli._common`.
"""

from __future__ import annotations

from collections.abc import Sequence

from neurontrace._allocator import use_system_allocator
from neurontrace.cli._common import Command, run
from neurontrace.cli.compile import CompileCommand
from neurontrace.cli.convert import ConvertCommand
from neurontrace.cli.diagnose import DiagnoseCommand
from neurontrace.cli.diff import DiffCommand
from neurontrace.cli.info import InfoCommand
from neurontrace.cli.memory import MemoryCommand
from neurontrace.cli.ops import OpsCommand
from neurontrace.cli.record import RecordCommand
from neurontrace.cli.runs import RunsCommand
from neurontrace.cli.view import ViewCommand
from neurontrace.cli.whatif import WhatifCommand

COMMANDS: tuple[type[Command], ...] = (
    DiagnoseCommand, OpsCommand, MemoryCommand, WhatifCommand, CompileCommand, ConvertCommand, InfoCommand,
    RecordCommand, ViewCommand, DiffCommand, RunsCommand,
)


def commands() -> tuple[Command, ...]:
    """Every subcommand, in help order."""
    return tuple(cls() for cls in COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    """The console script ``neurontrace``."""
    use_system_allocator()  # freed buffers go back to the heap, not a pool (neurontrace._allocator)
    return run(commands(), argv)
