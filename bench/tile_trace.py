"""Make a large trace of any shape by repeating a real one end to end in time.

Usage: python bench/tile_trace.py SOURCE OUT_PATH [--target-mb 300] [--fast]

`bench/make_large_trace.py` profiles a CPU run; this makes large traces shaped like any real trace,
for example a GPU one from the corpus (kernels, copies, launch flows, NCCL), to benchmark the
parser on device-heavy input. Copy k of the events is shifted by k times the source's time span,
and every id that must stay unique (External id, correlation, flow ids, Python ids) by k times the
source's largest id, so flows and stacks still pair up within each copy. Metadata events (``M``)
are written once. The JSON is written with the same layout torch.profiler uses (one key per line).

``--fast`` (for traces of tens of GB) renders one copy's JSON once as a template and writes copy k by
putting the shifted numbers into it (numpy formats them), about 20x faster than encoding every event: the
same events, ids and times, and the same text but for how a time is spelled (an integer time shift, so a
time keeps its source's fraction digits).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

_ID_ARGS = ("External id", "external id", "correlation", "Python id", "Python parent id", "Ev Idx")


def _load(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def _shifted(ev: dict[str, Any], k: int, span: float, id_step: int) -> dict[str, Any]:
    out = dict(ev)
    if isinstance(out.get("ts"), int | float):
        out["ts"] = round(out["ts"] + k * span, 3)
    if isinstance(out.get("id"), int):
        out["id"] += k * id_step
    args = out.get("args")
    if isinstance(args, dict):
        out["args"] = {key: v + k * id_step if key in _ID_ARGS and isinstance(v, int) and v >= 0 else v
                       for key, v in args.items()}
    return out


_SLOT = re.compile(r'"@@(\d+)@@"')


def _template(timed: list[dict[str, Any]], id_step: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """One copy's text cut at every number a copy shifts: the pieces of text around them, each number's
    value in the source, and whether it is a time (shifted by the span) or an id (by id_step)."""
    values: list[int] = []
    is_time: list[bool] = []
    after: dict[int, str] = {}  # a float time's fraction digits, kept as text after its integer part

    def slot(value: int, time: bool) -> str:
        values.append(value)
        is_time.append(time)
        return f"@@{len(values) - 1}@@"

    texts = []
    for ev in timed:
        out = dict(ev)
        ts = out.get("ts")
        if isinstance(ts, int) and not isinstance(ts, bool):
            out["ts"] = slot(ts, True)
        elif isinstance(ts, float) and math.isfinite(ts) and ts >= 0:
            text = json.dumps(ts)
            whole, _, frac = (text if "e" not in text.lower() else f"{ts:.3f}").partition(".")
            out["ts"] = slot(int(whole), True)
            after[len(values) - 1] = "." + frac if frac else ""
        if isinstance(out.get("id"), int) and not isinstance(out["id"], bool):
            out["id"] = slot(out["id"], False)
        args = out.get("args")
        if isinstance(args, dict):
            out["args"] = {k: slot(v, False) if k in _ID_ARGS and isinstance(v, int) and not isinstance(v, bool)
                           and v >= 0 else v for k, v in args.items()}
        texts.append(",\n" + json.dumps(out, indent=2))
    cut = _SLOT.split("".join(texts))  # text, slot number, text, ...: the slots in the text's order
    pieces, order = cut[0::2], [int(i) for i in cut[1::2]]
    for at, i in enumerate(order):
        pieces[at + 1] = after.get(i, "") + pieces[at + 1]
    return pieces, np.array(values, dtype=np.int64)[order], np.array(is_time, dtype=bool)[order]


def _write_fast(f: Any, timed: list[dict[str, Any]], copies: int, span: float, id_step: int, first: bool) -> None:
    pieces, base, is_time = _template(timed, id_step)
    step = np.where(is_time, math.ceil(span), id_step).astype(np.int64)
    out: list[str] = [""] * (2 * len(base) + 1)
    out[0::2] = pieces
    for k in range(copies):
        out[1::2] = (base + k * step).astype(str).tolist()
        text = "".join(out)
        f.write(text[2:] if first and k == 0 else text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--target-mb", type=float, default=300.0)
    ap.add_argument("--fast", action="store_true", help="write copies from a template of one (module docstring)")
    args = ap.parse_args()
    doc = _load(args.source)
    events = doc.pop("traceEvents")
    meta = [e for e in events if e.get("ph") == "M"]
    timed = [e for e in events if e.get("ph") != "M"]
    times = [e["ts"] + e.get("dur", 0) for e in timed if isinstance(e.get("ts"), int | float)]
    span = (max(times) - min(times)) * 1.01 if times else 1.0
    ids = [v for e in timed for v in [e.get("id"), *(e.get("args") or {}).values()] if isinstance(v, int)]
    id_step = max(ids, default=0) + 1
    one_copy = len(json.dumps(timed, indent=1).encode())
    copies = max(1, round(args.target_mb * 1e6 / one_copy))
    with args.out.open("w") as f:
        f.write("{\n")
        for key, value in doc.items():
            f.write(f"  {json.dumps(key)}: {json.dumps(value)},\n")
        f.write('  "traceEvents": [\n')
        first = True
        if args.fast:
            for ev in meta:
                f.write(("" if first else ",\n") + json.dumps(ev, indent=2))
                first = False
            _write_fast(f, timed, copies, span, id_step, first)
            f.write("\n  ]\n}\n")
            print(f"{args.out}: {copies} copies of {len(timed)} events from {args.source.name}, "
                  f"{args.out.stat().st_size / 1e6:.0f} MB")
            return
        stream = (_shifted(e, k, span, id_step) for k in range(copies) for e in timed)
        for ev in itertools.chain(meta, stream):
            f.write(("" if first else ",\n") + json.dumps(ev, indent=2))
            first = False
        f.write("\n  ]\n}\n")
    print(f"{args.out}: {copies} copies of {len(timed)} events from {args.source.name}, "
          f"{args.out.stat().st_size / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
