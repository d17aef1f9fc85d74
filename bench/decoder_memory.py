"""Peak memory of the Kineto decoders, as a multiple of the trace's size on disk.

Each measurement runs in a fresh child process: it reads the file once (so the page cache and the
imports are not counted), records its resident set size, parses the trace, and reports the peak
RSS above that baseline divided by the file's size. Inputs are generated (the shapes that cost the
most per byte):

- ``empty``: ``{}`` events (the per-event overhead alone),
- ``ops``: realistic cpu_op events with args,
- ``long``: events with 64 KiB names and args strings.

    python bench/decoder_memory.py                 # both decoders, 10 MB inputs
    python bench/decoder_memory.py --mb 40 --decoder python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import os, resource, sys, warnings
from pathlib import Path
path = Path(sys.argv[1])
from neurontrace.parsers import kineto
path.read_bytes()  # warm the page cache and the imports before the baseline
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
base = rss()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    trace = kineto.parse(path)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(max(peak - base, 0), trace.meta("decoder"))
"""


def make(kind: str, mb: float, out: Path) -> Path:
    target = int(mb * 1e6)
    if kind == "empty":
        one = "{}"
    elif kind == "ops":
        one = json.dumps({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2.25,
                          "args": {"External id": 7, "Record function id": 0, "Ev Idx": 3,
                                   "Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}})
    else:
        one = json.dumps({"ph": "X", "cat": "cpu_op", "name": "n" * 65536, "pid": 1, "tid": 1, "ts": 1, "dur": 1,
                          "args": {"note": "a" * 65536}})
    n = max(target // (len(one) + 1), 1)
    path = out / f"{kind}.json"
    with path.open("w") as f:
        f.write('{"traceEvents": [')
        f.write(",".join([one] * n))
        f.write("]}")
    return path


def measure(path: Path, decoder: str) -> tuple[float, str]:
    env = dict(os.environ)
    if decoder == "python":
        env["NEURONTRACE_KINETO_DECODER"] = "python"
    else:
        env.pop("NEURONTRACE_KINETO_DECODER", None)
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, env=env,
                         check=True)
    peak, _, used = out.stdout.strip().partition(" ")
    return int(peak) / path.stat().st_size, used


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=10.0, help="size of each generated trace (default 10 MB)")
    ap.add_argument("--decoder", choices=["python", "native", "both"], default="both")
    ap.add_argument("--kinds", default="empty,ops,long")
    args = ap.parse_args()
    decoders = ["python", "native"] if args.decoder == "both" else [args.decoder]
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'input':8} {'decoder':8} {'peak RSS / file size':>22}  decoder used")
        for kind in args.kinds.split(","):
            path = make(kind, args.mb, Path(tmp))
            for decoder in decoders:
                ratio, used = measure(path, decoder)
                print(f"{kind:8} {decoder:8} {ratio:21.1f}x  {used}")


if __name__ == "__main__":
    main()
