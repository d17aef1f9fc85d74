"""Heavy dependencies stay optional: importing the package and loading do not pull torch or Dash."""

from __future__ import annotations

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
