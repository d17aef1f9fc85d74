"""Legacy Neuron JSON (device and system) and summary-json / summary-text: micro inputs, expected rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import neurontrace
from neurontrace.errors import MalformedTraceError, NeuronProfileWarning
from neurontrace.parsers import neuron_summary
from neurontrace.testing import synthetic_neuron as syn
from tests.micro import rows

ID = "n_917c19d01695130056025ae3c98c9ff05b1bd1ee"
SYS_ID = "s_" + "a" * 40


def write(tmp_path: Path, doc: Any, name: str = "ntff.json") -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def test_device_json_sections_become_device_events(tmp_path: Path) -> None:
    p = write(tmp_path, {
        "summary": [{"total_time": 2.2e-05, "mfu_estimated_percent": 0.0097, "nc_idx": 1}],
        "instruction": [
            {"timestamp": 10261883214, "duration": 148, "label": "TensorMatrix", "subgroup": "pe0",
             "opcode": "MATMUL", "operands": "x", "hlo_name": "%add.1 = add(%dot, %c)"},
            {"timestamp": 10261883400, "duration": 20, "subgroup": "act", "opcode": "ACTIVATE"},
        ],
        "dma": [{"timestamp": 10261883300, "duration": 50, "variable": "w", "transfer_size": 4096,
                 "source": [["WEIGHT"]], "dest": ["SB"], "queue_type": "data"},
                {"timestamp": 10261883310, "duration": 5, "variable": "r", "transfer_size": 8,
                 "source": [["REMOTE"]], "dest": ["SB"], "queue_type": "software_dynamic"}],
        "cc_ops": [{"timestamp": 10261883500, "duration": 900, "operation": "AllGather", "input_size": 1024,
                    "cc_trigger": 10261883490, "cc_trigger_start_delay": 10}],
        "neff_node": [{"variable_name": "input36", "shape": "[2048 512]", "size": "4194304", "type": "IN"}],
        "profile_info": [{"ntff_filename": "profile.ntff"}],
    })
    assert neurontrace.detect(p).name == "neuron-json"
    t = neurontrace.load(p)
    assert rows(t, "device_events", "ts_ns", "dur_ns", "name", "category", "track", "device", "bytes",
                "direction") == [
        (10261883214, 148, "MATMUL", "compute", "tensor", "neuron:nc1", None, None),
        (10261883400, 20, "ACTIVATE", "compute", "scalar", "neuron:nc1", None, None),
        (10261883300, 50, "w", "dma", "dma data", "neuron:nc1", 4096, "d2d"),
        (10261883310, 5, "r", "dma", "dma software_dynamic", "neuron:nc1", 8, "p2p"),
        (10261883500, 900, "AllGather", "collective", "cc ops", "neuron:nc1", 1024, None),
    ]
    frame = t.frames.to_pylist()[t.device_events["frame_id"][0].as_py()]
    assert (frame["kind"], frame["function"]) == ("hlo", "%add.1 = add(%dot, %c)")
    assert json.loads(t.device_events["args"][0].as_py()) == {"label": "TensorMatrix", "subgroup": "pe0",
                                                               "operands": "x", "hlo_name": "%add.1 = add(%dot, %c)"}
    assert json.loads(t.device_events["args"][2].as_py())["source"] == [["WEIGHT"]]
    assert t.meta("neuron.summary")[0]["metrics"]["mfu_estimated_percent"] == 0.0097
    assert t.meta("neuron_json.neff_node")[0]["variable_name"] == "input36"
    assert t.meta("clock") == "neuron_device_relative_ns" and "ns from the profile start" in t.meta("alignment")["note"]
    (acct,) = t.accounting
    assert acct.kept == {"device_events": 5, "metadata": 3} and acct.events_read == 8


def test_system_json_events_counters_and_warnings(tmp_path: Path) -> None:
    p = write(tmp_path, {
        "trace_event": [
            {"name": "nrt_tensor_write", "timestamp": 1729888371056597613, "duration": 27094, "group": "nrt-nc-000",
             "type": 11, "id": 1, "parent_id": 0, "instance_id": "i-0f207fb2a99bd2d08", "process_id": "1627711",
             "thread_id": 1627711, "lnc_idx": "0", "size": "4", "tensor_id": "4900392441224765051"},
            {"name": "PjitFunction(matmul_allgather)", "timestamp": 1729888382798557372, "duration": 3758079,
             "group": "framework-80375131", "type": 99999, "instance_id": "i-0f207fb2a99bd2d08",
             "process_id": "701", "thread_id": 80375131},
            {"name": "nc_exec_running", "timestamp": 1729888382798600000, "duration": 5000, "group": "nrt-nc-000",
             "type": 11, "nc_idx": 0, "exec_id": 7, "instance_id": "i-0f207fb2a99bd2d08"},
        ],
        "cpu_util": [{"cpu_id": "average", "duration": 1000, "instance_id": "i-0f207fb2a99bd2d08",
                      "timestamp": 1729888371000000000, "util": 50.0}],
        "warnings": [{"message": "12 trace events were dropped during capture"}],
    }, name="system_profile.json")
    with pytest.warns(NeuronProfileWarning, match="12 trace events were dropped"):
        t = neurontrace.load(p)
    assert rows(t, "system_events", "name", "category", "track", "host", "pid", "tid") == [
        ("nrt_tensor_write", "transfer", "nrt-nc-000", "i-0f207fb2a99bd2d08", "1627711", "1627711"),
        ("PjitFunction(matmul_allgather)", "other", "framework-80375131", "i-0f207fb2a99bd2d08", "701", "80375131"),
    ]
    assert rows(t, "device_events", "name", "category", "device", "correlation") == [
        ("nc_exec_running", "execution", "neuron:nc0", 7)]
    assert rows(t, "counters", "name", "field", "value", "unit", "device") == [
        ("CpuUsage", "util", 0.5, "fraction", "cpu")]
    assert t.meta("clock") == "unix_epoch_ns"


def test_broken_json_is_a_named_error(tmp_path: Path) -> None:
    p = write(tmp_path, '{"instruction": [{"timestamp": 1, "duration": 2}, ', name="cut.json")
    with pytest.raises(MalformedTraceError, match="not valid JSON"):
        neurontrace.load(p)


def test_synthetic_legacy_json_round_trip(tmp_path: Path) -> None:
    dev, system = syn.write_legacy_json(syn.Scenario(executions=1), tmp_path)
    d, s = neurontrace.load(dev), neurontrace.load(system)
    assert d.meta("synthetic") is True and s.meta("synthetic") is True
    assert d.device_events.num_rows == 70 + 12 + 1 and s.device_events.num_rows == 1


SUMMARY_TEXT = f"""ubuntu@ip-10-0-0-1:~$ neuron-profile view -n file.neff -s profile.ntff --output-format summary-text
WARN[0000] NeuronCore buffer usage simulation is disabled for output format summary-text.
{ID}
    dma_transfer_count                          6
    total_time                                  2.6416626e-05
    dma_active_time_percent                     0.35276
    profiler_version                            2.25.145.0%kaena-tools/2.25@866f606
    nc_idx                                      0
{SYS_ID}
    total_duration_ns                           1786270865722793417
    event_type_count:
        nc_exec_running                         40
        cc_running                              720
    message_count:
        Cpu_Util_Message_Count                  3
