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
    it lazily; docs/scale.md). ``--dataset`` streams one trace of any size (a Kineto JSON, plain or gz)
    into such a dataset in bounded memory, as time-ordered parts of about --part-mb MB each. A dataset of one
    rank then gets the viewer's index stored beside its parts (read back from them), so its first ``view``
    opens without building it (docs/viewer.md); --no-viewer-index skips that.
    """

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        common.add_input(parser)
        parser.add_argument("-o", "--output", required=True, type=Path, help="output directory")
        parser.add_argument("--force", action="store_true", help="replace the output directory if it exists")
        parser.add_argument("--workers", type=common.positive_int, metavar="N",
                            help="convert a directory of ranks on a local Dask cluster of N worker processes")
        parser.add_argument("--dataset", action="store_true",
                            help="stream one trace (Kineto JSON, plain or gz, of any size) into a dataset of "
                                 "time-ordered parts, in bounded memory (docs/scale.md)")
        parser.add_argument("--part-mb", type=_positive_mb, default=128.0, metavar="MB",
                            help="with --dataset: raw event columns per part (default 128; memory peaks at a "
                                 "few times this)")
        parser.add_argument("--no-viewer-index", action="store_true",
                            help="do not store the viewer's index beside a dataset's parts (the first "
                                 "`neurontrace view DATASET` then builds it)")
        parser.add_argument("--viewer-index-max-events", type=common.positive_int, metavar="N",
                            help="store the viewer's index of a rank of at most N events (default: what builds "
                                 "within 2 GB, docs/viewer.md); the first view builds a bigger rank's")
        parser.add_argument("--scheduler", metavar="ADDRESS",
                            help="convert a directory of ranks on an existing Dask cluster (paths readable by "
                                 "its workers)")

    def run(self, args: argparse.Namespace) -> int:
        out: Path = args.output
        _check_output(out, Path(args.path), force=args.force)
        if args.dataset:
            return _stream(args, out)
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


def _stream(args: argparse.Namespace, out: Path) -> int:
    from neurontrace.dataset_stream import convert_trace
    from neurontrace.load import Probe, claiming
    from neurontrace.parsers import kineto

    src = Path(args.path)
    if not src.is_file():
        raise errors.InputNotFoundError(f"{src}: --dataset streams one trace file; a directory of ranks becomes a "
                                        "dataset without it")
    fmt = claiming(Probe(src)) if getattr(args, "format", None) is None else None
    if (fmt is not None and fmt.module != kineto.__name__) or getattr(args, "format", None) not in (None, "kineto"):
        raise errors.UsageError(f"{src}: --dataset streams Kineto (torch.profiler) JSON traces; convert this one "
                                "without it")
    if args.workers is not None or args.scheduler is not None:
        raise errors.UsageError("--workers/--scheduler convert a directory of ranks; --dataset streams one trace")
    with common.progress_bar() as progress:
        path, entries, acct = convert_trace(src, out, part_bytes=int(args.part_mb * (1 << 20)), force=args.force,
                                            rank=getattr(args, "rank", None), progress=progress)
    events = sum(e["rows"]["system_events"] + e["rows"]["device_events"] for e in entries)
    common.out(f"wrote dataset {path}/ (1 rank, {len(entries)} time-ordered parts, {events} events)")
    for w in acct.warnings:
        common.out(f"  warning: {w}")
    _viewer_index(path, args)
    common.out(f"next: neurontrace diagnose {path}")
    return errors.EXIT_OK


def _viewer_index(path: Path, args: argparse.Namespace) -> None:
    """Store the viewer's index of the dataset just written (app/index_convert.py), or say why not."""
    if args.no_viewer_index:
        return
    import time

    from neurontrace.app import index_convert

    common.note(f"storing the viewer's index of {path} (--no-viewer-index skips it) ...")
    t0 = time.perf_counter()
    with common.progress_bar() as progress:
        where, line = index_convert.store_dataset(path, max_events=args.viewer_index_max_events,
                                                   progress=progress)
    if where is None:
        common.note(f"neurontrace convert: note: viewer index not stored: {line}")
    else:
        common.note(f"{line} ({time.perf_counter() - t0:.1f} s)")


def _positive_mb(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of MB, got {text!r}")
    return value


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
    _viewer_index(path, args)
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
