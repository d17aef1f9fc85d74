"""Mutators for the newer inputs (issue #29 item 5): TORCH_TRACE compile logs and memory-snapshot pickles.

- compile logs: the real tlparse logs of the corpus (shared/corpus/compile), with a JSON payload cut,
  a payload line without its envelope, binary junk, flipped bytes, another encoding, a long line, an
  envelope whose JSON is of another shape;
- snapshot pickles: neurontrace.testing.synthetic_snapshot's snapshot (SYNTHETIC: built from the format
  torch/cuda/memory.py documents in ``_snapshot``) cut, flipped, nested 100,000 deep, naming a global
  (``os.system`` through ``__reduce__``: must be refused, never run), or with values of other types.

Each case must give a result or a named error through the command a user runs (``neurontrace compile``,
``neurontrace memory``/``diagnose``), never a traceback.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import random
import warnings
from pathlib import Path
from typing import Any

from neurontrace.cli import main


def compile_logs() -> list[Path]:
    """The real tlparse logs of the corpus (shared/corpus/compile/tlparse, beside the Kineto corpus)."""
    from tests.conftest import corpus_root

    kineto = corpus_root()
    root = kineto.parent / "compile" / "tlparse" if kineto is not None else None
    return sorted(root.glob("*.log")) if root is not None and root.is_dir() else []


def log_mutation(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    lines = data.split(b"\n")
    kind = rng.choice(["cut_payload", "no_envelope", "junk", "flip", "encoding", "long_line", "odd_json",
                       "truncate"])
    i = rng.randrange(len(lines))
    if kind == "cut_payload":
        lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
    elif kind == "no_envelope":
        lines[i] = lines[i].split(b"] ", 1)[-1]
    elif kind == "junk":
        lines.insert(i, rng.randbytes(rng.randint(1, 400)))
    elif kind == "long_line":
        lines.insert(i, b"V1206 15:18:15.925000 1 torch/_dynamo/utils.py:1] {\"x\": \"" + b"a" * 2_000_000 + b"\"}")
    elif kind == "odd_json":
        lines.insert(i, b"V1206 15:18:15.925000 1 torch/_dynamo/utils.py:1] " + rng.choice(
            [b"[1, 2]", b"7", b"null", b"{\"dynamo_start\": 5}", b"{\"compile_id\": []}", b"{\"has_payload\": {}}",
             b"{\"chromium_event\": {}, \"has_payload\": \"x\"}", b"{" * 5000 + b"}" * 5000,
             b"{\"dynamo_start\": {\"stack\": 1e400}}", b"{\"str\": [\"\\ud800\", 1, 2]}"]))
    out = b"\n".join(lines)
    if kind == "flip":
        b = bytearray(out)
        for _ in range(rng.randint(1, 5)):
            j = rng.randrange(len(b))
            b[j] ^= 1 << rng.randrange(8)
        out = bytes(b)
    elif kind == "encoding":
        out = out.decode("utf-8", "replace").encode(rng.choice(["utf-16", "latin-1", "utf-32"]), "replace")
    elif kind == "truncate":
        out = out[: rng.randrange(len(out))]
    return kind, out


class _Boom:
    """A pickle payload that would run a command if unpickled (it must be refused)."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, ("touch " + os.environ.get("NEURONTRACE_FUZZ_CANARY", "/nonexistent/canary"),))


def pickle_mutation(snapshot: dict[str, Any], rng: random.Random) -> tuple[str, bytes]:
    kind = rng.choice(["cut", "flip", "deep", "global", "retype", "huge_numbers"])
    data = pickle.dumps(snapshot, protocol=rng.choice([2, 4, 5]))
    if kind == "cut":
        return kind, data[: rng.randrange(len(data))]
    if kind == "flip":
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return kind, bytes(b)
    if kind == "deep":  # MARK ... LIST, nested: a list 100,000 deep, written without recursion
        n = rng.choice([1000, 100_000])
        return kind, b"\x80\x02" + b"(" * n + b"l" * n + b"."
    if kind == "global":
        return kind, pickle.dumps({"segments": [], "device_traces": [[_Boom()]]}, protocol=rng.choice([2, 4]))
    doc = pickle.loads(data)  # our own bytes, from the dict above
    if kind == "retype":
        key = rng.choice(["segments", "device_traces"])
        doc[key] = rng.choice([5, "x", None, {"a": 1}, [5, None, "x"], [[{"action": 3, "size": "big"}]]])
    else:
        for seg in doc.get("segments", [])[:3]:
            seg["total_size"] = rng.choice([2**70, -1, float("nan"), float("inf"), "1e400"])
            for blk in seg.get("blocks", [])[:3]:
                blk["size"] = rng.choice([2**64, -(2**70), float("nan")])
        for trace in doc.get("device_traces", [])[:1]:
            for e in trace[:5]:
                e["time_us"] = rng.choice([2**80, float("inf"), -1, "t"])
                e["addr"] = rng.choice([2**90, -5, None, "0x10"])
    return kind, pickle.dumps(doc, protocol=4)


def run_user(*argv: str) -> int:
    """One CLI run in this process; a non-named exception propagates (a traceback for the user)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return main(list(argv))
