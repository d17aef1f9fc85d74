"""Make a large trace of any shape by repeating a real one end to end in time.

Usage: python bench/tile_trace.py SOURCE OUT_PATH [--target-mb 300]

`bench/make_large_trace.py` profiles a CPU run; this makes large traces shaped like any real trace,
for example a GPU one from the corpus (kernels, copies, launch flows, NCCL), to benchmark the
parser on device-heavy input. Copy k of the events is shifted by k times the source's time span,
and every id that must stay unique (External id, correlation, flow ids, Python ids) by k times the
source's largest id, so flows and stacks still pair up within each copy. Metadata events (``M``)
are written once. The JSON is written with the same layout torch.profiler uses (one key per line).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
from pathlib import Path
from typing import Any

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--target-mb", type=float, default=300.0)
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
        stream = (_shifted(e, k, span, id_step) for k in range(copies) for e in timed)
        for ev in itertools.chain(meta, stream):
            f.write(("" if first else ",\n") + json.dumps(ev, indent=2))
            first = False
        f.write("\n  ]\n}\n")
    print(f"{args.out}: {copies} copies of {len(timed)} events from {args.source.name}, "
          f"{args.out.stat().st_size / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
