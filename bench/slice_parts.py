"""What the out-of-core merges of memory and compile hold: the bytes of their slices' parts beside the raw JSON.

Usage: python bench/slice_parts.py TRACE [TRACE ...] [--cuts N]

Method: each trace is loaded, sanitized and cut at its step boundaries (``ProfilerStep#N`` starts, as
diagnose DATASET's planner cuts; ``--cuts N``: N instants evenly spread instead); every registered section
is computed on each slice with ``Options.owned`` (tests/sliced_sections.py), and for memory (analysis/
memory_slices.py) and compile (analysis/compile_slices.py), whose slices keep their own rows for the merge,
the rows and Arrow bytes of all the slices' parts together are printed beside the raw (uncompressed) JSON's
size: what ``merge`` holds at once, whatever the slices' size. The merged values are checked equal to the
whole rank's (the script fails otherwise). The other sections' slice values are figures, not rows.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import neurontrace  # noqa: E402
from neurontrace.analysis import compile, memory  # noqa: E402
from tests.sliced_sections import Sliced, even_cuts, step_cuts  # noqa: E402


def raw_size(path: Path) -> int:
    if path.name.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return sum(len(b) for b in iter(lambda: f.read(1 << 24), b""))
    return path.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--cuts", type=int, default=0, help="N evenly spread cuts instead of the step boundaries")
    args = ap.parse_args()
    print(f"{'trace':<44} {'slices':>6} {'section':<8} {'rows':>9} {'Arrow MB':>9} {'JSON MB':>9} {'share':>7}")
    for path in args.traces:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = Sliced(neurontrace.load(path))
        cuts = even_cuts(run.trace, args.cuts) if args.cuts else step_cuts(run.trace)
        parts = run.slices(cuts)
        raw = raw_size(path)
        for section, attr in ((memory.SECTION, "rows"), (compile.SECTION, "host")):
            if run.merged(section, parts) != run.want(section):
                raise SystemExit(f"{path}: {section.key}'s merge differs from the whole rank's")
            tables = [getattr(p[section.key], attr) for p in parts if p.get(section.key) is not None]
            rows, nbytes = sum(t.num_rows for t in tables), sum(t.nbytes for t in tables)
            print(f"{path.name[:44]:<44} {len(parts):>6} {section.key:<8} {rows:>9,} {nbytes / 1e6:>9.2f} "
                  f"{raw / 1e6:>9.1f} {nbytes / raw:>7.2%}")


if __name__ == "__main__":
    main()
