"""Seeded mutations of real inputs, and the contract every mutated input must keep.

Used by tests/test_fuzz.py (a few thousand mutations, well under a minute) and by
bench/fuzz_campaign.py (the heavier campaign). The contract, for every input:

- loading it ends in a ``Trace`` or in a named error (``NeurontraceError``), never another exception;
- for Kineto JSON, both decoders (the compiled scanner and the reference) give the same tables and
  metadata, or the same named error;
- every table of a loaded trace passes ``validate(full=True)`` (no invalid UTF-8, no bad offsets),
  and the parse accounting adds up (checked by the parsers themselves).

The mutation classes are those an outside fuzzing campaign found problems with (issue #12): deep
nesting, ``args`` of the wrong kind or with duplicate keys, timestamps beyond int64 ns, numbers
beyond a double, invalid UTF-8 and lone surrogates, huge ranks and clock origins, byte-order marks,
nameless Python frames, ``-0``, byte flips and truncation, gzip damage and trailing bytes; and for
directories: renamed, dropped, retyped or nulled columns, part files of mixed schemas, flipped bytes.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gzip
import io
import json
import os
import random
import shutil
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import neurontrace
from neurontrace._io import read_content
from neurontrace.errors import NeurontraceError
from neurontrace.parsers import _kineto_json, _kineto_native, kineto

ROOT = Path(__file__).resolve().parent.parent
TABLES = ("system_events", "device_events", "flows", "counters", "frames")

Doc = dict[str, Any]


@dataclass
class Outcome:
    """What loading one input gave: ("ok", tables) or ("error", class and message)."""

    kind: str
    what: Any
    decoder: str | None = None


@contextmanager
def forced_decoder(decoder: str | None) -> Iterator[None]:
    """The Kineto decoder forced to ``decoder`` (None: the default) for the block; the setting restored after."""
    saved = os.environ.get(_kineto_native.ENV)
    if decoder is not None:
        os.environ[_kineto_native.ENV] = decoder
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(_kineto_native.ENV, None)
        else:
            os.environ[_kineto_native.ENV] = saved


def outcome(path: Path, decoder: str | None = None) -> Outcome:
    """Load ``path`` (with the Kineto decoder forced when given) and record what happened. Any
    exception that is not a NeurontraceError propagates: that is a failure of the contract."""
    try:
        with forced_decoder(decoder), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trace = neurontrace.load(path)
    except NeurontraceError as exc:
        return Outcome("error", (type(exc).__name__, str(exc)))
    for name, table in trace.tables.items():
        try:
            table.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise AssertionError(f"{path}: table {name} fails validate(full=True): {exc}") from exc
    meta = trace.metadata.filter(pc.not_equal(trace.metadata["key"], "decoder"))
    return Outcome("ok", ({n: trace.tables[n] for n in TABLES}, meta), trace.meta("decoder"))


def as_user(path: Path) -> list[int]:
    """``neurontrace info`` and ``diagnose`` on ``path`` in this process, as a user runs them: the exit
    codes. A named error is an exit code; any other exception propagates (a traceback for the user)."""
    from neurontrace.cli import main

    codes = []
    for command in ("info", "diagnose"):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            codes.append(main([command, str(path)]))
    return codes


def same(a: Outcome, b: Outcome) -> bool:
    if a.kind != b.kind:
        return False
    if a.kind == "error":
        return bool(a.what == b.what)
    (ta, ma), (tb, mb) = a.what, b.what
    return all(ta[n].equals(tb[n]) for n in TABLES) and bool(ma.equals(mb))


def check_kineto(path: Path) -> Outcome:
    """Both decoders on one file give the same rows (or the same named error), and loading it as a
    user does gives a trace with valid tables or a named error.

    The decoders are compared on what they hand the normalizer (every column of every event, in
    file order, and the other top-level keys): the normalizer is shared, so equal input gives equal
    tables (tests/test_kineto_native.py compares whole traces on the real files), and the
    campaign runs in a third of the time.
    """
    reference, native = decoded(path, "python"), decoded(path, "native")
    if not same_decoded(reference, native):
        raise AssertionError(f"{path}: the decoders disagree: reference {_brief(reference)}, native {_brief(native)}")
    return outcome(path)


def decoded(path: Path, decoder: str) -> Outcome:
    """What one decoder hands the normalizer for ``path``: all events as one table in file order."""
    try:
        with forced_decoder(decoder):
            content = read_content(path, snapshot=True)
            d = _kineto_json.decode(content.data, complete=content.complete,
                                    device_categories=list(kineto.DEVICE_CATEGORIES))
    except NeurontraceError as exc:
        return Outcome("error", (type(exc).__name__, str(exc)))
    events = pa.concat_tables(d.events or []).combine_chunks()
    events = events.take(pc.sort_indices(events["index"]))
    return Outcome("ok", (events, d.top, d.truncated_at, d.partial_events, d.notes), d.decoder)


def same_decoded(a: Outcome, b: Outcome) -> bool:
    if a.kind != b.kind or a.kind == "error":
        return a.kind == b.kind and bool(a.what == b.what)
    (ea, *ra), (eb, *rb) = a.what, b.what
    return bool(ea.equals(eb)) and _same_json(ra, rb)


def _same_json(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to itself (a top-level key may decode to one)."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _brief(o: Outcome) -> str:
    if o.kind == "error":
        return f"error {o.what}"
    first = o.what[0]
    if isinstance(first, pa.Table):
        return f"ok {first.num_rows} events ({o.decoder})"
    return "ok " + ", ".join(f"{n}={t.num_rows}" for n, t in first.items())


# -- Kineto: real traces, cut to small windows --------------------------------------------------------


def kineto_sources(max_bytes: int = 100_000) -> list[Path]:
    """The shipped samples and the small files of the real corpus (beside the checkout, if present)."""
    files = sorted((ROOT / "sample_traces").rglob("*.pt.trace.json.gz"))
    from tests.conftest import corpus_root  # (beside the checkout, or $NEURONTRACE_CORPUS)

    corpus = corpus_root()
    if corpus is not None:
        files += sorted(p for p in corpus.rglob("*") if p.name.endswith((".json", ".json.gz"))
                        and p.stat().st_size < max_bytes)
    return files


@functools.cache
def read_doc(path: Path) -> Doc:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def window(doc: Doc, rng: random.Random, size: int = 40) -> Doc:
    """A run of consecutive events (so python frames, ops and their kernels stay together) and
    every metadata event, with the document's other keys."""
    events = [e for e in doc.get("traceEvents", []) if isinstance(e, dict)]
    meta = [e for e in events if e.get("ph") == "M"][:20]
    rest = [e for e in events if e.get("ph") != "M"]
    start = rng.randrange(max(len(rest) - size, 0) + 1)
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    out["traceEvents"] = copy.deepcopy(meta + rest[start:start + size])
    return out


