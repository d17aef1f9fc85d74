"""The cross_rank section out of core: one rank's time slices (``Options.owned``) merged by ``SECTION.merge``
give the whole rank's collective rows (analysis/cross_rank_slices.py), and ``diagnose`` of slices the whole
rank's document, cross_rank included (docs/scale.md, "diagnose DATASET").

Real inputs with collectives: the corpus NCCL trace (21 NCCL kernels, A100, rank 0 of 2), the corpus CPU-only
HTA trace (rank 34, 10 gloo all-reduces), the corpus large-integer trace (rank 70, one all-reduce), and the
8-rank gloo job in sample_traces/gloo_8rank/ (real torch runs; its last rank arrives last at every all-reduce).
Cuts at step starts, at arbitrary instants, and just inside collectives (a collective carried into the next
slice); each slice read as the out-of-core reader does (every event overlapping it, with or without a halo).
"""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import pytest

import neurontrace
from neurontrace.analysis import cross_rank
from neurontrace.analysis.contract import Context, Options
from neurontrace.analysis.diagnose import combine, diagnose_rank
from neurontrace.analysis.sliced import diagnose_sliced, host_step_starts, slices_of
from neurontrace.analysis.slices import slice_of
from neurontrace.analysis.window import trace_span
from neurontrace.trace import Trace
from tests.conftest import SAMPLES, corpus_root
from tests.sliced_support import comparable, left_out, without_window_path
from tests.test_sliced import AT_STEPS_ONLY, same_answer

HTA = "HolisticTraceAnalysis/tests/data"
NCCL = f"{HTA}/nccl_parser_config/nccl_data.json.gz"
CPU_ONLY = f"{HTA}/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
LARGE_INT = f"{HTA}/large_integer_trace/rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz"
JOB = SAMPLES / "gloo_8rank"


def _load(path: Path) -> Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return neurontrace.load(path)


def _corpus(rel: str) -> Trace:
    root = corpus_root()
    if root is None or not (root / rel).is_file():
        pytest.skip("the real-trace corpus is not beside this checkout")
    return _load(root / rel)


@pytest.fixture(scope="module")
def job() -> list[Trace]:
    return [_load(p) for p in sorted(JOB.glob("rank-*.pt.trace.json.gz"))]


def _merge(parts: list[cross_rank.RankPart]) -> cross_rank.RankPart:
    assert cross_rank.SECTION.merge is not None
    merged: cross_rank.RankPart = cross_rank.SECTION.merge(parts)
    return merged


def _part(trace: Trace, owned: tuple[int, int] | None = None) -> cross_rank.RankPart:
    part: cross_rank.RankPart = cross_rank.SECTION.compute(Context(trace, [], [], {}, Options(owned=owned)))
    return part


def _cut_sets(trace: Trace, whole: cross_rank.RankPart) -> dict[str, list[int]]:
    lo, hi = trace_span(trace)
    return {"steps": host_step_starts(trace)[1:],
            "7 instants": [lo + (hi - lo) * i // 7 for i in range(1, 7)],
            "23 instants": [lo + (hi - lo) * i // 23 for i in range(1, 23)],
            "inside collectives": [s + 1 for s in whole.records["start_ns"].to_pylist()][::2]}


def _crossing(records: list[dict[str, object]], slices: list[tuple[int, int]]) -> int:
    """How many rows look back across a cut (their look-back starts in an earlier slice)."""
    def index(t: int) -> int:
        return next(i for i, (a, b) in enumerate(slices) if a <= t < b)
    return sum(index(int(r["before_start_ns"])) < index(int(r["start_ns"])) for r in records)  # type: ignore


@pytest.mark.parametrize("rel", [NCCL, CPU_ONLY, LARGE_INT, "job:0", "job:7"])
def test_the_slices_merge_into_the_whole_ranks_rows(rel: str, job: list[Trace]) -> None:
    trace = job[int(rel[4:])] if rel.startswith("job:") else _corpus(rel)
    whole = _part(trace)
    assert whole.records.num_rows >= 1
    crossing = 0
    for name, cuts in _cut_sets(trace, whole).items():
        slices = slices_of(trace_span(trace), cuts)
        for halo in (0, 1_000_000):
            parts = [_part(slice_of(trace, (a - halo, b + halo)), (a, b)) for a, b in slices]
            # a slice counts the collectives and steps starting in it
            assert sum(c.kinds["device"].rows.num_rows + c.kinds["host"].rows.num_rows
                       for p in parts for _, c in p.carries or []) == whole.records.num_rows, name
            merged = _merge(parts)
            assert merged.records.to_pylist() == whole.records.to_pylist(), (name, halo)
            assert merged.steps == whole.steps, (name, halo)
        crossing += _crossing(whole.records.to_pylist(), slices)
    if whole.records.num_rows > 1:  # the look-back to the previous collective crossed cuts, and came out whole
        assert crossing >= 1


def test_a_look_back_across_cuts_takes_the_earlier_slices_tails(job: list[Trace]) -> None:
    # rank 7 computes 6x the micro-batches before each all-reduce: its look-backs are long and busy; cut each in
    # three, the middle slice holding no collective at all, and the merged busy time and top ops still equal
    trace = job[7]
    whole = _part(trace)
    rows = whole.records.to_pylist()
    cuts = sorted(c for r in rows[1:] for c in (r["before_start_ns"] + (r["start_ns"] - r["before_start_ns"]) // 3,
                                                r["before_start_ns"] + 2 * (r["start_ns"] - r["before_start_ns"]) // 3))
    slices = slices_of(trace_span(trace), cuts)
    merged = _merge([_part(slice_of(trace, s), s) for s in slices])
    assert merged.records.to_pylist() == rows
    assert _crossing(rows, slices) == len(rows) - 1
    assert all(r["before_host_ns"] > 0 and r["before_top"] != "[]" for r in rows[1:])


@pytest.mark.parametrize("rel", [NCCL, "job:7"])
def test_diagnose_of_slices_equals_diagnose_with_cross_rank(rel: str, job: list[Trace]) -> None:
    assert cross_rank.SECTION.key not in left_out()  # no longer left out of an out-of-core diagnosis
    trace = job[int(rel[4:])] if rel.startswith("job:") else _corpus(rel)
    lo, hi = trace_span(trace)
    doc = same_answer(trace, host_step_starts(trace)[1:])
    same_answer(trace, [lo + (hi - lo) * i // 9 for i in range(1, 9)], ignore=("steps", "total"),
                at_steps_only=AT_STEPS_ONLY)
    assert len(doc[cross_rank.SECTION.key]["collectives"]) == _part(trace).records.num_rows


def test_a_job_of_sliced_ranks_equals_the_in_memory_job(job: list[Trace]) -> None:
    # cross_rank's combine runs over the merged ranks: the straggler, waits and bandwidth of the whole job. The
    # critical path's window-path figures across ranks are the critical_path section's own (docs/critical_path.md)
    whole = combine([diagnose_rank(t) for t in job]).as_dict()
    parts = combine([diagnose_sliced(t, host_step_starts(t)[1:]) for t in job]).as_dict()
    assert parts[cross_rank.SECTION.key] == whole[cross_rank.SECTION.key]
    assert whole[cross_rank.SECTION.key]["straggler_rank"] == 7
    assert [f["id"] for f in whole["findings"]].count("straggler") == 1
    assert without_window_path(comparable(parts, sliced=True)) == without_window_path(comparable(whole, sliced=False))
    assert len(list(itertools.chain(*(host_step_starts(t) for t in job)))) >= 8 * 2
