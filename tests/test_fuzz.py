"""A seeded fuzz campaign over real inputs, bounded to seconds (the heavier one: bench/fuzz_campaign.py).

Mutations of windows of the shipped samples and the small corpus traces (both Kineto decoders), of
the synthetic Neuron Explorer directories, of the legacy Neuron JSON samples and of a ``convert``
output must each load or fail with a named error, with valid tables (tests/fuzz_inputs.py says
exactly what is checked). The seed is fixed, so a failure names a case that reproduces.
"""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

import neurontrace
from tests import fuzz_inputs as fz
from tests import fuzz_new_inputs as fn
from tests import fuzz_structured as fs

SEED = 12
GZIP = b"\x1f\x8b"
KINETO_CASES = 1500
NEURON_CASES = 120
JSON_CASES = 1300
OUTPUT_CASES = 80
DATASET_CASES = 32
LOG_CASES = 40
PICKLE_CASES = 60
STRUCTURED_CASES = 300  # a count, not a time: the run is the same on every machine (~12 s on a quiet one)
USER_RUN_EVERY = 25  # of those, every 25th that loads also goes through `info` and `diagnose`


@pytest.mark.slow
def test_mutated_kineto_traces_load_or_fail_by_name_and_the_decoders_agree(tmp_path: Path) -> None:
    kinds: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    for i, (source, kind, data) in enumerate(fz.kineto_cases(SEED, KINETO_CASES)):
        path = tmp_path / (f"case{i % 8}.json" + (".gz" if data.startswith(GZIP) else ""))
        path.write_bytes(data)
        try:
            result = fz.check_kineto(path)
        except AssertionError as exc:
            raise AssertionError(f"case {i} ({kind} of {source}): {exc}") from exc
        except Exception as exc:
            raise AssertionError(f"case {i} ({kind} of {source}): {type(exc).__name__}: {exc}") from exc
        kinds[kind] += 1
        outcomes[result.kind] += 1
    # The campaign covers every class, and both outcomes happen (a mutator that never bites proves nothing).
    assert len(kinds) >= 17, kinds
    assert outcomes["ok"] > 100 and outcomes["error"] > 100, outcomes


def test_structure_aware_kineto_mutations_load_or_fail_by_name_and_the_decoders_agree(tmp_path: Path) -> None:
    """Swapped types, dropped keys, duplicate keys of other types, extreme numbers, unicode names and
    odd shapes (tests/fuzz_structured.py): both decoders' tables compared on every case."""
    kinds: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    for i, (source, kind, data) in enumerate(fs.cases(SEED, STRUCTURED_CASES)):
        path = tmp_path / f"case{i % 8}.json"
        path.write_bytes(data)
        try:
            result = fz.check_kineto(path)
            if result.kind == "ok" and i % USER_RUN_EVERY == 0:
                assert all(code in (0, 5) for code in fz.as_user(path)), kind
        except AssertionError as exc:
            raise AssertionError(f"structured case {i} ({kind} of {source}): {exc}") from exc
        except Exception as exc:
            raise AssertionError(f"structured case {i} ({kind} of {source}): {type(exc).__name__}: {exc}") from exc
        kinds[kind.split()[0]] += 1
        outcomes[result.kind] += 1
    assert set(kinds) == set(fs.KINDS), kinds
    assert outcomes["ok"] > 100 and outcomes["error"] > 50, outcomes


