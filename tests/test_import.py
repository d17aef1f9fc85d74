"""Heavy dependencies stay optional: importing the package and loading do not pull torch or Dash."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import SAMPLES


def test_import_and_load_do_not_import_torch_or_dash() -> None:
    code = (
        "import sys, neurontrace; neurontrace.load;"
        f"neurontrace.load({str(SAMPLES / 'cpu_train_loop.pt.trace.json.gz')!r});"
        "import neurontrace.cli;"
        "bad = [m for m in ('torch', 'dash', 'plotly', 'dask', 'distributed') if m in sys.modules];"
        "assert not bad, bad"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr


def test_parsers_and_app_live_in_the_neurontrace_namespace() -> None:
    import neurontrace.app
    import neurontrace.parsers.kineto

    assert neurontrace.parsers.kineto.FORMAT == "kineto"
    assert neurontrace.app.__name__ == "neurontrace.app"



def test_only_the_cli_changes_the_allocator() -> None:
    """A library user's process keeps Arrow's default pool; the console script puts Arrow on the system
    allocator before its command loads a trace (neurontrace._allocator)."""
    code = ("import pyarrow as pa, neurontrace\n"
            "default = pa.default_memory_pool().backend_name\n"
            f"neurontrace.load({str(SAMPLES / 'cpu_train_loop.pt.trace.json.gz')!r})\n"
            "loaded = pa.default_memory_pool().backend_name\n"
            "from neurontrace.cli import main\n"
            f"main(['info', {str(SAMPLES / 'cpu_train_loop.pt.trace.json.gz')!r}])\n"
            "print(default, loaded, pa.default_memory_pool().backend_name)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                         env={k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"})
    assert res.returncode == 0, res.stderr
    default, loaded, after = res.stdout.split()[-3:]
    assert loaded == default and after == "system"
