"""A Dask worker killed while the cluster starts, or a scheduler that is not there: a named error and exit
code (ClusterError, 13), not `RuntimeError: Nanny failed to start` with a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from neurontrace import errors
from neurontrace.cli import main
from tests.conftest import SAMPLES

pytest.importorskip("distributed")

KILL_SELF = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)  # the worker dies as it starts\n"


def test_a_worker_killed_while_the_cluster_starts_is_a_named_error(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import dask

    preload = tmp_path / "die.py"
    preload.write_text(KILL_SELF)
    with dask.config.set({"distributed.worker.preload": [str(preload)]}):
        code = main(["diagnose", str(SAMPLES / "gloo_8rank"), "--workers", "1"])
    err = capsys.readouterr().err
    assert code == errors.EXIT_CLUSTER == 13
    assert "could not start" in err and "Traceback" not in err and err.count("\n") == 1


def test_a_scheduler_that_is_not_there_is_a_named_error(capsys: pytest.CaptureFixture[str]) -> None:
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        code = main(["diagnose", str(SAMPLES / "gloo_8rank"), "--scheduler", "tcp://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == errors.EXIT_CLUSTER and "cannot reach the Dask scheduler" in err and "Traceback" not in err
