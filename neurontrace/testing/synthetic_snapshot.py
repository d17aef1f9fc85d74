"""SYNTHETIC PyTorch memory snapshots, built from the documented format, for tests where no GPU is at hand.

Nothing here is a measurement. The structure follows the ``_snapshot`` docstring of ``torch/cuda/memory.py``
(``Snapshot``, ``Segment``, ``Block``, ``Frame``, ``TraceEntry``): the caching allocator reserves segments
(``segment_alloc``), allocates blocks in them (``alloc``), and a free is requested (``free_requested``) then
completed (``free_completed``) once the stream's work is done. The snapshot carries
``neurontrace_synthetic`` so every report that reads it says SYNTHETIC.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

MIB = 1024**2
NOTE = "SYNTHETIC memory snapshot made by neurontrace.testing.synthetic_snapshot (not a measurement)"


def _frames(line: int, name: str) -> list[dict[str, Any]]:
    # innermost first, as the allocator records them: the library frame, then the user's line
    return [{"filename": "torch/nn/modules/linear.py", "line": 125, "name": "forward"},
            {"filename": "train.py", "line": line, "name": name},
            {"filename": "train.py", "line": 90, "name": "<module>"}]


def leaky_steps(steps: int = 4, leak_bytes: int = 8 * MIB, temp_bytes: int = 64 * MIB,
                oom_bytes: int | None = None) -> dict[str, Any]:
    """A snapshot of ``steps`` steps on cuda:0: each allocates and frees a ``temp_bytes`` temporary
    (train.py:12 in ``step``) and keeps a ``leak_bytes`` block alive (train.py:20 in ``step``); a weight
    block allocated before the history began stays live throughout. ``oom_bytes``: the last entry is an
    allocation of that size that failed."""
    seg_base, seg_size = 0x7F0000000000, 2048 * MIB
    weight = (seg_base, 16 * MIB)
    entries: list[dict[str, Any]] = []
    t = 1_700_000_000_000_000  # time_us (unix epoch microseconds)
    leaks = []
    temp_addr = seg_base + 1024 * MIB
    for i in range(steps):
        t += 1000
        entries.append({"action": "alloc", "addr": temp_addr, "size": temp_bytes, "stream": 0, "time_us": t,
                        "frames": _frames(12, "step")})
        t += 500
        entries.append({"action": "free_requested", "addr": temp_addr, "size": temp_bytes, "stream": 0,
                        "time_us": t, "frames": _frames(13, "step")})
        entries.append({"action": "free_completed", "addr": temp_addr, "size": temp_bytes, "stream": 0,
                        "time_us": t + 10, "frames": _frames(13, "step")})
        addr = seg_base + weight[1] + i * leak_bytes
        t += 200
        entries.append({"action": "alloc", "addr": addr, "size": leak_bytes, "stream": 0, "time_us": t,
                        "frames": _frames(20, "step")})
        leaks.append(addr)
        t += 300
        entries.append({"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": t, "frames": []})
    if oom_bytes is not None:
        entries.append({"action": "oom", "size": oom_bytes, "stream": 0, "time_us": t + 50, "device_free": 0,
                        "frames": _frames(30, "step")})
    blocks = [{"address": weight[0], "size": weight[1], "requested_size": weight[1], "state": "active_allocated",
               "frames": _frames(5, "build_model")}]
    blocks += [{"address": a, "size": leak_bytes, "requested_size": leak_bytes, "state": "active_allocated",
                "frames": _frames(20, "step")} for a in leaks]
    used = weight[1] + leak_bytes * len(leaks)
    blocks.append({"address": seg_base + used, "size": seg_size - used, "requested_size": 0, "state": "inactive",
                   "frames": []})
    segment = {"device": 0, "address": seg_base, "total_size": seg_size, "stream": 0, "segment_type": "large",
               "segment_pool_id": (0, 0), "allocated_size": used, "active_size": used, "blocks": blocks}
    return {"segments": [segment], "device_traces": [entries], "allocator_settings": {},
            "neurontrace_synthetic": NOTE}


def write(snapshot: dict[str, Any], path: Path) -> Path:
    """The snapshot pickled as ``_dump_snapshot`` writes it."""
    path.write_bytes(pickle.dumps(snapshot, protocol=4))
    return path
