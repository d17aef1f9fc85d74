"""The bytes ``diagnose DATASET``'s running merge state holds after each slice (analysis/sliced.RankFold).

    python bench/fold_state.py DATASET [--slice-events N] [--every K]

Diagnoses the dataset's first streamed rank slice by slice as ``diagnose DATASET`` does
(neurontrace/dataset_slices.py: its planner's cuts at step starts, about ``--slice-events`` events a slice)
and prints, after every ``K``-th slice and the last, the bytes the fold holds: in all and by part (each
section's state or held values, the device attribution with its stalls, the fallback ops), measured by
walking the objects (numpy and Arrow buffers by their size, Python objects by ``sys.getsizeof``). The
figure is the fold's own: not the process's RSS (bench/out_of_core.py gives that). A state that does not
grow with the slice count stays flat down the column; one that grows with the output (a row per step in the
JSON) grows by that much a slice.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from neurontrace.analysis.contract import Options  # noqa: E402
from neurontrace.analysis.sliced import RankFold, diagnose_slices, slices_of, step_cuts  # noqa: E402
from neurontrace.dataset import open_dataset, time_parts  # noqa: E402
from neurontrace.dataset_slices import SLICE_EVENTS, PartReader  # noqa: E402


def deep_bytes(obj: Any) -> int:
    """The bytes ``obj`` holds, each object counted once (numpy / Arrow: their buffers)."""
    seen: set[int] = set()
    total = 0
    stack = [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen or o is None or isinstance(o, type):
            continue
        seen.add(id(o))
        if isinstance(o, np.ndarray):
            total += o.nbytes + 112
            continue
        if isinstance(o, (pa.Table, pa.RecordBatch, pa.Array, pa.ChunkedArray)):
            total += o.nbytes
            continue
        if callable(o) and not hasattr(o, "__dict__"):
            continue
        total += sys.getsizeof(o)
        stack.extend(_children(o))
    return total


def _children(o: Any) -> Iterator[Any]:
    if isinstance(o, dict):
        yield from o.keys()
        yield from o.values()
    elif isinstance(o, (list, tuple, set, frozenset)):
        yield from o
    elif hasattr(o, "__dict__") and not isinstance(o, (str, bytes, int, float)):
        yield from vars(o).values()
    elif hasattr(o, "__slots__"):
        yield from (getattr(o, s) for s in o.__slots__ if hasattr(o, s))


def parts_of(fold: RankFold) -> dict[str, int]:
    """The fold's bytes by part (the plan and options are the run's, not the fold's: left out)."""
    out = {key: deep_bytes((f.state, f.held)) for key, f in fold.sections.items()}
    out["devices+stalls"] = deep_bytes(fold.devices)
    out["fallback"] = deep_bytes(fold.fallback)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--slice-events", type=int, default=SLICE_EVENTS)
    ap.add_argument("--every", type=int, default=1)
    args = ap.parse_args()
    ds = open_dataset(args.dataset)
    part = next(e["partition"] for e in ds.ranks if time_parts(e))
    reader = PartReader(ds, part)
    slices = slices_of(reader.span, step_cuts(reader.steps(), reader.sizes(), args.slice_events))
    print(f"{args.dataset}: {len(slices)} slices of about {args.slice_events} events; the fold's bytes after each")
    t0 = time.perf_counter()
    rows: list[tuple[int, dict[str, int]]] = []

    def show(k: int, fold: RankFold) -> None:
        if k % args.every and k != len(slices) - 1:
            return
        got = parts_of(fold)
        rows.append((k, got))
        big = sorted(got.items(), key=lambda kv: -kv[1])[:4]
        print(f"  slice {k + 1:4d}/{len(slices)} {time.perf_counter() - t0:7.1f} s  state {sum(got.values()) / 1e6:8.2f} MB"
              f"  ({', '.join(f'{name} {b / 1e6:.2f}' for name, b in big)})", flush=True)

    diagnose_slices(reader, slices, Options(), on_fold=show)
    if len(rows) >= 2:
        (k0, a), (k1, b) = rows[len(rows) // 2], rows[-1]
        grow = (sum(b.values()) - sum(a.values())) / max(1, k1 - k0)
        print(f"growth from slice {k0 + 1} to {k1 + 1}: {grow / 1e3:.1f} kB a slice; by part: " + ", ".join(
            f"{name} {(b[name] - a.get(name, 0)) / max(1, k1 - k0) / 1e3:.1f}" for name in b
            if abs(b[name] - a.get(name, 0)) > 1000))


if __name__ == "__main__":
    main()
