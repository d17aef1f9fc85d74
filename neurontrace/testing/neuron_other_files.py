"""Synthetic Neuron files other than Explorer Parquet (:mod:`neurontrace.testing.synthetic_neuron`):
legacy JSON, ``summary-json`` / ``summary-text``, NTFF-like and NEFF-like container headers, and a
TorchNeuron capture directory. Every output is labelled synthetic."""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

from neurontrace.testing.neuron_explorer_files import explorer_tables, summary_metrics, write_explorer
from neurontrace.testing.neuron_scenario import NOTE, Scenario
from neurontrace.testing.synthetic_neuron_observed import field as _field
from neurontrace.testing.synthetic_neuron_observed import neff_bytes

# -- legacy JSON ----------------------------------------------------------------------------------

_SUBGROUP = {"tensor": "pe", "vector": "dve", "scalar": "act", "gpsimd": "pool", "sync": "sp"}


def write_legacy_json(sc: Scenario, out_dir: str | Path) -> tuple[Path, Path]:
    """``synthetic_<name>_device.json`` (``ntff.json`` shape) and ``synthetic_<name>_system.json``."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    tables = explorer_tables(replace(sc, system=True))
    device = {
        "summary": [summary_metrics(sc)],
        "instruction": [{"timestamp": r["start_ts"], "duration": r["duration_ns"],
                         "label": r["timeline_track"], "subgroup": f"{_SUBGROUP.get(r['engine'], r['engine'])}0",
                         "opcode": r["opcode"], "operands": r["operands"], "hlo_name": r["hlo_name"]}
                        for r in tables.get("Instruction", [])],
        "dma": [{"timestamp": r["start_ts"], "duration": r["duration_ns"], "variable": r["variable"],
                 "transfer_size": r["transfer_bytes"], "source": [[r["source"].strip("[]")]],
                 "dest": [r["dest"].strip("[]")], "queue_type": r["queue_type"], "subgraph": "sg00"}
                for r in tables.get("DmaPacketAggregated", [])],
        "cc_ops": [{"timestamp": r["start_ts"], "duration": r["duration_ns"], "operation": r["operation"],
                    "input_size": r["input_size"], "cc_trigger": r["trigger_start_ts"],
                    "cc_trigger_start_delay": r["cc_trigger_start_delay"]} for r in tables.get("CcOp", [])],
        "neff_node": [{"variable_name": "input0", "shape": "[128 128]", "size": "32768", "type": "IN"}],
        "profile_info": [{"ntff_filename": f"synthetic_{sc.name}.ntff", "neff": sc.neff_name}],
        "synthetic": NOTE,
    }
    system = {
        "trace_event": [
            {"name": r["name"], "timestamp": r["start_ts"], "duration": r["duration_ns"], "id": r["id"],
             "parent_id": 0, "group": ("framework-" + str(r["thread_id"])) if r["trace_event_source"] == "framework"
             else f"nrt-nc-{sc.nc_idx:03d}", "type": 99999 if r["trace_event_source"] == "framework" else 11,
             "instance_id": r["instance_id"], "process_id": str(r["process_id"]), "thread_id": r["thread_id"],
             "nc_idx": r["nc_idx"], **json.loads(r["extra_attributes_json"] or "{}")}
            for r in tables.get("SystemProfileEvents", [])],
        "mem_usage": [{"timestamp": r["timestamp"], "duration": 1_000_000, "instance_id": r["instance_id"],
                       "usage": r["used_bytes"], "percent_usage": r["used_percent"]}
                      for r in tables.get("HostMemUsage", [])],
        "cpu_util": [{"timestamp": r["timestamp"], "duration": 1_000_000, "instance_id": r["instance_id"],
                      "cpu_id": r["cpu_id"], "util": r["util_percent"]} for r in tables.get("CpuUsage", [])],
        "system_profile_metadata": tables.get("SystemProfileMetadata", []),
        "device_profile_list": tables.get("DeviceProfileList", []),
        "warnings": [{"message": m} for m in sc.warnings],
        "synthetic": NOTE,
    }
    dev_path, sys_path = d / f"synthetic_{sc.name}_device.json", d / f"synthetic_{sc.name}_system.json"
    dev_path.write_text(json.dumps(device))
    sys_path.write_text(json.dumps(system))
    return dev_path, sys_path


# -- summaries --------------------------------------------------------------------------------------


def profile_id(sc: Scenario, kind: str = "n") -> str:
    return f"{kind}_{hashlib.sha1(('synthetic ' + sc.name).encode()).hexdigest()}"


def write_summary(sc: Scenario, path: str | Path, *, fmt: str = "json") -> Path:
    """``summary-json`` (``{"n_<40hex>": {metrics}}``) or ``summary-text`` (header + ``key value`` lines)."""
    p = Path(path)
    # Throttle keys name the *physical* core (addendum): logical nc_idx k is physical 2k and 2k+1 at LNC=2.
    physical = 2 * sc.nc_idx
    throttled = sum(w.dur_ns for w in sc.throttles)  # the windows of the whole profile
    metrics = {**summary_metrics(sc), "instance_type": sc.instance_type, "profiler_version": "synthetic",
               "nc_idx": sc.nc_idx, "nd_idx": 0, f"throttle_active_nc{physical}_time_ns": throttled,
               f"throttle_activity_0_active_time_nc{physical}_percent": throttled / 1e9 / summary_metrics(sc)["total_time"]}
    if fmt == "json":
        p.write_text(json.dumps({profile_id(sc): {**metrics, "synthetic": NOTE}}, indent=1))
        return p
    # As captured from a terminal: the prompt and command, a WARN line, then the profile (addendum).
    lines = [f"# {NOTE}",
             "synthetic@trn2:~$ neuron-profile view -n synthetic_mlp.neff -s profile.ntff --output-format summary-text",
             "WARN[0000] NeuronCore buffer usage simulation is disabled for output format summary-text.",
             profile_id(sc), f"    {'synthetic':<44}true"]
    lines += [f"    {k:<44}{_go_float(v)}" for k, v in metrics.items()]
    p.write_text("\n".join(lines) + "\n")
    return p


def _go_float(v: Any) -> str:
    """Go's shortest round-trip float, as neuron-profile prints it (``1.4000184e-05``): Python's repr."""
    return repr(v) if isinstance(v, float) else str(v)


# -- NTFF / NEFF containers -------------------------------------------------------------------------


def ntff_bytes(sc: Scenario, *, version: int = 5, neff_name: str | None = None) -> bytes:
    """An NTFF-like container (neuron.md §10.1): version byte, header, capture-metadata protobuf, and a
    short labelled tail instead of hardware records (which are undocumented)."""
    msg = b"".join([
        _field(1, (neff_name or sc.neff_name).encode()), _field(3, 10001), _field(5, 2),
        _field(8, _field(1, 2) + _field(2, 27) + _field(3, 23) + _field(5, b"synthetic" + b"0" * 31)),
        _field(9, sc.instance_type.encode()), _field(10, 2), _field(11, _field(1, 2) + _field(2, 23)),
        _field(12, _field(1, 2) + _field(2, 27) + _field(3, 34)),
    ])
    header = bytearray(128)
    header[0] = version
    header[1:8] = len(msg).to_bytes(7, "little")
    for off in (0x10, 0x20, 0x30, 0x40):
        header[off:off + 8] = struct.pack("<II", 3, 3)
    return bytes(header) + msg + NOTE.encode()


def write_ntff(sc: Scenario, path: str | Path, **kw: Any) -> Path:
    p = Path(path)
    p.write_bytes(ntff_bytes(sc, **kw))
    return p


def write_neff(sc: Scenario, path: str | Path) -> Path:
    """A NEFF-like file: 1024-byte header of u64 values (no UUID), then a gzip'd tar holding ``info.json``."""
    p = Path(path)
    p.write_bytes(neff_bytes(uuid=bytes(16), name=sc.neff_name, note=NOTE))
    return p


