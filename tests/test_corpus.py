"""Conformance over the real-trace corpus (../shared/corpus/kineto, see its README.md).

Every expected value here is computed independently from the raw JSON (stdlib ``json`` with
``parse_float=Decimal``, so µs values convert to exact integer ns) and compared exactly with what
``neurontrace.load`` produced. The parser is never used to compute an expectation.

Raw row ↔ table row: ``event_id`` is the 0-based index of the event in the raw ``traceEvents`` list.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import neurontrace
from neurontrace import Trace
from neurontrace.errors import TraceWarning
from tests.conftest import corpus_files, corpus_root

pytestmark = pytest.mark.corpus

# Kineto device categories (kineto.md §1.7; legacy aliases included).
DEVICE_CATS = frozenset({
    "kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "gpu_user_annotation",
    "cuda_sync", "xpu_sync", "mtia_ccp_events", "collective_comm",
})
KERNEL_CATS = frozenset({"kernel", "Kernel", "mtia_ccp_events", "collective_comm"})
MEMCPY_CATS = frozenset({"gpu_memcpy", "Memcpy"})
MEMSET_CATS = frozenset({"gpu_memset", "Memset"})
# Raw device category → the normalized categories it may become (kernels may be collectives).
DEVICE_CATEGORY_OF = {
    "kernel": {"compute", "collective"}, "Kernel": {"compute", "collective"},
    "mtia_ccp_events": {"compute", "collective"}, "collective_comm": {"collective"},
    "gpu_memcpy": {"memcpy"}, "Memcpy": {"memcpy"}, "gpu_memset": {"memset"}, "Memset": {"memset"},
    "gpu_user_annotation": {"annotation"}, "cuda_sync": {"sync_wait"}, "xpu_sync": {"sync_wait"},
}
# A few unambiguous host categories (kineto.md §1.7).
HOST_CATEGORY_OF = {
    "cpu_op": {"framework_op", "step"}, "Operator": {"framework_op", "step"},
    "cuda_runtime": {"runtime"}, "Runtime": {"runtime"}, "mtia_runtime": {"runtime"},
    "cuda_driver": {"driver"}, "python_function": {"python"},
}
NCCL_KERNEL = re.compile(r"^nccl|ncclKernel|ncclDevKernel")
MEMORY_NAMES = frozenset({"[memory]", "[OutOfMemory]"})
FLOW_PHASES = frozenset({"s", "f", "t"})
DIRECTION = re.compile(r"\b(HtoD|DtoH|DtoD|PtoP|HtoH)\b")
DIRECTIONS = {"HtoD": "h2d", "DtoH": "d2h", "DtoD": "d2d", "PtoP": "p2p", "HtoH": "h2h"}
INT64 = range(-(2**63), 2**63)
RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
# Args keys that a parser may lift into a column of their own; every other key must stay in `args`.
LIFTABLE_ARGS = frozenset({
    "External id", "external id", "correlation", "device", "stream", "bytes", "kind",
    "Python id", "Python parent id",
})

# Files the quirk tests name (paths relative to the corpus root).
HTA = "HolisticTraceAnalysis/tests/data"
RESNET50 = "kineto-tb_plugin/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
LARGE_INT = f"{HTA}/large_integer_trace/rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz"
CPU_ONLY = f"{HTA}/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
RANK_UNAVAILABLE = f"{HTA}/rank_unavailable/rank_not_found.json.gz"
DIST_INFO_UNAVAILABLE = f"{HTA}/distributed_info_unavailable/distributed_info_not_found.json.gz"
MTIA = f"{HTA}/mtia_inference_trace/mtia_inference_rank_0.json.gz"
NS_RESOLUTION = f"{HTA}/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
TRACELENS_BASE_TIME = "TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
AMD_FILES = (
    f"{HTA}/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",  # no roctracer keys: the name says AMD
    "TraceLens/tests/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz",
    "TraceLens/tests/traces/mi210/gpu_only_trace/gpu_only_trace.json.gz",
)
ROUND_TRIP_MAX_BYTES = 100_000  # compressed size of the files the Parquet round trip covers


# -- the raw side ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Raw:
    top: dict[str, Any]  # every top-level key except traceEvents
    events: list[dict[str, Any]]


@functools.lru_cache(maxsize=2)
def raw_file(path: Path) -> Raw:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = json.loads(data, parse_float=Decimal)
    if isinstance(doc, list):
        return Raw({}, doc)
    events = doc.pop("traceEvents")
    return Raw(doc, events)


# Real files whose load warns, and what the warning must say: the profiler's own ERROR list (MTIA). (A CUDA trace
# holding CPU ops only, distributed_info_not_found, is recorded as a fact at load and warned of once by diagnose:
# tests/test_normalized_meta.py.)
EXPECTED_WARNINGS = {
    MTIA: [("logged 1 ERROR message(s) in the trace: ERROR:2026-01-08 08:51:59 865:3386 DeviceProperties.cpp:47] "
           "gpuGetDeviceCount failed with code 35")],
}


@functools.lru_cache(maxsize=2)
def trace_of(path: Path) -> Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)  # checked by test_loads_without_warnings
        return neurontrace.load(path)


def ns(us: Any) -> int:
    """Exact ns of a µs value as written (int or Decimal)."""
    assert isinstance(us, int | Decimal) and not isinstance(us, bool), f"unexpected µs value {us!r}"
    scaled = Decimal(us) * 1000
    return int(scaled.to_integral_value(rounding=ROUND_HALF_EVEN))


def base_ns(raw: Raw) -> int:
    base = raw.top.get("baseTimeNanoseconds")
    return base if isinstance(base, int) and not isinstance(base, bool) else 0


def has_ts(e: dict[str, Any]) -> bool:
    return e.get("ts") is not None


def is_device_event(e: dict[str, Any]) -> bool:
    return e.get("ph") == "X" and e.get("cat") in DEVICE_CATS and has_ts(e)


def args_of(e: dict[str, Any]) -> dict[str, Any]:
    a = e.get("args")
    return a if isinstance(a, dict) else {}


def id_text(v: Any) -> str | None:
    return None if v is None else str(v)


def int64_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v in INT64 else None


def expected_backend(raw: Raw) -> str:
    cats = {e.get("cat") for e in raw.events}
    names = " ".join(str(p.get("name", "")) for p in raw.top.get("deviceProperties") or [] if isinstance(p, dict))
    if any(isinstance(c, str) and c.startswith("mtia_") for c in cats):
        return "mtia"
    if any(isinstance(c, str) and c.startswith("xpu_") for c in cats):
        return "xpu"
    if "roctracer_version" in raw.top or "hip_runtime_version" in raw.top or re.search(r"\bAMD\b", names):
        return "rocm"
    accelerator_cats = DEVICE_CATS | {"cuda_runtime", "cuda_driver", "Runtime"}
    if not raw.top.get("deviceProperties") and not cats & accelerator_cats:
        return "cpu"
    return "cuda"


def expected_direction(e: dict[str, Any]) -> str | None:
    m = DIRECTION.search(e.get("name") or "")
    if m is None:
        kind = args_of(e).get("kind")
        m = DIRECTION.fullmatch(kind) if isinstance(kind, str) else None
    return DIRECTIONS[m.group(1)] if m else None


def rows(table: pa.Table, *columns: str) -> list[dict[str, Any]]:
    """Selected columns as a list of row dicts (dictionary columns decoded to their values)."""
    out: list[dict[str, Any]] = table.select(list(columns)).to_pylist()
    return out


# -- the per-file fixture -------------------------------------------------------------------------


def _rel(p: Path) -> str:
    root = corpus_root()
    assert root is not None
    return p.relative_to(root).as_posix()


_FILES = corpus_files()
_PARAMS: list[Path | None] = [*_FILES] or [None]  # one "no-corpus" case where the corpus is absent


@dataclass(frozen=True)
class Case:
    rel: str
    path: Path

    @property
    def raw(self) -> Raw:
        return raw_file(self.path)

    @property
    def trace(self) -> Trace:
        return trace_of(self.path)


# Module scope makes pytest run every test of one file together, so each file is decoded once.
@pytest.fixture(scope="module", params=_PARAMS, ids=[_rel(p) for p in _FILES] or ["no-corpus"])
def corpus_file(request: pytest.FixtureRequest) -> Path | None:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def case(corpus: Path, corpus_file: Path | None) -> Case:
    """One corpus file; skips (through ``corpus``) when the corpus is not beside the checkout."""
    if corpus_file is None:
        pytest.skip(f"{corpus} holds no .json/.json.gz trace files")
    return Case(_rel(corpus_file), corpus_file)


def named(corpus: Path, rel: str) -> Case:
    path = corpus / rel
    if not path.is_file():
        pytest.skip(f"{rel} is not in this copy of the corpus")
    return Case(rel, path)


# -- every file -----------------------------------------------------------------------------------


def test_loads_without_warnings(case: Case) -> None:
    """No warning, except those a file's own content calls for (EXPECTED_WARNINGS), which must reach the accounting."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = neurontrace.load(case.path)
    expected = EXPECTED_WARNINGS.get(case.rel, [])
    got = [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in caught]
    assert len(got) == len(expected) and all(e in g for e, g in zip(expected, got, strict=True)), got
    assert len(trace.accounting[0].warnings) == len(expected)
    assert all(e in w for e, w in zip(expected, trace.accounting[0].warnings, strict=True))


