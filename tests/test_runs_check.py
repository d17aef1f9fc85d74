"""Unrelated runs loaded together are refused with a named error, never stitched into one device."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import neurontrace
from neurontrace import errors
from neurontrace.analysis.diagnose import diagnose
from tests.micro import write, x

RESNET = "kineto-tb_plugin/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
LINEAR = "param/et_replay/tests/inputs/linear_kineto.json.gz"


@pytest.mark.corpus
def test_two_unrelated_real_runs_in_one_directory_are_refused(corpus: Path, tmp_path: Path) -> None:
    # Two single-GPU runs, no distributedInfo, 66 million seconds apart on their clocks.
    for rel in (RESNET, LINEAR):
        shutil.copy(corpus / rel, tmp_path / Path(rel).name)
    with pytest.raises(errors.MixedRunsError, match=r"2 unrelated runs .*linear_kineto\.json\.gz.*worker0") as caught:
        diagnose(neurontrace.load(tmp_path))
    # The gap reads in a unit a person reads (it was "+66,xxx,xxx.xxx s"), and a bad input is no usage error.
    assert re.search(r"at \+\d\.\d\d years", str(caught.value)), caught.value
    assert errors.MixedRunsError.exit_code == errors.EXIT_MALFORMED


def test_windows_of_one_process_and_ranks_of_one_job_are_one_run(tmp_path: Path) -> None:
    # Two recording windows of the same process (a capture's startup and steady-state files) are one run ...
    (tmp_path / "one").mkdir()
    write(tmp_path / "one", [x("cpu_op", "aten::mm", 0, 10, pid=7)], "w0.json")
    write(tmp_path / "one", [x("cpu_op", "aten::mm", 10_000_000, 10, pid=7)], "w1.json")
    assert diagnose(neurontrace.load(tmp_path / "one")).devices
    # ... and files with ranks are the ranks of one job, whatever their clocks.
    (tmp_path / "job").mkdir()
    write(tmp_path / "job", [x("cpu_op", "aten::mm", 0, 10, pid=1)], "r0.json", distributedInfo={"rank": 0})
    write(tmp_path / "job", [x("cpu_op", "aten::mm", 9_000_000, 10, pid=2)], "r1.json", distributedInfo={"rank": 1})
    assert len(diagnose(neurontrace.load(tmp_path / "job")).devices) == 2
    # Two processes with disjoint activity and no ranks in two files: refused.
    (tmp_path / "two").mkdir()
    write(tmp_path / "two", [x("cpu_op", "aten::mm", 0, 10, pid=1)], "a.json")
    write(tmp_path / "two", [x("cpu_op", "aten::mm", 9_000_000, 10, pid=2)], "b.json")
    with pytest.raises(errors.MixedRunsError):
        diagnose(neurontrace.load(tmp_path / "two"))


def test_two_captures_of_one_rank_are_refused_not_merged_into_one_rank(tmp_path: Path) -> None:
    """Two `record` runs into one directory: both rank 0, other processes, other times (#27 item 8)."""
    for name, pid, at in (("run_a", 11, 0), ("run_b", 22, 50_000_000)):
        (tmp_path / name).mkdir()
        write(tmp_path / name, [x("cpu_op", "aten::mm", at, 10, pid=pid)], "rank0_w00.json", distributedInfo={"rank": 0})
    with pytest.raises(errors.MixedRunsError, match=r"rank 0 comes from two unrelated runs"):
        diagnose(neurontrace.load(tmp_path))
    # One capture's two windows (one process, the same rank) stay one run.
    (tmp_path / "run_b" / "rank0_w01.json").unlink(missing_ok=True)
    write(tmp_path / "run_a", [x("cpu_op", "aten::mm", 90_000_000, 10, pid=11)], "rank0_w01.json",
          distributedInfo={"rank": 0})
    assert diagnose(neurontrace.load(tmp_path / "run_a")).devices
