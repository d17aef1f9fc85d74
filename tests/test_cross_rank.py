"""Collectives across ranks, checked against an independent computation over the raw JSON.

Two real inputs: the 8-rank gloo job in sample_traces/gloo_8rank/ (made by
sample_traces/make_multirank.py; its last rank runs 6x the micro-batches, so it arrives last at every
gradient all-reduce) and the corpus's NCCL trace (rank 0 of 2 on A100s: one rank, bandwidth from
the kernel durations).
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import neurontrace
from neurontrace.analysis import cross_rank as xr
from neurontrace.analysis import cross_rank_slices
from neurontrace.analysis.diagnose import diagnose
from neurontrace.analysis.intervals import union
from tests.conftest import SAMPLES

JOB = SAMPLES / "gloo_8rank"
NCCL = Path("HolisticTraceAnalysis/tests/data/nccl_parser_config/nccl_data.json.gz")


def _raw(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    return doc


def _ns(doc: dict[str, Any], us: Decimal | int) -> int:
    return int(Decimal(us) * 1000) + int(doc.get("baseTimeNanoseconds", 0))


def _independent_job() -> list[dict[str, Any]]:
    """Per collective (op, ordinal): every rank's arrival and end (ns), message bytes, from the raw files."""
    seen: dict[tuple[str, int], dict[str, Any]] = {}
    for path in sorted(JOB.glob("rank-*.pt.trace.json.gz")):
        doc = _raw(path)
        rank = doc["distributedInfo"]["rank"]
        world = doc["distributedInfo"]["world_size"]
        ops = sorted((e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("gloo:")),
                     key=lambda e: e["ts"])
        count: dict[str, int] = defaultdict(int)
        for e in ops:
            op = e["name"].split(":")[1]
            elems = int(np.prod(e["args"]["Input Dims"][0]))
            nbytes = elems * 4 * (world if op == "all_gather" else 1)  # float32; all_gather outputs world inputs
            c = seen.setdefault((op, count[op]), {"op": op, "k": count[op], "bytes": nbytes, "arrival": {}, "end": {}})
            c["arrival"][rank] = _ns(doc, e["ts"])
            c["end"][rank] = _ns(doc, e["ts"]) + int(Decimal(e["dur"]) * 1000)
            count[op] += 1
    return list(seen.values())


@pytest.fixture(scope="module")
def job() -> xr.CrossRank:
    return xr.cross_rank(xr.rank_collectives(neurontrace.load(JOB)))


def test_job_collectives_match_the_raw_json(job: xr.CrossRank) -> None:
    want = _independent_job()
    assert len(want) == 8 and job.matched == 8 and job.ranks == list(range(8))
    got = {(c["op"], c["ordinal"]): c for c in job.collectives}
    for w in want:
        c = got[(w["op"], w["k"])]  # the k-th all_reduce of every rank is the same collective
        ranks = sorted(w["arrival"])
        assert c["ranks"] == ranks and c["complete"]
        assert c["arrival_ns"] == [w["arrival"][r] for r in ranks]
        last = max(ranks, key=lambda r: w["arrival"][r])
        assert c["last_rank"] == last
        assert c["arrival_skew_ns"] == w["arrival"][last] - min(w["arrival"].values())
        assert c["wait_ns"] == [w["arrival"][last] - w["arrival"][r] for r in ranks]
        transfer = w["end"][last] - w["arrival"][last]
        assert c["transfer_ns"] == transfer and c["bytes"] == w["bytes"]
        factor = 2 * 7 / 8 if w["op"] == "all_reduce" else 7 / 8  # NCCL: all-reduce 2(n-1)/n, all-gather (n-1)/n
        assert c["algbw_gbps"] == pytest.approx(w["bytes"] / transfer, rel=1e-5)
        assert c["busbw_gbps"] == pytest.approx(w["bytes"] / transfer * factor, rel=1e-5)


def test_straggler_is_the_late_rank_not_the_one_that_waited(job: xr.CrossRank) -> None:
    want = _independent_job()
    waits: dict[int, int] = defaultdict(int)
    for w in want:
        last = max(w["arrival"].values())
        for r, a in w["arrival"].items():
            waits[r] += last - a
    # The known feature of the job: rank 7 (6x the micro-batches) is last at every gradient all-reduce.
    reduces = [w for w in want if w["op"] == "all_reduce"]
    assert all(max(w["arrival"], key=w["arrival"].__getitem__) == 7 for w in reduces)
    assert job.straggler_rank == 7
    assert job.most_waiting_rank == max(waits, key=waits.__getitem__) != 7
    assert {p["rank"]: p["wait_ns"] for p in job.per_rank} == dict(waits)


def test_diagnose_reports_the_straggler_and_its_work() -> None:
    doc = diagnose(neurontrace.load(JOB)).as_dict()
    cr = doc["cross_rank"]
    assert cr["straggler_rank"] == 7 and len(cr["collectives"]) == 8
    assert all("algbw_gbps" in c and "busbw_gbps" in c for c in cr["collectives"])
    (f,) = [f for f in doc["findings"] if f["id"] == "straggler"]
    assert "Rank 7" in f["title"] and "load imbalance" in f["advice"]
    # Rank 7's work before those all-reduces (its extra backward passes) is named, not the waiting ranks'.
    assert cr["straggler_work"]["host_ns"] > 2 * cr["straggler_work"]["others_host_ns"]
    assert any("Backward" in name for name, _ in cr["straggler_work"]["top"])
    # Exposed collectives here are mostly waiting for rank 7: the advice says so instead of "overlap".
    exposed = [f for f in doc["findings"] if f["id"] == "exposed_collectives"]
    assert exposed and all("rank 7" in f["advice"] and "waiting" in f["advice"] for f in exposed)