def test_accounting(case: Case) -> None:
    raw, trace = case.raw, case.trace
    (acct,) = trace.accounting
    ev = raw.events
    assert acct.format == "kineto"
    assert acct.events_read == len(ev)
    assert acct.kept_total + acct.skipped_total == acct.events_read

    meta = sum(e.get("ph") == "M" for e in ev)
    no_ts = sum(e.get("ph") != "M" and not has_ts(e) for e in ev)
    flows = sum(e.get("ph") in FLOW_PHASES and has_ts(e) for e in ev)
    device = sum(is_device_event(e) for e in ev)
    counters = sum(
        has_ts(e) and (e.get("ph") == "C" or (e.get("ph") in ("i", "I") and e.get("name") in MEMORY_NAMES))
        for e in ev
    )
    system = len(ev) - meta - no_ts - flows - device - counters
    assert acct.kept.get("metadata", 0) == meta
    assert acct.kept.get("flows", 0) == flows
    assert acct.kept.get("device_events", 0) == device
    assert acct.kept.get("counters", 0) == counters
    assert acct.kept.get("system_events", 0) == system
    assert acct.skipped_total == no_ts
    assert trace.device_events.num_rows == device
    assert trace.system_events.num_rows == system


def test_durations_and_ids(case: Case) -> None:
    trace = case.trace
    for t in (trace.system_events, trace.device_events):
        negative = [r for r in rows(t, "event_id", "dur_ns") if r["dur_ns"] < 0]
        assert negative == []
    ids = trace.system_events["event_id"].to_pylist() + trace.device_events["event_id"].to_pylist()
    dupes = [i for i, n in Counter(ids).items() if n > 1]
    assert dupes == []


