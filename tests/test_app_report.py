"""The viewer's Report tab: every registered section's text (analysis/registry.py), as ``diagnose``
prints it, on the shipped real CPU trace, the real 8-rank gloo job and the shipped synthetic Neuron
profile (SYNTHETIC: written to the documented Neuron Explorer format, docs/formats/neuron.md); a
section added to the registry appears with no code in the app."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

pytest.importorskip("dash")

from rich.console import Console

import neurontrace
from neurontrace.analysis import registry
from neurontrace.analysis.contract import Context, DeviceSection, Section
from neurontrace.analysis.diagnose import Diagnosis
from neurontrace.app import callbacks, layout, tables
from neurontrace.app.model import ViewModel
from neurontrace.app.server import ViewerState, create_app
from neurontrace.render.report import render
from tests.app_support import load_quiet, synthetic_neuron
from tests.conftest import SAMPLES


def _text(component: Any) -> str:
    return json.dumps(component, default=lambda c: c.to_plotly_json() if hasattr(c, "to_plotly_json") else str(c))


def _diagnose_text(diag: Diagnosis) -> str:
    out = io.StringIO()
    # every rank's panel too, as `diagnose --ranks all` prints it (a job's report shows one line per rank)
    render(diag, Console(file=out, width=2000, highlight=False, color_system=None), ranks_all=True)
    return out.getvalue()


def _analysed(trace: neurontrace.Trace) -> ViewModel:
    model = ViewModel.build(trace)
    model.analyse()
    return model


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ViewModel]:
    return {"cpu": _analysed(neurontrace.load(SAMPLES / "cpu_train_loop.pt.trace.json.gz")),
            "gloo_8rank": _analysed(neurontrace.load(SAMPLES / "gloo_8rank")),
            "synthetic_neuron": _analysed(load_quiet(synthetic_neuron(tmp_path_factory.mktemp("neuron"))))}


@pytest.mark.parametrize("name", ["cpu", "gloo_8rank", "synthetic_neuron"])
def test_the_report_lists_every_section_with_text_as_diagnose_prints_it(models: dict[str, ViewModel],
                                                                        name: str) -> None:
    model = models[name]
    assert model.analysis is not None
    diag = model.analysis.diagnosis
    rows = model.analysis.report
    # Every section that has lines for this trace is listed once per device it is about (devices first,
    # then the job's), in registry order, and no other.
    expected = [(ds.key, d.device) for d in diag.devices for ds in registry.DEVICE_SECTIONS
                if d.sections.get(ds.key) is not None and ds.text(d.sections[ds.key])]
    expected += [(s.key, "") for s in registry.SECTIONS
                 if diag.sections.get(s.key) is not None and s.text(diag.sections[s.key])]
    assert [(r["key"], r["device"].split(" rank ")[0]) for r in rows] == expected
    assert rows, "each of these traces has sections to report"
    every: tuple[Section | DeviceSection, ...] = (*registry.SECTIONS, *registry.DEVICE_SECTIONS)
    titles = {s.key: s.title for s in every}
    printed = _diagnose_text(diag)
    page = _text(layout.report(rows))
    for r in rows:
        assert r["title"] == titles[r["key"]]
        for line in r["lines"]:
            assert line in printed, (r["key"], line)  # the same lines as `diagnose`'s text report
            assert json.dumps(line)[1:-1] in page, (r["key"], line)
        assert json.dumps(r["title"])[1:-1] in page


def test_real_job_and_device_sections_reach_the_report(models: dict[str, ViewModel]) -> None:
    """Job sections combined over 8 real ranks (cross-rank collectives) and per-device sections
    (engine waits, on the synthetic Neuron profile) both show, with the device they are about."""
    gloo = models["gloo_8rank"].analysis
    neuron = models["synthetic_neuron"].analysis
    assert gloo is not None and neuron is not None
    cross = [r for r in gloo.report if r["key"] == "cross_rank"]
    assert len(cross) == 1 and cross[0]["device"] == "" and "across 8 ranks" in cross[0]["lines"][0]
    assert {r["device"] for r in gloo.report if r["key"] == "ops"} == {f"cpu rank {k}" for k in range(8)}
    waits = [r for r in neuron.report if r["key"] == "engine_waits"]
    assert len(waits) == 1 and waits[0]["device"].startswith("neuron:")


def test_a_section_added_to_the_registry_appears_with_no_app_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new section (as the compile, memory and critical-path ones being added) is one registry line:
    the viewer's Report tab shows its title and lines through the Section contract alone."""

    def compute(ctx: Context) -> dict[str, int]:
        return {"events": int(ctx.trace.num_events)}

    added = Section(key="probe", title="probe section", compute=compute,
                    text=lambda v: [f"{v['events']:,} events seen by the probe"])
    monkeypatch.setattr(registry, "SECTIONS", (*registry.SECTIONS, added))
    trace = neurontrace.load(SAMPLES / "cpu_train_loop.pt.trace.json.gz")
    model = _analysed(trace)
    assert model.analysis is not None
    probe = [r for r in model.analysis.report if r["key"] == "probe"]
    assert probe == [{"key": "probe", "title": "probe section", "device": "",
                      "lines": [f"{trace.num_events:,} events seen by the probe"]}]
    assert f"{trace.num_events:,} events seen by the probe" in _text(layout.report(model.analysis.report))


def test_the_report_tab_waits_for_the_analysis_and_says_when_it_failed(models: dict[str, ViewModel]) -> None:
    state = ViewerState("cpu")
    assert "fills in when the analysis is done" in _text(callbacks.on_report(state))
    state.analysis_error = "analysis failed: no events"
    assert "analysis failed: no events" in _text(callbacks.on_report(state))
    state.model, state.analysis_error = models["cpu"], None
    assert "phases" in _text(callbacks.on_report(state))
    assert "No section has anything to report" in _text(layout.report([]))
    assert tables.report_rows(Diagnosis(devices=[], fallback_ops=[], findings=[], sections={}, inputs=[])) == []


def test_the_page_has_a_report_tab_the_app_fills(models: dict[str, ViewModel]) -> None:
    state = ViewerState("cpu")
    state.model, state.status = models["cpu"], "ready"
    client = create_app(state).server.test_client()
    assert "nt-report" in json.dumps(client.get("/_dash-layout").get_json())
    deps = client.get("/_dash-dependencies").get_json()
    assert any(d["output"] == "nt-report.children" for d in deps)
    body = {"output": "nt-report.children", "outputs": {"id": "nt-report", "property": "children"},
            "inputs": [{"id": "nt-analysis-ready", "property": "data", "value": True}], "state": [],
            "changedPropIds": ["nt-analysis-ready.data"]}
    res = client.post("/_dash-update-component", json=body)
    assert res.status_code == 200 and "steady median" in res.get_data(as_text=True)  # the phases section's line
