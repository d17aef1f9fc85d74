"""The analysis contract (analysis/contract.py): a section or finding family plugs in with one registry line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from neurontrace.analysis import registry
from neurontrace.analysis.contract import Context, DeviceSection, Finding, FindingFamily, Section
from neurontrace.analysis.diagnose import Diagnosis, diagnose
from neurontrace.render.report import render
from tests.micro import load, x


def _trace(tmp_path: Path):  # type: ignore[no-untyped-def]
    return load(tmp_path, [
        x("user_annotation", "ProfilerStep#1", 0, 100),
        x("cuda_runtime", "cudaLaunchKernel", 1, 5, correlation=1),
        x("kernel", "sgemm", 10, 50, pid=0, tid=7, device=0, correlation=1),
        {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 2,
         "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096, "Bytes": 512, "Total Allocated": 512,
                  "Total Reserved": 2048}},  # so the memory section is present too
    ])


def test_a_new_section_and_family_need_only_a_registry_line(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    kernels = Section("kernel_count", "kernel count",
                      lambda ctx: {"kernels": ctx.trace.device_events.num_rows},
                      text=lambda v: [f"{v['kernels']} device events"])
    busy = DeviceSection("busy", "busy", lambda ctx, d: d.causes_ns["compute"], text=lambda v: [f"busy {v} ns"])

    def many(ctx: Context) -> list[Finding]:  # reads an earlier section's value
        n = ctx.sections["kernel_count"]["kernels"]
        return [Finding("one_kernel", "info", "one kernel", f"{n} event", "none")] if n == 1 else []

    monkeypatch.setattr(registry, "SECTIONS", (*registry.SECTIONS, kernels))
    monkeypatch.setattr(registry, "DEVICE_SECTIONS", (*registry.DEVICE_SECTIONS, busy))
    monkeypatch.setattr(registry, "FINDINGS", (*registry.FINDINGS, FindingFamily("kernels", many)))
    diag = diagnose(_trace(tmp_path))
    doc = diag.as_dict()
    assert doc["kernel_count"] == {"kernels": 1}
    assert doc["devices"][0]["busy"] == 50_000
    assert "one_kernel" in [f["id"] for f in doc["findings"]]
    out = io.StringIO()
    render(diag, Console(file=out, width=200))
    assert "kernel count: 1 device events" in out.getvalue()
    assert "busy 50000 ns" in out.getvalue()
    assert Diagnosis.from_dict(json.loads(json.dumps(doc))).as_dict() == doc


def test_round_trip_keeps_every_registered_section(tmp_path: Path) -> None:
    doc = diagnose(_trace(tmp_path)).as_dict()
    assert {s.key for s in registry.SECTIONS} <= set(doc)
    again = Diagnosis.from_dict(json.loads(json.dumps(doc)))
    assert again.as_dict() == doc
    assert again.phases.steps == doc["phases"]["steps"]