def test_rows_are_the_raw_events(case: Case) -> None:
    """event_id indexes traceEvents; name, phase, category, pid and tid are as written."""
    raw, trace = case.raw, case.trace
    ev = raw.events
    host_only = trace.device_events.num_rows == 0 and trace.meta("backend") != "cpu"
    for table, device in ((trace.system_events, False), (trace.device_events, True)):
        bad: list[tuple[Any, ...]] = []
        for r in rows(table, "event_id", "name", "phase", "raw_category", "category", "pid", "tid"):
            i = r["event_id"]
            assert 0 <= i < len(ev), f"event_id {i} is not an index into traceEvents"
            e = ev[i]
            want = {
                "name": e.get("name") or "", "phase": e.get("ph"), "raw_category": e.get("cat"),
                "pid": id_text(e.get("pid")), "tid": id_text(e.get("tid")),
            }
            got = {k: (r[k] or "" if k == "name" else r[k]) for k in want}
            if got != want or is_device_event(e) != device:
                bad.append((i, want, got))
            allowed = (DEVICE_CATEGORY_OF if device else HOST_CATEGORY_OF).get(e.get("cat"))
            if allowed is not None and host_only and e.get("cat") == "cpu_op":
                allowed = allowed | {"transfer"}  # ops moving tensors to the device (parsers/_kineto_host_only.py)
            if allowed is not None and r["category"] not in allowed:
                bad.append((i, e.get("cat"), r["category"], sorted(allowed)))
            nccl = device and e.get("cat") in KERNEL_CATS and NCCL_KERNEL.search(e.get("name") or "")
            if nccl and r["category"] != "collective":
                bad.append((i, e.get("name"), r["category"], "collective"))
        assert bad[:10] == [], f"{len(bad)} rows differ from their raw events"


