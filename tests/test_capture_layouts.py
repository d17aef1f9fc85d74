"""Both TorchNeuron capture layouts, one or many ranks, around a **real** CPU framework trace.

The folders and file names are the documented ones (formats/neuron.md §1.2, §8.3 and the addendum
"TorchNeuron capture layouts"): the open-source backend's flat ``{out}/pytorch_trace.json`` (its
integration test exports ``neuron_trace.json``) + ``framework_mapping_<ts>.json`` +
``{out}/<instance>_pid_<pid>/`` with ``<h>_instid_<i>_vnc_<n>.ntff`` / ``neff_<h>.neff`` / ``.pb``
files, and the documented ``<instance>_pid_<pid>/<timestamp>/`` with ``trace.json``,
``profile_nc_<n>_session_<m>.ntff`` and ``neff_<h>_vnc_<n>.neff``. The framework trace is made here
by torch.profiler on the CPU (real); the NTFF/NEFF/.pb files are synthetic containers (no Trainium).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import neurontrace
from neurontrace.errors import EXIT_EXTERNAL_TOOL, NeuronToolMissingError, NeuronToolMissingWarning
from neurontrace.parsers import _neuron_tool, torchneuron_capture
from neurontrace.testing import synthetic_neuron as syn

pytestmark = pytest.mark.torch
HASH = "14382885777943380728"
PBS = ("ntrace.pb", "trace_info.pb", "cpu_util.pb", "host_mem.pb")


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real torch.profiler trace of a tiny CPU loop (copies around a nonzero, an .item())."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    path = tmp_path_factory.mktemp("real") / "trace.json"
    x = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            y = torch.empty_like(x).copy_(x)  # stands where a device->host copy would be
            nz = torch.nonzero(y > 0)
            back = torch.empty_like(nz).copy_(nz)
            (x @ x).sum().item()
            del back
    prof.export_chrome_trace(str(path))
    return path


@pytest.fixture
def no_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "emptybin"
    empty.mkdir()
    monkeypatch.setenv("PATH", f"{empty}{os.pathsep}{Path(sys.executable).parent}")
    monkeypatch.delenv("NEURONTRACE_NEURON_EXPLORER", raising=False)
    monkeypatch.setattr(_neuron_tool, "DOCUMENTED_DIR", empty)
    monkeypatch.setattr(torchneuron_capture, "find_tool", lambda _: None)


def flat_capture(out: Path, framework: Path | None, *, name: str = "pytorch_trace.json",
                 instance: str = "i-0123456789abcdef0", pid: int = 4242, cores: int = 2) -> Path:
    proc = out / f"{instance}_pid_{pid}"
    proc.mkdir(parents=True)
    sc = syn.Scenario()
    for vnc in range(cores):
        syn.write_ntff(sc, proc / f"{HASH}_instid_0_vnc_{vnc}.ntff", neff_name="file.neff")
    syn.write_neff(sc, proc / f"neff_{HASH}.neff")
    for pb in PBS:
        (proc / pb).write_bytes(b"SYNTHETIC placeholder")
    if framework is not None:
        shutil.copy(framework, out / name)
    return proc


def documented_capture(out: Path, framework: Path | None, *, instance: str = "i-0123456789abcdef0",
                       pid: int = 4242, stamp: str = "20260401T101010") -> Path:
    leaf = out / f"{instance}_pid_{pid}" / stamp
    leaf.mkdir(parents=True)
    sc = syn.Scenario()
    syn.write_ntff(sc, leaf / "profile_nc_0_session_0.ntff")
    syn.write_neff(sc, leaf / f"neff_{HASH}_vnc_0.neff")
    syn.write_neff(sc, leaf / "neff_99_vnc_0.neff")
    for pb in PBS:
        (leaf / pb).write_bytes(b"SYNTHETIC placeholder")
    if framework is not None:
        shutil.copy(framework, leaf / "trace.json")
    return leaf


def _ops(t: neurontrace.Trace) -> list[str]:
    return [n for n, c in zip(t.system_events["name"].to_pylist(), t.system_events["category"].to_pylist(),
                              strict=True) if c == "framework_op"]


@pytest.mark.usefixtures("no_tool")
@pytest.mark.parametrize("name", ["pytorch_trace.json", "neuron_trace.json"])
def test_flat_layout_analyses_the_framework_trace_and_names_each_undecoded_profile(
        tmp_path: Path, cpu_trace: Path, name: str) -> None:
    out = tmp_path / "out"
    proc = flat_capture(out, cpu_trace, name=name)
    for where in (out, proc):  # the capture root, or the process folder alone (its parent holds the trace)
        with pytest.warns(NeuronToolMissingWarning) as caught:
            t = neurontrace.load(where)
        assert "aten::nonzero" in _ops(t) and t.device_events.num_rows == 0
        assert set(t.system_events["host"].to_pylist()) == {"i-0123456789abcdef0"}
        msg = str(caught[0].message)
        for vnc in (0, 1):
            ntff = proc / f"{HASH}_instid_0_vnc_{vnc}.ntff"
            assert (f"neuron-explorer view -n {proc / f'neff_{HASH}.neff'} -s {ntff} --output-format parquet "
                    f"--output-file {proc / ntff.stem}_parquet") in msg
        assert f"neuron-explorer view -d {proc} --output-format parquet" in msg
        undecoded = t.meta("undecoded_profiles")
        assert [u["ntff"] for u in undecoded if u["ntff"]] == [str(proc / f"{HASH}_instid_0_vnc_{v}.ntff")
                                                                for v in (0, 1)]
        assert t.accounting[0].warnings == [msg]


@pytest.mark.usefixtures("no_tool")
def test_documented_layout_many_ranks(tmp_path: Path, cpu_trace: Path) -> None:
    out = tmp_path / "profile_output"
    leaves = [documented_capture(out, cpu_trace, instance=f"i-0rank{r}", pid=100 + r) for r in range(2)]
    with pytest.warns(NeuronToolMissingWarning) as caught:
        t = neurontrace.load(out)
    assert set(zip(t.system_events["host"].to_pylist(), t.system_events["rank"].to_pylist(), strict=True)) == {
        ("i-0rank0", 0), ("i-0rank1", 1)}
    assert _ops(t).count("aten::nonzero") == 4  # 2 calls in each rank's trace
    msg = str(caught[0].message)
    for leaf in leaves:  # a session NTFF pairs with no single NEFF: the folder is decoded whole
        assert "profile_nc_0_session_0.ntff: NTFF version 5" in msg
        assert f"neuron-explorer view -d {leaf} --output-format parquet --output-file {leaf}/neuron_parquet" in msg


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NEURONTRACE_NEURON_EXPLORER": "neuron-explorer-not-installed-here", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "neurontrace", *map(str, args)], capture_output=True, text=True,
                          timeout=120, check=False, env=env)


def test_diagnose_a_capture_without_the_decoder_exits_0_with_the_framework_side(tmp_path: Path,
                                                                                 cpu_trace: Path) -> None:
    flat_capture(tmp_path / "out", cpu_trace)
    res = _cli("diagnose", tmp_path / "out", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [d["device"] for d in doc["devices"]] == ["cpu"] and sum(doc["devices"][0]["causes_ns"].values()) > 0
    # the load warning, with the commands, reaches --json (beside the events each input skipped, by reason)
    (warning,) = [w for w in doc["warnings"] if "skipped" not in w["message"]]
    assert "neuron-explorer view -n" in warning["message"] and warning["format"] == "torchneuron-capture"
    text = _cli("diagnose", tmp_path / "out").stdout
    # ... and the text report (the real capture may or may not give findings, so no order is pinned here)
    assert "load warnings" in text and "2 device profile(s) and the system profile not decoded" in text


def test_an_ntff_folder_alone_is_exit_9_with_the_commands_never_an_empty_report(tmp_path: Path) -> None:
    proc = flat_capture(tmp_path / "out", None)
    for where in (tmp_path / "out", proc):
        res = _cli("diagnose", where)
        assert res.returncode == EXIT_EXTERNAL_TOOL, res.stdout
        assert "no framework trace here" in res.stderr and f"-s {proc / f'{HASH}_instid_0_vnc_1.ntff'}" in res.stderr
        assert res.stdout == ""


@pytest.mark.usefixtures("no_tool")
def test_a_folder_of_cli_pairs_alone_raises_with_a_command_per_pair(tmp_path: Path) -> None:
    d = tmp_path / "kernels"
    d.mkdir()
    for stem in ("stream_256k_fd1k", "transpose_1024"):
        syn.write_ntff(syn.Scenario(), d / f"{stem}.ntff", neff_name="file.neff")
        syn.write_neff(syn.Scenario(), d / f"{stem}.neff")
    with pytest.raises(NeuronToolMissingError) as info:
        neurontrace.load(d)
    for stem in ("stream_256k_fd1k", "transpose_1024"):
        assert f"view -n {d / stem}.neff -s {d / stem}.ntff" in str(info.value)
    assert "view -d" not in str(info.value)  # no system profile: -d would fail ("No metadata found")


def test_framework_mapping_links_runtime_executions_to_the_ops_that_issued_them(tmp_path: Path,
                                                                                 cpu_trace: Path) -> None:
    out = tmp_path / "out"
    proc = flat_capture(out, cpu_trace)
    framework = neurontrace.load(cpu_trace).system_events.to_pylist()
    nonzero = [e for e in framework if e["name"] == "aten::nonzero"]
    seq = [(int(json.loads(e["args"])["Sequence number"]), int(e["tid"])) for e in nonzero]
    mapping = {"version": 1, "data": [
        {"nrta_seq_id": 700 + i, "framework_op_exec_ids": [{"seq_nr": nr, "th_id": tid, "stream_id": 0}]}
        for i, (nr, tid) in enumerate(seq)] + [{"nrta_seq_id": 999}]}  # the last entry is malformed
    (out / "framework_mapping_20260401_101010_123.json").write_text(json.dumps(mapping))
    # The system profile as neuron-explorer would have decoded it into the capture: an nrt_execute right
    # after each nonzero, whose attributes carry the NRT async sequence id (the key is not public:
    # nrta_seq_id assumed). Times are Unix ns, the framework trace's clock.
    syn.write_tables(proc / "neuron_parquet", {
        "Metadata": [{"profile_schema_version": "7.4.0", "neuroncore_idx": 0,
                      "first_ts": "1970-01-01 00:00:00+00:00"}],
        "SystemProfileEvents": [
            {"id": i, "name": "nrt_execute", "start_ts": e["ts_ns"] + e["dur_ns"], "end_ts": e["ts_ns"] + e["dur_ns"] + 500,
             "duration_ns": 500, "trace_event_source": "neuron_rt", "instance_id": "i-0123456789abcdef0",
             "process_id": 4242, "thread_id": 1, "nc_idx": 0,
             "extra_attributes_json": json.dumps({"nrta_seq_id": 700 + i})}
            for i, e in enumerate(nonzero)]}, label=False)
    t = neurontrace.load(out)
    fact = t.meta("torchneuron.framework_mapping")
    assert (fact["entries"], fact["flows"], fact["runtime_events_with_seq_id"]) == (len(seq), len(seq), len(seq))
    flows = t.flows.to_pylist()
    ids = dict(zip(t.system_events["event_id"].to_pylist(), t.system_events["name"].to_pylist(), strict=True))
    linked = [(ids[f["src_event_id"]], f["src_ts_ns"], ids[f["dst_event_id"]]) for f in flows
              if f["raw_category"] == "framework_mapping"]
    # Each execution links to the nonzero right before it (sequence numbers repeat without autograd).
    assert linked == [("aten::nonzero", e["ts_ns"], "nrt_execute") for e in nonzero]
    assert t.accounting[0].skipped["framework_mapping entry without nrta_seq_id / framework_op_exec_ids"] == 1


def test_the_shipped_ntff_sample_is_exit_9_not_an_empty_report() -> None:
    # The case: `diagnose sample_traces/synthetic_neuron/synthetic_ntff` printed an empty cpu report, exit 0.
    from tests.conftest import SAMPLES

    res = _cli("diagnose", SAMPLES / "synthetic_neuron" / "synthetic_ntff")
    assert res.returncode == EXIT_EXTERNAL_TOOL and res.stdout == ""
    assert "neuron-explorer view -n" in res.stderr and "synthetic_mlp.neff -s" in res.stderr


@pytest.mark.usefixtures("no_tool")
def test_an_ntff_version_view_cannot_read_is_named_with_the_reason(tmp_path: Path, cpu_trace: Path) -> None:
    proc = flat_capture(tmp_path / "out", cpu_trace, cores=1)
    syn.write_ntff(syn.Scenario(), proc / f"{HASH}_instid_0_vnc_0.ntff", version=129, neff_name="file.neff")
    with pytest.warns(NeuronToolMissingWarning, match=r"NTFF format version 129; neuron-explorer view 2\.31/2\.32 "
                                                      r"parses versions 1-7"):
        neurontrace.load(tmp_path / "out")
