"""TorchNeuron capture directories: framework trace + device profiles, one or many ranks, aligned.

Captures are synthetic (``neurontrace.testing.synthetic_neuron.write_capture``); decoding raw NTFFs uses the
``neuron-explorer`` test double from ``test_neuron_ntff``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pytest

import neurontrace
from neurontrace.errors import NeuronProfileWarning, NeuronToolMissingWarning
from neurontrace.load import Probe
from neurontrace.parsers import torchneuron_capture
from neurontrace.testing import synthetic_neuron as syn
from tests.micro import rows
from tests.test_neuron_ntff import fake_tool

RANK0 = syn.Scenario(rank=0)
RANK1 = syn.Scenario(instance_id="i-0synthetic000000002", pid=5555, nc_idx=1, rank=1,
                     host_epoch_ns=RANK0.host_epoch_ns + 7_000)


def test_multi_rank_root_loads_as_one_trace_with_host_and_rank(tmp_path: Path) -> None:
    root = tmp_path / "profile_output"
    for sc in (RANK0, RANK1):
        syn.write_capture(sc, root)
    assert neurontrace.detect(root).name == "torchneuron-capture"
    t = neurontrace.load(root)
    assert t.meta("format") == "torchneuron-capture" and t.meta("clock") == "unix_epoch_ns"
    assert t.meta("synthetic") is True
    for table in ("system_events", "device_events"):
        where = set(rows(t, table, "host", "rank"))
        assert where == {(RANK0.instance_id, 0), (RANK1.instance_id, 1)}, table
    assert set(rows(t, "device_events", "rank", "device")) == {(0, "neuron:nc0"), (1, "neuron:nc1")}
    # The framework trace comes from trace.json via the Kineto parser, and only once.
    cats = rows(t, "system_events", "rank", "name", "raw_category")
    assert cats.count((0, "aten::linear", "cpu_op")) == 2
    assert (0, "nrt_execute", "privateuse1_driver") in cats and (0, "neuron::dispatch", "privateuse1_runtime") in cats
    formats = [a.format for a in t.accounting]
    assert formats == ["torchneuron-capture", "kineto", "neuron-explorer", "kineto", "neuron-explorer"]
    al = t.meta("alignment")
    assert [leaf["rank_source"] for leaf in al] == ["framework trace (distributedInfo)"] * 2
    assert [leaf["device"][0]["method"] for leaf in al] == ["nc_exec_running"] * 2
    assert [leaf["framework"][0]["clock"] for leaf in al] == ["unix_epoch_ns"] * 2


def test_device_time_lands_where_the_host_launched_it(tmp_path: Path) -> None:
    leaf = syn.write_capture(RANK1, tmp_path)
    t = neurontrace.load(leaf.parent)
    dev = t.device_events.filter(pc.equal(t.device_events["raw_category"], "Instruction"))
    first_instruction = pc.min(dev["ts_ns"]).as_py()
    driver = t.system_events.filter(pc.equal(t.system_events["raw_category"], "privateuse1_driver"))
    # The synthetic driver call (nrt_execute) ends exactly when the device execution starts.
    ends = sorted(a + b for a, b in zip(driver["ts_ns"].to_pylist(), driver["dur_ns"].to_pylist(), strict=True))
    assert first_instruction == ends[0] == RANK1.host_epoch_ns + RANK1.exec_start_ns


def test_rank_from_folder_order_when_the_trace_has_none(tmp_path: Path) -> None:
    for sc in (syn.Scenario(), syn.Scenario(instance_id="i-0synthetic000000009", pid=9)):
        syn.write_capture(sc, tmp_path)
    t = neurontrace.load(tmp_path)
    assert {r for (r,) in rows(t, "device_events", "rank")} == {0, 1}
    assert t.meta("rank_source") == ["folder position in the capture root (no rank in the framework trace)"]


def test_without_neuron_explorer_the_framework_trace_loads_alone(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NEURONTRACE_NEURON_EXPLORER", raising=False)
    monkeypatch.setattr(torchneuron_capture, "find_tool", lambda _: None)
    leaf = syn.write_capture(RANK0, tmp_path / "out", processed=False)
    with pytest.warns(NeuronToolMissingWarning, match=r"(?s)not decoded; .*neuron-explorer view -d .*--output-format parquet"):
        t = neurontrace.load(leaf)
    assert t.device_events.num_rows == 0 and t.system_events.num_rows == 7
    capture_acct = t.accounting[0]
    assert capture_acct.skipped == {"not decoded: neuron-explorer is not installed": 4}
    assert t.meta("alignment")[0]["device_source"] == "not decoded (neuron-explorer missing)"


def test_raw_capture_is_decoded_with_view_d_and_empty_ntffs_are_reported(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake_tool(tmp_path, monkeypatch)
    leaf = syn.write_capture(RANK0, tmp_path / "out", processed=False)
    (leaf / "profile_nc_1_session_0.ntff").write_bytes(b"")
    with pytest.warns(NeuronProfileWarning, match=r"1 NTFF file\(s\) are empty .*ran nothing"):
        t = neurontrace.load(leaf.parent)
    (call,) = log.read_text().splitlines()
    assert call.startswith(f"view -d {leaf} --output-format parquet")
    assert t.device_events.num_rows > 0 and set(rows(t, "device_events", "host")) == {(RANK0.instance_id,)}
    acct = t.accounting
    assert acct[0].skipped["empty NTFF (the NeuronCore ran nothing)"] == 1
    explorer = next(a for a in acct if a.format == "neuron-explorer")
    assert explorer.skipped["SystemProfileEvents: framework events (the same trace.json is loaded by the Kineto "
                            "parser)"] == 2
    assert json.loads(json.dumps(t.meta("alignment")))[0]["device_source"] == "decoded by neuron-explorer view -d"


def test_sniffing_claims_captures_but_not_plain_trace_folders(tmp_path: Path) -> None:
    leaf = syn.write_capture(RANK0, tmp_path / "out")
    assert neurontrace.detect(leaf).name == "torchneuron-capture"
    assert neurontrace.detect(leaf.parent).name == "torchneuron-capture"
    assert neurontrace.detect(leaf / "synthetic_mlp_parquet").name == "neuron-explorer"
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "trace.json").write_text(json.dumps(syn.kineto_trace(RANK0)))
    assert not torchneuron_capture.sniff(Probe(plain))