def test_timestamps_exact(case: Case) -> None:
    """ts_ns == baseTimeNanoseconds + ts·1000 and dur_ns == max(0, dur·1000), exactly, for every row."""
    raw, trace = case.raw, case.trace
    base = base_ns(raw)
    bad: list[tuple[Any, ...]] = []
    for table in (trace.system_events, trace.device_events):
        for r in rows(table, "event_id", "ts_ns", "dur_ns"):
            e = raw.events[r["event_id"]]
            want_ts = base + ns(e["ts"])
            want_dur = max(0, ns(e["dur"])) if e.get("ph") == "X" and e.get("dur") is not None else 0
            if (r["ts_ns"], r["dur_ns"]) != (want_ts, want_dur):
                bad.append((r["event_id"], e.get("ts"), e.get("dur"), (want_ts, want_dur), (r["ts_ns"], r["dur_ns"])))
    assert bad[:10] == [], f"{len(bad)} rows with inexact times"


def test_clock(case: Case) -> None:
    raw, trace = case.raw, case.trace
    absolute = bool(base_ns(raw)) or any(has_ts(e) and e["ts"] > 10**12 for e in raw.events)
    assert trace.meta("clock") == ("unix_epoch_ns" if absolute else "trace_relative_ns")


def test_device_time_per_device(case: Case) -> None:
    """Per device, kernel time and memcpy time equal the raw sums of max(0, dur) in exact ns."""
    raw, trace = case.raw, case.trace
    backend = expected_backend(raw)
    want: dict[str, Counter[str]] = {"kernel": Counter(), "memcpy": Counter()}
    for e in raw.events:
        if not is_device_event(e) or e.get("cat") not in KERNEL_CATS | MEMCPY_CATS:
            continue
        index = args_of(e).get("device", e.get("pid"))
        group = "kernel" if e["cat"] in KERNEL_CATS else "memcpy"
        want[group][f"{backend}:{index}"] += max(0, ns(e.get("dur", 0)))
    got: dict[str, Counter[str]] = {"kernel": Counter(), "memcpy": Counter()}
    for r in rows(trace.device_events, "device", "category", "dur_ns"):
        kind = {"compute": "kernel", "collective": "kernel", "memcpy": "memcpy"}.get(r["category"])
        if kind:
            got[kind][r["device"]] += r["dur_ns"]
    assert got == want
    assert trace.meta("backend") == backend


