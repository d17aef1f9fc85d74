"""Real CPU runs made here with PyTorch (tests/layer_runs.py): layers told apart by their shapes in a diff, and
autocast's casts kept out of the op's math."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import neurontrace
from neurontrace.analysis.diff import diff
from neurontrace.analysis.ops import op_table
from neurontrace.render import diff_report
from tests.layer_runs import BATCH, STEPS, WIDTH, layer_runs

pytestmark = pytest.mark.torch
W = WIDTH
LAYERS = {"fc1": [[BATCH, 128], [W, 128], [W]], "fc2": [[BATCH, W], [W, W], [W]], "fc3": [[BATCH, W], [64, W], [64]]}


@pytest.fixture(scope="module")
def runs() -> Path:
    pytest.importorskip("torch")
    return layer_runs()


def test_diff_names_the_slower_layer_by_its_shapes(runs: Path) -> None:
    d = diff(neurontrace.load(runs / "base.pt.trace.json"), neurontrace.load(runs / "slow.pt.trace.json"))
    assert d.ops is not None
    rows = [r for r in d.ops.to_pylist() if r["kind"] == "op" and r["name"] == "aten::linear"]
    assert len({r["source"] for r in rows}) == 1 and rows[0]["source"].endswith(" forward")  # one line of code ...
    by_shape = {r["shapes"]: r for r in rows}  # ... three layers
    assert set(by_shape) == {json.dumps(s) for s in LAYERS.values()}
    assert all(r["matched_by"] == "name+source" for r in rows)
    fc2 = by_shape[json.dumps(LAYERS["fc2"])]
    assert fc2["status"] == "slower" and (fc2["baseline_count"], fc2["change_count"]) == (STEPS, 3 * STEPS)
    for layer in ("fc1", "fc3"):
        r = by_shape[json.dumps(LAYERS[layer])]
        assert r["baseline_count"] == r["change_count"] == STEPS
    doc = d.as_dict()
    assert json.dumps(LAYERS["fc2"]) in {o["shapes"] for o in doc["ops"]}
    assert type(d).from_dict(doc).as_dict() == doc
    console = Console(record=True, width=250)
    diff_report.render(d, console)
    text = console.export_text()
    assert any(f"aten::linear {json.dumps(LAYERS['fc2'])}" in line and "slower" in line
               for line in text.splitlines())


def test_diff_without_shapes_on_one_side_still_matches_the_line(runs: Path, tmp_path: Path) -> None:
    """The slow run's trace with its Input Dims removed (as record_shapes=False writes it): the three layers fold
    into one row per line, matched with the baseline's, not reported added and removed."""
    doc = json.loads((runs / "slow.pt.trace.json").read_text())
    for e in doc["traceEvents"]:
        e.get("args", {}).pop("Input Dims", None)
    (tmp_path / "noshapes.json").write_text(json.dumps(doc))
    d = diff(neurontrace.load(runs / "base.pt.trace.json"), neurontrace.load(tmp_path / "noshapes.json"))
    assert d.ops is not None
    (row,) = [r for r in d.ops.to_pylist() if r["kind"] == "op" and r["name"] == "aten::linear"]
    assert row["shapes"] is None and (row["baseline_count"], row["change_count"]) == (3 * STEPS, 5 * STEPS)


def _inner_linear_ns(path: Path) -> int:
    """Independently of neurontrace: the summed duration of the aten::linear(c10::BFloat16, ...) inside each
    outermost aten::linear (whose weights are float: autocast casts them, then runs the inner op), in ns."""
    ev: list[dict[str, Any]] = [e for e in json.loads(path.read_text())["traceEvents"]
                                if e.get("cat") == "cpu_op" and e["name"] == "aten::linear"]

    def inside(e: dict[str, Any], o: dict[str, Any]) -> bool:
        return e is not o and e["tid"] == o["tid"] and o["ts"] <= e["ts"] and e["ts"] + e["dur"] <= o["ts"] + o["dur"]

    outer = [o for o in ev if not any(inside(o, p) for p in ev)]
    total = 0
    for o in outer:
        assert o["args"]["Input type"][1] == "float"
        (inner,) = [e for e in ev if inside(e, o)]
        assert set(inner["args"]["Input type"]) == {"c10::BFloat16"}
        total += round(inner["dur"] * 1000)
    return total


def test_autocast_precision_and_time_come_from_the_op_doing_the_math(runs: Path) -> None:
    path = runs / "autocast.pt.trace.json"
    rows = {r.op: r for r in op_table(neurontrace.load(path)).rows}
    linear = rows["aten::linear"]
    assert linear.dtype == "bf16" and linear.ops == 3 * STEPS  # the outer op records float inputs
    assert linear.flops == STEPS * 2 * BATCH * (128 * W + W * W + W * 64)
    assert linear.device_ns == pytest.approx(_inner_linear_ns(path), abs=len(LAYERS) * STEPS)