def _event(doc: Doc, rng: random.Random, want: Callable[[Doc], bool] = lambda e: True) -> Doc | None:
    events = [e for e in doc["traceEvents"] if isinstance(e, dict) and want(e)]
    return rng.choice(events) if events else None


def _args(doc: Doc, rng: random.Random) -> Doc | None:
    ev = _event(doc, rng, lambda e: isinstance(e.get("args"), dict))
    return ev["args"] if ev is not None else None


# Values that broke a decoder once, written as raw JSON text (some are not expressible in Python's json).
ODD_VALUES = ["-1e400", "1e400", "-0", "-0.0", "9223372036854775808", "9.3e15", "1e300", "-9223372036854775809",
              "\"\\ud800\"", "\"\\udc00x\"", "\"\\ud800\\u0041\"", "\"\\u0000\"", "[]", "{}", "[1,{}]", "null",
              "true", "\"\"", "0.0000000001", "123456789012345678901234567890", "\"\xff\xfe\"", "\"a\xc3\"",
              "[" * 1200 + "]" * 1200, "{\"a\":" * 600 + "1" + "}" * 600]
READ_KEYS = ["ts", "dur", "ph", "cat", "name", "pid", "tid", "id", "args"]
READ_ARGS = ["External id", "external id", "correlation", "device", "stream", "bytes", "kind", "Call stack",
             "Python id", "Python parent id", "Device Type", "Device Id", "Bytes", "Total Allocated",
             "Total Reserved", "name", "labels"]


