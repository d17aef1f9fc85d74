"""``neurontrace.capture``: one context manager that records what the analyzers need.

    import neurontrace

    with neurontrace.capture("captures", notes="baseline, bf16") as cap:
        for batch in loader:
            train_step(batch)
            cap.step()                      # marks a step (torch.profiler's prof.step())
    print(cap.path)                         # captures/<host>_pid<pid>_rank<r>/: traces + run.json

It wraps ``torch.profiler.profile`` with the settings the analyses rely on (stacks, shapes, memory,
step markers, the activities of the backend in use, a synchronize before each export), records a
startup window (compilation, first iterations) apart from steady-state windows (see
:class:`Schedule`), and writes ``run.json`` beside the traces (``docs/capture.md``). Code that
cannot see the handle marks steps with ``neurontrace.capture.step()`` (or
``neurontrace.capture.current().step()``), a no-op when no capture is running.

It fails soft: when the profiler cannot start, step or export, the program runs on, a
:class:`~neurontrace.errors.CaptureWarning` says what was not captured, and ``run.json`` records
why. Only mistakes in the arguments raise, before anything runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Literal

from neurontrace import _capture_backend as backend
from neurontrace._capture_compile import CompileRecorder
from neurontrace._capture_record import (
    DEFAULT_OUT_DIR,
    behaviour_env,
    host_name,
    new_record,
    utc_now,
    write_run_record,
)
from neurontrace._capture_schedule import STEADY, Schedule, Window, label
from neurontrace.errors import CaptureWarning

__all__ = ["Capture", "CaptureWarning", "Inactive", "Schedule", "capture", "current", "step"]

StepOn = Literal["manual", "optimizer"]
_ACTIONS = {"none": "NONE", "warmup": "WARMUP", "record": "RECORD", "save": "RECORD_AND_SAVE"}
_ACTIVE: list[Capture] = []  # running captures, innermost last


class Capture:
    """The handle of one capture: a context manager with :meth:`step`, ``path`` and ``warnings``.

    Build it with :func:`capture`. Arguments are checked when it is built (mistakes raise then);
    everything after that fails soft.
    """

    def __init__(
        self,
        out_dir: str | Path = DEFAULT_OUT_DIR,
        *,
        schedule: Schedule | tuple[int, ...] | str | None = None,
        record_shapes: bool = True,
        with_stack: bool = True,
        profile_memory: bool = True,
        activities: Iterable[Any] | None = None,
        notes: str | None = None,
        tags: Iterable[str] = (),
        step_on: StepOn = "manual",
        profiler_options: Mapping[str, Any] | None = None,
        neuron: backend.NeuronOptions | None = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.schedule = Schedule.coerce(schedule)
        if step_on not in ("manual", "optimizer"):
            raise ValueError(f"step_on must be 'manual' or 'optimizer', got {step_on!r}")
        self._options = {"record_shapes": bool(record_shapes), "with_stack": bool(with_stack),
                         "profile_memory": bool(profile_memory), **dict(profiler_options or {})}
        self._neuron_options = neuron or backend.NeuronOptions()
        self._notes = notes
        self._tags = tuple(str(t) for t in tags)
        self._step_on: StepOn = step_on
        given = list(activities) if activities is not None else None
        if given is not None:
            backend.validate_neuron(backend.activity_names(given, cuda=False, neuron=False), self._neuron_options)
        elif self._neuron_options.given and not backend.neuron_installed():
            raise backend.missing_neuron(", ".join(self._neuron_options.given))
        self._torch: ModuleType = backend.torch_module()
        self._cuda = backend.cuda_available(self._torch)
        auto_neuron = given is None and backend.neuron_installed()
        self._names = backend.activity_names(given, cuda=self._cuda, neuron=auto_neuron)
        self._neuron = "PrivateUse1" in self._names
        self._sync_cuda = self._cuda and "CUDA" in self._names

        self.path: Path | None = None
        self.warnings: list[str] = []
        self.record: dict[str, Any] = {}
        self._prof: Any = None
        self._step = 0  # the step now running (== steps marked so far)
        self._closing = 0  # the step whose end is being processed (for on_trace_ready)
        self._exiting = False
        self._joined: Capture | None = None
        self._hook: Any = None
        self._neuron_export: Callable[[Any], None] | None = None
        self._started_at = 0.0
        self._used = False
        self._compile: CompileRecorder | None = None

    # -- the public surface ------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether the profiler is running now."""
        return (self._joined or self)._prof is not None

    def step(self) -> None:
        """Mark the end of a step (training iteration); drives the schedule like ``prof.step()``."""
        if self._joined is not None:
            self._joined.step()
            return
        closing = self._step
        self._step += 1
        if self.record:
            self.record["steps_marked"] = self._step
        if self._prof is None:
            return
        try:
            if self.schedule.action(closing) == "save":
                self._synchronize()
            self._preset(closing + 1)
            self._closing = closing
            with warnings.catch_warnings():
                # torch warns that each cycle's events are cleared: exporting every window is the point.
                warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
                self._prof.step()
        except Exception as exc:
            self._fail("step", f"the profiler failed at the end of step {closing}", exc,
                       "profiling stopped; the program continues")

    def __enter__(self) -> Capture:
        if self._used:
            raise RuntimeError("a capture handle records one run; call neurontrace.capture(...) again for another")
        if _ACTIVE:
            # A capture inside a running one (a script using capture() under `neurontrace record`)
            # joins it: torch runs one profiler per process, and the outer one's settings apply.
            self._joined = _ACTIVE[-1]
            self._used = True
            self.path = self._joined.path
            self.record = self._joined.record
            self.warnings = self._joined.warnings
            return self
        self._used = True
        _ACTIVE.append(self)
        self._start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._joined is not None:
            return
        try:
            self._finish(exc)
        finally:
            _ACTIVE.remove(self)

    def __repr__(self) -> str:
        state = "running" if self.active else "stopped"
        return f"<neurontrace Capture {state} path={str(self.path)!r} steps={self._step}>"

    # -- start ---------------------------------------------------------------------------------------

    def _start(self) -> None:
        self._started_at = time.monotonic()
        rank = backend.distributed_rank(self._torch)
        try:
            self.record = new_record(notes=self._notes, tags=self._tags, out_dir=self.out_dir)
            if rank is not None:
                self.record.update(rank=rank[0], world_size=rank[1], rank_source="torch.distributed")
            self.path = _capture_dir(self.out_dir, self.record["rank"])
        except OSError as exc:
            self._fail("start", f"cannot create the capture directory in {self.out_dir}", exc,
                       "nothing is captured; the program continues")
            return
        self._describe()
        try:
            self._compile = CompileRecorder(self._torch, self.path)
            self.record["compile"] = self._compile.start()
        except Exception as exc:
            self._compile = None
            self._fail("compile_logs", "cannot record torch.compile's logs", exc, "run.json lacks them", warn=False)
        if self._step_on == "optimizer":
            try:
                self._hook = backend.on_optimizer_step(self.step)
            except Exception as exc:
                self._fail("step_hook", "cannot mark steps at optimizer.step()", exc,
                           "no steps are marked automatically; the program continues")
        try:
            kwargs = self._profiler_options()
        except Exception as exc:
            self._fail("start", "the profiler could not be configured", exc,
                       "nothing is captured; the program continues")
            return
        self._write()
        # Starting the profiler is the last thing done here, so none of the capture's own work
        # (run.json, hooks) lands in the first window.
        try:
            backend.prepare(self._torch)
            self._prof = self._torch.profiler.profile(**kwargs)
            self._preset(0)
            self._prof.__enter__()
        except Exception as exc:
            self._fail("start", "the profiler could not start", exc, "nothing is captured; the program continues")

    def _describe(self) -> None:
        r = self.record
        r["backend"] = "neuron" if self._neuron else "cuda" if self._sync_cuda else "cpu"
        for key, fn in (("versions", backend.versions), ("devices", backend.devices)):
            try:
                r[key] = fn(self._torch, cuda=self._cuda, neuron=self._neuron)
            except Exception as exc:  # facts we cannot read are recorded as failures, not fatal
                self._fail(key, f"could not read the {key}", exc, "run.json lacks them", warn=False)
        # Again, now that the backend is imported: torch_neuronx sets defaults of its variables on import.
        r["environment"] = behaviour_env()
        r["profiler"] = {"activities": self._names, "schedule": self.schedule.as_dict(), "step_on": self._step_on,
                         **{k: (v if isinstance(v, bool | int | float | str) else repr(v))
                            for k, v in self._options.items()}}
        if self._neuron:
            r["neuron"] = {"config": None, "fallback_ops_source": "torch_neuronx.get_fallback_ops()",
                           "executed_ops": None, "files": []}
            if os.environ.get("NEURON_RT_INSPECT_ENABLE", "0") not in ("", "0"):
                # The Neuron docs: do not combine runtime inspect with torch.profiler (formats/neuron.md §8).
                self._warn("NEURON_RT_INSPECT_ENABLE is set, and the Neuron documentation says not to combine "
                           "it with torch.profiler; unset it for this capture")

    def _profiler_options(self) -> dict[str, Any]:
        """Keywords for ``torch.profiler.profile``; on TorchNeuron also its config and exporter."""
        torch = self._torch
        action = torch.profiler.ProfilerAction
        kwargs: dict[str, Any] = {
            "activities": backend.profiler_activities(torch, self._names),
            "schedule": lambda s: getattr(action, _ACTIONS[self.schedule.action(s)]),
            "on_trace_ready": self._on_trace_ready,
            **self._options,
        }
        assert self.path is not None
        if self._neuron:
            config, recorded = backend.neuron_config(self.path, self._neuron_options)
            self.record["neuron"]["config"] = recorded
            kwargs["experimental_config"] = config
            try:
                self._neuron_export = backend.neuron_exporter(config)
            except Exception as exc:
                self._fail("exporter", "TorchNeuron's exporter (NeuronProfiler) could not be created", exc,
                           "framework traces will be written by torch.profiler instead")
        return kwargs

    def _preset(self, step: int) -> None:
        """Label the next window inside its own trace file (a top-level ``neurontrace`` key)."""
        window = self.schedule.next_window(step)
        if window is not None and self.path is not None:
            facts = {"capture": self.path.name, "window": window.index, "phase": window.phase,
                     "planned_steps": [window.first_step, window.last_step], "run_record": "run.json"}
            self._prof.preset_metadata_json("neurontrace", json.dumps(facts))

    # -- export --------------------------------------------------------------------------------------

    def _on_trace_ready(self, prof: Any) -> None:
        """Called by torch.profiler when a window closes; never raises into the user's program."""
        self._refresh_rank()
        last = self._closing
        planned = self.schedule.window(last) or Window(len(self.record["windows"]), STEADY, last, last)
        name = label(planned, last_step=last, at_exit=self._exiting)
        entry: dict[str, Any] = {"index": planned.index, "label": name, "first_step": planned.first_step,
                                 "last_step": last, "planned_last_step": planned.last_step,
                                 "complete": last == planned.last_step, "exporter": None, "files": [],
                                 "error": None}
        self.record["windows"].append(entry)
        try:
            if self._neuron:
                entry["exporter"] = "torch_neuronx.profiling.NeuronProfiler.export_trace"
                entry["files"] = self._export_neuron(prof)
            else:
                entry["exporter"] = "torch.profiler.export_chrome_trace"
                entry["files"] = [self._export_chrome(prof, entry)]
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
            what = f"window {planned.index} ({name}, steps {planned.first_step}-{last}) was not exported"
            if self._neuron:
                self._export_fallback(prof, entry, what, exc)
            else:
                self._fail("export", what, exc, "its trace is missing; the program continues")
        self._write()

    def _export_chrome(self, prof: Any, entry: Mapping[str, Any]) -> str:
        name = (f"rank{self.record['rank']}_w{entry['index']:02d}_{entry['label']}"
                f"_steps{entry['first_step']}-{entry['last_step']}.pt.trace.json.gz")
        assert self.path is not None
        prof.export_chrome_trace(str(self.path / name))
        return name

    def _export_neuron(self, prof: Any) -> list[str]:
        """TorchNeuron's exporter; the files it wrote are found by listing the output tree."""
        assert self.path is not None
        if self._neuron_export is None:
            raise RuntimeError("TorchNeuron's exporter is unavailable (see the start failure)")
        before = set(_files(self.path / "neuron"))
        self._neuron_export(prof)
        return sorted(f for f in _files(self.path / "neuron") if f not in before and ".json" in f)

    def _export_fallback(self, prof: Any, entry: dict[str, Any], what: str, exc: Exception) -> None:
        """TorchNeuron's exporter failed: keep at least the framework trace, written by torch."""
        try:
            entry["files"] = [self._export_chrome(prof, entry)]
            entry["exporter"] = "torch.profiler.export_chrome_trace (TorchNeuron's exporter failed)"
            self._fail("export", what + " by TorchNeuron's exporter", exc,
                       "the framework trace was written by torch.profiler instead, apart from the Neuron files")
        except Exception as exc2:
            self._fail("export", what, exc2, f"its trace is missing (TorchNeuron's exporter: {exc})")

    # -- finish --------------------------------------------------------------------------------------

    def _finish(self, exc: BaseException | None) -> None:
        self._exiting = True
        self._closing = self._step
        if self._hook is not None:
            self._hook.remove()
        if self._prof is not None:
            try:
                if self.schedule.action(self._step) in ("record", "save"):
                    self._synchronize()
                self._prof.__exit__(None, None, None)
            except Exception as err:
                self._fail("stop", "the profiler failed to stop", err, "the last window may be missing")
            self._prof = None
        if not self.record:
            return
        if self._neuron:
            self._neuron_facts()
        self._check_coverage()
        r = self.record
        if self._compile is not None:
            r.setdefault("compile", {}).update(self._compile.stop())
        # Scripts often set variables (NEURON_CC_FLAGS...) after the capture started, or start
        # torch.distributed late: keep what changed.
        now = behaviour_env()
        r["environment_changes"] = {k: now.get(k) for k in sorted(set(now) | set(r["environment"]))
                                    if now.get(k) != r["environment"].get(k)}
        self._refresh_rank()
        r["exit"] = _exit_facts(exc)
        r["end_time"] = utc_now()
        r["duration_s"] = round(time.monotonic() - self._started_at, 3)
        exported = any(w["files"] for w in r["windows"])
        r["status"] = ("complete" if exported and not r["failures"] else "partial" if exported
                       else "failed" if r["failures"] else "empty")
        self._write()

    def _neuron_facts(self) -> None:
        assert self.path is not None
        try:
            fallen, executed = backend.fallback_ops()
            self.record["fallback_ops"] = fallen
            self.record["neuron"]["executed_ops"] = executed
        except Exception as exc:
            self._fail("fallback_ops", "could not read torch_neuronx.get_fallback_ops()", exc,
                       "run.json does not list the ops that fell back to the CPU")
        self.record["neuron"]["files"] = sorted(_files(self.path / "neuron"))

    def _check_coverage(self) -> None:
        """Say so when the run ended before the schedule recorded anything (or any steady state)."""
        windows = self.record["windows"]
        if not windows and not self.record["failures"]:
            first = self.schedule.next_window(0)
            when = f"from step {first.first_step}" if first else "no step"
            self._warn(f"nothing was captured: the run marked {self._step} steps and the schedule records {when}; "
                       "mark steps with step() or pass a schedule that fits the run")
        elif self._step and windows and all(w["label"] != STEADY for w in windows):
            nxt = self.schedule.next_window(self._step)
            if nxt is not None and nxt.phase == STEADY and self.schedule.startup:
                self._warn(f"no steady-state window was captured: the run marked {self._step} steps and the "
                           f"schedule records steady state from step {nxt.first_step}")

    # -- helpers -------------------------------------------------------------------------------------

    def _refresh_rank(self) -> None:
        """A process group initialised after the capture started knows the rank better than the environment."""
        if self.record.get("rank_source") == "torch.distributed":
            return
        rank = backend.distributed_rank(self._torch)
        if rank is not None:
            self.record.update(rank=rank[0], world_size=rank[1], rank_source="torch.distributed")

    def _synchronize(self) -> None:
        if not (self._sync_cuda or self._neuron):
            return  # nothing asynchronous to wait for on the CPU
        try:
            backend.synchronize(self._torch, cuda=self._sync_cuda, neuron=self._neuron)
        except Exception as exc:
            self._fail("synchronize", "the device synchronize before export failed", exc,
                       "the window may miss device work still in flight", warn=True)

    def _fail(self, stage: str, what: str, exc: BaseException, consequence: str, *, warn: bool = True) -> None:
        if self.record:
            self.record["failures"].append({"stage": stage, "what": what, "error": f"{type(exc).__name__}: {exc}",
                                            "step": self._step})
        if stage in ("start", "step", "stop") and self._prof is not None:
            prof, self._prof = self._prof, None
            # Already broken: the failure being reported is what the user needs to know.
            with contextlib.suppress(Exception):
                prof.__exit__(None, None, None)
        if warn:
            self._warn(f"{what} ({type(exc).__name__}: {exc}); {consequence}")
        self._write()

    def _warn(self, message: str) -> None:
        text = f"neurontrace capture: {message}"
        self.warnings.append(text)
        if self.record:
            self.record["warnings"].append(text)
        warnings.warn(text, CaptureWarning, stacklevel=_user_stacklevel())

    def _write(self) -> None:
        if self.path is None or not self.record:
            return
        try:
            write_run_record(self.path, self.record)
        except OSError as exc:
            message = f"neurontrace capture: run.json could not be written in {self.path} ({exc})"
            if message not in self.warnings:
                self.warnings.append(message)
                warnings.warn(message, CaptureWarning, stacklevel=_user_stacklevel())


