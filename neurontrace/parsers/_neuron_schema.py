"""Which Explorer schema a profile is, and what of it this parser maps (neuron.md §3.2, §13.1).

``Metadata.profile_schema_version`` names the schema; ``SchemaFields`` describes every field of every
table the file's writer knew. Going from 7.4.0 (SDK 2.31, documented column by column) to 12.0.1
(SDK 2.33, only its headline is public) took at least five breaking (MAJOR) revisions, and which
columns changed is not known: tables are therefore read by column **presence** through the
alternatives each table spec lists (e.g. ``duration_ns`` or ``end_ts - start_ts``), never by a fixed
7.4.0 column list. For a major version outside :data:`KNOWN_MAJORS`, the load goes on with what maps
and a :class:`~neurontrace.errors.SchemaVersionWarning` names, per table, the columns this parser
has no place for (they are kept in ``args`` or, for lean tables, left in the source files).
"""

from __future__ import annotations

from typing import Any

from neurontrace.errors import SchemaVersionWarning
from neurontrace.trace import ParseAccounting

from ._neuron_common import warn
from ._neuron_device import SPECS
from ._neuron_frames import LINK_COLUMNS
from ._neuron_read import SourceTable
from ._neuron_system import _ID_COLUMNS, _LEAN, _MAPPED, COUNTER_TABLES

KNOWN_MAJORS = (7, 12)
_FLOW = {"in_id", "out_id", "in_table", "out_table", "dependency_type", "gap_time"}
_DEVICE_EXTRA = {"pcore_idx", "evt_wait_time_ns", "transfer_bytes", "source", "dest", "input_size", "output_size"}


def mapped_columns(table: str) -> set[str] | None:
    """Columns of ``table`` the parser reads into a place of its own (None: a table it does not map by column)."""
    for spec in SPECS:
        if spec.table == table:
            cols = {*spec.start, *spec.end, *spec.duration, *spec.name, *spec.lean, *_DEVICE_EXTRA}
            cols |= {c for c in (spec.track_column, spec.source_id) if c}
            return cols | (set(LINK_COLUMNS) if table == "Instruction" else set())
    if table == "SystemProfileEvents":
        return {*_MAPPED, *_LEAN, "pcore_idx"}
    if table == "Flow":
        return set(_FLOW)
    if table in COUNTER_TABLES:
        values = COUNTER_TABLES[table]["values"]
        return {*_ID_COLUMNS, *(values if isinstance(values, dict) else ())}
    return None


def unmapped(tables: dict[str, SourceTable]) -> dict[str, list[str]]:
    """Per mapped table, the columns present in the file that no table spec names."""
    out = {}
    for name, table in sorted(tables.items()):
        known = mapped_columns(name)
        if known is None:
            continue
        values = COUNTER_TABLES.get(name, {}).get("values")
        suffix = "_percent" if values == "percent" else "_bytes" if values == "bytes" else None
        extra = [c for c in table.columns if c not in known and not (suffix and c.endswith(suffix))]
        if extra:
            out[name] = extra
    return out


def schema_fields(tables: dict[str, SourceTable]) -> dict[str, Any] | None:
    """What ``SchemaFields`` describes, and where the file's tables differ from it."""
    if "SchemaFields" not in tables:
        return None
    rows = tables["SchemaFields"].read(tables["SchemaFields"].present(["table_name", "field_name"])).to_pylist()
    described: dict[str, set[str]] = {}
    for r in rows:
        if r.get("table_name") and r.get("field_name"):
            described.setdefault(str(r["table_name"]), set()).add(str(r["field_name"]))
    undescribed = {name: sorted(set(t.columns) - described[name]) for name, t in tables.items()
                   if name in described and set(t.columns) - described[name]}
    fact: dict[str, Any] = {"tables": len(described), "fields": sum(map(len, described.values()))}
    if undescribed:
        fact["columns_not_described"] = undescribed
    return fact


def check(version: str | None, major: int | None, tables: dict[str, SourceTable], acct: ParseAccounting,
          source: str) -> dict[str, Any]:
    """Schema facts for metadata; the warning for a major version this parser was not written against."""
    facts: dict[str, Any] = {}
    fields = schema_fields(tables)
    if fields is not None:
        facts["neuron.schema_fields"] = fields
    cols = unmapped(tables)
    facts["neuron.unmapped_columns"] = cols
    if version is not None and major is not None and major not in KNOWN_MAJORS:
        known = " and ".join(f"{k}.x" for k in KNOWN_MAJORS)
        listed = "; ".join(f"{t}: {', '.join(c[:12])}{' ...' if len(c) > 12 else ''}" for t, c in cols.items())
        warn(acct, f"{source}: profile schema {version} is a major version this neurontrace was not written "
             f"against (it knows {known}); loaded what maps by column name and presence. Columns it could not "
             f"map (kept in args, or in the source files for lean tables): {listed or 'none'}. Check the "
             "result, and report the version if something is missing", SchemaVersionWarning)
    return facts