def test_links_and_bytes(case: Case) -> None:
    """correlation, External id (either spelling) and memcpy/memset bytes come from args."""
    raw, trace = case.raw, case.trace
    bad: list[tuple[Any, ...]] = []
    for table, device in ((trace.system_events, False), (trace.device_events, True)):
        cols = ["event_id", "correlation", "external_id"] + (["bytes", "category"] if device else [])
        for r in rows(table, *cols):
            e = raw.events[r["event_id"]]
            a = args_of(e)
            ext = a.get("External id", a.get("external id"))
            want = {"correlation": int64_or_none(a.get("correlation")), "external_id": int64_or_none(ext)}
            if device and e.get("cat") in MEMCPY_CATS | MEMSET_CATS:
                want["bytes"] = int64_or_none(a.get("bytes"))
            got = {k: r[k] for k in want}
            if got != want:
                bad.append((r["event_id"], want, got))
    assert bad[:10] == [], f"{len(bad)} rows with wrong links"


def test_args_kept(case: Case) -> None:
    """Every args key without a column of its own survives, value for value, in the args text."""
    raw, trace = case.raw, case.trace
    bad: list[tuple[Any, ...]] = []
    for table in (trace.system_events, trace.device_events):
        for r in rows(table, "event_id", "args"):
            want = {k: v for k, v in args_of(raw.events[r["event_id"]]).items() if k not in LIFTABLE_ARGS}
            if not want:
                continue
            got = json.loads(r["args"], parse_float=Decimal) if r["args"] else {}
            missing = {k: v for k, v in want.items() if k not in got or got[k] != v}
            if missing:
                bad.append((r["event_id"], missing))
    assert bad[:5] == [], f"{len(bad)} rows lost args"


def test_memcpy_direction(case: Case) -> None:
    raw, trace = case.raw, case.trace
    bad: list[tuple[Any, ...]] = []
    for r in rows(trace.device_events, "event_id", "category", "direction"):
        e = raw.events[r["event_id"]]
        if e.get("cat") in MEMCPY_CATS:
            want = expected_direction(e)
            if want is not None and r["direction"] != want:
                bad.append((r["event_id"], e.get("name"), want, r["direction"]))
        elif r["direction"] is not None:  # only copies have a direction
            bad.append((r["event_id"], e.get("name"), None, r["direction"]))
    assert bad[:10] == [], f"{len(bad)} rows with a wrong direction"


def test_flows(case: Case) -> None:
    """One row per start/finish pair; marker times exact; bound ends are real events."""
    raw, trace = case.raw, case.trace
    base = base_ns(raw)
    per_id: dict[tuple[Any, str | None], Counter[str]] = defaultdict(Counter)
    src_ts: Counter[int] = Counter()
    dst_ts: Counter[int] = Counter()
    for e in raw.events:
        if e.get("ph") in FLOW_PHASES and has_ts(e):
            end = "s" if e["ph"] == "s" else "f"
            per_id[(e.get("cat"), id_text(e.get("id")))][end] += 1
            (src_ts if end == "s" else dst_ts)[base + ns(e["ts"])] += 1
    fl = trace.flows
    assert fl.num_rows == sum(max(c["s"], c["f"]) for c in per_id.values())
    assert Counter(v for v in fl["src_ts_ns"].to_pylist() if v is not None) == src_ts
    assert Counter(v for v in fl["dst_ts_ns"].to_pylist() if v is not None) == dst_ts
    ids = set(trace.system_events["event_id"].to_pylist()) | set(trace.device_events["event_id"].to_pylist())
    ends = fl["src_event_id"].to_pylist() + fl["dst_event_id"].to_pylist()
    assert [i for i in ends if i is not None and i not in ids] == []


