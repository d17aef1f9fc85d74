"""Summary-only inputs give a real per-NeuronCore report (issue: summaries were an empty `cpu` device).

The fixtures are written here from the key names and quirks of real outputs (formats/neuron.md §4 and
its addendum): a shell prompt and a ``WARN`` line before the data, Go-style floats, ``*_percent``
fractions 0..1, ``total_time`` with ~2 ms of start-up, per-**physical**-core throttle keys. The values
are made up to trip each rule; they are not measurements.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import neurontrace
from neurontrace.analysis.neuron_summary import neuron_summaries

PID = "n_6a9f72dff4d4e0509c1e47661fbbf1737746038b"
PID2 = "n_917c19d01695130056025ae3c98c9ff05b1bd1ee"
# One logical core (nc_idx 1) whose throttle keys name physical cores 2 and 3 (LNC=2 on trn2).
METRICS = {
    "total_time": 2.1e-03, "total_exec_time": 2.5e-05, "total_active_time": 2.0e-05,
    "total_active_time_percent": 0.009523809523809525,
    "tensor_engine_active_time": 1.2e-05, "tensor_engine_active_time_percent": 0.005714285714285714,
    "vector_engine_active_time": 4.0e-06, "vector_engine_active_time_percent": 0.0019047619047619048,
    "scalar_engine_active_time_percent": 0.001, "gpsimd_engine_active_time_percent": 0.0,
    "mfu_estimated_percent": 0.0009969, "hfu_estimated_percent": 0.0041, "mbu_estimated_percent": 0.008322879540435138,
    "model_flops": 1048576, "hardware_flops": 4194304, "transpose_flops": 1048576,
    "dma_transfer_count": 640, "dma_transfer_total_bytes": 655360, "dma_active_time": 1.5e-05,
    "hbm_read_bytes": 400000, "hbm_write_bytes": 200000, "spill_save_bytes": 120000, "spill_reload_bytes": 150000,
    "cc_op_count": 2, "cc_op_active_time_percent": 0.001,
    "throttle_active_nc2_time_ns": 1500, "throttle_avg_util_limit_nc2_percent": 0.75,
    "throttle_activity_0_active_time_nc2_percent": 0.05, "throttle_gpio_1_active_time_nc3_percent": 0.0,
    "instance_type": "trn2.3xlarge", "profiler_version": "2.25.145.0%kaena-tools/2.25@866f606",
    "nc_idx": 1, "nd_idx": 0,
}


def go_float(v: object) -> str:
    """Go's shortest round-trip form, as neuron-profile prints (``1.4000184e-05``): Python's repr."""
    return repr(v) if isinstance(v, float) else str(v)


def summary_text(path: Path, profiles: dict[str, dict[str, object]]) -> Path:
    lines = [("ubuntu@ip-172-31-0-1:~/kernels$ neuron-profile view -n file.neff -s profile.ntff "
             "--output-format summary-text"),
             ("WARN[0000] NeuronCore buffer usage simulation is disabled for output format summary-text. "
             "Specify --enable-nc-buf-usage to enable it.")]
    for pid, metrics in profiles.items():
        lines.append(pid)
        lines += [f"    {k:<44}{go_float(v)}" for k, v in metrics.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(params=["text", "json"])
def summary(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    other = {**METRICS, "nc_idx": 0, "mfu_estimated_percent": 0.4, "tensor_engine_active_time_percent": 0.6}
    other = {k: v for k, v in other.items() if not k.startswith(("throttle_", "spill_", "transpose"))}
    profiles = {PID: METRICS, PID2: other}
    if request.param == "text":
        return summary_text(tmp_path / "summary.txt", profiles)
    p = tmp_path / "summary.json"
    p.write_text(json.dumps(profiles))
    return p


def test_every_metric_is_kept_under_its_own_key_with_its_exact_value(summary: Path) -> None:
    cores = {c.device: c for c in neuron_summaries(neurontrace.load(summary))}
    assert set(cores) == {"neuron:nc0", "neuron:nc1"}
    c = cores["neuron:nc1"]
    assert c.profile_id == PID and c.metrics == METRICS  # exact: same keys, same values, fractions stay 0..1


def test_derived_figures_use_active_time_as_the_denominator(summary: Path) -> None:
    (c,) = [c for c in neuron_summaries(neurontrace.load(summary)) if c.device == "neuron:nc1"]
    d = c.derived
    assert d["total_time_s"] == 2.1e-03 and d["active_time_s"] == 2.0e-05
    assert d["engine_share_of_active"]["tensor"] == pytest.approx(0.6)  # 12 µs of 20 µs active, not of 2.1 ms
    assert d["engine_share_of_active"]["scalar"] == pytest.approx(0.001 * 2.1e-3 / 2e-5)
    assert d["dma"] == {"transfers": 640, "bytes": 655360, "average_bytes": 1024,
                        "active_share_of_active": pytest.approx(0.75)}
    assert d["hbm"]["read_bytes_per_s"] == pytest.approx(400000 / 2e-5)
    assert d["spill"]["reload_share_of_hbm_reads"] == pytest.approx(0.375)
    assert d["flops"]["transpose_share_of_hardware"] == 0.25
    assert (d["mfu"], d["hfu"], d["mbu"]) == (0.0009969, 0.0041, 0.008322879540435138)


def test_throttling_is_keyed_by_the_physical_core(summary: Path) -> None:
    (c,) = [c for c in neuron_summaries(neurontrace.load(summary)) if c.device == "neuron:nc1"]
    assert c.throttling == {
        "nc2": {"active_time_ns": 1500, "avg_util_limit_fraction": 0.75,
                "by_type": {"activity_0": {"active_time_fraction": 0.05}}},
        "nc3": {"by_type": {"gpio_1": {"active_time_fraction": 0.0}}},
    }


def test_neuron_explorer_summary_rules(summary: Path) -> None:
    cores = {c.device: c for c in neuron_summaries(neurontrace.load(summary))}
    fired = {f["id"] for f in cores["neuron:nc1"].findings}
    assert fired == {"low_model_flops", "transpose_flops", "spill_reload", "throttling", "small_dma", "low_mfu"}
    throttle = next(f for f in cores["neuron:nc1"].findings if f["id"] == "throttling")
    assert "physical nc2" in throttle["evidence"] and "nc3" not in throttle["evidence"]
    # The other core: MFU 0.4 of 0.6 tensor-active is 67% of active FLOPs, no spill/transpose/throttle keys.
    assert {f["id"] for f in cores["neuron:nc0"].findings} == {"small_dma"}


def test_diagnose_of_a_summary_alone_is_a_report_not_an_empty_cpu_window(tmp_path: Path) -> None:
    p = summary_text(tmp_path / "summary.txt", {PID: METRICS})
    res = subprocess.run([sys.executable, "-m", "neurontrace", "diagnose", str(p), "--json"], capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["devices"] == []  # no events: nothing to attribute, and no empty `cpu` device
    (core,) = doc["neuron_summary"]
    assert core["metrics"] == METRICS and core["device"] == "neuron:nc1"
    assert core["derived"]["active_time_s"] == 2.0e-05
    assert {"low_model_flops", "spill_reload", "throttling"} <= {f["id"] for f in doc["findings"]}
    text = subprocess.run([sys.executable, "-m", "neurontrace", "diagnose", str(p)], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, "COLUMNS": "200"}).stdout
    assert "window 0.000 ms" not in text and "empty trace" not in text and "cross-rank" not in text
    assert "total 2.10 ms, active 20.0 µs" in text and "throttling on physical nc2" in text
