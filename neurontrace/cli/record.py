"""``neurontrace record [options] -- python script.py [args...]``: run a script under a capture.

The script runs in this process (``runpy``), exactly as ``python script.py args`` would run it,
inside :func:`neurontrace.capture.capture`. Steps are marked by the script calling
``neurontrace.capture.step()`` (or ``neurontrace.capture.current().step()``); with
``--steps optimizer`` a step ends at every ``optimizer.step()``; a script that marks no steps is
recorded as one window. The exit code is the script's. Under a launcher, run neurontrace per rank:
``torchrun --nproc-per-node 8 -m neurontrace record -- train.py``.

"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any

from neurontrace import errors
from neurontrace._capture_record import DEFAULT_OUT_DIR
from neurontrace._capture_schedule import Schedule
from neurontrace.cli import _common as common


class RecordCommand(common.Command):
    """run a Python script under torch.profiler with the settings diagnose needs (docs/capture.md)

    The exit code is the script's own. The capture directory holds the trace(s) and run.json.
    """

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.usage = "neurontrace record [options] -- python SCRIPT.py [ARGS...]"
        parser.add_argument("-o", "--output", type=Path, default=Path(DEFAULT_OUT_DIR),
                            help=f"directory to put the capture directory in (default {DEFAULT_OUT_DIR})")
        parser.add_argument("--steps", choices=("manual", "optimizer"), default="manual",
                            help="manual (default): the script calls neurontrace.capture.step(); "
                                 "optimizer: a step ends at every optimizer.step()")
        when = parser.add_mutually_exclusive_group()
        when.add_argument("--schedule", type=_schedule, metavar="WAIT,WARMUP,ACTIVE[,REPEAT]",
                          help="steady-state windows, as torch.profiler.schedule (default 1,1,3,1)")
        when.add_argument("--all-steps", action="store_true",
                          help="record every step in one window (large traces for long runs)")
        parser.add_argument("--startup", type=int, metavar="N",
                            help="first steps recorded as the startup window (default 1; 0 for none)")
        parser.add_argument("--activities", type=_words, metavar="A[,A...]",
                            help="cpu, cuda, neuron (default: CPU plus the accelerator in use)")
        parser.add_argument("--no-stack", action="store_true", help="do not record Python stacks")
        parser.add_argument("--no-shapes", action="store_true", help="do not record input shapes")
        parser.add_argument("--no-memory", action="store_true", help="do not record memory events")
        parser.add_argument("--note", help="free text kept in run.json (what this run is)")
        parser.add_argument("--tag", action="append", default=[], help="a label kept in run.json (repeatable)")
        parser.add_argument("--neuron-modes", type=_words, metavar="M[,M...]",
                            help="TorchNeuron profile modes: device, runtime, cpu_util, host_memory (needs torch-neuronx)")
        parser.add_argument("--neuron-cores", metavar="SPEC",
                            help="NeuronCores to capture, e.g. 0,1,2-5 (needs torch-neuronx)")
        parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- python SCRIPT.py [ARGS...]",
                            help="the script and its arguments, after --")

    def run(self, args: argparse.Namespace) -> int:
        from neurontrace import _capture_script as script
        from neurontrace.capture import Capture, capture

        target = script.parse_command(args.command)
        if args.output.exists() and not args.output.is_dir():
            raise errors.OutputExistsError(f"{args.output} exists and is not a directory; choose another --output")
        # Built before the script runs, so a bad option or a missing torch stops here (validate first).
        cap: Capture = capture(args.output, **_capture_options(args))
        exc: BaseException | None = None
        with warnings.catch_warnings():
            # The CLI hides trace warnings (they reach users through its own summaries); a capture's
            # warnings are news while the script runs, so they show as they happen.
            warnings.simplefilter("default", errors.CaptureWarning)
            with script.script_environment(target):
                try:
                    with cap:
                        script.run(target)
                except BaseException as raised:  # the script's ending, whatever it is, decides the exit code
                    exc = raised
                code = script.exit_code(exc, target)
        sys.stdout.flush()
        _summary(cap)
        return code


def _capture_options(args: argparse.Namespace) -> dict[str, Any]:
    default = Schedule()
    if args.all_steps:
        schedule = Schedule.everything()
    else:
        wait, warmup, active, repeat = args.schedule or (default.wait, default.warmup, default.active, default.repeat)
        startup = default.startup if args.startup is None else args.startup
        try:
            schedule = Schedule(wait=wait, warmup=warmup, active=active, repeat=repeat, startup=startup)
        except ValueError as exc:
            raise errors.UsageError(str(exc)) from None
    return {
        "schedule": schedule, "step_on": args.steps, "activities": args.activities,
        "record_shapes": not args.no_shapes, "with_stack": not args.no_stack, "profile_memory": not args.no_memory,
        "notes": args.note, "tags": args.tag, "neuron_modes": args.neuron_modes, "neuron_cores": args.neuron_cores,
    }


def _summary(cap: Any) -> None:
    """Where the capture went, what it holds, and what to run next (on stderr: stdout is the script's)."""
    if cap.path is None:
        common.note("neurontrace record: nothing was captured (see the warnings above)")
        return
    windows = cap.record.get("windows", [])
    done = [w for w in windows if w.get("files")]
    parts = ", ".join(_describe(w, cap.record.get("steps_marked", 0)) for w in done) or "no trace"
    common.note(f"neurontrace record: wrote {cap.path}/ ({parts}; run.json)")
    if cap.record.get("steps_marked", 0) == 0 and done:
        common.note("  the script marked no steps, so the whole run is one window; mark steps with "
                    "neurontrace.capture.step() or pass --steps optimizer")
    for message in cap.warnings:
        common.note(f"  warning: {message.removeprefix('neurontrace capture: ')}")
    if done:
        common.note(f"next: neurontrace diagnose {cap.path}")
        common.note(f"      neurontrace convert {cap.path} -o {cap.path}.parquet")
    else:
        common.note(f"  run.json in {cap.path} says why nothing was captured")


def _describe(window: dict[str, Any], steps_marked: int) -> str:
    if window["label"] == "whole_run" and steps_marked == 0:
        return "the whole run"
    first, last = window["first_step"], window["last_step"]
    return f"{window['label']} step {first}" if first == last else f"{window['label']} steps {first}-{last}"


def _schedule(text: str) -> tuple[int, int, int, int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WAIT,WARMUP,ACTIVE[,REPEAT] (whole numbers), got {text!r}") from None
    if len(values) not in (3, 4):
        raise argparse.ArgumentTypeError(f"expected 3 or 4 numbers (WAIT,WARMUP,ACTIVE[,REPEAT]), got {text!r}")
    wait, warmup, active, *rest = values
    return wait, warmup, active, rest[0] if rest else 1


def _words(text: str) -> list[str]:
    return [w.strip() for w in text.split(",") if w.strip()]