def kineto_mutation(doc: Doc, rng: random.Random) -> tuple[str, bytes]:
    """One mutation of a document: (its class, the file's bytes)."""
    doc = copy.deepcopy(doc)
    swaps: list[tuple[str, str]] = []  # raw JSON text spliced in after serialising

    def odd(text: str | None = None) -> str:
        token = f"@@odd{len(swaps)}@@"
        swaps.append((json.dumps(token), text if text is not None else rng.choice(ODD_VALUES)))
        return token

    kind = rng.choice(["event_field", "args_field", "args_unread", "args_kind", "args_duplicate", "top_field",
                       "rank", "base_time", "unnamed_frame", "drop_key", "bytes_flip", "truncate", "bom",
                       "gzip_damage", "gzip_trailing", "counter_zero", "deep"])
    gz = False
    if kind == "event_field" and (ev := _event(doc, rng)) is not None:
        ev[rng.choice(READ_KEYS)] = odd()
    elif kind == "args_field" and (args := _args(doc, rng)) is not None:
        args[rng.choice(READ_ARGS)] = odd()
    elif kind == "args_unread" and (args := _args(doc, rng)) is not None:
        args["fuzz unread"] = odd()
    elif kind == "args_kind" and (ev := _event(doc, rng)) is not None:
        ev["args"] = odd(rng.choice(["[1,2]", "\"text\"", "7", "true", "-1e400"]))
    elif kind == "args_duplicate" and (args := _args(doc, rng)) is not None:
        key = rng.choice([*args, *READ_ARGS])
        args[key] = odd(f'{rng.randint(-5, 5)}, "{key}": {rng.choice(ODD_VALUES)}')
    elif kind == "top_field":
        doc[rng.choice(["deviceProperties", "distributedInfo", "fuzz", "schemaVersion", "traceName"])] = odd()
    elif kind == "rank":
        doc["distributedInfo"] = {"rank": odd(rng.choice(["2147483648", "-2147483649", "1e400", "\"3\"", "true",
                                                          "99999999999999999999", "7"]))}
    elif kind == "base_time":
        doc["baseTimeNanoseconds"] = odd(rng.choice(["9223372036854775000", "92233720368547750000000", "1e400",
                                                     "-5", "1.5e18", "\"1\"", "true", "1700000000000000000"]))
    elif kind == "unnamed_frame" and (ev := _event(doc, rng, lambda e: e.get("cat") == "python_function")):
        ev.pop("name", None)
    elif kind == "drop_key" and (ev := _event(doc, rng)) is not None and ev:
        ev.pop(rng.choice(list(ev)))
    elif kind == "counter_zero":
        doc["traceEvents"].append({"ph": "C", "name": "fuzz counter", "pid": 1, "tid": 1, "ts": 1,
                                   "args": {"v": odd(rng.choice(["-0", "-0.0", "0", "1e400", "-1e400"]))}})
    elif kind == "deep" and (args := _args(doc, rng)) is not None:
        depth = rng.choice([100, 511, 513, 900, 989, 991, 1200, 5000])
        args["deep"] = odd("[" * depth + "]" * depth)
    elif kind in ("gzip_damage", "gzip_trailing"):
        gz = True
    data = json.dumps(doc, indent=rng.choice([None, 1, 2])).encode()
    for token, raw in swaps:  # latin-1: "\xff" in a value stays the single byte 0xFF (invalid UTF-8)
        data = data.replace(token.encode(), raw.encode("latin-1"))
    if kind == "bytes_flip":
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] = rng.choice([b[i] ^ (1 << rng.randrange(8)), ord(rng.choice('{}[]",:\\0-e')), 0xFF])
        data = bytes(b)
    elif kind == "truncate":
        data = data[: rng.randrange(1, len(data))]
    elif kind == "bom":
        data = b"\xef\xbb\xbf" + data
    if gz:
        data = gzip.compress(data, compresslevel=rng.choice([1, 6, 9]), mtime=0)
        if kind == "gzip_trailing":
            data += rng.choice([b"\0" * rng.randint(1, 600), rng.randbytes(rng.randint(1, 50)), b"\x1f"])
        else:
            b = bytearray(data)
            how = rng.choice(["flip", "cut"])
            if how == "flip":
                b[rng.randrange(10, len(b))] ^= 1 << rng.randrange(8)
            else:
                b = b[: rng.randrange(10, len(b))]
            data = bytes(b)
    return kind, data