# -- TorchNeuron capture directory ------------------------------------------------------------------


def kineto_trace(sc: Scenario) -> dict[str, Any]:
    """A framework ``trace.json`` like TorchNeuron's (Kineto JSON, PrivateUse1 categories)."""
    base = sc.host_epoch_ns - 3_000_000
    events: list[dict[str, Any]] = []

    def x(cat: str, name: str, start_ns: int, dur_ns: int, tid: int, **args: Any) -> None:
        events.append({"ph": "X", "cat": cat, "name": name, "pid": sc.pid, "tid": tid,
                       "ts": (start_ns - base) / 1000, "dur": dur_ns / 1000, "args": args})

    starts = sc.exec_starts()
    step0 = sc.host_epoch_ns + starts[0] - sc.launch_ns - 200_000
    x("user_annotation", "ProfilerStep#1", step0, starts[-1] + sc.exec_len_ns + sc.launch_ns + 300_000, sc.tid)
    for e, x0 in enumerate(starts):
        s = sc.host_epoch_ns + x0 - sc.launch_ns - 5_000
        x("cpu_op", "aten::linear", s, 4_000, sc.tid, **{"External id": e + 1})
        x("privateuse1_runtime", "neuron::dispatch", s + 500, 3_000, sc.tid, correlation=e + 1,
          **{"External id": e + 1})
        x("privateuse1_driver", "nrt_execute", s + 5_000, sc.launch_ns, 7, correlation=e + 1, device=sc.nc_idx)
    top: dict[str, Any] = {"schemaVersion": 1, "baseTimeNanoseconds": base, "displayTimeUnit": "ms",
                           "synthetic": NOTE, "traceEvents": events}
    if sc.rank is not None:
        top["distributedInfo"] = {"rank": sc.rank, "world_size": 2, "backend": "xla"}
    return top


def write_capture(sc: Scenario, root: str | Path, *, processed: bool = True, stamp: str = "20251218T153556",
                  ntff: bool = True) -> Path:
    """``<root>/<instance>_pid_<pid>/<stamp>/`` with trace.json, NTFF/NEFF, .pb placeholders and
    (``processed``) the Explorer Parquet directory ``synthetic_<name>_parquet/``. Returns the leaf."""
    leaf = Path(root) / f"{sc.instance_id}_pid_{sc.pid}" / stamp
    leaf.mkdir(parents=True, exist_ok=True)
    (leaf / "trace.json").write_text(json.dumps(kineto_trace(sc)))
    if ntff:
        write_ntff(sc, leaf / f"profile_nc_{sc.nc_idx}_session_0.ntff")
        write_neff(sc, leaf / f"neff_{sc.numeric_hash}_vnc_{sc.nc_idx}.neff")
    for pb in ("ntrace.pb", "trace_info.pb"):
        (leaf / pb).write_bytes(b"SYNTHETIC placeholder: " + NOTE.encode())
    if processed:
        write_explorer(sc, leaf / f"synthetic_{sc.name}_parquet")
    return leaf
