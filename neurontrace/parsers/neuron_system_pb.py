"""A Neuron system profile's ``.pb`` file (``ntrace.pb``, ``trace_info.pb``, ``cpu_util.pb``, ``host_mem.pb``) → `Trace`.

These files have no published schema (neuron.md §10.3); :mod:`._neuron_pb` reads what can be
established without Neuron's tools: the framing of the streams, and from ``trace_info.pb`` the
instance id, CPU model, file paths and event-type names. Loading one of them describes every system
``.pb`` file of its folder in metadata ``neuron.system_pb`` and leaves the event tables empty, with a
warning (in the accounting) that says what is not decoded and the ``neuron-explorer view -d`` command
that decodes it. A folder holding them loads as a capture (``torchneuron-capture``), which does the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neurontrace.errors import NeuronToolMissingWarning
from neurontrace.load import Probe
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import ACCOUNTING_KEY, ParseAccounting, Trace, metadata_table

from . import _neuron_pb as pb
from ._neuron_common import warn
from ._normalized_meta import with_normalized

FORMAT = "neuron-system-pb"


def sniff(probe: Probe) -> bool:
    return not probe.is_dir and probe.path.name in pb.FILES


def parse(path: Path, *, progress: Progress = no_progress) -> Trace:
    path = Path(path)
    acct = ParseAccounting(source=str(path), format=FORMAT)
    files = pb.describe(path.parent)
    acct.events_read += len(files)
    acct.keep("metadata", len(files))
    info = next((f for f in files if f["file"] == pb.INFO), None)
    warn(acct, not_decoded_message(path.parent, files), NeuronToolMissingWarning)
    facts: dict[str, Any] = {"format": FORMAT, "backend": "neuron", "clock": "none (system profile not decoded)",
                             "neuron.system_pb": files, ACCOUNTING_KEY: acct.as_dict()}
    if info is not None and info.get("instance_id"):
        facts["host"] = info["instance_id"]
    return with_normalized(Trace(metadata=metadata_table(facts, source=str(path))))


def not_decoded_message(folder: Path, files: list[dict[str, Any]]) -> str:
    streams = [f"{f['file']} ({f['messages']} messages{'' if f['consumed_exactly'] else ', cut off'})"
               for f in files if "messages" in f]
    return (f"{folder}: the system profile is not decoded: {', '.join(streams) or 'no event streams'} are "
            "length-prefixed protobuf streams whose fields Neuron does not publish (trace_info.pb's instance, "
            "CPU model, files and event types are in metadata neuron.system_pb). On a machine with AWS's "
            f"neuron-explorer run `{pb.decode_command(folder)}` and load the result")