def kineto_cases(seed: int, count: int, max_bytes: int = 100_000) -> Iterator[tuple[str, str, bytes]]:
    """(source name, mutation class, bytes) for ``count`` mutations of windows of the real traces."""
    rng = random.Random(seed)
    sources = kineto_sources(max_bytes)
    for _ in range(count):
        src = rng.choice(sources)
        kind, data = kineto_mutation(window(read_doc(src), rng), rng)
        yield src.name, kind, data


# -- Neuron Explorer Parquet directories ---------------------------------------------------------------


NEURON_DIRS = [ROOT / "sample_traces" / "synthetic_neuron" / "synthetic_mlp_parquet",
               ROOT / "sample_traces" / "synthetic_neuron" / "synthetic_mlp_v12_parquet"]


# A column of another type than neuron.md declares (issue #29 item 1): each makes n values.
RETYPE: dict[str, Callable[[int], pa.Array]] = {
    "as_int": lambda n: pa.array(range(n), pa.int64()),
    "as_float": lambda n: pa.array([i + 0.5 for i in range(n)], pa.float64()),
    "as_timestamp": lambda n: pa.array([1_700_000_000_000_000_000 + i for i in range(n)], pa.timestamp("ns")),
    "nan": lambda n: pa.array([float("nan")] * n, pa.float64()),
    "int64_max": lambda n: pa.array([2**63 - 1] * n, pa.int64()),
    "bad_utf8": lambda n: pa.array([b"ok\xff"] * n, pa.binary()).view(pa.string()),
    "null_type": pa.nulls,
    "abc": lambda n: pa.array(["abc"] * n, pa.string()),
}