def test_single_rank_nccl_bandwidth_from_kernel_durations(corpus: Path) -> None:
    doc = _raw(corpus / NCCL)
    want = sorted(((_ns(doc, e["ts"]), int(Decimal(e["dur"]) * 1000), e["args"]) for e in doc["traceEvents"]
                   if e.get("cat") == "kernel" and "Collective name" in e.get("args", {})), key=lambda x: x[0])
    cr = diagnose(neurontrace.load(corpus / NCCL)).sections["cross_rank"]
    got = sorted(cr.collectives, key=lambda c: c["arrival_ns"][0])
    assert len(got) == len(want) == 21 and cr.matched == 0 and cr.straggler_rank is None
    factor = {"allreduce": 2 * (2 - 1) / 2, "broadcast": 1.0}  # Group size 2
    for c, (ts, dur, args) in zip(got, want, strict=True):
        nbytes = max(args["In msg nelems"], args["Out msg nelems"]) * {"Float": 4, "Long": 8}[args["dtype"]]
        assert c["arrival_ns"] == [ts] and c["transfer_ns"] == dur and c["transfer_from"] == "kernel"
        assert c["arrival_skew_ns"] is None and c["bytes"] == nbytes and c["group_size"] == args["Group size"]
        assert c["algbw_gbps"] == pytest.approx(nbytes / dur, rel=1e-5)
        assert c["busbw_gbps"] == pytest.approx(nbytes / dur * factor[args["Collective name"]], rel=1e-5)


def test_low_bus_bandwidth_judged_against_the_link_class(corpus: Path) -> None:
    found = [f for f in diagnose(neurontrace.load(corpus / NCCL)).findings if f.id == "low_bus_bandwidth"]
    assert found and all("NVLink 3" in f.title for f in found)  # A100-PG509-200 is an SXM part
    assert xr.link_class("NVIDIA A100-PG509-200") == ("NVLink 3", 300.0)
    assert xr.link_class("Tesla V100-SXM2-32GB") == ("NVLink 2", 150.0)
    assert xr.link_class("NVIDIA H100 PCIe") == ("PCIe 5.0 x16", 64.0)
    assert xr.link_class("an unknown board") is None


def _rows(**cols: list[Any]) -> pa.Table:
    n = len(cols["rank"])
    base: dict[str, list[Any]] = {f.name: [None] * n for f in xr.RECORDS}
    base.update(device=["cuda:0"] * n, group=["0"] * n, op=["all_reduce"] * n, name=["k"] * n, ordinal=[0] * n,
                bytes=[1 << 20] * n, group_size=[2] * n, before_start_ns=[0] * n, before_device_ns=[0] * n,
                before_host_ns=[0] * n, before_top=["[]"] * n)
    base.update(cols)
    return pa.table({f.name: pa.array(base[f.name], f.type) for f in xr.RECORDS}, schema=xr.RECORDS)


def test_sequence_numbers_win_over_order() -> None:
    """With Seq recorded, a rank that missed a collective (a shorter profile) still matches by number."""
    rows = _rows(rank=[0, 0, 1], seq=[5, 6, 6], ordinal=[0, 1, 0], start_ns=[100, 300, 340], end_ns=[200, 400, 400])
    cr = xr.cross_rank(rows)
    by_seq = {c["seq"]: c for c in cr.collectives}
    assert by_seq[6]["ranks"] == [0, 1] and by_seq[6]["last_rank"] == 1 and by_seq[6]["wait_ns"] == [40, 0]
    assert by_seq[6]["transfer_ns"] == 60 and by_seq[5]["ranks"] == [0] and not by_seq[5]["complete"]


def test_covered_time_matches_a_brute_force_count() -> None:
    rng = np.random.default_rng(3)
    s = np.sort(rng.integers(0, 1000, 40))
    busy = union(s, s + rng.integers(1, 60, 40))
    lo = rng.integers(0, 1000, 30)
    hi = lo + rng.integers(0, 200, 30)
    mask = np.zeros(1300, dtype=bool)
    for a, b in zip(*busy, strict=True):
        mask[a:b] = True
    assert cross_rank_slices.covered(busy, lo, hi).tolist() == [int(mask[a:b].sum()) for a, b in zip(lo, hi, strict=True)]


def test_large_collectives_keep_sums_not_per_rank_lists(job: xr.CrossRank, monkeypatch: pytest.MonkeyPatch) -> None:
    """Above PER_RANK_LISTS_MAX ranks a collective's per-rank lists are null (the document grows with
    collectives + ranks); every other field, the per-rank sums and the straggler are those of the full record."""
    records = xr.rank_collectives(neurontrace.load(JOB))
    monkeypatch.setattr(xr, "PER_RANK_LISTS_MAX", 4)  # the 8-rank job's collectives are then "large"
    small = xr.cross_rank(records)
    assert len(small.collectives) == len(job.collectives) == 8
    for full, c in zip(job.collectives, small.collectives, strict=True):
        assert all(c[k] is None for k in xr.PER_RANK_LISTS)
        assert c["rank_count"] == len(full["ranks"]) == 8 and c["first_arrival_ns"] == min(full["arrival_ns"])
        assert c["host_count"] == len(full["hosts"])
        assert {k: v for k, v in c.items() if k not in xr.PER_RANK_LISTS} == \
            {k: v for k, v in full.items() if k not in xr.PER_RANK_LISTS}
    assert small.per_rank == job.per_rank and small.straggler_rank == job.straggler_rank == 7
    assert small.straggler_work == job.straggler_work
