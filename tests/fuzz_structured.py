"""Structure-aware mutations of Kineto JSON (issue #29 item 5), beside the byte-level ones of fuzz_inputs.

Where ``fuzz_inputs.kineto_mutation`` damages a file as a disk or a copy would, these change the
document as a hostile or buggy writer would, field by field, and keep it valid JSON (except where
the text itself is the point: numbers beyond a double, lone surrogates):

- ``swap_type``: a field the parsers read gets a value of another JSON type;
- ``drop_keys``: one to three keys removed from up to five events (``ph``, ``ts``, ``name`` too);
- ``duplicate_key``: a key given twice with values of different types, the odd one first or last
  (both decoders must take the last, as ``JSON.parse`` does);
- ``extreme_number``: a number at or beyond the edges of int64 and of a double;
- ``unicode_name``: names in scripts, combining marks, bidi controls, emoji, NUL, lone surrogates;
- ``odd_event``: an event that is not an object, or ``traceEvents`` holding another shape.

Every case is checked like the others (tests/fuzz_inputs.py: both decoders' tables compared, valid tables,
named errors only).
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from typing import Any

from tests import fuzz_inputs as fz

KINDS = ("swap_type", "drop_keys", "duplicate_key", "extreme_number", "unicode_name", "odd_event")
# A value of each JSON type, as raw text.
TYPED = {"int": "7", "float": "2.5", "str": '"text"', "list": "[1, \"a\"]", "dict": '{"k": 1}', "null": "null",
         "bool": "true"}
EXTREMES = ["1e308", "-1e308", "1e400", "-1e400", "9223372036854775807", "9223372036854775808",
            "-9223372036854775808", "-9223372036854775809", "1" * 300, "4.9e-324", "-0", "1e-400",
            "18446744073709551616", "1.7976931348623157e308", "0.1", "-1"]
NAMES = ["\u202eevil\u202c", "\u210c\U0001d522\U0001d529\U0001d529\U0001d52c", "\U0001f600" * 50, "a\u0000b",
         "e" + "\u0301" * 1000, "\ufeffname", "\u0627\u0644\u0639\u0631\u0628\u064a\u0629", "\u4e2d\u6587::op",
         "aten::mm\n\t\r", "\\ud800", "\\udc00tail", "\\ud83d\\ude00", "x" * 5000]
NUMERIC_KEYS = ("ts", "dur", "pid", "tid", "id")


def _type_of(v: Any) -> str:
    return ("null" if v is None else "bool" if isinstance(v, bool) else "int" if isinstance(v, int)
            else "float" if isinstance(v, float) else "str" if isinstance(v, str) else "list"
            if isinstance(v, list) else "dict")


def _other(v: Any, rng: random.Random) -> str:
    return TYPED[rng.choice([t for t in TYPED if t != _type_of(v)])]


def _target(ev: fz.Doc, rng: random.Random) -> fz.Doc:
    """The event itself, or (two times in five) its args object when it has one."""
    args = ev.get("args")
    return args if isinstance(args, dict) and args and rng.random() < 0.4 else ev


def mutation(doc: fz.Doc, rng: random.Random) -> tuple[str, bytes]:
    """One structure-aware mutation of a document: (its class and detail, the file's bytes)."""
    doc = copy.deepcopy(doc)
    swaps: list[tuple[str, str]] = []

    def raw(text: str) -> str:
        token = f"@@raw{len(swaps)}@@"
        swaps.append((json.dumps(token), text))
        return token

    events = [e for e in doc["traceEvents"] if isinstance(e, dict)]
    kind = rng.choice(KINDS)
    detail = ""
    if not events:
        kind = "odd_event"
    if kind == "swap_type":
        ev = rng.choice(events)
        target = _target(ev, rng)
        key = rng.choice([*target] or fz.READ_KEYS)
        detail = key
        target[key] = raw(_other(target.get(key), rng))
    elif kind == "drop_keys":
        for ev in rng.sample(events, min(len(events), rng.randint(1, 5))):
            for key in rng.sample(list(ev), min(len(ev), rng.randint(1, 3))):
                ev.pop(key)
    elif kind == "duplicate_key":
        ev = rng.choice(events)
        target = _target(ev, rng)
        if not target:
            target = ev
        key = rng.choice(list(target) or ["name"])
        target.setdefault(key, "x")
        keep, odd = json.dumps(target[key]), _other(target[key], rng)
        first = rng.random() < 0.5
        detail = f"{key} odd {'first' if first else 'last'}"
        target[key] = raw(f'{odd}, {json.dumps(key)}: {keep}' if first else f'{keep}, {json.dumps(key)}: {odd}')
    elif kind == "extreme_number":
        ev = rng.choice(events)
        args = ev.get("args")
        if isinstance(args, dict) and args and rng.random() < 0.5:
            key = rng.choice([*args, *fz.READ_ARGS])
            args[key] = raw(rng.choice(EXTREMES))
        else:
            key = rng.choice(NUMERIC_KEYS)
            ev[key] = raw(rng.choice(EXTREMES))
        detail = key
    elif kind == "unicode_name":
        for ev in rng.sample(events, min(len(events), rng.randint(1, 4))):
            name = rng.choice(NAMES)
            ev["name"] = raw(f'"{name}"') if name.startswith("\\u") else name
    else:
        shape = rng.choice(["event_list", "event_number", "event_string", "event_null", "events_object",
                            "events_string", "doc_list", "nested_args"])
        detail = shape
        if shape.startswith("event_") and doc["traceEvents"]:
            i = rng.randrange(len(doc["traceEvents"]))
            doc["traceEvents"][i] = raw({"event_list": "[1, 2]", "event_number": "3", "event_string": '"x"',
                                         "event_null": "null"}[shape])
        elif shape == "events_object":
            doc["traceEvents"] = {"0": events[:1]}
        elif shape == "events_string":
            doc["traceEvents"] = "[]"
        elif shape == "doc_list":
            data = json.dumps(doc["traceEvents"]).encode()
            return f"{kind} {detail}", data
        elif events:
            rng.choice(events)["args"] = {"a": {"b": {"c": [1, {"d": None}]}}}
    data = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    for token, text in swaps:
        data = data.replace(token.encode(), text.encode("utf-8", "surrogatepass"))
    return f"{kind} {detail}".strip(), data


def cases(seed: int, count: int, max_bytes: int = 100_000) -> Iterator[tuple[str, str, bytes]]:
    """(source name, mutation class, bytes) for ``count`` structure-aware mutations of real trace windows."""
    rng = random.Random(seed)
    sources = fz.kineto_sources(max_bytes)
    for _ in range(count):
        src = rng.choice(sources)
        kind, data = mutation(fz.window(fz.read_doc(src), rng), rng)
        yield src.name, kind, data
