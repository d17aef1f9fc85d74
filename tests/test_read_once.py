"""Each input is read once: every format's sniffer runs once per input, frame sources and recorded fallback
ops once per rank (a second pass over the same bytes or tables was pure cost, and two passes could disagree)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from neurontrace.analysis import diagnose as diagnose_module
from neurontrace.analysis import stalls
from neurontrace.cli import main
from neurontrace.load import Format, Probe
from tests.conftest import SAMPLES


def _count_claims(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, str]]:
    """(format, path) -> how often that format's sniffer was asked about that path."""
    seen: Counter[tuple[str, str]] = Counter()
    original = Format.claims

    def counting(self: Format, probe: Probe) -> bool:
        seen[(self.name, str(probe.path))] += 1
        return original(self, probe)

    monkeypatch.setattr(Format, "claims", counting)
    return seen


@pytest.mark.parametrize("path", [SAMPLES / "cpu_train_loop.pt.trace.json.gz", SAMPLES / "gloo_8rank",
                                  SAMPLES / "synthetic_neuron" / "synthetic_mlp_parquet"])
def test_diagnose_asks_each_format_about_each_input_once(path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    seen = _count_claims(monkeypatch)
    assert main(["diagnose", str(path), "--json"]) == 0
    assert '"format": ' in capsys.readouterr().out  # the inputs still name their format
    assert seen and max(seen.values()) == 1, [k for k, n in seen.items() if n > 1]


def test_info_asks_each_format_once(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    seen = _count_claims(monkeypatch)
    path = SAMPLES / "cpu_train_loop.pt.trace.json.gz"
    assert main(["info", str(path)]) == 0
    assert capsys.readouterr().out.startswith(f"{path}: kineto")
    assert seen and max(seen.values()) == 1


def test_the_job_plan_asks_each_format_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from neurontrace import distributed

    seen = _count_claims(monkeypatch)
    tasks, names = distributed.plan([SAMPLES / "gloo_8rank", SAMPLES / "cpu_train_loop.pt.trace.json.gz"])
    assert names == ["a directory of traces", "kineto"]
    assert [t.format for t in tasks] == ["kineto"] * 9  # the workers are told, and do not detect again
    assert max(seen.values()) == 1


def test_frame_sources_and_recorded_ops_once_per_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    import neurontrace
    from neurontrace.analysis import fallback

    calls: Counter[str] = Counter()

    def counted(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    for module in (diagnose_module, stalls):
        monkeypatch.setattr(module, "frame_sources", counted("frame_sources", stalls.frame_sources))
    monkeypatch.setattr("neurontrace.analysis.attribution.frame_sources", counted("frame_sources", stalls.frame_sources))
    for module in (diagnose_module, fallback):
        monkeypatch.setattr(module, "recorded_ops", counted("recorded_ops", fallback.recorded_ops))
    trace = neurontrace.load(SAMPLES / "gloo_8rank")  # 8 ranks, a CPU device each, with stalls
    diag = diagnose_module.diagnose(trace)
    assert len(diag.devices) == 8 and any(d.top_stalls for d in diag.devices)
    assert calls == {"frame_sources": 8, "recorded_ops": 8}
