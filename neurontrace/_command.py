"""The base of every `neurontrace` subcommand (one class per subcommand, memray style)."""

from __future__ import annotations

import argparse
from typing import ClassVar


class Command:
    name: ClassVar[str]
    help: ClassVar[str]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        raise NotImplementedError

    def run(self, args: argparse.Namespace) -> int:
        raise NotImplementedError