def test_rank(case: Case) -> None:
    """rank is distributedInfo.rank when given; otherwise null or the file name's rank, never mixed."""
    raw, trace = case.raw, case.trace
    info = raw.top.get("distributedInfo")
    given = info.get("rank") if isinstance(info, dict) else None
    allowed: set[int | None]
    if isinstance(given, int):
        allowed = {given}
    else:
        m = RANK_IN_NAME.search(case.path.name)
        allowed = {None, int(m.group(1))} if m else {None}
    seen = set()
    for name in ("system_events", "device_events", "flows", "counters", "metadata"):
        seen |= set(trace.tables[name]["rank"].to_pylist())
    assert len(seen) <= 1, f"several ranks in one single-rank file: {seen}"
    assert seen <= allowed


_SMALL = [p for p in _FILES if p.stat().st_size <= ROUND_TRIP_MAX_BYTES]


@pytest.mark.parametrize("path", _SMALL or [None], ids=[_rel(p) for p in _SMALL] or ["no-corpus"])
def test_parquet_round_trip(corpus: Path, path: Path | None, tmp_path: Path) -> None:
    assert path is not None, "the corpus folder exists but holds no small trace"
    trace = trace_of(path)
    out = trace.to_parquet(tmp_path / "out")
    back = Trace.from_parquet(out)
    assert back.equals(trace)
    assert back.accounting == trace.accounting


# -- quirks of particular files -------------------------------------------------------------------


def test_legacy_tb_plugin_resnet50(corpus: Path) -> None:
    """torch 1.9: legacy categories, string tids, lower-case `external id`, [memory] without cat."""
    c = named(corpus, RESNET50)
    raw, trace = c.raw, c.trace
    dev = trace.device_events
    assert dev.num_rows > 0
    assert set(dev["raw_category"].to_pylist()) == {"Kernel", "Memcpy", "Memset"}
    assert "stream 7" in set(dev["tid"].to_pylist())
    for r in rows(dev, "event_id", "external_id"):
        want = raw.events[r["event_id"]]["args"]["external id"]
        assert r["external_id"] == want, r
    cats = Counter(zip(trace.system_events["raw_category"].to_pylist(),
                       trace.system_events["category"].to_pylist(), strict=True))
    assert {(raw_cat, cat) for raw_cat, cat in cats if raw_cat == "Runtime"} == {("Runtime", "runtime")}
    assert {cat for raw_cat, cat in cats if raw_cat == "Operator"} <= {"framework_op", "step"}
    assert set(trace.flows["kind"].to_pylist()) == {"launch"}
    memory = sum(e.get("ph") == "i" and e.get("name") == "[memory]" and "cat" not in e for e in raw.events)
    assert memory > 0
    assert trace.accounting[0].kept["counters"] == memory


def test_large_integer_survives_in_args(corpus: Path) -> None:
    c = named(corpus, LARGE_INT)
    raw, trace = c.raw, c.trace
    big = [(i, k, v) for i, e in enumerate(raw.events) for k, v in args_of(e).items()
           if isinstance(v, int) and v not in INT64]
    assert big, "the file should hold an integer beyond int64"
    args = {r["event_id"]: r["args"] for t in (trace.system_events, trace.device_events)
            for r in rows(t, "event_id", "args")}
    for i, key, value in big:
        assert str(value) in args[i]
        assert json.loads(args[i])[key] == value


def test_cpu_only_rank_from_distributed_info(corpus: Path) -> None:
    trace = named(corpus, CPU_ONLY).trace
    assert trace.device_events.num_rows == 0
    assert trace.system_events.num_rows > 0
    assert set(trace.system_events["rank"].to_pylist()) == {34}
    assert set(trace.metadata["rank"].to_pylist()) == {34}


@pytest.mark.parametrize("rel", [RANK_UNAVAILABLE, DIST_INFO_UNAVAILABLE])
def test_rank_unavailable(corpus: Path, rel: str) -> None:
    """No rank anywhere (and none in the file name): loads, rank is null."""
    trace = named(corpus, rel).trace
    assert trace.system_events.num_rows > 0
    assert set(trace.system_events["rank"].to_pylist()) == {None}


