"""Kineto ``[memory]`` / ``[OutOfMemory]`` instants → the ``memory_events`` table (kineto.md, memory events), and
their ``counters`` rows (Bytes, Total Allocated, Total Reserved; ``args`` keeps only what no column holds).

Each instant is one allocator call: ``Bytes`` > 0 an allocation, < 0 a free, ``Addr`` the block,
``Total Allocated`` / ``Total Reserved`` the allocator's totals after it (absent from the old events of
torch 1.8/1.9, which carry only ``Device Type``, ``Device Id`` and ``Bytes``). ``[OutOfMemory]`` is an
allocation that failed; its ``Bytes`` is what was asked for. Each row is charged to the framework op
running on the same thread at that instant: the outermost one, the op user code called (``aten::linear``,
not the ``aten::empty`` inside it), and that op's source frame; where no op runs (a free at a ``del``), to
the Python frame running.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import numpy as np
import pyarrow as pa

from neurontrace.columns import isin
from neurontrace.parsers._pool import POOL, pc
from neurontrace.schema import DICT_STRING
from neurontrace.trace import ParseAccounting

from ._arrow import constant, encoded, pair_codes

_INT64_MAX = 2**63 - 1
# The decoder's columns of a memory instant's counters (the values of its three series).
MEMORY_FIELDS = {"mem_bytes": "Bytes", "mem_total_allocated": "Total Allocated",
                 "mem_total_reserved": "Total Reserved"}
_SLICE_ROWS = 1 << 16  # rows of args text matched at a time


class _Args(msgspec.Struct, gc=False):
    addr: int | float | None = msgspec.field(default=None, name="Addr")


_DECODER = msgspec.json.Decoder(list[_Args | None])


def memory_events(t: pa.Table, system: pa.Table, device: pa.Array, rank: int | None,
                  acct: ParseAccounting) -> pa.Table:
    """The memory_events rows of the memory instants ``t`` (the parser's memory split, in file order)."""
    n = t.num_rows
    addr = _addresses(t["args"], acct)
    nbytes, bad_bytes = _ints(t["mem_bytes"], signed=True)
    allocated, bad_alloc = _ints(t["mem_total_allocated"], signed=False)
    reserved, bad_res = _ints(t["mem_total_reserved"], signed=False)
    if bad_bytes or bad_alloc or bad_res:
        acct.warnings.append(
            f"memory events: {bad_alloc} negative or non-integral Total Allocated, {bad_res} Total Reserved and "
            f"{bad_bytes} non-integral Bytes values were left out (null); peaks use the others")
    is_oom = pc.fill_null(pc.equal(t["name"], "[OutOfMemory]"), False)
    action = pc.if_else(is_oom, "oom", pc.if_else(pc.less(pc.fill_null(nbytes, 0), 0), "free", "alloc"))
    op_row = _enclosing(t, system, "framework_op")
    py_row = _enclosing(t, system, "python")  # where no op runs (a free at a `del`), the Python frame's line
    frame_row = np.where(op_row >= 0, op_row, py_row)
    return pa.table({
        "ts_ns": t["ts_ns"],
        "device": device,
        "rank": constant(rank, n, pa.int32()),
        "pid": t["pid"],
        "tid": t["tid"],
        "action": action,
        "addr": addr,
        "bytes": nbytes,
        "total_allocated_bytes": allocated,
        "total_reserved_bytes": reserved,
        "stream": pa.nulls(n, pa.int64(), memory_pool=POOL),
        "op_event_id": _at(system["event_id"], op_row),
        "op": _at(system["name"], op_row),
        "frame_id": _at(system["frame_id"], frame_row),
    })


def _at(col: pa.ChunkedArray, rows: np.ndarray) -> pa.Array:
    """``col`` at ``rows``; null where a row is -1."""
    if not len(col):
        return pa.nulls(len(rows), col.type, memory_pool=POOL)
    at = pc.take(col, pa.array(np.maximum(rows, 0), memory_pool=POOL))
    return pc.if_else(pa.array(rows < 0, memory_pool=POOL), pa.scalar(None, col.type), at)


def _ints(col: pa.ChunkedArray, *, signed: bool) -> tuple[pa.Array, int]:
    """Float64 byte counts as int64, and how many were unusable: values that are not whole numbers within
    int64, and negative ones unless ``signed``, become null."""
    v = col.to_numpy(zero_copy_only=False).astype(np.float64)
    ok = np.isfinite(v) & (np.floor(v) == v) & (np.abs(v) <= 2.0**62)
    if not signed:
        ok &= v >= 0
    out = np.where(ok, v, 0).astype(np.int64)
    return pa.array(out, mask=~ok, memory_pool=POOL), int((~ok & ~np.isnan(v)).sum())


_ADDR = r'"Addr":\s*(?P<addr>\d{1,18})[,}\s]'  # what Kineto writes: a whole number (addresses fit in 18 digits)


def _addresses(args: pa.ChunkedArray, acct: ParseAccounting) -> pa.Array:
    """``Addr`` of each event's args text: one regular-expression pass in Arrow where every Addr is a plain
    whole number (what Kineto writes), else a decode of the rows' args."""
    if not len(args):
        return pa.nulls(0, pa.int64(), memory_pool=POOL)
    parts, plain = [], True
    for text in _slices(args):
        found = pc.extract_regex(text, _ADDR)  # null where no match (the struct, not its field, is null)
        matched = pc.fill_null(found.is_valid(), False)
        mentioned = pc.sum(pc.match_substring(text, '"Addr"')).as_py()  # booleans sum as counts
        plain = plain and (pc.sum(matched).as_py() or 0) == (mentioned or 0)
        addr = pc.if_else(matched, found.field("addr"), pa.scalar(None, pa.string()))
        parts.append(pc.cast(addr, pa.int64()))
    if plain:  # every Addr is in the plain form
        return pa.concat_arrays(parts, memory_pool=POOL) if parts else pa.nulls(0, pa.int64(), memory_pool=POOL)
    texts = args.to_pylist()
    doc = b"[" + b",".join((s or "null").encode() for s in texts) + b"]"
    try:
        decoded = _DECODER.decode(doc)
    except msgspec.ValidationError:  # an Addr that is not a number: read row by row, dropping it
        decoded = [_one(s) for s in texts]
    addr = [a.addr if a is not None and a.addr is not None and 0 <= a.addr <= _INT64_MAX
            and float(a.addr).is_integer() else None for a in decoded]
    bad = sum(1 for a, v in zip(decoded, addr, strict=True) if v is None and a is not None and a.addr is not None)
    if bad:
        acct.warnings.append(f"{bad} memory events have an Addr that is not an address; kept without it")
    return pa.array([int(a) if a is not None else None for a in addr], pa.int64(), memory_pool=POOL)


def _slices(args: pa.ChunkedArray | pa.Array) -> Iterator[pa.Array]:
    """The args text about ``_SLICE_ROWS`` rows at a time: each step's copies stay small, and the chunks of a
    chunked read are joined up to that size (a compute call costs about the same on a chunk of 500 rows: the BERT
    trace's 34,220 memory instants in 64 chunks took 119 ms in ``_unexplained``, in one chunk 72 ms)."""
    group: list[pa.Array] = []
    rows = 0
    for chunk in args.chunks if isinstance(args, pa.ChunkedArray) else [args]:
        for at in range(0, len(chunk), _SLICE_ROWS):
            group.append(chunk.slice(at, _SLICE_ROWS))
            rows += len(group[-1])
            if rows >= _SLICE_ROWS:
                yield group[0] if len(group) == 1 else pa.concat_arrays(group, memory_pool=POOL)
                group, rows = [], 0
    if group:
        yield group[0] if len(group) == 1 else pa.concat_arrays(group, memory_pool=POOL)


def _one(text: str | None) -> _Args | None:
    try:
        return msgspec.json.decode(text or "null", type=_Args | None)
    except msgspec.ValidationError:  # an Addr of another type: marked unusable (counted, then dropped)
        return _Args(addr=-1)


def _enclosing(t: pa.Table, system: pa.Table, category: str) -> np.ndarray:
    """Row in ``system`` of the outermost (``framework_op``) or innermost (other categories) event of
    ``category`` on the same thread enclosing each instant (-1: none)."""
    out = np.full(t.num_rows, -1, dtype=np.int64)
    if not t.num_rows:  # most traces have no memory instants: the system table is not scanned for them
        return out
    op_rows = np.flatnonzero(isin(system["category"], (category,)))
    if not len(op_rows):
        return out
    # Threads as numbers: the pairs of each table numbered on their own (the system table's from its
    # dictionaries), then the instants' pairs mapped onto the events' (few distinct): no string copied per row.
    sys_thread, sys_pairs = pair_codes(system["pid"], system["tid"])
    ev_code, ev_pairs = pair_codes(t["pid"], t["tid"])
    number = {pair: i for i, pair in enumerate(sys_pairs)}
    ev_number = np.asarray([number.setdefault(pair, len(number)) for pair in ev_pairs], dtype=np.int64)
    op_thread, ev_thread = sys_thread[op_rows], ev_number[ev_code]
    start = system["ts_ns"].to_numpy()[op_rows]
    end = start + system["dur_ns"].to_numpy()[op_rows]
    ts = t["ts_ns"].to_numpy()
    for code in np.unique(ev_thread):
        mine = np.flatnonzero(op_thread == code)
        if not len(mine):
            continue
        mine = mine[np.lexsort((-end[mine], start[mine]))]  # by start, the outer of equal starts first
        s, e = start[mine], end[mine]
        parent, root = _parents(s, e)
        q = np.flatnonzero(ev_thread == code)
        cand = np.searchsorted(s, ts[q], side="right") - 1
        for _ in range(len(s) + 1):  # walk out to the first op still open at the instant
            bad = cand >= 0
            bad[bad] = e[cand[bad]] < ts[q][bad]
            if not bad.any():
                break
            cand[bad] = parent[cand[bad]]
        if category == "framework_op":
            cand = np.where(cand >= 0, root[np.maximum(cand, 0)], -1)
        out[q] = np.where(cand >= 0, op_rows[mine[np.maximum(cand, 0)]], -1)
    return out


def _parents(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each interval's enclosing interval and outermost enclosing one (positions; -1 and itself at the
    top), for nested intervals sorted by start (the outer of equal starts first); an interval ending where
    the next starts encloses it, as a stack walk would have it. Vectorized over nesting levels: an
    interval's depth is how many intervals before it are still open at its start, and its parent is the
    last interval before it one level up."""
    n = len(start)
    pos = np.arange(n, dtype=np.int64)
    depth = pos - np.searchsorted(np.sort(end), start, side="left")
    parent = np.full(n, -1, dtype=np.int64)
    by_depth = np.lexsort((pos, depth))
    levels = np.searchsorted(depth[by_depth], np.arange(int(depth.max(initial=0)) + 2))
    for d in range(1, len(levels) - 1):
        up, here = by_depth[levels[d - 1]:levels[d]], by_depth[levels[d]:levels[d + 1]]
        if len(up) and len(here):
            k = np.searchsorted(up, here, side="left") - 1
            parent[here] = np.where(k >= 0, up[np.maximum(k, 0)], -1)
    top = by_depth[levels[0]:levels[1]]
    root = top[np.maximum(np.searchsorted(top, pos, side="right") - 1, 0)] if len(top) else pos.copy()
    return parent, root


def memory_counters(t: pa.Table, device: pa.Array, host: str | None, rank: int | None) -> pa.Table:
    """Up to three rows per memory instant (Bytes, Total Allocated, Total Reserved): the repeated texts as
    dictionaries from the start, so no plain copy of them exists per row (the memory-heavy trace's peak)."""
    for name in ("name", "pid", "tid"):
        t = t.set_column(t.schema.get_field_index(name), name, encoded(t[name]))
    device = encoded(device)
    parts = []
    first = True
    for col, field in MEMORY_FIELDS.items():
        has = pc.is_valid(t[col])
        sub = t.select(["ts_ns", "name", "pid", "tid", col, *(["args"] if first else [])])
        sub = sub if t[col].null_count == 0 else pc.filter(sub, has)
        n = sub.num_rows
        parts.append(pa.table({
            "ts_ns": sub["ts_ns"],
            "name": sub["name"],
            "field": constant(field, n, DICT_STRING),
            "value": sub[col],
            "unit": constant("bytes", n, DICT_STRING),
            "host": constant(host, n, DICT_STRING),
            "rank": constant(rank, n, pa.int32()),
            "pid": sub["pid"],
            "tid": sub["tid"],
            "device": device if n == t.num_rows else pc.filter(device, has),
            "args": _unexplained(sub["args"]) if first else pa.nulls(n, pa.string(), memory_pool=POOL),
        }))
        first = False
    return pa.concat_tables(parts, memory_pool=POOL)


# The args of a memory instant that columns hold: the counters' values and memory_events' addr and device, each a
# whole number those columns keep exactly (below 2^53; an address in 18 digits, as memory_events reads it).
_PAIR = (r'(?:"(?:Total Reserved|Total Allocated|Bytes|Device Id|Device Type)":\s*-?\d{1,15}'
         r'|"Addr":\s*\d{1,18})')
_MEMORY_ARG = r'\s*' + _PAIR + r'\s*(?:,|(\}))'  # a pair and its comma (a closing brace is kept)
# The rule: args made only of such pairs, which leave nothing (null). One match finds them, and only the rows
# it does not match go through the cutting (the same pairs, removed by _MEMORY_ARG, left to right).
_ONLY_PAIRS = r'^\{(?:\s*' + _PAIR + r'\s*,)*\s*' + _PAIR + r'\s*\}$'
# Such pairs, then members of plain keys and whole numbers or literals (torch 2's "finished", "Ev Idx"): what the
# cutting leaves of them is those members in braces: the leading pairs replaced by "{" once, where none of the
# rest is a held key (three regex replacements per row took 8-20% of the load of the corpus H100 BERT trace
# tiled to 133 MB; a capturing match costs three times a plain one in RE2).
_MEMBER = r'"[^"\\{}\[\]]*":\s*(?:-?\d+|true|false|null)'
_LEADING_PAIRS = r'^\{(?:\s*' + _PAIR + r'\s*,)*\s*'
_PAIRS_THEN_REST = _LEADING_PAIRS + _MEMBER + r'(?:\s*,\s*' + _MEMBER + r')*\s*\}$'
_HELD_KEY = r'"(?:Total Reserved|Total Allocated|Bytes|Device Id|Device Type|Addr)"'


def _unexplained(args: pa.ChunkedArray) -> pa.ChunkedArray:
    """The args text of memory instants without the keys a column holds (null when none is left): a copy of
    the whole JSON per allocator call cost more than the rest of a memory-heavy trace's tables. Only a flat
    object without escapes is cut (a nested or escaped one is kept whole: a key inside it is no column's)."""
    out = []
    for text in _slices(args):
        explained = pc.fill_null(pc.match_substring_regex(text, _ONLY_PAIRS), False)
        if pc.all(explained).as_py():
            out.append(pa.nulls(len(text), pa.string(), memory_pool=POOL))
            continue
        shaped = pc.fill_null(pc.match_substring_regex(text, _PAIRS_THEN_REST), False)
        rest = pc.replace_substring_regex(text, _LEADING_PAIRS, "{")  # shaped: '{', the others, space, '}'
        plain = pc.and_(shaped, pc.invert(pc.fill_null(pc.match_substring_regex(rest, _HELD_KEY), True)))
        if pc.all(pc.or_(pc.or_(explained, plain), pc.is_null(text))).as_py():  # a null stays null either way
            cut = pc.binary_join_element_wise(pc.utf8_rtrim_whitespace(pc.utf8_slice_codeunits(rest, 0, -1)), "}",
                                              "")
        else:
            cut = _cut(text)
        out.append(pc.if_else(explained, pa.scalar(None, pa.string()), cut))
    return pa.chunked_array(out, pa.string())


def _cut(text: pa.Array) -> pa.Array:
    """The args without the pairs a column holds, for a flat object without escapes; others as they are."""
    simple = pc.fill_null(pc.match_substring_regex(text, r'^\{[^{}\[\]\\]*\}$'), False)
    rest = pc.replace_substring_regex(text, _MEMORY_ARG, r"\1")
    rest = pc.replace_substring_regex(rest, r"^\{[\s,]*", "{")
    rest = pc.replace_substring_regex(rest, r"[\s,]*\}$", "}")
    cut = pc.if_else(pc.equal(rest, "{}"), pa.scalar(None, pa.string()), rest)
    return pc.if_else(simple, cut, text)