class Inactive:
    """What :func:`current` returns when no capture is running: ``step()`` does nothing."""

    path: Path | None = None
    active = False
    warnings: list[str] = []  # noqa: RUF012 (always empty, never appended to)

    def step(self) -> None:
        """Nothing to mark: no capture is running."""

    def __repr__(self) -> str:
        return "<neurontrace Capture inactive>"


_INACTIVE = Inactive()


def capture(
    out_dir: str | Path = DEFAULT_OUT_DIR,
    *,
    schedule: Schedule | tuple[int, ...] | str | None = None,
    record_shapes: bool = True,
    with_stack: bool = True,
    profile_memory: bool = True,
    activities: Iterable[Any] | None = None,
    notes: str | None = None,
    tags: Iterable[str] = (),
    step_on: StepOn = "manual",
    profiler_options: Mapping[str, Any] | None = None,
    neuron_modes: Iterable[str] | None = None,
    neuron_cores: str | None = None,
    neuron_max_events_per_nc: int | None = None,
    neuron_config: Mapping[str, Any] | None = None,
) -> Capture:
    """A context manager that profiles its block into ``<out_dir>/<host>_pid<pid>_rank<rank>/``.

    ``schedule``: a :class:`Schedule`, ``"all"`` (one window for the whole block) or
    ``(wait, warmup, active[, repeat])``; the default records step 0 as the ``startup`` window and
    steps 3-5 as a ``steady`` window. ``activities``: None picks CPU, plus CUDA when available,
    plus TorchNeuron (``PrivateUse1``) when ``torch_neuronx`` is installed; or name them
    (``"cpu"``, ``"cuda"``, ``"neuron"`` or ``ProfilerActivity`` members). ``step_on="optimizer"``
    marks a step after every ``optimizer.step()``. ``profiler_options`` go to
    ``torch.profiler.profile`` as given (e.g. ``{"with_flops": True}``). The ``neuron_*``
    options set TorchNeuron's ``NeuronConfig`` (``modes``, ``capture_enabled_for_nc``,
    ``max_events_per_nc``, or any keyword via ``neuron_config``) and need torch-neuronx.
    """
    return Capture(
        out_dir, schedule=schedule, record_shapes=record_shapes, with_stack=with_stack,
        profile_memory=profile_memory, activities=activities, notes=notes, tags=tags, step_on=step_on,
        profiler_options=profiler_options,
        neuron=backend.NeuronOptions(
            modes=tuple(neuron_modes) if neuron_modes is not None else None, cores=neuron_cores,
            max_events_per_nc=neuron_max_events_per_nc, extra=dict(neuron_config or {}),
        ),
    )


