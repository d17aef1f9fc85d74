"""Neuron Explorer Parquet output (``neuron-explorer view --output-format parquet``) → `Trace`.

Spec: shared/formats/neuron.md §3. A directory of ``<Table>.parquet`` files (big tables split into
``<Table>_<n>.parquet``), or an Explorer data path holding ``profiles/global/<name>@latest/`` ones
(each loaded, then combined); every table is optional, columns are looked up by name, so schema 7.x and
12.x both load by column presence. Where each table goes:

- device timelines (Instruction, DMA, collectives, semaphores, barriers, throttling, errors,
  executions) → ``device_events`` on device ``neuron:nc<N>`` (see ``_neuron_device``);
- ``SystemProfileEvents`` → ``system_events`` (runtime, framework) and ``device_events`` (hardware
  events such as ``nc_exec_running``), ``flow_id`` links → ``flows`` (see ``_neuron_system``);
- ``Flow`` → ``flows`` of kind ``dependency`` (see ``_neuron_flows``);
- usage tables (HBM, DMA, PSUM/SBUF, pending DMA, CPU, host memory) → ``counters``; HBM and host memory
  usage, and ``SbufAllocation``'s occupancy periods, → ``memory_events`` (see ``_neuron_memory``);
- ``StackFrame*``, ``Kernel*``, ``nki_source_location``, ``bir_debug_info_source_location``,
  ``hlo_name``, ``layer`` → ``frames``, with ``frame_id`` on each instruction (see ``_neuron_frames``);
- ``Metadata``, ``NeffHeader``, ``Summary`` (``*_percent`` as fractions 0..1), ``OpcodeSummary`` and
  the other lookup tables → ``metadata`` (keys ``neuron.<table>``);
- rows of ``Warning`` → load warnings (:class:`~neurontrace.errors.NeuronProfileWarning`).

Device times are put on the host's Unix-epoch clock when the profile says how (``_neuron_align``);
``metadata`` records the clock (``clock``) and the method (``alignment``). Columns without a place
of their own go to ``args``: all of them for tables up to 1M rows, a few identifying ones above
(``detail="full"`` copies all, ``detail="lean"`` never does); ``neuron.args_detail`` says which.
Nothing is dropped that way: a lean table's other columns stay in its Parquet files, and
:func:`source_columns` reads them back aligned with the table's events (one per row, in source
order), so a 10M-row Instruction table loads without a JSON copy of every column.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace import schema
from neurontrace.errors import NeuronProfileWarning, UnknownFormatError
from neurontrace.load import Probe
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import ACCOUNTING_KEY, ParseAccounting, Trace, checked, conform, metadata_table

from . import _neuron_schema
from ._neuron_align import align
from ._neuron_common import warn
from ._neuron_device import SPECS, first_present, load_device_tables
from ._neuron_events import DETAILS, FULL_ARGS_MAX_ROWS, Context, device_table, system_table
from ._neuron_flows import load_flows, referenced_tables
from ._neuron_frames import FrameBuilder
from ._neuron_memory import memory_events as neuron_memory_events
from ._neuron_memory import sbuf_events
from ._neuron_meta import LOOKUP_TABLES, READ_INTO, SKIPPED_TABLES, UNKNOWN_TABLE_ROWS_KEPT, read_profile
from ._neuron_read import KNOWN_TABLES, SourceTable, looks_like_explorer, open_tables
from ._neuron_system import (
    COUNTER_TABLES,
    host_exec_starts,
    load_counters,
    load_hw_events,
    load_system_events,
    system_flows,
)
from ._normalized_meta import with_normalized

FORMAT = "neuron-explorer"
_NC = re.compile(r"neuron:nc(\d+)$")
_PROFILE_TABLES = {"Metadata", "Summary", "Warning", "SystemProfileEvents", "Flow", *LOOKUP_TABLES}


def sniff(probe: Probe) -> bool:
    return probe.is_dir and (looks_like_explorer(probe.path) or bool(data_path_profiles(probe.path)))


def data_path_profiles(path: Path) -> list[Path]:
    """Profiles of an Explorer data path (``--data-path P`` → ``P/profiles/global/<name>@latest/``)."""
    root = path / "profiles" / "global"
    if not root.is_dir():
        return []
    return sorted(d for d in root.iterdir() if d.is_dir() and looks_like_explorer(d))


def parse(
    path: Path,
    *,
    progress: Progress = no_progress,
    detail: str = "auto",
    source: str | None = None,
    skip_framework_events: bool = False,
    host: str | None = None,
    rank: int | None = None,
) -> Trace:
    """Load one Explorer Parquet directory.

    ``detail`` chooses what ``args`` holds (module docstring); ``skip_framework_events`` leaves out
    framework events the caller loads from ``trace.json`` itself; ``host``/``rank`` label every row.
    """
    if detail not in DETAILS:
        raise ValueError(f"detail must be one of {', '.join(DETAILS)}, not {detail!r}")
    path = Path(path)
    if not looks_like_explorer(path) and data_path_profiles(path):
        return Trace.concat([parse(d, progress=progress, detail=detail, skip_framework_events=skip_framework_events,
                                   host=host, rank=rank) for d in data_path_profiles(path)])
    tables, others, problems = open_tables(path)
    src = source or str(path)
    if not tables:
        raise UnknownFormatError(f"{path}: no <Table>.parquet files; expected a neuron-explorer Parquet directory")
    acct = ParseAccounting(source=src, format=FORMAT)
    for problem in problems:
        warn(acct, problem, NeuronProfileWarning, stacklevel=3)
    prof = read_profile(tables, acct, src)
    ctx = Context(source=src, acct=acct, frames=FrameBuilder(tables), device=prof.device, detail=detail,
                  host=host or prof.host, rank=rank, multi_pcore=prof.multi_pcore)
    if "Flow" in tables:
        ctx.want_ids = referenced_tables(tables["Flow"])
    steps = 5
    progress("neuron tables", 0, steps)
    hw = load_system_events(ctx, tables["SystemProfileEvents"], skip_framework=skip_framework_events) \
        if "SystemProfileEvents" in tables else None
    alignment = align(
        device_exec_starts=[int(r["execution_start_ts"]) for r in prof.facts.get("neuron.execution_info", [])
                            if r.get("execution_start_ts") is not None],
        host_exec_starts=host_exec_starts(hw, _nc_index(prof.device)),
        metadata=prof.metadata,
        device_min_ts=tables["Instruction"].column_min("start_ts") if "Instruction" in tables else None,
    )
    ctx.offset_ns = alignment.offset_ns
    load_hw_events(ctx, hw)
    progress("neuron tables", 1, steps)
    load_device_tables(ctx, tables)
    progress("neuron tables", 2, steps)
    device = device_table(ctx)
    if "Flow" in tables:
        load_flows(ctx, tables["Flow"], device)
    system_flows(ctx)
    progress("neuron tables", 3, steps)
    scales = load_counters(ctx, tables)
    sbuf = sbuf_events(ctx, tables["SbufAllocation"]) if "SbufAllocation" in tables else None
    _account_rest(ctx, tables, prof.facts)
    _report_repairs(acct, tables, src)
    prof.facts.update(_neuron_schema.check(prof.schema_version, prof.major, tables, acct, src))
    progress("neuron tables", 4, steps)
    facts: dict[str, Any] = {
        "format": FORMAT,
        "backend": "neuron",
        "clock": alignment.clock,
        "alignment": alignment.fact(),
        "device": prof.device,
        "device_source": prof.device_source,
        "synthetic": prof.synthetic,
        "neuron.profile_schema_version": prof.schema_version,
        "neuron.schema_major": prof.major,
        "neuron.args_detail": {
            "tables": ctx.args_detail,
            "rule": f"full = every unmapped column in args; lean (auto above {FULL_ARGS_MAX_ROWS} rows) = a few "
                    "identifying columns in args (none for Instruction), the other columns stay in the source "
                    "Parquet files and neurontrace.parsers.neuron_explorer.source_columns(trace, table) reads "
                    "them back aligned with the events; a table's rows keep their source order (derived rows "
                    "follow them)",
        },
        "neuron.columns_read": ctx.columns_read,
        **prof.facts,
    }
    if ctx.derived:
        facts["neuron.derived_rows"] = ctx.derived
    facts.update(ctx.checks)
    if scales:
        facts["neuron.percent_scales"] = scales
    if others:
        facts["neuron.non_table_files"] = others
    facts[ACCOUNTING_KEY] = acct.as_dict()
    progress("neuron tables", steps, steps)
    counters = _concat(ctx.counters, schema.COUNTERS)
    return with_normalized(checked(Trace(
        system_events=system_table(ctx),
        device_events=device,
        flows=_concat(ctx.flows, schema.FLOWS),
        counters=counters,
        memory_events=_memory(neuron_memory_events(counters), sbuf),
        frames=ctx.frames.table(),
        metadata=metadata_table(facts, source=src, rank=rank),
    ), src))


def _memory(usage: pa.Table | None, sbuf: pa.Table | None) -> pa.Table | None:
    parts = [conform(p, schema.MEMORY_EVENTS) for p in (usage, sbuf) if p is not None]
    return pa.concat_tables(parts) if parts else None


def _report_repairs(acct: ParseAccounting, tables: dict[str, SourceTable], source: str) -> None:
    """One warning per table the read boundary had to repair (_neuron_conform), with its counts."""
    for name, table in sorted(tables.items()):
        if table.repairs:
            what = "; ".join(f"{k} ({n:,} value(s) read)" for k, n in sorted(table.repairs.items()))
            warn(acct, f"{source}: table {name} holds values of another type or beyond their range: {what}",
                 NeuronProfileWarning, stacklevel=3)


def _nc_index(device: str) -> int | None:
    m = _NC.match(device)
    return int(m.group(1)) if m else None


def _concat(parts: list[pa.Table], spec: schema.TableSpec) -> pa.Table:
    if not parts:
        return spec.empty()
    return pa.concat_tables([conform(p, spec) for p in parts])


def _account_rest(ctx: Context, tables: dict[str, SourceTable], facts: dict[str, Any]) -> None:
    """Tables not mapped above: description and lookup tables read into the model are counted kept where
    they went (READ_INTO); tables left out on purpose are counted skipped with their reason; unknown small
    tables are kept in metadata (``neuron.table.<Name>``), big ones skipped."""
    handled = {s.table for s in SPECS} | set(COUNTER_TABLES) | _PROFILE_TABLES | {"SbufAllocation"}
    unknown = []
    for name, table in tables.items():
        if name in handled:
            continue
        n = table.num_rows
        ctx.acct.events_read += n
        if name in READ_INTO:
            ctx.acct.keep(READ_INTO[name], n)
        elif name in SKIPPED_TABLES:
            ctx.acct.skip(f"{name}: {SKIPPED_TABLES[name]}", n)
        elif name in KNOWN_TABLES:
            ctx.acct.skip(f"{name}: not mapped", n)
        elif n <= UNKNOWN_TABLE_ROWS_KEPT:
            facts[f"neuron.table.{name}"] = table.read().to_pylist()
            ctx.acct.keep("metadata", n)
            unknown.append(name)
        else:
            ctx.acct.skip(f"{name}: a table this neurontrace does not know, too big for metadata", n)
            unknown.append(name)
    if unknown:
        facts["neuron.unknown_tables"] = unknown


def source_columns(trace: Trace, table: str = "Instruction", columns: Sequence[str] | None = None, *,
                   source: str | None = None) -> pa.Table:
    """A device table's source columns read back from its Parquet files, aligned with its events.

    One row per row of the source table, in source order: ``event_id`` (null for a row that was
    skipped for having no start time), then ``columns`` (default: all of them). This is how the
    columns a lean load leaves out of ``args`` are reached; it works as long as the Explorer
    directory the trace was loaded from (its ``source`` in ``metadata``) is still there.
    ``source`` picks the directory when the trace holds several Neuron profiles.
    """
    sources = [s for s, f in zip(trace.metadata["source"].to_pylist(), trace.metadata["key"].to_pylist(), strict=True)
               if f == "format" and s is not None and trace_format(trace, s) == FORMAT]
    if source is None:
        if len(set(sources)) != 1:
            raise ValueError(f"source_columns: the trace holds {len(set(sources))} Neuron Explorer profiles; "
                             f"pass source= one of {sorted(set(sources))}")
        source = sources[0]
    elif source not in sources:
        raise ValueError(f"source_columns: {source!r} is not a Neuron Explorer profile of this trace")
    spec = {s.table: s for s in SPECS}.get(table)
    if spec is None:
        raise ValueError(f"source_columns: {table!r} is not a device table ({', '.join(s.table for s in SPECS)})")
    tables, _, _ = open_tables(Path(source))
    if table not in tables:
        raise FileNotFoundError(f"{source}: no {table}.parquet any more; was the profile moved or deleted?")
    src = tables[table]
    start = first_present(src, spec.start)
    wanted = list(src.columns if columns is None else columns)
    missing = [c for c in wanted if not src.has(c)]
    if missing or start is None:
        raise ValueError(f"{source}/{table}: no column(s) {missing or list(spec.start)}; it has {src.columns}")
    data = src.read(list(dict.fromkeys([start, *wanted])))
    valid = pc.is_valid(data[start]).to_numpy(zero_copy_only=False)
    device = trace_fact(trace, source, "device")
    ev = trace.device_events
    mine = pc.and_(pc.equal(ev["raw_category"], table), pc.equal(ev["device"], device))
    ids = np.sort(ev.filter(mine)["event_id"].to_numpy())
    if len(ids) != int(valid.sum()):
        raise ValueError(f"{source}/{table}: {int(valid.sum())} rows with a start time in the files, but the trace "
                         f"has {len(ids)} events of it; the files changed after loading")
    event_id = np.full(len(valid), -1, dtype=np.int64)
    event_id[valid] = ids
    return pa.table({"event_id": pa.array(event_id, mask=~valid), **{c: data[c] for c in wanted}})


def trace_fact(trace: Trace, source: str, key: str) -> Any:
    """A metadata fact recorded for one input of the trace (JSON-decoded), or None."""
    m = trace.metadata
    rows = m.filter(pc.and_(pc.equal(m["key"], key), pc.equal(m["source"], source)))
    return json.loads(rows["value"][0].as_py()) if rows.num_rows else None


def trace_format(trace: Trace, source: str) -> Any:
    return trace_fact(trace, source, "format")
