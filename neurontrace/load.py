"""`load(path)`: sniff the format from content, dispatch to the parser registered for it.

A format is a name plus the import path of a parser module exposing

    sniff(probe: Probe) -> bool      # cheap: looks at the head of the file or the directory listing
    parse(path: Path, *, progress: Progress) -> Trace

Modules are imported only when their format is used, so ``import neurontrace`` stays light and
the registry never imports a parser it does not need (DESIGN.md: one-way dependencies).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol, cast

from neurontrace._io import describe_magic, existing, is_corrupt_gzip, read_head
from neurontrace.errors import (
    EmptyInputError,
    MalformedTraceError,
    NeurontraceError,
    UnknownFormatError,
    UsageError,
)
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import Trace


@dataclass(frozen=True)
class Probe:
    """What sniffers look at: the path, and (lazily) the head of its content."""

    path: Path

    @cached_property
    def head(self) -> bytes:
        return b"" if self.path.is_dir() else read_head(self.path)

    @property
    def is_dir(self) -> bool:
        return self.path.is_dir()


class ParserModule(Protocol):
    def sniff(self, probe: Probe) -> bool: ...
    def parse(self, path: Path, *, progress: Progress = ..., **options: Any) -> Trace: ...


@dataclass(frozen=True)
class Format:
    name: str
    module: str
    description: str
    reads: str = "file"  # "file" or "dir": the other kind is refused without importing the module

    def parser(self) -> ParserModule:
        return cast(ParserModule, importlib.import_module(self.module))

    def claims(self, probe: Probe) -> bool:
        return (self.reads == "dir") == probe.is_dir and self.parser().sniff(probe)


FORMATS: dict[str, Format] = {}


def register(name: str, module: str, description: str, *, reads: str = "file") -> None:
    """Register a format; ``module`` is an import path (third-party parsers welcome); ``reads`` says
    whether it reads files or directories."""
    if reads not in ("file", "dir"):
        raise ValueError(f"reads must be 'file' or 'dir', not {reads!r}")
    FORMATS[name] = Format(name, module, description, reads)


def claiming(probe: Probe) -> Format | None:
    """The first registered format whose sniffer claims the path."""
    return next((f for f in FORMATS.values() if f.claims(probe)), None)


# What `convert` writes: these carry the accounting of the original parse, checked when it ran.
STORED_FORMATS = ("neurontrace-dataset", "neurontrace-parquet")
register("neurontrace-dataset", "neurontrace.dataset",
         "a hive-partitioned dataset of many ranks written by `neurontrace convert DIR -o DATASET`", reads="dir")
register("neurontrace-parquet", "neurontrace.parsers.neurontrace_parquet",
         "a directory written by `neurontrace convert` / Trace.to_parquet", reads="dir")
# Directory formats first (an Explorer directory, then a capture directory that may hold one).
# Then Kineto JSON: its sniffer claims only heads naming "traceEvents" (or a bare list of events),
# which no Neuron file has, so the Neuron file parsers (heavier to import) are imported only for
# files Kineto does not claim.
register("neuron-explorer", "neurontrace.parsers.neuron_explorer",
         "a Neuron Explorer Parquet directory (neuron-explorer view --output-format parquet)", reads="dir")
register("torchneuron-capture", "neurontrace.parsers.torchneuron_capture",
         "a TorchNeuron / Neuron inspect capture directory (<instance>_pid_<pid>/ with trace.json, .ntff, .neff)",
         reads="dir")
register("kineto", "neurontrace.parsers.kineto",
         "torch.profiler / Kineto Chrome-trace JSON (.json, .json.gz, .pt.trace.json)")
register("ntff", "neurontrace.parsers.ntff",
         "a Neuron NTFF device trace (*.ntff, decoded with neuron-explorer and its NEFF)")
register("neuron-json", "neurontrace.parsers.neuron_json",
         "legacy Neuron Explorer / neuron-profile JSON (--output-format json), device or system")
register("neuron-summary", "neurontrace.parsers.neuron_summary",
         "a Neuron summary (--output-format summary-json or summary-text)")
register("neuron-system-pb", "neurontrace.parsers.neuron_system_pb",
         "a Neuron system profile's .pb file (ntrace.pb, trace_info.pb, cpu_util.pb, host_mem.pb): framing and "
         "capture facts; the events need neuron-explorer")
register("torch-memory-snapshot", "neurontrace.parsers.torch_memory_snapshot",
         "a PyTorch memory snapshot pickle (torch.cuda.memory._dump_snapshot), read without running code")


def detect(path: str | Path) -> Format:
    """The format of ``path``, decided from its content; raises a named error when none fits."""
    probe = Probe(existing(path))
    fmt = claiming(probe)
    if fmt is None:
        raise _unknown(probe)
    return fmt


def _unknown(probe: Probe) -> NeurontraceError:
    expected = "; ".join(f"{f.name} ({f.description})" for f in FORMATS.values())
    if probe.is_dir:
        found = "a directory with no trace files neurontrace can read"
    elif probe.path.stat().st_size == 0:
        return EmptyInputError(f"{probe.path}: the file is empty (0 bytes); expected one of: {expected}")
    else:
        broken = is_corrupt_gzip(probe.path)
        if broken is not None:
            return MalformedTraceError(f"{probe.path}: corrupt gzip data ({broken}); nothing inflates. Copy or "
                                       "export the file again")
        found = describe_magic(probe.head) or _describe_text(probe.head)
    return UnknownFormatError(f"{probe.path}: found {found}; expected one of: {expected}")


def _describe_text(head: bytes) -> str:
    text = head[:60].decode("utf-8", "replace").strip().replace("\n", " ")
    if not text:
        return "no readable content"
    return f"content starting {text[:40]!r}"


def load(
    path: str | Path,
    *,
    format: str | None = None,
    progress: Progress = no_progress,
    **options: Any,
) -> Trace:
    """Load a trace file or directory into a :class:`Trace`.

    ``format`` forces a registered format by name; otherwise the format is sniffed from content.
    A directory that is not itself a known format is loaded as a set of traces (one per rank),
    combined into one Trace with ``rank``/``host`` set from each file. ``options`` go to the
    parser of the detected format (e.g. ``neff=`` for an NTFF file); an option that format does not
    take is refused with a UsageError.
    """
    return load_named(path, format=format, progress=progress, **options)[0]


DIRECTORY_OF_TRACES = "a directory of traces"  # how an input that no one format claims is named (``inputs``)


def load_named(
    path: str | Path,
    *,
    format: str | None = None,
    progress: Progress = no_progress,
    **options: Any,
) -> tuple[Trace, str]:
    """:func:`load`, and the name of the format that read ``path`` (:data:`DIRECTORY_OF_TRACES` for a
    directory of traces): every format's sniffer runs once per input, here, and never again for it."""
    p = existing(path)
    if format is not None:
        if format not in FORMATS:
            raise UnknownFormatError(f"unknown format {format!r}; formats are: {', '.join(FORMATS)}")
        return _parse(FORMATS[format], p, progress, options), format
    probe = Probe(p)
    fmt = claiming(probe)
    if fmt is not None:
        return _parse(fmt, p, progress, options), fmt.name
    if probe.is_dir:
        if options:
            raise UsageError(f"{p}: options {sorted(options)} apply to a single profile, not a directory of traces")
        return _load_collection(p, progress), DIRECTORY_OF_TRACES
    raise _unknown(probe)


