"""Units scaled per value in every text report (neurontrace/units.py): never "0.000 ms" for µs work."""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from neurontrace import units


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(units).failed == 0


@pytest.mark.parametrize(("ns", "text"), [
    (0, "0 ns"), (1, "1 ns"), (999, "999 ns"), (999.6, "1.00 µs"), (1_000, "1.00 µs"), (12_345, "12.3 µs"),
    (123_456, "123 µs"), (999_600, "1.00 ms"), (40_000_000, "40.0 ms"), (61_000_000_000, "61.0 s"),
])
def test_each_duration_picks_its_own_unit(ns: float, text: str) -> None:
    assert units.duration(ns) == text


def test_sizes_rates_and_shares() -> None:
    assert (units.size(0), units.size(1023), units.size(4096), units.size(5 << 30)) == (
        "0 B", "1023 B", "4.00 KiB", "5.00 GiB")
    assert units.rate(2e10) == "20.0 GB/s" and units.share(0.0004) == "0.04%" and units.share(0.5) == "50.0%"
    assert units.seconds(2.1e-3) == "2.10 ms" and units.seconds(None) == "-"


def test_a_neuron_report_never_prints_zero_milliseconds(tmp_path: Path) -> None:
    # Neuron executions are µs long: the synthetic sample's stalls and waits are 0.8 µs .. 20 µs.
    from neurontrace.testing import synthetic_neuron as syn

    out = subprocess.run([sys.executable, "-m", "neurontrace", "diagnose",
                          str(syn.write_explorer(syn.Scenario(), tmp_path / "p"))],
                         capture_output=True, text=True, timeout=120, check=False,
                         env={**os.environ, "COLUMNS": "200"}).stdout
    assert "window 60.0 µs (2 device executions)" in out
    assert "0.000 ms" not in out and not re.search(r"\b0\.00\d ms", out)