def test_mutated_neuron_directories_load_or_fail_by_name(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    outcomes: Counter[str] = Counter()
    for i in range(NEURON_CASES):
        src = rng.choice(fz.NEURON_DIRS)
        kind = fz.neuron_mutation(src, tmp_path / "d", rng)
        try:
            outcomes[fz.outcome(tmp_path / "d").kind] += 1
        except Exception as exc:
            raise AssertionError(f"case {i} ({kind} of {src.name}): {type(exc).__name__}: {exc}") from exc
    assert outcomes["ok"] > 5 and outcomes["error"] > 3, outcomes


def test_mutated_legacy_neuron_json_loads_or_fails_by_name(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    docs = {p: json.loads(p.read_text()) for p in fz.LEGACY_JSON}
    outcomes: Counter[str] = Counter()
    for i in range(JSON_CASES):
        src = rng.choice(fz.LEGACY_JSON)
        kind, doc = fz.json_value_mutation(docs[src], rng)
        path = tmp_path / src.name
        path.write_text(json.dumps(doc))
        try:
            outcomes[fz.outcome(path).kind] += 1
        except Exception as exc:
            raise AssertionError(f"case {i} ({kind} of {src.name}): {type(exc).__name__}: {exc}") from exc
    assert outcomes["ok"] > 20 and outcomes["error"] > 5, outcomes


def test_damaged_convert_outputs_load_or_fail_by_name(tmp_path: Path) -> None:
    trace = neurontrace.load(fz.ROOT / "sample_traces" / "cpu_train_loop.pt.trace.json.gz")
    clean = trace.to_parquet(tmp_path / "clean")
    outcomes = _damaged_copies(clean, tmp_path / "out", fz.parquet_output_mutation, OUTPUT_CASES)
    assert outcomes["error"] > 20, outcomes


def _damaged_copies(clean: Path, out: Path, mutate: Callable[[Path, random.Random], str], cases: int,
                    user_every: int = 0) -> Counter[str]:
    """``cases`` seeded damages of fresh copies of ``clean`` at ``out``, each loaded (every ``user_every``-th
    that loads also through info/diagnose): the outcomes, or an AssertionError naming the case."""
    rng = random.Random(SEED)
    outcomes: Counter[str] = Counter()
    for i in range(cases):
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(clean, out)
        kind = mutate(out, rng)
        try:
            result = fz.outcome(out)
            if user_every and result.kind == "ok" and i % user_every == 0:
                fz.as_user(out)
        except Exception as exc:
            raise AssertionError(f"case {i} ({kind}): {type(exc).__name__}: {exc}") from exc
        outcomes[result.kind] += 1
    return outcomes


def test_damaged_datasets_load_or_fail_by_name(tmp_path: Path) -> None:
    """A dataset of two real ranks (the gloo sample) with a partition missing or extra, a newer or odd marker,
    a partition file retyped, flipped or cut: loaded, or a named error; every 4th also through info/diagnose."""
    from neurontrace.cli import main

    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r in (0, 1):
        shutil.copy(fz.ROOT / "sample_traces" / "gloo_8rank" / f"rank-{r}.pt.trace.json.gz", ranks)
    assert fz.as_user(ranks) is not None
    clean = tmp_path / "clean"
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["convert", str(ranks), "-o", str(clean)]) == 0
    outcomes = _damaged_copies(clean, tmp_path / "ds", fz.dataset_mutation, DATASET_CASES, user_every=4)
    assert outcomes["ok"] > 3 and outcomes["error"] > 10, outcomes


@pytest.mark.skipif(not fn.compile_logs(), reason="the real compile logs (shared/corpus/compile) are not here")
def test_damaged_compile_logs_give_a_report_or_a_named_error(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    codes: Counter[int] = Counter()
    for i in range(LOG_CASES):
        src = rng.choice(fn.compile_logs())
        kind, data = fn.log_mutation(src.read_bytes(), rng)
        path = tmp_path / "x.log"
        path.write_bytes(data)
        try:
            codes[fn.run_user("compile", str(path))] += 1
        except Exception as exc:
            raise AssertionError(f"log case {i} ({kind} of {src.name}): {type(exc).__name__}: {exc}") from exc
    assert codes[0] > 10, codes


def test_damaged_snapshot_pickles_give_a_result_or_a_named_error_and_never_run_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from neurontrace.testing import synthetic_snapshot

    canary = tmp_path / "canary"
    monkeypatch.setenv("NEURONTRACE_FUZZ_CANARY", str(canary))
    snapshot = synthetic_snapshot.leaky_steps(steps=2)
    rng = random.Random(SEED)
    codes: Counter[str] = Counter()
    for i in range(PICKLE_CASES):
        kind, data = fn.pickle_mutation(snapshot, rng)
        path = tmp_path / "s.pickle"
        path.write_bytes(data)
        try:
            codes[f"{kind} {fn.run_user('memory', str(path))}"] += 1
        except Exception as exc:
            raise AssertionError(f"pickle case {i} ({kind}): {type(exc).__name__}: {exc}") from exc
    assert not canary.exists()  # the __reduce__ payload never ran
    assert codes["global 5"] > 0 and codes["huge_numbers 0"] > 0, codes


def test_mutations_are_reproducible() -> None:
    first = [(k, d) for _, k, d in fz.kineto_cases(SEED, 40)]
    assert first == [(k, d) for _, k, d in fz.kineto_cases(SEED, 40)]
    structured = [(k, d) for _, k, d in fs.cases(SEED, 40)]
    assert structured == [(k, d) for _, k, d in fs.cases(SEED, 40)]
