"""``neurontrace memory``: peaks, what is live at the peak, growth per step and OOMs (docs/memory.md)."""

from __future__ import annotations

import argparse
import json

from neurontrace import errors
from neurontrace.cli import _common as common

SCHEMA = "neurontrace.memory/1"


class MemoryCommand(common.Command):
    """show memory: the peak per device and what was live at it, growth per step, OOMs (docs/memory.md)

    Reads a torch.profiler trace made with profile_memory=True, a PyTorch memory snapshot pickle
    (torch.cuda.memory._dump_snapshot; read without running any of its code) or a Neuron profile. Per
    device: the exact peak of the recorded allocated and reserved totals, the allocations live at the peak
    grouped by op and source line, per-step figures and the growth of end-of-step memory with the source of
    what is never freed, each out-of-memory event, and a snapshot's segments against what is allocated.
    """

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        common.add_input(parser, nargs="+")
        parser.add_argument("--json", action="store_true", help=f"print the {SCHEMA} JSON document")
        parser.add_argument("--device", metavar="D", help="only this device (cuda:0, cpu, neuron:nc0)")

    def run(self, args: argparse.Namespace) -> int:
        from neurontrace.analysis.memory import memory
        from neurontrace.analysis.memory_findings import findings

        trace, inputs = common.load_traces(args.path, args)
        result = memory(trace)
        if result is None:
            raise errors.UsageError("the input holds no memory events: profile with profile_memory=True, or "
                                    "dump a snapshot with torch.cuda.memory._dump_snapshot")
        if args.device is not None:
            known = sorted({d.device for d in result.devices} | {n.device for n in result.neuron})
            result.devices = [d for d in result.devices if d.device == args.device]
            result.neuron = [n for n in result.neuron if n.device == args.device]
            if not result.devices and not result.neuron:
                raise errors.UsageError(f"no memory events on {args.device!r}; the input has {', '.join(known)}")
        found = findings(result)
        segments = trace.meta_all("memory_snapshot")
        if args.json:
            doc = {"schema": SCHEMA, "synthetic": bool(trace.meta("synthetic", False)), "inputs": inputs,
                   **result.as_dict(), "snapshot_segments": [s for part in segments for s in part],
                   "findings": [f.as_dict() for f in found],
                   "warnings": common.load_warnings(trace)}
            common.out(json.dumps(doc, indent=2))
            return errors.EXIT_OK
        from neurontrace.render.memory_report import render

        render(result, found, [s for part in segments for s in part], trace, common.console())
        return errors.EXIT_OK
