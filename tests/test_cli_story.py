"""One story across commands (#27), held as users meet it: each command run as a subprocess with no terminal
(as in a pipe or a CI log), its output read as text."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, corpus_root

PAIR = (SAMPLES / "compare" / "baseline.pt.trace.json.gz", SAMPLES / "compare" / "slowed.pt.trace.json.gz")


def piped(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The command with its output going to a pipe: no terminal, no COLUMNS (what a CI log gets)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([sys.executable, "-m", "neurontrace", *map(str, args)], capture_output=True, text=True,
                          timeout=180, check=False, env=env, stdin=subprocess.DEVNULL)


def test_piped_reports_print_whole_names_and_headers() -> None:
    """Names used to be cut at 80 columns in pipes (``aten:…``, ``kern…``, ``TFLOP…``)."""
    res = piped("diff", *PAIR)
    assert res.returncode == 0, res.stderr
    assert "…" not in res.stdout
    assert "autograd::engine::evaluate_function: AddmmBackward0" in res.stdout
    assert "aten::native_layer_norm" in res.stdout


def test_piped_ops_table_keeps_every_header_and_kernel_name() -> None:
    root = corpus_root()
    if root is None:
        pytest.skip("the real-trace corpus is not beside the checkout")
    trace = root / "TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    res = piped("ops", trace)
    assert res.returncode == 0, res.stderr
    assert "…" not in res.stdout
    assert "TFLOP/s" in res.stdout and "% of peak" in res.stdout


def test_view_on_a_busy_port_is_a_named_error_that_suggests_port_0() -> None:
    """It used to exit 1 ("a bug, please report") with the web framework's own text."""
    import socket

    from neurontrace import errors

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        res = piped("view", SAMPLES / "cpu_train_loop.pt.trace.json.gz", "--port", str(busy.getsockname()[1]),
                    "--no-browser")
    assert res.returncode == errors.EXIT_USAGE, res.stderr
    assert "--port 0" in res.stderr and "in use by another program" not in res.stderr
    assert res.stderr.count("\n") == 1  # one line, no framework text


def test_view_of_a_file_that_is_no_trace_exits_instead_of_serving(tmp_path: Path) -> None:
    from neurontrace import errors

    bad = tmp_path / "notes.json"
    bad.write_text("not json at all")
    res = piped("view", bad, "--port", "0", "--no-browser")  # returns: it never starts serving
    assert res.returncode == errors.EXIT_UNKNOWN_FORMAT and "notes.json" in res.stderr
    assert "http://" not in res.stdout
