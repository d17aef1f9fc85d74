"""Tiny traces for the viewer's tests, built straight as Arrow tables (every column under control).

    host  pid 1 / tid 1   [== main (frame pkg/model.py:3) ===========================]  0..100 µs
                            [== aten::mm (frame :3) ===]                                10..50
                               [launch]                                                 20..25, corr 7
    host  pid 1 / tid 2   [evil_rel ../../etc/passwd]  [evil_abs /etc/passwd]           0..40, 50..90
    device cuda:0 stream 7              [== kernel ==]                                  30..60, corr 7
    flows: launch → kernel (launch); step ProfilerStep#1 over 0..100 µs on tid 1
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import neurontrace
from neurontrace import Trace
from neurontrace.errors import TraceWarning
from tests.conftest import SAMPLES

T0 = 1_700_000_000_000_000_000  # an epoch-ns origin like real traces have
US = 1000

SOURCE = "\n".join(f"line {i} of model.py" if i != 3 else "def forward(x):  # line 3" for i in range(1, 31)) + "\n"


def tiny_trace(rank: int | None = None) -> Trace:
    def ev(rows: list[tuple[int, int, int, str, str, str, int | None, int | None]]) -> dict[str, list[object]]:
        cols: dict[str, list[object]] = {k: [] for k in ("event_id", "ts_ns", "dur_ns", "name", "category", "pid",
                                                         "tid", "track", "correlation", "frame_id")}
        for eid, ts, dur, name, cat, tid, corr, frame in rows:
            cols["event_id"].append(eid)
            cols["ts_ns"].append(T0 + ts * US)
            cols["dur_ns"].append(dur * US)
            cols["name"].append(name)
            cols["category"].append(cat)
            cols["pid"].append("1")
            cols["tid"].append(tid)
            cols["track"].append(f"thread {tid}")
            cols["correlation"].append(corr)
            cols["frame_id"].append(frame)
        return cols

    host = ev([
        (0, 0, 100, "ProfilerStep#1", "step", "1", None, None),
        (1, 0, 100, "pkg/model.py(3): forward", "python", "1", None, 0),
        (2, 10, 40, "aten::mm", "framework_op", "1", None, 0),
        (3, 20, 5, "cudaLaunchKernel", "runtime", "1", 7, 0),
        (4, 0, 40, "evil_rel", "framework_op", "2", None, 1),
        (5, 50, 40, "evil_abs", "framework_op", "2", None, 2),
    ])
    host["host"] = ["box"] * len(host["event_id"])
    host["rank"] = [rank] * len(host["event_id"])
    system = pa.table({**host, "args": ['{"note": "tiny"}'] * len(host["event_id"])})
    device = pa.table({
        "event_id": [10], "ts_ns": [T0 + 30 * US], "dur_ns": [30 * US], "name": ["volta_sgemm"],
        "category": ["compute"], "device": ["cuda:0"], "track": ["stream 7"], "correlation": [7], "frame_id": [0],
        "rank": pa.array([rank], pa.int32()),
    })
    frames = pa.table({
        "frame_id": [0, 1, 2], "parent_id": pa.array([None, None, None], pa.int64()),
        "file": ["pkg/model.py", "../../etc/passwd", "/etc/passwd"], "line": pa.array([3, 1, 1], pa.int32()),
        "function": ["forward", "evil_rel", "evil_abs"], "kind": ["python"] * 3, "is_user": [True] * 3,
    })
    flows = pa.table({"flow_id": ["7"], "kind": ["launch"], "src_event_id": [3], "dst_event_id": [10],
                      "src_ts_ns": [T0 + 20 * US], "dst_ts_ns": [T0 + 30 * US], "rank": pa.array([rank], pa.int32())})
    return Trace(system_events=system, device_events=device, frames=frames, flows=flows)


def source_root(tmp: Path) -> Path:
    """A source root holding pkg/model.py (line 3 is ``def forward``)."""
    root = tmp / "src"
    (root / "pkg").mkdir(parents=True, exist_ok=True)
    (root / "pkg" / "model.py").write_text(SOURCE)
    return root


def synthetic_neuron(tmp_path: Path) -> Path:
    """The shipped synthetic Neuron Explorer profile, or one written now."""
    shipped = SAMPLES / "synthetic_neuron" / "synthetic_mlp_parquet"
    if shipped.is_dir():
        return shipped
    if importlib.util.find_spec("neurontrace.testing.synthetic_neuron") is None:
        pytest.skip("no synthetic Neuron sample and no neurontrace.testing.synthetic_neuron to write one")
    from neurontrace.testing import synthetic_neuron as syn

    return Path(syn.write_explorer(syn.Scenario(), tmp_path / "synthetic_mlp_parquet"))


def load_quiet(path: Path) -> neurontrace.Trace:
    """Load, ignoring the load warnings synthetic profiles are built to raise (they are in the accounting)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        return neurontrace.load(path)


def layout_text(node: Any) -> str:
    """Every text of a Dash component tree, joined by spaces (what a reader of the page sees)."""
    if isinstance(node, str | int | float):
        return str(node)
    if isinstance(node, list | tuple):
        return " ".join(layout_text(n) for n in node)
    children = getattr(node, "children", None)
    return "" if children is None else layout_text(children)
