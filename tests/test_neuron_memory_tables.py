"""Neuron Explorer's memory tables in memory_events and the memory section: SbufAllocation occupancy periods,
HbmUsageSummaryByType, the summary's spill figures. SYNTHETIC profiles only (no Trainium here): written by
neurontrace.testing.neuron_memory_files with the columns of the Explorer profile schema 7.4.0 (formats/neuron.md
§3.7, §3.8); every expected figure is computed here from the rows written, independently of the reader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import neurontrace
from neurontrace import units
from neurontrace.analysis.memory import Memory, memory, text
from neurontrace.analysis.memory_findings import findings
from neurontrace.testing import synthetic_neuron as syn
from neurontrace.testing.neuron_memory_files import HBM_BY_TYPE, SPILL, add_memory_tables, sbuf_rows


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return add_memory_tables(syn.write_explorer(syn.Scenario(), tmp_path_factory.mktemp("mem") / "p"))


def _load(path: Path) -> neurontrace.Trace:
    return neurontrace.load(path)


def test_sbuf_occupancy_peak_and_what_is_live_there(profile: Path) -> None:
    trace = _load(profile)
    rows = [r for r in sbuf_rows(0) if r["end_ts"] >= r["start_ts"]]
    # occupancy by brute force: at each period start, the bytes of the periods holding [start, end) then
    occupancy = {r["start_ts"]: sum(q["end_address"] - q["start_address"] for q in rows
                                   if q["start_ts"] <= r["start_ts"] < q["end_ts"]) for r in rows}
    at = max(occupancy, key=lambda k: occupancy[k])
    live = {(q["tensor_name"] or q["hlo_name"]): q["end_address"] - q["start_address"] for q in rows
            if q["start_ts"] <= at < q["end_ts"]}
    result = memory(trace)
    assert result is not None
    (sbuf,) = [d for d in result.devices if d.device.endswith(".sbuf")]
    assert sbuf.device == "neuron:nc0.sbuf" and not sbuf.usage_samples
    assert sbuf.peak_allocated_bytes == occupancy[at]
    assert {g.op: g.bytes for g in sbuf.live_at_peak} == live
    ev = trace.memory_events.filter(pc.equal(trace.memory_events["category"].cast("string"), "sbuf"))
    assert ev.num_rows == 2 * len(rows)
    assert sum(ev["bytes"].to_pylist()) == 0  # every period taken is given back
    assert not findings(result)  # no capacity, no steps, no OOM in the profile: nothing to find
    acct = trace.accounting[0]
    assert acct.skipped["SbufAllocation: no start/end time, end before start, or no positive address range"] == 1


def test_hbm_by_type_and_spills_per_core(profile: Path) -> None:
    result = memory(_load(profile))
    assert result is not None
    (n,) = result.neuron
    assert n.device == "neuron:nc0" and n.hbm_by_type == HBM_BY_TYPE
    assert (n.spill_save_bytes, n.spill_reload_bytes) == (SPILL["spill_save_bytes"], SPILL["spill_reload_bytes"])
    (summary,) = pq.read_table(profile / "Summary.parquet").to_pylist()
    assert n.hbm_read_bytes == summary.get("hbm_read_bytes")
    lines = "\n".join(text(result))
    assert f"neuron:nc0: HBM {units.size(sum(HBM_BY_TYPE.values()))} by type: weights {units.size(5 << 30)}" in lines
    assert f"spills: {units.size(SPILL['spill_save_bytes'])} saved to HBM" in lines
    assert Memory.from_dict(json.loads(json.dumps(result.as_dict()))) == result


def test_a_summary_without_spill_keys_reports_none(tmp_path: Path) -> None:
    """The summary omits spill keys when they are zero (formats/neuron.md §3.2): no figure, not a 0."""
    result = memory(_load(syn.write_explorer(syn.Scenario(), tmp_path / "p")))
    assert result is None or not result.neuron


def test_the_memory_command_on_a_neuron_profile(profile: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "neurontrace", "memory", str(profile), "--json",
                           "--device", "neuron:nc0"], check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["synthetic"] is True and doc["neuron"][0]["hbm_by_type"] == HBM_BY_TYPE


def test_a_summary_json_alone_gives_the_spill_figures(tmp_path: Path) -> None:
    """A SYNTHETIC summary-json (synthetic_neuron_observed, the shape of the real 2.32 files) with the two spill keys
    (§4.2): the memory section reports them though the file holds no memory events."""
    from neurontrace.testing import synthetic_neuron_observed as obs

    doc = obs.summary_json()
    (metrics,) = doc.values()
    metrics.update(spill_save_bytes=3 << 20, spill_reload_bytes=9 << 20)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(doc))
    trace = neurontrace.load(path)
    assert trace.memory_events.num_rows == 0
    result = memory(trace)
    assert result is not None and not result.devices
    (n,) = result.neuron
    assert (n.spill_save_bytes, n.spill_reload_bytes, n.hbm_by_type) == (3 << 20, 9 << 20, {})
    assert n.hbm_read_bytes == metrics.get("hbm_read_bytes")
