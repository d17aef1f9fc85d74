"""Formats read once: the normalized metadata keys (schema.NORMALIZED_KEYS) parsers derive, on real inputs.

Each rule is checked against the real Kineto traces of the corpus (what their JSON says, read here on its own),
against stored outputs written without the keys (as neurontrace wrote them before), and, for the rule that
an accelerator trace without device activity makes one warning, on the corpus simple_add with its device events
removed and on a real CPU trace of the TorchNeuron eager shape (tests/test_neuron_observed.py).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import neurontrace
from neurontrace import trace_facts
from neurontrace.analysis import load_warnings
from neurontrace.analysis.cross_rank import link_class, rank_collectives
from neurontrace.analysis.diagnose import diagnose
from neurontrace.analysis.memory import memory
from neurontrace.analysis.peaks import device_peak
from neurontrace.catalog import run_facts
from neurontrace.dataset import open_dataset, write_dataset
from neurontrace.parsers.kineto import parse_bytes
from neurontrace.parsers.neuron_explorer import parse as parse_explorer
from neurontrace.schema import DEVICE_ACTIVITY, DEVICES, DISTRIBUTED, NORMALIZED_KEYS, TOOL_VERSIONS
from neurontrace.testing.neuron_explorer_files import write_explorer
from neurontrace.testing.neuron_scenario import Scenario
from neurontrace.trace import Trace

HTA = "HolisticTraceAnalysis/tests/data"
A100 = f"{HTA}/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz"
NCCL = f"{HTA}/nccl_parser_config/nccl_data.json.gz"
TRITON = f"{HTA}/triton_example/triton_example.json.gz"
MI250 = f"{HTA}/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
MI300 = "TraceLens/tests/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz"
SGLANG = "TraceLens/tests/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"
NO_DEVICE = f"{HTA}/distributed_info_unavailable/distributed_info_not_found.json.gz"
REAL = (A100, NCCL, TRITON, MI250, MI300, SGLANG)


def _raw(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    return doc


def _load(path: Path) -> Trace:
    return neurontrace.load(path)


@pytest.mark.parametrize("rel", REAL)
def test_the_normalized_keys_say_what_the_real_file_says(corpus: Path, rel: str) -> None:
    doc, trace = _raw(corpus / rel), _load(corpus / rel)
    backend = trace.meta("backend")
    devices = trace_facts.devices(trace)
    for p in doc["deviceProperties"]:  # every listed device, under the id its events use
        d = devices[f"{backend}:{p['id']}"]
        assert (d.name, d.index, d.memory_bytes, d.kind) == (p["name"], p["id"], p["totalGlobalMem"], backend)
        assert d.compute_capability == f"{p['computeMajor']}.{p['computeMinor']}" and d.listed
        assert d.memory_source == f"deviceProperties[{p['id']}].totalGlobalMem"
    event_ids = set(pc.unique(trace.device_events["device"].cast(pa.string())).to_pylist())
    assert event_ids and event_ids <= set(devices)  # every device the events name has a record
    versions = trace_facts.tool_versions(trace)
    for key, value in doc.items():
        if "version" in key.lower() and not isinstance(value, dict | list):
            name = "kineto_schema" if key == "schemaVersion" else key.removesuffix("_version")
            assert versions.pop(name) == {str(value)}
    info = doc.get("distributedInfo")
    if info is None:
        assert versions == {} and trace_facts.distributed(trace) == []
        return
    assert versions == ({"nccl": {info["nccl_version"]}} if "nccl_version" in info else {})
    (dist,) = trace_facts.distributed(trace)
    assert (dist.rank, dist.world_size, dist.backend) == (info.get("rank"), info.get("world_size"),
                                                          info.get("backend"))
    assert [(g.name, g.size) for g in dist.groups] == [(pg["pg_name"], pg["pg_size"])
                                                       for pg in info.get("pg_config", [])]


def test_rocm_device_events_find_their_listed_device(corpus: Path) -> None:
    """Real MI300X trace: kernels on rocm:2, one device listed with id 0, memory events on rocm:0. The device
    id follows the device column (rocm:N, not cuda:N as cross_rank once keyed it), and rocm:2 is the listed one."""
    doc, trace = _raw(corpus / MI300), _load(corpus / MI300)
    (listed,) = doc["deviceProperties"]
    assert set(pc.unique(trace.device_events["device"].cast(pa.string())).to_pylist()) == {"rocm:2"}
    devices = trace_facts.devices(trace)
    assert set(devices) == {"rocm:0", "rocm:2"} and devices["rocm:2"].name == listed["name"] == "AMD Instinct MI300X VF"
    assert not devices["rocm:2"].listed and "only device" in devices["rocm:2"].evidence
    peak = device_peak(trace, "rocm:2")
    assert peak.name == listed["name"] and peak.peak is not None  # as before: the peaks knew the renumbering
    mem_of = memory(trace)
    assert mem_of is not None
    (mem,) = [d for d in mem_of.devices if d.device == "rocm:0"]
    assert (mem.capacity_bytes, mem.capacity_source) == (
        listed["totalGlobalMem"], f"deviceProperties[0].totalGlobalMem ({listed['name']})")
    # Cross-rank records now carry the ROCm device's name, so its link class is known. A labelled
    # transformation of the real file: one kernel renamed to an RCCL all-reduce kernel (no corpus ROCm trace
    # holds a collective).
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["name"] = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
    (record,) = rank_collectives(parse_bytes(json.dumps(doc).encode(), source="mi300_with_allreduce")).to_pylist()
    assert (record["device"], record["device_name"]) == ("rocm:2", listed["name"])
    assert link_class(record["device_name"]) == ("Infinity Fabric", 448.0)


def _without_normalized(trace: Trace) -> Trace:
    """``trace`` as an older neurontrace stored it: the same metadata without the normalized keys."""
    meta = trace.metadata
    old = pc.invert(pc.is_in(meta["key"], pa.array([k.key for k in NORMALIZED_KEYS])))
    return Trace(**{**trace.tables, "metadata": meta.filter(old)})


def _normalized(trace: Trace) -> dict[str, Any]:
    return {k.key: trace.meta_all(k.key) for k in NORMALIZED_KEYS}


def test_outputs_written_before_the_keys_get_them_on_read(corpus: Path, tmp_path: Path) -> None:
    fresh = _load(corpus / SGLANG)
    expected = _normalized(fresh)
    assert expected[DEVICES.key] and expected[TOOL_VERSIONS.key] and expected[DISTRIBUTED.key]
    older = _without_normalized(fresh)
    assert _normalized(older) == {k.key: [] for k in NORMALIZED_KEYS}
    older.to_parquet(tmp_path / "old_convert")
    assert _normalized(neurontrace.load(tmp_path / "old_convert")) == expected
    write_dataset([older], tmp_path / "old_dataset")
    assert _normalized(open_dataset(tmp_path / "old_dataset").load()) == expected
    fresh.to_parquet(tmp_path / "new_convert")  # an output that has them is read as it is: never twice
    assert _normalized(neurontrace.load(tmp_path / "new_convert")) == expected


def test_a_neuron_profile_states_its_instance_and_versions(tmp_path: Path) -> None:
    # SYNTHETIC Explorer directory (no real Explorer output is public; neuron.md §3.2: the Metadata table's
    # instance_type and *_version columns). The catalog files the run by them, as it did from the raw rows.
    sc = Scenario()
    trace = parse_explorer(write_explorer(sc, tmp_path / "profile"))
    versions = trace_facts.tool_versions(trace)
    assert versions["neuron_runtime"] == {"2.27.23 (synthetic)"} and "neuron_compiler" in versions
    assert trace_facts.instance_types(trace) == [sc.instance_type]
    assert set(trace_facts.devices(trace)) == {f"neuron:nc{sc.nc_idx}"}
    facts = run_facts(trace)
    assert facts["device_type"] == sc.instance_type and facts["versions"]["neuron_runtime"] == "2.27.23 (synthetic)"
    assert device_peak(trace, f"neuron:nc{sc.nc_idx}").name == sc.instance_type


def test_an_accelerator_trace_without_device_events_is_one_rule_one_warning(corpus: Path) -> None:
    """Real CUDA trace holding CPU ops only (edited upstream): loading records the fact and warns nothing; diagnose
    makes its verdict on the host (no launches: nothing recorded was lost) and says so once."""
    trace = _load(corpus / NO_DEVICE)  # filterwarnings=error: a load warning would fail here
    fact = trace.meta(DEVICE_ACTIVITY.key)
    assert fact["recorded"] is False and fact["backend"] == "cuda" and fact["transfers"] > 0
    assert not any("device activity" in w for a in trace.accounting for w in a.warnings)
    diag = diagnose(trace)
    assert [d.device for d in diag.devices] == ["cpu"]
    said = [w.message for w in diag.sections[load_warnings.SECTION.key].items if "device activity" in w.message]
    assert len(said) == 1 and said[0].startswith("a cuda trace with no device activity recorded")
    assert f"{fact['transfers']} aten::to op(s) that move tensors to the device" in said[0]