def neuron_mutation(src: Path, out: Path, rng: random.Random) -> str:
    """Copy an Explorer directory to ``out`` with one mutation; returns its class."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out)
    files = sorted(out.glob("*.parquet"))
    f = rng.choice(files)
    kind = rng.choice(["rename", "drop", "as_text", "nulls", "as_list", "mixed_parts", "flip", "cut", "remove",
                       "empty", "as_int", "as_float", "as_timestamp", "nan", "int64_max", "duplicate", "bad_utf8",
                       "null_type", "abc"])
    if kind in ("flip", "cut"):
        b = bytearray(f.read_bytes())
        if kind == "flip":
            for _ in range(rng.randint(1, 3)):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        else:
            b = b[: rng.randrange(len(b))]
        f.write_bytes(bytes(b))
        return f"{kind} {f.name}"
    if kind == "remove":
        f.unlink()
        return f"remove {f.name}"
    t = pq.read_table(f)
    if not t.num_columns:
        return "none"
    col = rng.choice(t.column_names)
    i = t.column_names.index(col)
    if kind == "rename":
        t = t.rename_columns([c + "_renamed" if c == col else c for c in t.column_names])
    elif kind == "drop":
        t = t.drop_columns([col])
    elif kind == "as_text":
        t = t.set_column(i, col, pa.array([None if v is None else str(v) for v in t[col].to_pylist()], pa.string()))
    elif kind == "nulls":
        t = t.set_column(i, col, pa.nulls(t.num_rows, t.schema.field(col).type))
    elif kind == "as_list":
        t = t.set_column(i, col, pa.array([[v] for v in t[col].to_pylist()]))
    elif kind == "empty":
        t = t.slice(0, 0)
    elif kind in RETYPE:
        t = t.set_column(i, col, RETYPE[kind](t.num_rows))
    elif kind == "duplicate":
        t = pa.Table.from_arrays([*t.columns, t[col]], names=[*t.column_names, col])
    elif kind == "mixed_parts" and t.num_rows >= 2:
        f.unlink()
        stem = f.name.removesuffix(".parquet").split("_")[0]
        half = t.num_rows // 2
        pq.write_table(t.slice(0, half), out / f"{stem}_0.parquet")
        rest = t.slice(half)
        rest = rest.set_column(i, col, pa.array([None if v is None else str(v) for v in rest[col].to_pylist()],
                                                pa.string()))
        pq.write_table(rest, out / f"{stem}_1.parquet")
        return f"mixed_parts {stem}.{col}"
    pq.write_table(t, f)
    return f"{kind} {f.name}:{col}"


# -- legacy Neuron JSON, and neurontrace's own Parquet directories ----------------------------------


LEGACY_JSON = sorted((ROOT / "sample_traces" / "synthetic_neuron").glob("synthetic_mlp_*.json"))


def json_value_mutation(doc: Any, rng: random.Random) -> tuple[str, Any]:
    """Replace one value anywhere in a JSON document with a value of another kind."""
    doc = copy.deepcopy(doc)
    path: list[Any] = []
    node = doc
    for _ in range(rng.randint(1, 3)):
        if isinstance(node, dict) and node:
            key = rng.choice(list(node))
        elif isinstance(node, list) and node:
            key = rng.randrange(len(node))
        else:
            break
        path.append(key)
        if not isinstance(node[key], dict | list) or rng.random() < 0.3:
            break
        node = node[key]
    if not path:
        return "none", doc
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    value: Any = rng.choice([5, -1, "x", None, [], {}, [1], [[1]], True, 2**70, -1e300, 1e30, 0.5, "1e400", ""])
    parent[path[-1]] = value
    return f"{'.'.join(map(str, path))}={value!r}", doc


def parquet_output_mutation(out: Path, rng: random.Random) -> str:
    """Damage a directory written by Trace.to_parquet (in place)."""
    kind = rng.choice(["extra_column", "drop_column", "retype", "marker_list", "marker_text", "marker_version",
                       "remove_table", "flip"])
    files = sorted(out.glob("*.parquet"))
    f = rng.choice(files)
    if kind.startswith("marker"):
        marker = out / "neurontrace.json"
        marker.write_text({"marker_list": "[1, 2]", "marker_text": "not json {",
                           "marker_version": json.dumps({"layout_version": rng.choice([0, 2, "1", None])})}[kind])
        return kind
    if kind == "remove_table":
        f.unlink()
        return f"remove {f.name}"
    if kind == "flip":
        b = bytearray(f.read_bytes())
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        f.write_bytes(bytes(b))
        return f"flip {f.name}"
    t = pq.read_table(f)
    if kind == "extra_column":
        t = t.append_column("fuzz_extra", pa.nulls(t.num_rows, pa.int64()))
    elif t.num_columns:
        col = rng.choice(t.column_names)
        if kind == "drop_column":
            t = t.drop_columns([col])
        else:
            t = t.set_column(t.column_names.index(col), col, pa.array([[1]] * t.num_rows))
    pq.write_table(t, f)
    return f"{kind} {f.name}"


# -- neurontrace datasets (convert DIR -o DATASET) ------------------------------------------------------


def dataset_mutation(out: Path, rng: random.Random) -> str:
    """Damage a dataset written by ``neurontrace convert DIR -o DATASET`` (in place): a partition missing
    or extra, a marker from a newer layout or of another shape, a partition file retyped, flipped or cut."""
    kind = rng.choice(["drop_partition", "extra_partition", "marker_layout", "marker_shape", "marker_ranks",
                       "retype", "flip", "cut", "extra_column"])
    marker = out / "neurontrace-dataset.json"
    parts = sorted(out.glob("*/rank=*/*.parquet"))
    f = rng.choice(parts)
    if kind == "drop_partition":
        shutil.rmtree(f.parent)
    elif kind == "extra_partition":
        extra = f.parent.parent / "rank=99"
        extra.mkdir(exist_ok=True)
        shutil.copy(f, extra / f.name)
    elif kind.startswith("marker"):
        doc = json.loads(marker.read_text())
        if kind == "marker_layout":
            doc["layout"] = rng.choice(["neurontrace-dataset/2", None, 1, ["x"]])
            marker.write_text(json.dumps(doc))
        elif kind == "marker_ranks":
            doc["ranks"] = rng.choice([5, None, [1, "x"], [{"rank": "1e400", "partition": "../../etc"}], {}])
            marker.write_text(json.dumps(doc))
        else:
            marker.write_text(rng.choice(["[]", "7", "null", "{", "[" * 100_000 + "]" * 100_000]))
    elif kind in ("flip", "cut"):
        b = bytearray(f.read_bytes())
        if kind == "flip":
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        else:
            b = b[: rng.randrange(len(b))]
        f.write_bytes(bytes(b))
    else:
        t = pq.read_table(f)
        if kind == "extra_column":
            t = t.append_column("fuzz_extra", pa.nulls(t.num_rows, pa.int64()))
        elif t.num_columns:
            col = rng.choice(t.column_names)
            t = t.set_column(t.column_names.index(col), col, pa.array([[1]] * t.num_rows))
        pq.write_table(t, f)
    return f"{kind} {f.relative_to(out)}"