"""


def test_summary_text_metrics(tmp_path: Path) -> None:
    p = write(tmp_path, SUMMARY_TEXT, name="summary.txt")
    assert neurontrace.detect(p).name == "neuron-summary"
    t = neurontrace.load(p)
    dev, system = t.meta_all("neuron.summary")
    assert dev == {"profile_id": ID, "kind": "device", "device": "neuron:nc0",
                   "percent_scale": "fraction 0..1 in the input (kept)",
                   "metrics": {"dma_transfer_count": 6, "total_time": 2.6416626e-05, "dma_active_time_percent": 0.35276,
                               "profiler_version": "2.25.145.0%kaena-tools/2.25@866f606", "nc_idx": 0}}
    assert system["kind"] == "system" and system["metrics"] == {
        "total_duration_ns": 1786270865722793417, "event_type_count.nc_exec_running": 40,
        "event_type_count.cc_running": 720, "message_count.Cpu_Util_Message_Count": 3}
    (acct,) = t.accounting
    assert acct.kept == {"metadata": 9}
    assert acct.skipped == {"log or prompt line outside a profile block": 2, "profile header line": 2,
                            "nested block header": 2}
    table = neuron_summary.metrics_table(t).to_pylist()
    assert {r["metric"]: r["unit"] for r in table if r["profile_id"] == ID} == {
        "dma_transfer_count": "count", "total_time": "s", "dma_active_time_percent": "fraction",
        "profiler_version": None, "nc_idx": None}


def test_summary_json_percent_values_are_fractions(tmp_path: Path) -> None:
    p = write(tmp_path, {ID: {"total_time": 2.2e-05, "mfu_estimated_percent": 0.0097, "nc_idx": 0,
                              "instance_type": "trn2.48xlarge"}}, name="summary.json")
    (s,) = neurontrace.load(p).meta_all("neuron.summary")
    assert s["metrics"]["mfu_estimated_percent"] == 0.0097 and s["percent_scale"].startswith("fraction")
    # A tool writing 0-100 is caught by the range check.
    p2 = write(tmp_path, {ID: {"mfu_estimated_percent": 31.0, "hfu_estimated_percent": 0.5}}, name="pct.json")
    (s2,) = neurontrace.load(p2).meta_all("neuron.summary")
    assert s2["metrics"] == {"mfu_estimated_percent": 0.31, "hfu_estimated_percent": 0.005}
    assert s2["percent_scale"].startswith("0-100")


def test_summary_without_a_profile_is_malformed(tmp_path: Path) -> None:
    p = write(tmp_path, f"{ID}\n    total_time 1.0\n", name="s.txt")
    p.write_text("WARN only a log line\n")
    with pytest.raises(MalformedTraceError, match="no n_<id>/s_<id> profile"):
        neuron_summary.parse(p)


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_synthetic_summaries_are_labelled(tmp_path: Path, fmt: str) -> None:
    t = neurontrace.load(syn.write_summary(syn.Scenario(), tmp_path / f"s.{fmt}", fmt=fmt))
    assert t.meta("synthetic") is True
    metrics = t.meta("neuron.summary")["metrics"]
    # As in real files: total_time carries ~2.08 ms of start-up, *_percent are fractions of total_time.
    assert metrics == {**syn.summary_metrics(syn.Scenario()), **{k: metrics[k] for k in metrics
                                                                 if k not in syn.summary_metrics(syn.Scenario())}}
    assert metrics["total_time"] == pytest.approx(metrics["total_active_time"] + syn.STARTUP_S)
    assert metrics["throttle_active_nc0_time_ns"] == 4000
