"""Progress reporting: silent in the library, a transient bar in the CLI (STYLE.md habit 8)."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Called by long-running work: ``stage`` names the step, ``done``/``total`` count its units."""

    def __call__(self, stage: str, done: int, total: int | None) -> None: ...


def no_progress(stage: str, done: int, total: int | None) -> None:
    """The library default: report nothing."""
