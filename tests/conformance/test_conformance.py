"""Every real trace gets the verdict declared for it in tests/conformance/expectations.py."""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import pytest

import neurontrace
from neurontrace.analysis.diagnose import Diagnosis, diagnose
from neurontrace.causes import CAUSES
from tests.conformance.expectations import EXPECTATIONS, RUN_EXPECTATIONS, TOLERANCE, Expect, RunExpect
from tests.conftest import SAMPLES, corpus_files, corpus_root


def _path(e: Expect) -> Path | None:
    if e.base == "samples":
        return SAMPLES / e.path
    root = corpus_root()
    return None if root is None else root / e.path


@functools.cache
def _diagnosis(path: Path) -> Diagnosis:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # load warnings are part of the diagnosis (its warnings section)
        return diagnose(neurontrace.load(path))


@pytest.mark.parametrize("e", EXPECTATIONS, ids=lambda e: f"{Path(e.path).name}:{e.device}")
def test_verdict(e: Expect) -> None:
    path = _path(e)
    if path is None:
        pytest.skip("the real-trace corpus (../shared/corpus/kineto) is not beside this checkout")
    diag = _diagnosis(path)
    (dev,) = [d for d in diag.devices if d.device == e.device]
    assert dev.window_rule == e.rule, e.why
    for cause in CAUSES:
        got = 100 * dev.causes_ns[cause] / dev.window_ns
        assert abs(got - e.shares.get(cause, 0.0)) <= TOLERANCE, f"{cause} {got:.1f}%: {e.why}"
    fired = {f.id for f in diag.findings}
    assert set(e.must) <= fired, f"missing {set(e.must) - fired}: {e.why}"
    assert not set(e.must_not) & fired, f"wrongly fired {set(e.must_not) & fired}: {e.why}"


def test_every_corpus_trace_has_a_declared_verdict() -> None:
    root = corpus_root()
    if root is None:
        pytest.skip("the real-trace corpus (../shared/corpus/kineto) is not beside this checkout")
    declared = {e.path for e in EXPECTATIONS if e.base == "corpus"}
    missing = [p.relative_to(root).as_posix() for p in corpus_files() if p.relative_to(root).as_posix() not in declared]
    assert not missing, f"corpus traces without an expectation: {missing}"
    assert all(e.why for e in EXPECTATIONS)


@pytest.mark.parametrize("path", sorted({(e.base, e.path) for e in EXPECTATIONS}), ids=lambda p: Path(p[1]).name)
def test_no_real_trace_has_host_slices_overflowing_their_parent(path: tuple[str, str]) -> None:
    # Real profilers write nesting host stacks: a hit here is a false positive of analysis/malformed.py (checked by
    # hand: the MTIA inference trace's runtime records overlap on one thread, hence ASYNC_ON_THREAD; the torch
    # samples' record_function ranges open inside Python frames, hence Python frames nest only among themselves).
    e = next(e for e in EXPECTATIONS if (e.base, e.path) == path)
    p = _path(e)
    if p is None:
        pytest.skip("the real-trace corpus (../shared/corpus/kineto) is not beside this checkout")
    assert "overflows_parent" not in _diagnosis(p).sections["event_checks"].counts


@pytest.mark.torch
@pytest.mark.parametrize("e", RUN_EXPECTATIONS, ids=lambda e: e.run)
def test_verdict_of_a_real_run(e: RunExpect, verdict_runs: Path) -> None:
    diag = _diagnosis(verdict_runs / e.run)
    fired = {f.id for f in diag.findings}
    assert set(e.must) <= fired, f"missing {set(e.must) - fired}: {e.why}"
    assert not set(e.must_not) & fired, f"wrongly fired {set(e.must_not) & fired}: {e.why}"
    stalls = [s for d in diag.devices for s in d.top_stalls if s.detail == e.detail]
    assert stalls, e.why
    if e.source is not None:
        assert all(s.source and s.source.endswith(f" {e.source}") for s in stalls), e.why
    if e.run == "ddp":
        (straggler,) = [f for f in diag.findings if f.id == "straggler"]
        assert "host-side work" in straggler.advice and "computes more" not in straggler.advice, e.why
