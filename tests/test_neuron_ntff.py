"""NTFF files: header facts, NEFF pairing, and decoding through neuron-explorer.

The real ``neuron-explorer`` is not installed here (it ships with AWS's aws-neuronx-tools). Tests that
need it put a **test double** named ``neuron-explorer`` on PATH: a small script that writes a
synthetic Explorer Parquet directory (or fails, hangs, writes nothing, as each test asks).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import neurontrace
from neurontrace import errors
from neurontrace.parsers import _neuron_ntff, _neuron_tool, ntff
from neurontrace.parsers._neuron_ntff import read_header
from neurontrace.testing import synthetic_neuron as syn

FAKE_TOOL = """#!{python}
# TEST DOUBLE standing in for AWS neuron-explorer (not the real tool): it writes a synthetic
# Explorer Parquet directory where `view ... --output-file DIR` asks, or misbehaves on request.
import os, sys, time
from pathlib import Path
args = sys.argv[1:]
with open(os.environ["FAKE_EXPLORER_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
out = Path(args[args.index("--output-file") + 1])
mode = os.environ.get("FAKE_EXPLORER_MODE", "ok")
if mode == "fail":
    out.mkdir(parents=True)
    (out / "Instruction.parquet").write_bytes(b"half-written")
    print("ERRO[0001] Unable to process profile: ERROR_PROCESS_INCOMPLETE")
    sys.exit(3)
if mode == "hang":
    out.mkdir(parents=True)
    time.sleep(120)
if mode == "empty":
    sys.exit(0)
from neurontrace.testing import synthetic_neuron as syn
syn.write_explorer(syn.Scenario(name="decoded"), out)
print("INFO wrote", out)
"""


def fake_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str = "ok") -> Path:
    """Put the test double first on PATH; returns its call log."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "neuron-explorer"
    tool.write_text(FAKE_TOOL.format(python=sys.executable))
    tool.chmod(0o755)
    log = tmp_path / "fake-explorer.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_EXPLORER_LOG", str(log))
    monkeypatch.setenv("FAKE_EXPLORER_MODE", mode)
    monkeypatch.setenv("NEURONTRACE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NEURONTRACE_NEURON_EXPLORER", raising=False)
    return log


def capture(tmp_path: Path, ntff_name: str = "profile.ntff", neff_name: str | None = "synthetic_mlp.neff") -> Path:
    sc = syn.Scenario()
    d = tmp_path / "run"
    d.mkdir(exist_ok=True)
    if neff_name:
        syn.write_neff(sc, d / neff_name)
    return syn.write_ntff(sc, d / ntff_name)


def test_header_facts_are_read_without_decoding(tmp_path: Path) -> None:
    h = read_header(capture(tmp_path))
    assert (h.version, h.neff_name, h.instance_type, h.runtime_version, h.driver_version,
            h.collectives_version) == (5, "synthetic_mlp.neff", "trn2.3xlarge", "2.27.23", "2.23", "2.27.34")
    assert h.synthetic and h.runtime_git_hash and h.runtime_git_hash.startswith("synthetic")
    assert "NTFF version 5" in h.describe() and "runtime 2.27.23" in h.describe()
    v4 = read_header(syn.write_ntff(syn.Scenario(), tmp_path / "old.ntff", version=4))
    assert v4.version == 4


def test_an_ntff_is_recognised_by_its_header_whatever_its_name(tmp_path: Path) -> None:
    p = capture(tmp_path, ntff_name="capture.bin")
    assert neurontrace.detect(p).name == "ntff"


def test_empty_ntff_says_the_core_ran_nothing(tmp_path: Path) -> None:
    p = tmp_path / "profile_nc_3_session_0.ntff"
    p.write_bytes(b"")
    with pytest.raises(errors.EmptyNtffError, match="NeuronCore that ran nothing") as info:
        ntff.parse(p)
    assert info.value.exit_code == errors.EXIT_UNKNOWN_FORMAT


def test_neff_found_by_numeric_hash(tmp_path: Path) -> None:
    p = capture(tmp_path, ntff_name="395760075800974_instid_0_vnc_1.ntff", neff_name=None)
    for name in ("neff_395760075800974_vnc_0.neff", "neff_395760075800974_vnc_1.neff"):
        syn.write_neff(syn.Scenario(), p.parent / name)
    neff, rule = _neuron_ntff.find_neff(p, read_header(p), None)
    assert neff.name == "neff_395760075800974_vnc_1.neff" and rule == "same numeric hash as the NTFF name"


def test_hash_mismatch_is_a_named_error(tmp_path: Path) -> None:
    p = capture(tmp_path, ntff_name="111_instid_0_vnc_0.ntff", neff_name="neff_222.neff")
    with pytest.raises(errors.NeffMismatchError, match="hash mismatch: the NTFF's numeric hash is 111") as info:
        ntff.parse(p)
    assert info.value.exit_code == errors.EXIT_MALFORMED
    with pytest.raises(errors.NeffMismatchError, match=r"neff_222\.neff"):
        ntff.parse(p, neff=p.parent / "neff_222.neff")


@pytest.mark.parametrize(("neff_name", "rule"), [("synthetic_mlp.neff", "NEFF name recorded in the NTFF"),
                                                 ("file.neff", "the only NEFF in the folder")])
def test_neff_found_by_recorded_name_or_as_the_only_one(tmp_path: Path, neff_name: str, rule: str) -> None:
    p = capture(tmp_path, neff_name=neff_name)
    neff, found_by = _neuron_ntff.find_neff(p, read_header(p), None)
    assert (neff.name, found_by) == (neff_name, rule)


# Each pairing rule on a micro-capture named as the real conventions name it (neuron.md §1.2, §1.3, addendum):
# (NTFF name, NEFF files in the folder, the NEFF name recorded in the NTFF, expected NEFF, expected rule).
PAIRINGS = [
    # 5 of 8 observed CLI captures: same stem, the NTFF records file.neff, several pairs in one folder.
    ("stream_256k_fd1k.ntff", ["stream_256k_fd1k.neff", "transpose_1024.neff"], "file.neff",
     "stream_256k_fd1k.neff", "same stem as the NTFF"),
    ("profile_exec_3.ntff", ["profile.neff", "other.neff"], "file.neff", "profile.neff", "same stem as the NTFF"),
    ("profile_rank_1.ntff", ["profile.neff", "other.neff"], "file.neff", "profile.neff", "same stem as the NTFF"),
    # A same-stem NEFF wins over the recorded name (which names the NEFF before the harness renamed it).
    ("transpose_1024.ntff", ["transpose_1024.neff", "file.neff"], "file.neff", "transpose_1024.neff",
     "same stem as the NTFF"),
    ("395760075800974_instid_0_vnc_1.ntff", ["neff_395760075800974_vnc_0.neff", "neff_395760075800974_vnc_1.neff"],
     "file.neff", "neff_395760075800974_vnc_1.neff", "same numeric hash as the NTFF name"),
    ("14382885777943380728_instid_0_vnc_5.ntff", ["neff_14382885777943380728.neff"], "file.neff",
     "neff_14382885777943380728.neff", "same numeric hash as the NTFF name"),
    ("run.ntff", ["graph.neff", "model.neff"], "model.neff", "model.neff", "NEFF name recorded in the NTFF"),
    ("run.ntff", ["compiled.neff"], "file.neff", "compiled.neff", "the only NEFF in the folder"),
]


@pytest.mark.parametrize(("ntff_name", "neffs", "recorded", "expected", "rule"), PAIRINGS)
def test_every_pairing_convention_in_order(tmp_path: Path, ntff_name: str, neffs: list[str], recorded: str,
                                           expected: str, rule: str) -> None:
    d = tmp_path / "cap"
    d.mkdir()
    p = syn.write_ntff(syn.Scenario(), d / ntff_name, neff_name=recorded)
    for name in neffs:
        syn.write_neff(syn.Scenario(), d / name)
    neff, found_by = _neuron_ntff.find_neff(p, read_header(p), None)
    assert (neff.name, found_by) == (expected, rule)
    assert _neuron_ntff.find_neff(p, read_header(p), d / neffs[-1])[1] == "given explicitly"  # --neff wins over all


def test_a_miss_lists_every_rule_tried(tmp_path: Path) -> None:
    d = tmp_path / "cap"
    d.mkdir()
    p = syn.write_ntff(syn.Scenario(), d / "stream_exec_2.ntff", neff_name="file.neff")
    for name in ("a.neff", "b.neff"):
        syn.write_neff(syn.Scenario(), d / name)
    with pytest.raises(errors.NeffNotFoundError) as info:
        _neuron_ntff.find_neff(p, read_header(p), None)
    msg = str(info.value)
    for part in ("same stem: stream_exec_2.neff", "same stem: stream.neff", "recorded in the NTFF: file.neff",
                 "the only NEFF in the folder", "NEFFs in the folder: a.neff, b.neff", "--neff"):
        assert part in msg


@pytest.mark.usefixtures("no_tool")
def test_a_session_ntff_says_to_decode_its_folder(tmp_path: Path) -> None:
    d = tmp_path / "20251218T153556"
    d.mkdir()
    p = syn.write_ntff(syn.Scenario(), d / "profile_nc_0_session_0.ntff")
    for name in ("neff_1_vnc_0.neff", "neff_2_vnc_0.neff"):
        syn.write_neff(syn.Scenario(), d / name)
    with pytest.raises(errors.NeuronToolMissingError) as info:
        ntff.parse(p)
    assert "session NTFF" in str(info.value) and f"neuron-explorer view -d {d} " in str(info.value)
    with pytest.raises(errors.NeffNotFoundError, match="pairs with no single NEFF"):
        _neuron_ntff.find_neff(p, read_header(p), None)


def test_a_session_ntff_is_decoded_with_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake_tool(tmp_path, monkeypatch)
    d = tmp_path / "20251218T153556"
    d.mkdir()
    p = syn.write_ntff(syn.Scenario(), d / "profile_nc_0_session_0.ntff")
    syn.write_neff(syn.Scenario(), d / "neff_1_vnc_0.neff")
    t = ntff.parse(p)
    assert t.device_events.num_rows > 0
    assert log.read_text().split()[:3] == ["view", "-d", str(d)]


@pytest.mark.parametrize("version", [8, 129])
def test_an_ntff_version_above_7_is_refused_before_decoding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            version: int) -> None:
    log = fake_tool(tmp_path, monkeypatch)
    p = syn.write_ntff(syn.Scenario(), tmp_path / "inspect.ntff", version=version)
    syn.write_neff(syn.Scenario(), tmp_path / "inspect.neff")
    with pytest.raises(errors.NtffVersionError, match=rf"NTFF format version {version}; .*versions 1-7") as info:
        neurontrace.load(p)
    assert info.value.exit_code == errors.EXIT_UNKNOWN_FORMAT and not log.exists()