def _parse(fmt: Format, path: Path, progress: Progress, options: dict[str, Any]) -> Trace:
    parser = fmt.parser()
    if options:
        accepted = inspect.signature(parser.parse).parameters
        wrong = sorted(k for k in options if k not in accepted)
        if wrong:
            raise UsageError(f"{path} is {fmt.name}, whose parser takes no option {', '.join(wrong)}")
    try:
        trace = parser.parse(path, progress=progress, **options)
    except UnicodeDecodeError as exc:  # only input bytes fail to decode (e.g. a damaged Parquet string page)
        raise MalformedTraceError(f"{path}: holds bytes that are not UTF-8 where text belongs ({exc}); the file "
                                  "is damaged. Regenerate or copy it again") from exc
    if fmt.name not in STORED_FORMATS:
        for acct in trace.accounting:
            acct.check()  # read == kept + skipped, for every parser: checked here, once
    return trace


MAX_COLLECTION_DEPTH = 3  # e.g. captures/<host>_pid<p>_rank<r>/<trace files>


def _load_collection(directory: Path, progress: Progress) -> Trace:
    members = _members(directory, MAX_COLLECTION_DEPTH)
    if not members:
        if not any(directory.iterdir()):
            raise EmptyInputError(f"{directory}: the directory is empty; expected trace files")
        raise _unknown(Probe(directory))
    traces = []
    for i, (child, fmt) in enumerate(members):
        progress("files", i, len(members))
        traces.append(_parse(fmt, child, progress, {}))
    progress("files", len(members), len(members))
    return Trace.concat(traces)


def members(directory: Path) -> list[tuple[Path, Format]]:
    """The traces a directory of traces holds (one per rank, usually), with the format that reads each."""
    return _members(directory, MAX_COLLECTION_DEPTH)


def _members(directory: Path, depth: int) -> list[tuple[Path, Format]]:
    """Every file or directory under ``directory`` that a format claims; unclaimed folders are
    searched further down (a directory of ranks, a directory of capture directories)."""
    members: list[tuple[Path, Format]] = []
    for child in sorted(directory.iterdir()):
        if child.name.startswith(".") or not (child.is_file() or child.is_dir()):
            continue
        if child.is_file() and child.stat().st_size == 0:
            continue
        fmt = claiming(Probe(child))
        if fmt is not None:
            members.append((child, fmt))
        elif child.is_dir() and depth > 1:
            members += _members(child, depth - 1)
    return members
