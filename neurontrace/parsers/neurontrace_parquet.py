"""neurontrace's own Parquet layout (``neurontrace convert`` output): read it back as it was."""

from __future__ import annotations

from pathlib import Path

from neurontrace.load import Probe
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import PARQUET_MARKER, Trace

from ._normalized_meta import with_normalized


def sniff(probe: Probe) -> bool:
    return probe.is_dir and (probe.path / PARQUET_MARKER).is_file()


def parse(path: Path, *, progress: Progress = no_progress) -> Trace:
    progress("read parquet", 0, 1)
    trace = with_normalized(Trace.from_parquet(path))  # an output written before the normalized keys gets them
    progress("read parquet", 1, 1)
    return trace
