"""torch.profiler / Kineto Chrome-trace JSON → `Trace` (spec: shared/formats/kineto.md).

Reads all four format generations (legacy ``Operator``/``Runtime``/``Kernel`` categories and
``async`` flows; ``async_cpu_to_gpu``; ``ac2g``; float µs relative to ``baseTimeNanoseconds``),
``.json``/``.json.gz``/``.tmp`` files, CUDA, ROCm, MTIA, CPU-only and PrivateUse1 backends.

Every input event lands somewhere, and the accounting says where:
- ``X`` events → ``system_events`` (host categories) or ``device_events`` (device categories);
- ``[memory]``/``[OutOfMemory]`` instants and ``C`` events → ``counters``;
- other instants → ``system_events`` (``dur_ns`` 0); unknown phases too, with the phase kept;
- ``s``/``f``/``t`` flow markers → ``flows`` (a pair of markers is one row);
- ``M`` events (process/thread names) → ``metadata`` (key ``kineto.names``);
- events without a timestamp (other than ``M``) are skipped with that reason.

The viewer hints ``s`` (instant scope), ``bp`` and ``cname`` of an event are not kept.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from neurontrace import schema
from neurontrace.errors import MalformedTraceError, TraceWarning, TruncatedTraceWarning
from neurontrace.load import Probe
from neurontrace.parsers._pool import POOL, pc
from neurontrace.progress import Progress, no_progress
from neurontrace.run_record import read_run_record
from neurontrace.schema import COUNTERS
from neurontrace.trace import ACCOUNTING_KEY, ParseAccounting, Trace, conform, metadata_table

from . import _kineto_chunks, _kineto_json
from . import _kineto_host_only as host_only
from ._arrow import (
    constant,
    encoded,
    first_seen,
    flat,
    lookup,
    map_unique,
    min_by_key,
    pair_codes,
    pair_index,
    valid_utf8,
)
from ._kineto_chunks import CHUNK_BYTES, EventChunk, TraceEnd
from ._kineto_frames import link_frames
from ._kineto_memory import MEMORY_FIELDS, memory_counters
from ._kineto_memory import memory_events as _memory_events
from ._normalized_meta import with_normalized

FORMAT = "kineto"
__all__ = ["EventChunk", "TraceEnd", "iter_chunks", "parse", "parse_bytes", "sniff"]

# Kineto category → normalized category. Legacy (torch 1.8/1.9) aliases map like their successors.
HOST_CATEGORIES = {
    "cpu_op": "framework_op", "Operator": "framework_op",
    "user_annotation": "annotation", "Trace": "annotation",
    "cuda_runtime": "runtime", "Runtime": "runtime", "xpu_runtime": "runtime", "mtia_runtime": "runtime",
    "privateuse1_runtime": "runtime", "glow_runtime": "runtime", "hpu_op": "framework_op",
    "cuda_driver": "driver", "xpu_driver": "driver", "privateuse1_driver": "driver",
    "python_function": "python", "overhead": "overhead", "cpu_instant_event": "memory",
    "cuda_event": "runtime", "mtia_insight": "other",
}
DEVICE_CATEGORIES = {
    "kernel": "compute", "Kernel": "compute",
    "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
    "gpu_memset": "memset", "Memset": "memset",
    "gpu_user_annotation": "annotation",
    "cuda_sync": "sync_wait", "xpu_sync": "sync_wait",
    "mtia_ccp_events": "compute", "collective_comm": "collective",
}
LAUNCH_FLOWS = frozenset({"ac2g", "async", "async_cpu_to_gpu", "async_gpu"})
MEMORY_EVENTS = frozenset({"[memory]", "[OutOfMemory]"})
# HTA's communication-kernel pattern (kineto.md §1.10), plus MTIA hccl ops.
_COLLECTIVE = re.compile(r"(^nccl)|(ncclKernel)|(ncclDevKernel)|(^rccl)|(^hccl)|(^c10d::)")
_MEMCPY_DIRECTION = re.compile(r"\b(HtoD|DtoH|DtoD|PtoP|HtoH|DtoA|AtoD|AtoH|HtoA|AtoA)\b")
_DIRECTIONS = {"HtoD": "h2d", "DtoH": "d2h", "DtoD": "d2d", "PtoP": "p2p", "HtoH": "h2h",
               "AtoD": "d2d", "DtoA": "d2d", "AtoA": "d2d", "HtoA": "h2d", "AtoH": "d2h"}
_STEP = re.compile(r"^ProfilerStep#\d+")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_INT64_MAX = 2**63 - 1
_TB_WORKER = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json")


def sniff(probe: Probe) -> bool:
    if probe.is_dir:
        return False
    head = probe.head.lstrip()
    if head.startswith(b"{"):
        return b'"traceEvents"' in head or (b'"schemaVersion"' in head and b'"deviceProperties"' in head)
    return head.startswith(b"[") and b'"ph"' in head[:4096]


# An event name is kept to this many characters (a 200 MB name took `diagnose` 178 s; the longest real name in
# the corpus, a templated CUDA kernel, has 5,123):
# the rest is cut, marked with "…", and counted in the accounting's warnings. Both decoders' rows pass here.
MAX_NAME_CHARS = 65_536


def _bounded_names(ev: pa.Table) -> tuple[pa.Table, int]:
    """``ev`` with names beyond MAX_NAME_CHARS cut to it (a trailing "…"), and how many were cut."""
    col = ev["name"]
    if pa.types.is_dictionary(col.type):
        return ev, 0
    too_long = pc.greater(pc.binary_length(col), MAX_NAME_CHARS)  # bytes >= characters: a cheap first test
    if not pc.any(too_long).as_py():
        return ev, 0
    too_long = pc.fill_null(pc.greater(pc.utf8_length(col), MAX_NAME_CHARS), False)
    n = int(pc.sum(too_long).as_py() or 0)
    if not n:
        return ev, 0
    cut = pc.binary_join_element_wise(pc.utf8_slice_codeunits(col, 0, MAX_NAME_CHARS - 1), pa.scalar("…"), "")
    named = pc.cast(pc.if_else(too_long, cut, col), col.type)
    return ev.set_column(ev.schema.get_field_index("name"), "name", named), n


def parse(path: Path, *, progress: Progress = no_progress, rank: int | None = None,
          device_elsewhere: bool = False) -> Trace:
    """``device_elsewhere``: the device events of this run come from other files (a Neuron capture's
    framework trace), so a trace without device events is not reported as a host-only one."""
    decoded = _kineto_chunks.decode_file(path, progress=progress, device_categories=list(DEVICE_CATEGORIES))
    # A neurontrace capture's run.json (versions, fallback ops, step windows) joins the metadata.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TraceWarning)
        run = read_run_record(path)
    decoded.notes += [str(w.message) for w in caught if issubclass(w.category, TraceWarning)]
    if run is not None:
        decoded.top["neurontrace_run"] = run
    return normalize(decoded, source=str(path), rank=rank, progress=progress, device_elsewhere=device_elsewhere)


def iter_chunks(path: str | Path, *, chunk_bytes: int = CHUNK_BYTES,
                progress: Progress = no_progress) -> Iterator[EventChunk | TraceEnd]:
    """The trace's events a chunk of about ``chunk_bytes`` of content at a time, in file order, then one
    :class:`TraceEnd` (top-level keys, accounting): memory about 3x ``chunk_bytes`` whatever the size.
    The contract (changes while read, cut-off files, declined input) is ``_kineto_chunks.iter_chunks``'s;
    docs/scale.md, "One trace, a chunk at a time"."""
    return _kineto_chunks.iter_chunks(path, chunk_bytes=chunk_bytes, progress=progress,
                                      device_categories=list(DEVICE_CATEGORIES))


def parse_bytes(data: bytes, *, source: str = "<memory>", rank: int | None = None) -> Trace:
    """Parse a trace held in memory (tests, notebooks)."""
    decoded = _kineto_json.decode(data, complete=True, device_categories=list(DEVICE_CATEGORIES))
    return normalize(decoded, source=source, rank=rank)


# -- normalization ------------------------------------------------------------------------------


def normalize(
    decoded: _kineto_json.Decoded, *, source: str, rank: int | None = None, progress: Progress = no_progress,
    device_elsewhere: bool = False, known_backend: str | None = None,
) -> Trace:
    """``known_backend``: the backend of the whole trace when ``decoded`` holds only some of its events
    (one time part of a trace streamed into a dataset: neurontrace.dataset_stream)."""
    parts, decoded.events = decoded.events, None  # each part is released as soon as it is split
    if parts is None:
        raise ValueError("this decoded trace was already normalized")
    top = decoded.top
    n_events = sum(p.num_rows for p in parts)
    acct = ParseAccounting(source=source, format=FORMAT, events_read=n_events + decoded.partial_events)
    acct.skip("cut in half by truncation", decoded.partial_events)
    acct.warnings += decoded.notes
    rank, rank_source = _rank(top, source, rank, acct)
    host = _host(top, source)
    backend = known_backend if known_backend is not None else _backend(top, parts)
    base = _base_time(top, acct)
    split: dict[str, list[pa.Table]] = {k: [] for k in _SPLIT_COLUMNS}
    no_ts = bad_utf8 = long_names = 0
    while parts:
        ev = parts.pop(0)
        if base:  # generation (d): ts is relative to this epoch-ns origin
            ev = ev.set_column(ev.schema.get_field_index("ts_ns"), "ts_ns", _shifted(ev["ts_ns"], base))
        # args is kept as raw text: bytes that are not UTF-8 are replaced here, before any table holds them
        args, bad = valid_utf8(ev["args"])
        if bad:
            ev, bad_utf8 = ev.set_column(ev.schema.get_field_index("args"), "args", args), bad_utf8 + bad
        ev, cut = _bounded_names(ev)
        long_names += cut
        masks = _split_masks(ev)
        no_ts += _count(masks.pop("no_ts"))
        for part, mask in masks.items():
            split[part].append(_rows(ev.select(_SPLIT_COLUMNS[part]), mask))
        del ev
    # Memory peaks here: every full-width copy costs as much as the raw JSON's args, so parts the
    # decoder already routed are kept whole (see _rows) and each part is let go once split.
    meta, flow_markers, counter_events, memory_events, system, device = (
        _in_file_order(split.pop(k)) for k in _SPLIT_COLUMNS)
    acct.skip("no timestamp", no_ts)
    if bad_utf8:
        acct.warnings.append(f"{bad_utf8} events have bytes that are not UTF-8 in their args; they were "
                             "replaced with U+FFFD")
    if long_names:
        acct.warnings.append(f"{long_names} event names longer than {MAX_NAME_CHARS:,} characters were cut to that "
                             "length (marked with a trailing …)")
    kept_events = n_events - no_ts
    system, device = _encoded(system), _encoded(device)

    names = _names(meta)
    acct.keep("metadata", meta.num_rows)
    progress("normalize", 1, 4)

    frames, system, device = link_frames(system, device, acct)
    progress("normalize", 2, 4)
    sys_table = _system_table(system, names, host, rank, backend)
    del system
    dev_table = _device_table(device, names, host, rank, backend)
    del device
    acct.keep("system_events", sys_table.num_rows)
    acct.keep("device_events", dev_table.num_rows)
    acct.warnings += host_only.log_warnings(top, source)  # the profiler's own ERROR/WARNING lists
    activity = None  # an accelerator trace without device events: a fact; analysis/device_activity.py decides
    if backend != "cpu" and dev_table.num_rows == 0 and sys_table.num_rows and not device_elsewhere:
        sys_table, activity = host_only.unrecorded_device(sys_table, backend)

    mem_device = _memory_device_column(memory_events, backend)
    counters = pa.concat_tables([conform(_typed(t, COUNTERS), COUNTERS) for t in (
        memory_counters(memory_events, mem_device, host, rank), _counter_events(counter_events, host, rank))],
        memory_pool=POOL)
    # The memory instants are kept as counters (the accounting's table) and, one row each, as memory_events.
    mem_table = _memory_events(memory_events, sys_table, mem_device, rank, acct)
    acct.keep("counters", memory_events.num_rows + counter_events.num_rows)
    flows = _flows(flow_markers, sys_table, dev_table, rank)
    acct.keep("flows", flow_markers.num_rows)
    progress("normalize", 3, 4)

    for msg in acct.warnings:
        warnings.warn(msg, TraceWarning, stacklevel=3)
    if decoded.truncated_at is not None:
        msg = (f"{source}: the trace was cut off at byte {decoded.truncated_at}; kept the "
               f"{kept_events} complete events before the cut (metadata written after the events is lost)")
        if decoded.damage:
            msg += f". Why: {decoded.damage}"
        acct.warnings.append(msg)
        warnings.warn(msg, TruncatedTraceWarning, stacklevel=3)
    facts: dict[str, Any] = {
        "format": FORMAT,
        "clock": "unix_epoch_ns" if _absolute_clock(base, sys_table, dev_table) else "trace_relative_ns",
        "backend": backend,
        "rank_source": rank_source,
        "decoder": decoded.decoder,
        "kineto.names": names,
        ACCOUNTING_KEY: acct.as_dict(),
    }
    run = top.pop("neurontrace_run", None)
    if run is not None:
        facts["run"] = run
    if activity is not None:
        facts[schema.DEVICE_ACTIVITY.key] = activity
    facts.update({f"kineto.{k}": v for k, v in top.items()})
    progress("normalize", 4, 4)
    return with_normalized(Trace(
        system_events=_typed(sys_table, schema.SYSTEM_EVENTS),
        device_events=_typed(dev_table, schema.DEVICE_EVENTS),
        flows=_typed(flows, schema.FLOWS),
        counters=counters,
        memory_events=_typed(mem_table, schema.MEMORY_EVENTS),
        frames=frames,
        metadata=metadata_table(facts, source=source, rank=rank),
    ))


def _typed(t: pa.Table | None, spec: schema.TableSpec) -> pa.Table | None:
    """``t`` with each column of another type than the schema's cast to it here, on the parse's pool
    (``Trace`` conforms its tables on Arrow's default pool; the casts left for it are then none)."""
    if t is None:
        return None
    types = {c.name: c.type for c in spec.columns}
    for i, name in enumerate(t.column_names):
        want = types.get(name)
        col = t.column(i)
        if want is None or col.type == want:
            continue
        if pa.types.is_dictionary(want) and col.type == want.value_type:
            col = pc.dictionary_encode(col)  # Arrow's cast to a dictionary ignores the pool it is given
        t = t.set_column(i, name, col if col.type == want else pc.cast(col, want))
    return t


_EVENT_COLUMNS = [c for c in _kineto_json.COLUMNS if not c.startswith("mem_") and c not in ("label", "labels")]
# The columns each destination of an input event needs (see the module docstring for the rules).
_SPLIT_COLUMNS = {
    "meta": ["index", "name", "pid", "tid", "label", "labels"],
    "flow": ["index", "ph", "cat", "flow_id", "pid", "tid", "ts_ns"],
    "counter": ["index", "ts_ns", "name", "pid", "tid", "args"],
    "memory": ["index", "ts_ns", "name", "pid", "tid", "args", *MEMORY_FIELDS, "mem_device_type", "mem_device_id"],
    "system": _EVENT_COLUMNS,
    "device": _EVENT_COLUMNS,
}


def _split_masks(ev: pa.Table) -> dict[str, pa.ChunkedArray]:
    """Where each decoded event goes: one mask per destination, plus events skipped for no time."""
    ph = ev["ph"]
    is_meta = pc.equal(ph, "M")
    no_ts = pc.and_(pc.is_null(ev["ts_ns"]), pc.invert(is_meta))
    has_ts = pc.invert(no_ts)
    is_flow = pc.and_(has_ts, pc.is_in(ph, pa.array(["s", "f", "t"])))
    is_counter = pc.and_(has_ts, pc.equal(ph, "C"))
    is_instant = pc.is_in(ph, pa.array(["i", "I"]))
    is_memory = pc.and_(has_ts, pc.and_(is_instant, pc.is_in(ev["name"], pa.array(sorted(MEMORY_EVENTS)))))
    is_device = pc.and_(pc.equal(ph, "X"), pc.is_in(ev["cat"], pa.array(sorted(DEVICE_CATEGORIES))))
    is_device = pc.and_(has_ts, pc.fill_null(is_device, False))
    is_system = pc.and_(has_ts, pc.invert(pc.or_(pc.or_(is_meta, is_flow),
                                                  pc.or_(pc.or_(is_counter, is_memory), is_device))))
    return {"meta": is_meta, "flow": is_flow, "counter": is_counter, "memory": is_memory,
            "system": is_system, "device": is_device, "no_ts": no_ts}


# Strings that repeat across events. They are dictionary-encoded once, right after the split, and
# every later step (frames, tracks, flow binding, the schema's dictionary columns) reuses the codes.
_REPEATED = ("name", "cat", "ph", "pid", "tid")


def _encoded(t: pa.Table) -> pa.Table:
    for name in _REPEATED:
        t = t.set_column(t.schema.get_field_index(name), name, flat(pc.dictionary_encode(t[name])))
    return t


def _in_file_order(pieces: list[pa.Table]) -> pa.Table:
    """One destination's rows from every part, in file order. The decoder's routing puts nearly all
    of them in one part; rows found in several (an event it left to "the rest") are sorted back."""
    full = [p for p in pieces if p.num_rows]
    if len(full) <= 1:
        return full[0] if full else pieces[0]
    return pa.concat_tables(full, memory_pool=POOL).sort_by("index")


def _rows(t: pa.Table, mask: pa.ChunkedArray) -> pa.Table:
    """The rows where mask holds; the table itself (no copy) when that is all of them."""
    n = _count(mask)
    if n == t.num_rows:
        return t
    return t.slice(0, 0) if n == 0 else pc.filter(t, mask)


def _count(mask: pa.Array | pa.ChunkedArray) -> int:
    """True cells of a boolean mask (nulls are not): Arrow sums booleans as counts, no int64 copy."""
    return int(pc.sum(mask).as_py() or 0)


_INT32 = range(-(2**31), 2**31)  # the schema's rank column is int32


def _rank(top: dict[str, Any], source: str, given: int | None, acct: ParseAccounting) -> tuple[int | None, str]:
    if given is not None:
        return given, "caller"
    info = top.get("distributedInfo")
    found: list[tuple[Any, str]] = []
    if isinstance(info, dict) and "rank" in info:
        found.append((info["rank"], "distributedInfo"))
    elif info is not None and not isinstance(info, dict):  # kept as its text when it does not decode
        acct.warnings.append(f"{source}: distributedInfo is {str(info)[:60]!r}, not an object; its rank is ignored")
    m = _RANK_IN_NAME.search(Path(source).name)
    if m:
        found.append((int(m.group(1)), "file name"))
    for value, where in found:
        if isinstance(value, int) and not isinstance(value, bool) and value in _INT32:
            return value, where
        acct.warnings.append(f"{source}: rank {str(value)[:40]} from the {where} is not a 32-bit integer; "
                             "ignored")
    return None, "unknown"


def _base_time(top: dict[str, Any], acct: ParseAccounting) -> int | None:
    """``baseTimeNanoseconds`` (None when absent or unusable): the epoch origin of relative timestamps."""
    base = top.get("baseTimeNanoseconds")
    if base is None:
        return None
    if isinstance(base, int) and not isinstance(base, bool) and 0 <= base <= _INT64_MAX:
        return base
    acct.warnings.append(f"baseTimeNanoseconds is {str(base)[:40]}, not a count of nanoseconds since the epoch "
                         "(a non-negative int64); timestamps kept relative to the trace")
    return None


def _shifted(ts: pa.ChunkedArray, base: int) -> pa.ChunkedArray:
    try:
        return pc.add_checked(ts, base)
    except pa.ArrowInvalid as exc:
        raise MalformedTraceError(f"baseTimeNanoseconds {base} plus an event's ts overflows int64 nanoseconds "
                                  f"(beyond the year 2262): the timestamps are damaged ({exc})") from exc


def _host(top: dict[str, Any], source: str) -> str | None:
    for key in ("host_name", "hostname", "host"):
        if isinstance(top.get(key), str):
            return str(top[key])
    m = _TB_WORKER.match(Path(source).name)
    return m.group("host") if m else None


def _backend(top: dict[str, Any], parts: list[pa.Table]) -> str:
    cats = {c for ev in parts for c in pc.unique(ev["cat"]).to_pylist()}
    props = top.get("deviceProperties")
    props = props if isinstance(props, list) else []
    names = " ".join(str(p.get("name", "")) for p in props if isinstance(p, dict))
    if cats & {"privateuse1_runtime", "privateuse1_driver"}:
        return "neuron" if "neuron" in json.dumps(top).lower() else "privateuse1"
    if cats & {"mtia_runtime", "mtia_ccp_events"}:
        return "mtia"
    if cats & {"xpu_runtime", "xpu_driver"}:
        return "xpu"
    if "roctracer_version" in top or "hip_runtime_version" in top or re.search(r"AMD|Radeon|Instinct", names):
        return "rocm"
    if not props and not cats & (set(DEVICE_CATEGORIES) | {"cuda_runtime", "cuda_driver", "Runtime"}):
        return "cpu"  # no accelerator listed and no accelerator activity: a CPU-only profile
    return "cuda"


def _absolute_clock(base: int | None, *tables: pa.Table) -> bool:
    if base is not None:
        return True
    lows = [pc.min(t["ts_ns"]).as_py() for t in tables if t.num_rows]
    # Epoch-µs timestamps (older generations) are after 2001 in ns; relative ones are far smaller.
    return bool(lows) and min(lows) > 10**18


def _names(meta: pa.Table) -> dict[str, Any]:
    """process/thread names and labels from M events (few per trace): {'pid': ..., 'pid/tid': ...}."""
    out: dict[str, Any] = {}
    for name, pid, tid, label, labels in zip(
        meta["name"].to_pylist(), meta["pid"].to_pylist(), meta["tid"].to_pylist(),
        meta["label"].to_pylist(), meta["labels"].to_pylist(), strict=True,
    ):
        if name == "process_name" and label is not None:
            out[f"{pid}"] = label
        elif name == "process_labels" and labels is not None:
            out[f"{pid}#labels"] = labels
        elif name == "thread_name" and label is not None:
            out[f"{pid}/{tid}"] = label.strip()
    return out


def _common(t: pa.Table, host: str | None, rank: int | None) -> dict[str, Any]:
    n = t.num_rows
    return {
        "event_id": t["index"],
        "ts_ns": t["ts_ns"],
        "dur_ns": pc.fill_null(pc.max_element_wise(t["dur_ns"], 0), 0),
        "name": pc.fill_null(t["name"], ""),
        "raw_category": t["cat"],
        "phase": t["ph"],
        "host": constant(host, n, pa.string()),
        "rank": constant(rank, n, pa.int32()),
        "pid": t["pid"],
        "tid": t["tid"],
        "correlation": t["correlation"],
        "external_id": pc.coalesce(t["external_id"], t["external_id_legacy"]),
        "frame_id": t["frame_id"],
        "args": t["args"],
    }


def _system_table(t: pa.Table, names: dict[str, Any], host: str | None, rank: int | None, backend: str) -> pa.Table:
    cols = _common(t, host, rank)
    cat = map_unique(t["cat"], lambda c: HOST_CATEGORIES.get(c, "other"), pa.string(), null_as_empty=True)
    is_step = map_unique(t["name"], lambda n: bool(_STEP.match(n)), pa.bool_(), null_as_empty=True)
    cat = pc.if_else(pc.and_(is_step, pc.is_in(cat, pa.array(["annotation", "framework_op"]))), "step", cat)
    # Instants other than memory events mark moments (Record Window End, Iteration Start).
    instant = pc.is_in(t["ph"], pa.array(["i", "I"]))
    cat = pc.if_else(pc.and_(instant, pc.equal(cat, "other")), "annotation", cat)
    cols["category"] = cat
    cols["track"] = _tracks(t, names, "thread")
    cols["device"] = pa.nulls(t.num_rows, pa.string(), memory_pool=POOL)
    return pa.table(cols)


def _device_table(t: pa.Table, names: dict[str, Any], host: str | None, rank: int | None, backend: str) -> pa.Table:
    cols = _common(t, host, rank)
    cat = map_unique(t["cat"], lambda c: DEVICE_CATEGORIES.get(c, "other"), pa.string())
    collective = map_unique(t["name"], lambda n: bool(_COLLECTIVE.search(n)), pa.bool_(), null_as_empty=True)
    cat = pc.if_else(pc.and_(collective, pc.is_in(cat, pa.array(["compute", "other"]))), "collective", cat)
    cols["category"] = cat
    index = pc.coalesce(t["device"], pc.cast(t["pid"], pa.string()))
    cols["device"] = map_unique(pc.fill_null(index, "?"), lambda d: f"{backend}:{d}", pa.string())
    cols["track"] = _tracks(t, names, "stream")
    is_copy = pc.is_in(cat, pa.array(["memcpy", "memset"]))
    cols["bytes"] = pc.if_else(is_copy, t["nbytes"], pa.scalar(None, pa.int64()))
    direction = map_unique(t["name"], _direction, pa.string(), null_as_empty=True)
    rocm_kind = map_unique(pc.fill_null(t["kind"], ""), _direction, pa.string())
    cols["direction"] = pc.if_else(pc.equal(cat, "memcpy"), pc.coalesce(direction, rocm_kind), None)
    return pa.table(cols)


def _direction(name: str) -> str | None:
    m = _MEMCPY_DIRECTION.search(name)
    return _DIRECTIONS[m.group(1)] if m else None


def _tracks(t: pa.Table, names: dict[str, Any], default: str) -> pa.Array:
    code, pairs = pair_codes(t["pid"], t["tid"])

    def label(pid: str, tid: str) -> str:
        if f"{pid}/{tid}" in names:
            return str(names[f"{pid}/{tid}"])
        return tid if tid.startswith(("stream", "thread")) else f"{default} {tid}"

    # A dictionary array straight away (the schema's type): the labels are not copied to every row and
    # hashed back. Its dictionary lists them in order of first appearance, as dictionary_encode would.
    if not len(code):
        return pa.array([], pa.string(), memory_pool=POOL)
    labels = [label(p, t) for p, t in pairs]
    distinct = {v: i for i, v in enumerate(dict.fromkeys(labels))}
    row_label = np.asarray([distinct[v] for v in labels], dtype=np.int64)[code]
    order, renumbered = first_seen(row_label, len(distinct))
    values = np.asarray(list(distinct), dtype=object)[order]
    indices = pa.array(renumbered, pa.int32(), memory_pool=POOL)
    return pa.DictionaryArray.from_arrays(indices, pa.array(values, pa.string()))


def _memory_device_column(t: pa.Table, backend: str) -> pa.Array:
    dtype = pc.fill_null(t["mem_device_type"], -1)
    did = pc.fill_null(t["mem_device_id"], -1)
    key = pc.binary_join_element_wise(pc.cast(dtype, pa.string()), pc.cast(did, pa.string()), ":")
    return map_unique(key, lambda k: _memory_device(k, backend), pa.string())


def _memory_device(key: str, backend: str) -> str:
    kind, _, idx = key.partition(":")
    if kind == "0":
        return "cpu"
    if kind == "1":  # c10 DeviceType CUDA, which ROCm builds report too
        return f"{backend if backend == 'rocm' else 'cuda'}:{idx}"
    if kind == "6":  # c10 DeviceType HIP (ROCm builds that report their own type)
        return f"rocm:{idx}"
    return f"device_type{kind}:{idx}"


def _counter_events(t: pa.Table, host: str | None, rank: int | None) -> pa.Table:
    """``C`` events: each numeric arg becomes one row (series = event name, field = arg key)."""
    rows: dict[str, list[Any]] = {k: [] for k in ("ts_ns", "name", "field", "value", "pid", "tid", "args")}
    for ts, name, pid, tid, args in zip(
        t["ts_ns"].to_pylist(), t["name"].to_pylist(), t["pid"].to_pylist(), t["tid"].to_pylist(),
        t["args"].to_pylist(), strict=True,
    ):
        values = json.loads(args) if args else {}
        numeric = {k: v for k, v in values.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        for i, (k, v) in enumerate(numeric.items() or [("value", float("nan"))]):
            for col, val in zip(rows, (ts, name or "", k, float(v), pid, tid, args if i == 0 else None),
                                strict=True):
                rows[col].append(val)
    n = len(rows["ts_ns"])
    return pa.table({
        "ts_ns": pa.array(rows["ts_ns"], pa.int64(), memory_pool=POOL),
        "name": pa.array(rows["name"], pa.string(), memory_pool=POOL),
        "field": pa.array(rows["field"], pa.string(), memory_pool=POOL),
        "value": pa.array(rows["value"], pa.float64(), memory_pool=POOL),
        "unit": pa.nulls(n, pa.string(), memory_pool=POOL),
        "host": constant(host, n, pa.string()),
        "rank": constant(rank, n, pa.int32()),
        "pid": pa.array(rows["pid"], pa.string(), memory_pool=POOL),
        "tid": pa.array(rows["tid"], pa.string(), memory_pool=POOL),
        "device": pa.nulls(n, pa.string(), memory_pool=POOL),
        "args": pa.array(rows["args"], pa.string(), memory_pool=POOL),
    })


def _flows(markers: pa.Table, system: pa.Table, device: pa.Table, rank: int | None) -> pa.Table | None:
    """Pair s/f markers (same category and id, n-th start with n-th finish) and bind their ends.

    An end binds to the event on the same pid/tid starting at the marker's time, written before the
    marker (Kineto writes a flow right after its event); launch flows whose end is not found that
    way fall back to the correlation id (kineto.md §1.9: prefer correlation).
    """
    if markers.num_rows == 0:
        return None
    cat = pc.fill_null(markers["cat"], "")
    flow_id = pc.fill_null(markers["flow_id"], "")
    is_src = pc.equal(markers["ph"], "s").to_numpy(zero_copy_only=False)
    index = markers["index"].to_numpy()
    events = pa.concat_tables([system.select(["event_id", "pid", "tid", "ts_ns"]),
                               device.select(["event_id", "pid", "tid", "ts_ns"])], memory_pool=POOL)
    bound = _bind(markers, index, events)
    launch = pc.is_in(cat, pa.array(sorted(LAUNCH_FLOWS))).to_numpy(zero_copy_only=False) & (bound < 0)
    if launch.any():
        corr = pc.cast(pc.if_else(pc.match_substring_regex(flow_id, r"^-?\d{1,18}$"), flow_id, None), pa.int64())
        corr_np = pc.fill_null(corr, -1).to_numpy()
        bound = np.where(launch & is_src, _first_with(system, corr_np), bound)
        bound = np.where(launch & ~is_src, _first_with(device, corr_np), bound)
    pair = pair_index(cat, flow_id)  # a number per (category, id): no joined string per marker
    # One flow per (pair, n): the n-th start and the n-th end of a pair. Markers are in file order,
    # so a flow's first marker row orders the flows as the file does.
    key = pair * (len(index) + 1) + _ordinal(pair * 2 + is_src)
    flows = np.unique(key)
    src, dst = _row_of(key, is_src, flows), _row_of(key, ~is_src, flows)
    first = np.where((src >= 0) & ((dst < 0) | (src < dst)), src, dst)
    order = np.argsort(first, kind="stable")
    src, dst, first = src[order], dst[order], first[order]
    at = pc.take(markers, pa.array(first, memory_pool=POOL))
    ts = markers["ts_ns"].to_numpy()
    return pa.table({
        "flow_id": at["flow_id"],
        "kind": map_unique(pc.fill_null(at["cat"], ""), _flow_kind, pa.string()),
        "raw_category": at["cat"],
        "src_event_id": _at(bound, src, bound[np.maximum(src, 0)] >= 0),
        "dst_event_id": _at(bound, dst, bound[np.maximum(dst, 0)] >= 0),
        "src_ts_ns": _at(ts, src),
        "dst_ts_ns": _at(ts, dst),
        "rank": constant(rank, len(first), pa.int32()),
    })


def _row_of(key: np.ndarray, mask: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Row (among ``mask``) holding each wanted key, -1 where none does; keys are unique per side."""
    rows = np.flatnonzero(mask)
    order = np.argsort(key[rows])
    have = key[rows][order]
    pos = np.minimum(np.searchsorted(have, wanted), max(len(have) - 1, 0))
    found = (have[pos] == wanted) if len(have) else np.zeros(len(wanted), dtype=bool)
    return np.where(found, rows[order][pos] if len(have) else -1, -1)


def _at(values: np.ndarray, rows: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """values[rows], null where a row is -1 (or not valid)."""
    ok = rows >= 0 if valid is None else (rows >= 0) & valid
    return pa.array(values[np.maximum(rows, 0)], mask=~ok, memory_pool=POOL)


def _flow_kind(cat: str) -> str:
    return "launch" if cat in LAUNCH_FLOWS else ("fwdbwd" if cat == "fwdbwd" else "other")


def _ordinal(group: np.ndarray) -> np.ndarray:
    """Position of each row among the earlier rows of its group (rows are in file order)."""
    order = np.argsort(group, kind="stable")
    g = group[order]
    starts = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1]
    first = np.repeat(starts, np.diff(np.r_[starts, len(g)]))
    out = np.empty(len(group), dtype=np.int64)
    out[order] = np.arange(len(group)) - first
    return out


def _bind(markers: pa.Table, index: np.ndarray, events: pa.Table) -> np.ndarray:
    """Event id at the marker's pid/tid and time, the last one written before the marker; -1 if none."""
    n_ev = events.num_rows
    if n_ev == 0:
        return np.full(len(index), -1, dtype=np.int64)
    place, places = pair_codes(*(pa.concat_arrays([encoded(events[c]), encoded(markers[c])], memory_pool=POOL)
                                 for c in ("pid", "tid")))
    # One sortable int64 per (place, time): time offsets when they fit beside the place, else ranks.
    ts = np.r_[events["ts_ns"].to_numpy(), markers["ts_ns"].to_numpy()]
    span = int(ts.max()) - int(ts.min()) + 1
    if span * len(places) < 2**62:
        key = place * span + (ts - ts.min())
    else:
        key = place * (len(ts) + 1) + np.unique(ts, return_inverse=True)[1].reshape(-1)
    ev_key, mk_key = key[:n_ev], key[n_ev:]
    ev_id = events["event_id"].to_numpy()
    order = np.lexsort((ev_id, ev_key))
    ev_key, ev_id = ev_key[order], ev_id[order]
    lo = np.searchsorted(ev_key, mk_key, side="left")
    cand = np.searchsorted(ev_key, mk_key, side="right") - 1
    for _ in range(n_ev + 1):
        later = (cand >= lo) & (ev_id[np.maximum(cand, 0)] > index)
        if not later.any():
            break
        cand[later] -= 1
    return np.where(cand >= lo, ev_id[np.maximum(cand, 0)], -1)


def _first_with(events: pa.Table, corr: np.ndarray) -> np.ndarray:
    """Smallest event id carrying each correlation id; -1 where none does."""
    t = pc.filter(events.select(["event_id", "correlation"]), pc.is_valid(events["correlation"]))
    if t.num_rows == 0:
        return np.full(len(corr), -1)
    keys, ids = min_by_key(t["correlation"].to_numpy(), t["event_id"].to_numpy())
    pos, hit = lookup(keys, corr)
    return np.where(hit & (corr >= 0), ids[pos], -1)
