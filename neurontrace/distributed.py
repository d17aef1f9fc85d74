"""Diagnose a job of many ranks on Dask: one map task per rank file, one reduce.

    >>> from neurontrace import distributed
    >>> doc = distributed.diagnose(["traces/"], workers=8).as_dict()  # doctest: +SKIP

Per-rank parsing and attribution are independent, and the cross-rank step is a small reduce, so
the work runs on ``dask.distributed`` (install ``neurontrace[distributed]``):

- a **map** task per input file (or capture directory) loads it on a worker and returns that rank's
  compact result (:class:`~neurontrace.analysis.diagnose.RankResult`: devices, fallback ops, each
  section's per-rank value, among them the per-collective records of the cross-rank analysis), or a
  :class:`RankFailure` naming the error;
- compile logs (``compiles``: the rows of ``--compile-log`` and the logs beside the traces, read by the driver,
  small) travel with every map task; each rank takes its own rows (rank-less rows go with rank 0, or with the
  only rank) and refuses them when they are of another run, as the single-process path does;
- one **reduce** task, on a worker too, combines them exactly as the single-process ``diagnose`` does
  (:func:`~neurontrace.analysis.diagnose.combine`) and returns the ``neurontrace.diagnose/1`` document.

The driver holds futures and the final document only, never a rank's events or results. A rank that
fails is listed in the document's ``warnings`` while the others complete (the CLI then exits with
``EXIT_PARTIAL``). Importing ``neurontrace`` never imports this module or Dask.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from neurontrace import errors
from neurontrace._allocator import ENV, UNSET_ENV, handing_back, use_system_allocator
from neurontrace._optional import require
from neurontrace.analysis import load_warnings
from neurontrace.analysis.compile import check_same_run
from neurontrace.analysis.contract import Options
from neurontrace.analysis.diagnose import Diagnosis, RankResult, combine, compiles_of_rank, diagnose_rank
from neurontrace.analysis.load_warnings import LoadWarning, LoadWarnings
from neurontrace.load import DIRECTORY_OF_TRACES, FORMATS, Probe, claiming, load, members
from neurontrace.progress import Progress, no_progress

_T = TypeVar("_T")


@dataclass(frozen=True)
class RankFailure:
    """A rank (an input file) whose map task failed: the error, and the exit code it would have had."""

    path: str
    error: str
    exit_code: int

    def warning(self) -> str:
        return f"{self.path}: not analysed ({self.error})"


@dataclass
class JobResult:
    """What :func:`diagnose` returns: the job's diagnosis of every rank analysed, and the ranks that were not
    (their loudest warning is already in the diagnosis's load-warnings section)."""

    diagnosis: Diagnosis
    failed: list[RankFailure]

    def as_dict(self) -> dict[str, Any]:
        """The ``diagnose --json`` document; ``failed_ranks`` only when some failed (a complete job's document
        is exactly the single-process one)."""
        doc = self.diagnosis.as_dict()
        if self.failed:
            doc["failed_ranks"] = [{"path": f.path, "error": f.error, "exit_code": f.exit_code} for f in self.failed]
        return doc


@dataclass(frozen=True)
class RankInput:
    """One map task's input: a path, the extra load options it needs (a dataset's partition), and the format
    that claimed it on the driver (then the worker does not detect it again; None: the worker detects)."""

    path: str
    options: dict[str, Any]
    format: str | None = None


def rank_inputs(paths: Sequence[str | Path], format: str | None = None) -> list[RankInput]:
    """The map tasks' inputs: a directory of traces expanded into its rank files (as ``load`` does), a
    neurontrace dataset into its rank partitions (:func:`plan` also names each path's format)."""
    return plan(paths, format)[0]


def plan(paths: Sequence[str | Path], format: str | None = None) -> tuple[list[RankInput], list[str]]:
    """The map tasks' inputs, and how ``diagnose`` names each given path's format (``inputs``). Every
    format's sniffer runs once per input here; the workers are told the format found.

    A path this process cannot see is passed on as it is: its task fails (a missing rank is reported,
    the others complete), or succeeds on a cluster whose workers see other disks.
    """
    from neurontrace import dataset

    tasks: list[RankInput] = []
    names: list[str] = []
    for p in (Path(x) for x in paths):
        if not p.exists():
            tasks.append(RankInput(str(p), {}, format))
            names.append(format or "missing")
            continue
        fmt = FORMATS[format] if format is not None else claiming(Probe(p))
        names.append(fmt.name if fmt is not None else DIRECTORY_OF_TRACES if p.is_dir() else "unknown")
        if fmt is not None and fmt.module == dataset.__name__:  # a dataset: one task per rank partition
            seen: set[str] = set()
            for e in dataset.open_dataset(p).ranks:
                if not dataset.time_parts(e):
                    tasks.append(RankInput(str(p), {"partition": e["partition"], "part": e["part"]}, fmt.name))
                elif e["partition"] not in seen:  # a streamed trace's time parts: one task reads them all
                    seen.add(e["partition"])
                    tasks.append(RankInput(str(p), {"partition": e["partition"], "part": None}, fmt.name))
        elif fmt is None and p.is_dir():
            found = members(p)
            if not found:
                raise errors.EmptyInputError(f"{p}: no trace files neurontrace can read in this directory")
            tasks += [RankInput(str(f), {}, f_fmt.name) for f, f_fmt in found]
        else:
            tasks.append(RankInput(str(p), {}, fmt.name if fmt is not None else None))
    return tasks, names


def diagnose_one(path: str, options: Options, format: str | None = None,
                 load_options: dict[str, Any] | None = None, many: bool = False) -> list[RankResult] | RankFailure:
    """The map task: load one input and diagnose each rank in it; a failure is returned, not raised.
    ``options.compiles`` holds the job's compile-log rows: each rank keeps its own (all of them in a job of
    one rank: ``many`` False) after checking they are of its run."""
    def work() -> list[RankResult]:
        trace = load(path, format=format, **(load_options or {}))
        ranks = trace.split_ranks()
        out = []
        for t in ranks:
            rows = compiles_of_rank(options.compiles, t, 2 if many or len(ranks) > 1 else 1)
            if rows is not None:
                check_same_run(t, rows)
            out.append(diagnose_rank(t, replace(options, compiles=rows)))
        return out

    return _map_task(path, work)


def _map_task(path: str, work: Callable[[], _T]) -> _T | RankFailure:
    """Run one map task's ``work`` on a worker, which holds one rank after another: Arrow on malloc, and the
    heap's free pages handed back once the rank is dropped (:mod:`neurontrace._allocator`). A failure is
    returned, not raised, so the other ranks complete."""
    use_system_allocator()
    with handing_back():
        try:
            return work()
        except errors.NeurontraceError as exc:
            return RankFailure(path, str(exc), exc.exit_code)
        except Exception as exc:  # a bug must not lose the other ranks: reported as an internal error
            return RankFailure(path, f"internal error {type(exc).__name__}: {exc}", errors.EXIT_INTERNAL)


def reduce(results: Sequence[list[RankResult] | RankFailure], options: Options,
           inputs: list[dict[str, Any]] | None = None, log_ranks: Sequence[int] = ()) -> JobResult | RankFailure:
    """The reduce task: every rank's result into the job's diagnosis. ``log_ranks``: the ranks the compile
    logs name, every one of which the job must have: a RankFailure of the logs otherwise (logs of another
    run; returned, so the driver raises it as the named error, and no worker logs a traceback)."""
    failures = [r for r in results if isinstance(r, RankFailure)]
    parts = sorted((p for r in results if not isinstance(r, RankFailure) for p in r), key=_rank_order)
    if not parts:
        first = failures[0]
        raise _error(first.exit_code, f"every rank failed; the first: {first.warning()}")
    have = {p.rank for p in parts} | {None}
    extra = sorted(set(log_ranks) - have)
    if extra and not failures:
        return RankFailure("--compile-log", f"the compile logs are of rank(s) {extra}, which the job does not have "
                           f"(its ranks: {sorted(r for r in have if r is not None)}): logs of another run?",
                           errors.MixedRunsError.exit_code)
    diag = combine(parts, options, inputs=inputs)
    if failures:  # the load-warnings section of every report: a rank not analysed is the loudest warning
        found: LoadWarnings = diag.sections.get(load_warnings.SECTION.key) or LoadWarnings()
        diag.sections[load_warnings.SECTION.key] = LoadWarnings(
            found.items + [LoadWarning(f.path, None, f"not analysed: {f.error}") for f in failures])
    return JobResult(diag, failures)


def _rank_order(p: RankResult) -> tuple[bool, int]:
    return (p.rank is None, p.rank or 0)


def _error(code: int, message: str) -> errors.NeurontraceError:
    for cls in _subclasses(errors.NeurontraceError):
        if getattr(cls, "exit_code", None) == code:
            return cls(message)
    return errors.NeurontraceError(message)


def _subclasses(cls: type[errors.NeurontraceError]) -> Iterator[type[errors.NeurontraceError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def diagnose(
    paths: str | Path | Sequence[str | Path],
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    client: Any = None,
    progress: Progress = no_progress,
    inputs: list[dict[str, Any]] | None = None,
    format: str | None = None,
    load_options: dict[str, Any] | None = None,
    window: tuple[int, int] | None = None,
    fallback_ops: Sequence[str] = (),
    top: int | None = None,
    compiles: Any = None,
    compile_warnings: Sequence[str] = (),
) -> JobResult:
    """The diagnosis of a job, computed rank by rank on Dask (``.as_dict()``: the ``diagnose --json`` document).

    ``client`` (a ``distributed.Client``) is used as given; else ``scheduler`` (an address such as
    ``tcp://host:8786``) is connected to; else a ``LocalCluster`` of ``workers`` processes (default: one
    per core) is started and closed again. The paths must be readable by the workers. ``window``,
    ``fallback_ops`` and ``top`` are those of ``neurontrace.analysis.diagnose.diagnose``, and so are
    ``compiles`` (compile-log rows, schema.COMPILES: each rank gets its own) and ``compile_warnings``;
    ``progress`` is called as ranks finish (stage ``"ranks"``).
    """
    given = [paths] if isinstance(paths, str | Path) else paths
    files, named = plan(given, format)
    options = Options(window, tuple(sorted(set(fallback_ops))), top if top is not None else Options().top,
                      compile_warnings=tuple(compile_warnings))
    log_ranks = [] if compiles is None else sorted({r for r in compiles["rank"].to_pylist() if r is not None})
    if inputs is None:
        inputs = [{"path": str(p), "format": name} for p, name in zip(given, named, strict=True)]
    with _client(client, scheduler, workers) as c:
        dd = require("distributed", extra="distributed")
        job = _job_id()
        logs = c.scatter(compiles, broadcast=True) if compiles is not None else None  # sent once, not per task
        futures = [c.submit(_diagnose_with_logs, f.path, options, logs, f.format,
                            {**(load_options or {}), **f.options}, len(files) > 1,
                            key=f"neurontrace-rank-{i}-{job}", pure=False) for i, f in enumerate(files)]
        # Submitted at once: the reduce starts on a worker as the last rank finishes, while ranks are counted.
        reduced = c.submit(reduce, futures, options, inputs, log_ranks, key=f"neurontrace-reduce-{job}",
                           pure=False)
        progress("ranks", 0, len(futures))
        for done, _ in enumerate(dd.as_completed(futures), start=1):  # counts ranks; results stay on workers
            progress("ranks", done, len(futures))
        result: JobResult | RankFailure = reduced.result()
        if isinstance(result, RankFailure):
            raise _error(result.exit_code, result.error)
        return result


def _diagnose_with_logs(path: str, options: Options, compiles: Any, format: str | None,
                        load_options: dict[str, Any], many: bool) -> list[RankResult] | RankFailure:
    """The map task with the job's compile-log rows (a scattered table) put into its options."""
    return diagnose_one(path, replace(options, compiles=compiles), format, load_options, many)


def _job_id() -> str:
    """A job's own suffix for its task keys: Dask reuses the result of a key still held, so two jobs on one
    client (one after another from a notebook, or at once) must never share one."""
    import uuid

    return uuid.uuid4().hex[:12]


@contextmanager
def _client(client: Any, scheduler: str | None, workers: int | None) -> Iterator[Any]:
    if client is not None:
        yield client
        return
    if scheduler is not None:
        dd = require("distributed", extra="distributed")
        with contextlib.ExitStack() as stack:
            try:
                c = stack.enter_context(dd.Client(scheduler))
            except (OSError, TimeoutError, ValueError) as exc:  # no scheduler there, or no address
                raise errors.ClusterError(f"cannot reach the Dask scheduler at {scheduler} ({type(exc).__name__}: "
                                          f"{exc}); is it running, and is the address right?") from exc
            yield c
        return
    with local_cluster(workers) as c:
        yield c


@contextmanager
def local_cluster(workers: int | None = None, *, dashboard: str | None = ":0") -> Iterator[Any]:
    """A ``Client`` of a new ``LocalCluster`` on this machine (``--workers N``): ``workers`` processes (default:
    one per core) of one thread each, so a worker holds one rank at a time, started with the allocator
    settings of :mod:`neurontrace._allocator`; the dashboard on a free port (``None``: no dashboard)."""
    import logging

    import dask

    dd = require("distributed", extra="distributed")
    n = workers or os.cpu_count() or 1
    # Dask starts workers with MALLOC_TRIM_THRESHOLD_=65536, which also pins glibc's mmap threshold at 128 KiB:
    # a rank of 291 MB took 31% longer (neurontrace._allocator). A map task trims after a large rank itself.
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(dask.config.set({f"distributed.nanny.pre-spawn-environ.{k}": None for k in UNSET_ENV}))
            cluster = stack.enter_context(dd.LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=dashboard,
                silence_logs=logging.ERROR, env=ENV))
            c = stack.enter_context(dd.Client(cluster))
        except (RuntimeError, OSError, TimeoutError) as exc:  # a worker died while starting ("Nanny failed")
            raise errors.ClusterError(
                f"the local Dask cluster of {n} worker process{'es' if n != 1 else ''} could not start "
                f"({type(exc).__name__}: {exc}): a worker died or was killed while starting (out of memory?); "
                "try fewer --workers, or run without --workers") from exc
        yield c


def convert_one(path: str, directory: str, format: str | None = None,
                load_options: dict[str, Any] | None = None) -> list[dict[str, Any]] | RankFailure:
    """A conversion map task: load one input and write each of its ranks' partitions into ``directory``."""
    from neurontrace import dataset

    def work() -> list[dict[str, Any]]:
        trace = load(path, format=format, **(load_options or {}))
        return [{**dataset.write_rank(one, directory), "warnings": [w for a in one.accounting for w in a.warnings]}
                for one in trace.split_ranks()]

    return _map_task(path, work)


def convert(
    paths: str | Path | Sequence[str | Path],
    output: str | Path,
    *,
    force: bool = False,
    workers: int | None = None,
    scheduler: str | None = None,
    client: Any = None,
    local: bool = False,
    progress: Progress = no_progress,
    format: str | None = None,
    load_options: dict[str, Any] | None = None,
) -> tuple[Path, list[dict[str, Any]], list[RankFailure]]:
    """Convert a job, one rank file at a time, into a dataset (neurontrace.dataset): on Dask, or in this
    process when ``local`` (then Dask is not imported). Memory stays bounded either way: a process holds
    one rank at a time.

    Each input file is assumed to hold other ranks than the rest (one rank per file, the usual layout).
    Returns the dataset path, the marker's rank entries, and the inputs that failed.
    """
    from neurontrace import dataset

    files = rank_inputs([paths] if isinstance(paths, str | Path) else paths, format)
    tmp = dataset.start(output, force=force)
    try:
        return _convert_into(tmp, files, output, force, workers, scheduler, client, local, progress, format,
                             load_options)
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)  # gone already (swapped in) unless something failed


def _convert_into(tmp: Path, files: list[RankInput], output: str | Path, force: bool,
                  workers: int | None, scheduler: str | None, client: Any, local: bool, progress: Progress,
                  format: str | None, load_options: dict[str, Any] | None,
                  ) -> tuple[Path, list[dict[str, Any]], list[RankFailure]]:
    from neurontrace import dataset

    results: list[list[dict[str, Any]] | RankFailure] = []
    progress("ranks", 0, len(files))
    if local:
        for done, f in enumerate(files, start=1):
            results.append(convert_one(f.path, str(tmp), f.format, {**(load_options or {}), **f.options}))
            progress("ranks", done, len(files))
    else:
        with _client(client, scheduler, workers) as c:
            dd = require("distributed", extra="distributed")
            job = _job_id()
            futures = [c.submit(convert_one, f.path, str(tmp), f.format, {**(load_options or {}), **f.options},
                                key=f"neurontrace-convert-{i}-{job}", pure=False) for i, f in enumerate(files)]
            for done, _ in enumerate(dd.as_completed(futures), start=1):
                progress("ranks", done, len(futures))
            results = c.gather(futures)  # small: one marker entry per rank
    failures = [r for r in results if isinstance(r, RankFailure)]
    entries = [e for r in results if not isinstance(r, RankFailure) for e in r]
    if not entries:
        first = failures[0]
        raise _error(first.exit_code, f"every rank failed; the first: {first.warning()}")
    _check_unique([e["partition"] for e in entries])
    return dataset.finish(tmp, output, entries, force=force), entries, failures


def _check_unique(partitions: list[str]) -> None:
    seen = set()
    for p in partitions:
        if p in seen:
            raise errors.UsageError(f"two inputs hold {p}: a dataset keeps one part per rank; convert each run "
                                    "into its own dataset")
        seen.add(p)