@pytest.mark.usefixtures("no_tool")
def test_without_neuron_explorer_the_error_says_what_to_run_and_where(tmp_path: Path) -> None:
    p = capture(tmp_path)
    with pytest.raises(errors.NeuronToolMissingError) as info:
        neurontrace.load(p)
    msg = str(info.value)
    assert info.value.exit_code == errors.EXIT_EXTERNAL_TOOL == 9
    for part in ("NTFF version 5", "captured against synthetic_mlp.neff", "on trn2.3xlarge", "aws-neuronx-tools",
                 ("neuron-explorer view -n synthetic_mlp.neff -s profile.ntff --output-format parquet "
                  "--output-file profile_parquet"), "load it with neurontrace"):
        assert part in msg


def test_decodes_with_neuron_explorer_into_a_content_keyed_cache(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake_tool(tmp_path, monkeypatch)
    p = capture(tmp_path)
    t = neurontrace.load(p)
    assert t.meta("format") == "ntff" and t.device_events.num_rows > 0
    assert t.meta("ntff.header")["neff_name"] == "synthetic_mlp.neff" and t.meta("ntff.synthetic") is True
    assert t.meta("ntff.neff")["found_by"] == "NEFF name recorded in the NTFF"
    assert t.accounting[0].source == f"{p} (decoded by neuron-explorer)"
    (call,) = log.read_text().splitlines()
    assert call.startswith(f"view -n {p.parent / 'synthetic_mlp.neff'} -s {p} --output-format parquet --output-file ")
    cached = list((tmp_path / "cache" / "neuron-explorer").iterdir())
    assert len(cached) == 1 and (cached[0] / _neuron_tool.MARKER).is_file()
    # Same content: served from the cache, the tool is not run again.
    assert neurontrace.load(p).equals(t) and len(log.read_text().splitlines()) == 1
    # Changed content: a new key.
    p.write_bytes(p.read_bytes() + b"more records")
    neurontrace.load(p)
    assert len(log.read_text().splitlines()) == 2


@pytest.mark.parametrize(("mode", "error", "match"), [
    ("fail", errors.NeuronToolFailedError, "(?s)failed with exit code 3.*ERROR_PROCESS_INCOMPLETE"),
    ("empty", errors.NeuronToolFailedError, "wrote no Parquet tables"),
    ("hang", errors.NeuronToolTimeoutError, "did not finish within 1 s"),
])
def test_explorer_failures_are_named_and_leave_nothing_in_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, error: type[Exception], match: str) -> None:
    fake_tool(tmp_path, monkeypatch, mode)
    p = capture(tmp_path)
    with pytest.raises(error, match=match) as info:
        ntff.parse(p, timeout_s=1)
    assert getattr(info.value, "exit_code", None) == errors.EXIT_EXTERNAL_TOOL
    cache = tmp_path / "cache" / "neuron-explorer"
    assert not cache.exists() or not any(cache.iterdir())