def test_mtia_backend(corpus: Path) -> None:
    c = named(corpus, MTIA)
    raw, trace = c.raw, c.trace
    assert trace.meta("backend") == "mtia"
    devices = set(trace.device_events["device"].to_pylist())
    assert devices and all(d.startswith("mtia:") for d in devices), devices
    n = sum(is_device_event(e) and e["cat"] == "mtia_ccp_events" for e in raw.events)
    assert n > 0
    assert trace.device_events["raw_category"].to_pylist().count("mtia_ccp_events") == n


@pytest.mark.parametrize("rel", AMD_FILES)
def test_amd_devices_are_rocm(corpus: Path, rel: str) -> None:
    trace = named(corpus, rel).trace
    assert trace.meta("backend") == "rocm"
    devices = set(trace.device_events["device"].to_pylist())
    assert devices and all(d.startswith("rocm:") for d in devices), devices


@pytest.mark.parametrize("rel", [NS_RESOLUTION, TRACELENS_BASE_TIME])
def test_nanosecond_fractions_exact(corpus: Path, rel: str) -> None:
    """Float µs with a 3-digit ns fraction: every ns digit survives (absolute and base-relative)."""
    c = named(corpus, rel)
    raw, trace = c.raw, c.trace
    base = base_ns(raw)
    fractional = {i: e for i, e in enumerate(raw.events)
                  if isinstance(e.get("ts"), Decimal) and e["ts"] % 1 != 0}
    assert len(fractional) > 100, "the file should have ts values with a ns fraction"
    got = {r["event_id"]: r["ts_ns"] for t in (trace.system_events, trace.device_events)
           for r in rows(t, "event_id", "ts_ns") if r["event_id"] in fractional}
    assert len(got) > 100
    wrong = {i: (base + ns(fractional[i]["ts"]), ts) for i, ts in got.items() if ts != base + ns(fractional[i]["ts"])}
    assert list(wrong.items())[:10] == []
    if rel == NS_RESOLUTION:
        assert base == 0 and min(got.values()) > 10**18  # absolute epoch floats, beyond double's exact range
    else:
        assert base > 0


# -- attribution on every file ---------------------------------------------------------------------

# Kernels that are not compute: collectives, and MTIA's DMA requests and stream waits (mtia_ccp_events).
COMPUTE_EXCLUDED = re.compile(r"^(nccl|rccl|hccl|c10d::)|ncclKernel|ncclDevKernel|^(dma_request|event_wait|event_record)$")


def _merged_length(intervals: list[tuple[int, int]]) -> int:
    """Total length of a union of intervals, by the textbook sort-and-merge (independent of the sweep)."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s  # type: ignore[operator]
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s  # type: ignore[operator]
    return total


def test_attribution_conserves_time_and_matches_compute_union(case: Case) -> None:
    from neurontrace.analysis.diagnose import diagnose

    diag = diagnose(case.trace)
    backend = expected_backend(case.raw)
    base = base_ns(case.raw)
    assert diag.devices
    for dev in diag.devices:
        lo, hi = dev.window
        assert sum(dev.causes_ns.values()) == hi - lo
        assert set(dev.causes_ns) == {"compute", "collectives", "data_movement", "host_fallback",
                                      "host_overhead", "idle"}
        if dev.device == "cpu":
            continue
        kernels = []
        for e in case.raw.events:
            if e.get("ph") != "X" or e.get("cat") not in KERNEL_CATS or COMPUTE_EXCLUDED.search(e.get("name") or ""):
                continue
            a = args_of(e)
            if f"{backend}:{a.get('device', e.get('pid'))}" != dev.device or not has_ts(e):
                continue
            s = base + ns(e["ts"])
            end = s + max(0, ns(e.get("dur", 0)))
            if min(end, hi) > max(s, lo):
                kernels.append((max(s, lo), min(end, hi)))
        assert dev.causes_ns["compute"] == _merged_length(kernels), dev.device
