"""What a system profile's ``.pb`` files show without Neuron's tools (neuron.md §10.3 and addendum 2).

AWS publishes no schema for ``ntrace.pb``, ``cpu_util.pb``, ``host_mem.pb`` or ``trace_info.pb``;
only their roles (``how-to-profile-workload.rst``: runtime events; sampled host CPU utilisation per
core; host memory; the capture's metadata). Real files showed (addendum 2):

- ``ntrace.pb``, ``cpu_util.pb``, ``host_mem.pb`` are **streams**: each protobuf message is preceded by
  its length as a little-endian u32, and the file is consumed exactly;
- ``trace_info.pb`` is **one** message holding the instance id, the CPU model, the paths of the other
  ``.pb`` files (relative or absolute) and the event-type names.

This module establishes only that: the framing (messages, bytes, whether the file is consumed
exactly, the wire types of the top-level fields seen) and, from ``trace_info.pb``, the strings whose
kind their text itself shows (an EC2 instance id ``i-<hex>``, a path ending in ``.pb``, a CPU model
naming a vendor or "CPU", a known system event name; neuron.md §6.2). It never assigns a meaning to a
field number: the events, CPU and host-memory series stay **not decoded**, and every result says so
with the command that decodes them (``neuron-explorer view -d DIR``, which writes
``SystemProfileEvents``, ``CpuUsage`` and ``HostMemUsage``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

STREAMS = {"ntrace.pb": "SystemProfileEvents", "cpu_util.pb": "CpuUsage", "host_mem.pb": "HostMemUsage"}
INFO = "trace_info.pb"
FILES = frozenset({*STREAMS, INFO})
_WIRE = {0: "varint", 1: "fixed64", 2: "bytes", 5: "fixed32"}
_INSTANCE = re.compile(r"^i-[0-9a-f]{8,17}$")
_CPU = re.compile(r"(?i)\b(intel|amd|xeon|epyc|graviton|neoverse|cpu|processor)\b")
_EVENT = re.compile(r"^(nrt|nc|cc|kbl|dmem|hw|model|timestamp|numerical|runtime|nrta?)_[a-z0-9_]+$")
_MAX_INFO = 64 << 20  # trace_info.pb is small metadata
WALKED = 1000  # stream messages whose fields are listed


def decode_command(folder: Path | str) -> str:
    return f"neuron-explorer view -d {folder} --output-format parquet --output-file {folder}/neuron_parquet"


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def walk(msg: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of each top-level field of a protobuf message (wire format only);
    raises ValueError where the bytes are not a message."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(msg):
        key, pos = read_varint(msg, pos)
        num, wire = key >> 3, key & 7
        value: Any
        if num == 0:
            raise ValueError(f"field number 0 at byte {pos}")
        if wire == 0:
            value, pos = read_varint(msg, pos)
        elif wire == 1:
            value, pos = msg[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = read_varint(msg, pos)
            value, pos = msg[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = msg[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wire} at byte {pos}")
        if pos > len(msg):
            raise ValueError("a field runs past the message")
        out.append((num, wire, value))
    return out


def stream(path: Path) -> dict[str, Any]:
    """The framing of a length-prefixed stream file: messages, bytes, where it stops, fields seen (the
    fields of the first :data:`WALKED` messages; the others are only counted)."""
    size = path.stat().st_size
    pos = n = bad = 0
    wires: dict[int, set[str]] = {}
    with path.open("rb") as f:
        while pos + 4 <= size:
            length = int.from_bytes(f.read(4), "little")
            if pos + 4 + length > size:
                break
            if n < WALKED:
                try:
                    for num, wire, _ in walk(f.read(length)):
                        wires.setdefault(num, set()).add(_WIRE[wire])
                except ValueError:
                    bad += 1
            else:
                f.seek(length, 1)
            pos += 4 + length
            n += 1
    exact = pos == size
    fact: dict[str, Any] = {
        "file": path.name, "bytes": size, "messages": n, "framing": "u32 little-endian length + message",
        "consumed_exactly": exact,
        "top_level_fields": {str(k): sorted(v) for k, v in sorted(wires.items())},
        "decoded": False,
        "not_decoded": f"the {STREAMS.get(path.name, 'system')} rows: the field meanings are not published; "
                       f"`{decode_command(path.parent)}` decodes them",
    }
    if bad:
        fact["messages_not_protobuf"] = bad
    if not exact:
        fact["stops_at_byte"] = pos
    return fact


def trace_info(path: Path) -> dict[str, Any]:
    """``trace_info.pb``: the strings whose kind their own text shows, and the framing."""
    with path.open("rb") as f:
        data = f.read(_MAX_INFO)
    strings: list[str] = []
    try:
        _strings(data, strings, depth=0)
        parsed = True
    except ValueError:
        parsed = False
    instance = [s for s in strings if _INSTANCE.match(s)]
    paths = [s for s in strings if s.endswith(".pb")]
    events = [s for s in strings if _EVENT.match(s)]
    cpu = [s for s in strings if _CPU.search(s) and s not in paths]
    fact: dict[str, Any] = {
        "file": path.name, "bytes": len(data), "one_message": parsed,
        "instance_id": instance[0] if instance else None,
        "cpu_model": cpu[0] if cpu else None,
        "files": list(dict.fromkeys(paths)),
        "event_types": list(dict.fromkeys(events)),
        "other_strings": len(strings) - len(set(instance) | set(paths) | set(events) | set(cpu)),
        "rule": "strings classified by their text only (i-<hex> instance id, *.pb path, CPU vendor words, "
                "system event names of neuron.md §6.2); no field number is given a meaning",
    }
    return fact


def _strings(msg: bytes, out: list[str], *, depth: int) -> None:
    for _, wire, value in walk(msg):
        if wire != 2:
            continue
        text = _text(value)
        if text is not None:
            out.append(text)
        elif depth < 8:
            try:
                _strings(value, out, depth=depth + 1)
            except ValueError:
                continue


def _text(value: bytes) -> str | None:
    if not value:
        return None
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() else None


def describe(folder: Path) -> list[dict[str, Any]]:
    """Every system ``.pb`` file of a capture folder, as :func:`stream` / :func:`trace_info` read it."""
    out = []
    for name in (INFO, *STREAMS):
        p = folder / name
        if p.is_file():
            out.append(trace_info(p) if name == INFO else stream(p))
    return out