def current() -> Capture | Inactive:
    """The running capture of this process, or an inactive handle whose ``step()`` does nothing."""
    return _ACTIVE[-1] if _ACTIVE else _INACTIVE


def step() -> None:
    """Mark the end of a step in the running capture (nothing when none is running)."""
    current().step()


def _exit_facts(exc: BaseException | None) -> dict[str, Any]:
    """How the captured block ended: normally, by ``sys.exit`` (with its code), or by an exception."""
    if exc is None:
        return {"status": "ok", "exit_code": 0}
    if isinstance(exc, SystemExit):
        code = exc.code
        return {"status": "exit", "exit_code": code if isinstance(code, int) else 0 if code is None else 1}
    return {"status": "exception", "exit_code": None, "exception": f"{type(exc).__name__}: {exc}"}


def _capture_dir(out_dir: Path, rank: int) -> Path:
    """A new directory per run and rank; an existing one is never reused (suffix ``_2``, ``_3``...)."""
    host = re.sub(r"[^A-Za-z0-9.-]+", "-", host_name()) or "host"
    base = f"{host}_pid{os.getpid()}_rank{rank}"
    out_dir.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        path = out_dir / (base if n == 1 else f"{base}_{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{out_dir}: too many captures named {base}_*")


def _files(root: Path) -> list[str]:
    """Files under ``root``, relative to the capture directory (its parent), as POSIX paths."""
    if not root.is_dir():
        return []
    return [p.relative_to(root.parent).as_posix() for p in root.rglob("*") if p.is_file()]


def _user_stacklevel() -> int:
    """The stack level of the first frame outside neurontrace, contextlib and torch (warnings point there)."""
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None:
        mod = frame.f_globals.get("__name__", "")
        if not (mod.startswith(("neurontrace", "torch")) or mod == "contextlib"):
            return level
        frame = frame.f_back
        level += 1
    return 1


class _CallableModule(types.ModuleType):
    """This module is also the function: ``neurontrace.capture(...)`` and ``neurontrace.capture.step()``.

    ``neurontrace.capture`` names this submodule once it is imported (Python binds submodules on
    their package), so the module itself must be callable for both spellings to work.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Capture:
        return capture(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
