"""The viewer's first view before its track index (neurontrace/app/preview.py), on a real corpus trace.

The promise: the preview page draws every process and device as its header row exactly as the full index
draws them (same rows, same bins, byte for byte) wherever the preview answers (the whole trace, where the
page opens), and the server shows it while the full index is built, then swaps the full index in.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

pytest.importorskip("dash")

from dash import no_update
from plotly.io.json import to_json_plotly

import neurontrace
from neurontrace.app import callbacks, figures, layout, lod, preview, server, tracks
from neurontrace.app.model import MARKER_CATEGORIES, ViewModel
from neurontrace.app.server import PREVIEW, READY, ViewerState, create_app, main_page
from neurontrace.trace import Trace
from tests.conftest import corpus_root

# A real H100-era GPU trace of the corpus (45 k events, rank 0): its host process and its GPU hold more than
# lod.COARSE_MIN_EVENTS events (their headers come from the whole-trace sums), its other processes fewer
# (binned from their events), and two processes hold only instants (not drawn).
REAL = "HolisticTraceAnalysis/tests/data/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


@pytest.fixture(scope="module")
def real() -> Trace:
    root = corpus_root()
    if root is None or not (root / REAL).exists():
        pytest.skip("the real-trace corpus is not beside the checkout")
    return neurontrace.load(root / REAL)


@pytest.fixture(scope="module")
def models(real: Trace) -> tuple[ViewModel, ViewModel]:
    pv = preview.build(real, markers=MARKER_CATEGORIES)
    assert pv is not None
    return ViewModel.build(real, index=pv), ViewModel.build(real)


def _header_rows(model: ViewModel, window: tuple[int, int]) -> tuple[list[str], list[dict[str, Any]]]:
    drawn = figures.timeline(model, callbacks.request(model, window, expanded=[]))
    return [r.label for r in drawn.rows], json.loads(to_json_plotly(drawn.figure["data"]))


def test_the_preview_has_the_full_index_groups(models: tuple[ViewModel, ViewModel]) -> None:
    pv, full = models[0].index, models[1].index
    assert [(g.key, g.label, g.side, g.device, g.rank) for g in pv.groups] == \
        [(g.key, g.label, g.side, g.device, g.rank) for g in full.groups]
    assert (pv.origin_ns, pv.span_ns, pv.categories) == (full.origin_ns, full.span_ns, full.categories)
    big = sorted(full.group_coarse)
    assert big and sorted(pv.group_coarse) == big  # both paths below: sums for these groups, events for the rest
    assert len(big) < len(full.groups)
    for g in big:  # the whole-trace sums are the full index's, to float32 rounding of sums taken in another order
        a, b = pv.group_coarse[g], full.group_coarse[g]
        assert np.array_equal(a.cats, b.cats) and np.array_equal(a.count, b.count)
        np.testing.assert_allclose(a.cum, b.cum, rtol=1e-6, atol=1e-3 * a.bin_ns)
    small = [t.n_events for t in pv.tracks if t.group not in big]
    assert pv.n_events == sum(small) < len(full.start)  # only the small groups' events are held
    assert sum(t.n_events for t in pv.tracks) == len(full.start)
    hidden = [g.key for g in full.groups if all(full.tracks[t].empty for t in g.tracks)]
    assert hidden and hidden == [g.key for g in pv.groups if all(pv.tracks[t].empty for t in g.tracks)]


def test_the_first_view_is_the_full_index_view_bin_for_bin(models: tuple[ViewModel, ViewModel]) -> None:
    pm, fm = models
    labels, data = _header_rows(pm, (0, pm.index.span_ns))
    full_labels, full_data = _header_rows(fm, (0, fm.index.span_ns))
    assert labels == full_labels and len(labels) >= 3
    heat = [t for t in data if t.get("type") == "heatmap"]
    assert heat and data == full_data  # the same rows, the same bins, the same colours and hover values
    page = to_json_plotly(main_page(pm, ["."], preview=True))
    assert "indexing 45," in page and "header row until its lanes are ready" in page


def test_groups_binned_from_events_match_at_any_zoom(real: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no group big enough for sums (the bound raised), the preview holds every event, one lane per group,
    and each header is binned from them as the full index bins it from its lanes, at every zoom."""
    monkeypatch.setattr(lod, "COARSE_MIN_EVENTS", 10**9)
    pv = preview.build(real, markers=MARKER_CATEGORIES)
    assert pv is not None and not pv.group_coarse and pv.n_events == real.num_events
    pm, fm = ViewModel.build(real, index=pv), ViewModel.build(real)
    span = fm.index.span_ns
    drawn = 0
    for window in [(0, span), (span // 3, span // 3 + span // 50), (span // 2, span // 2 + span // 2000)]:
        w = lod.window(*window, 1600)
        for g in pm.index.groups:
            a = lod.encode(*lod.group_busy(pm.index, g.index, w, markers=MARKER_CATEGORIES))
            b = lod.encode(*lod.group_busy(fm.index, g.index, w, markers=MARKER_CATEGORIES))
            assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
            drawn += int(a[0].any())
    assert drawn >= 6  # the host process and the GPU drew something at each zoom
    for event_id in pm.index.event_id[:: max(1, pm.index.n_events // 50)].tolist():  # an event resolves the same
        got, want = pm.event(event_id), fm.event(event_id)
        assert got is not None and want is not None and {**got, "lane": 0} == {**want, "lane": 0}


def _poll(state: ViewerState, shown: str, carry: Any = None) -> tuple[int, str]:
    """POST the page's load poll as the browser does (``carry``: the nt-carry store, what the user chose on
    the preview): (HTTP status, response body)."""
    client = create_app(state).server.test_client()
    outputs = [{"id": "nt-page", "property": "children"}, {"id": "nt-load-poll", "property": "disabled"},
               {"id": "nt-page-stage", "property": "data"}]
    body = {"output": "..nt-page.children...nt-load-poll.disabled...nt-page-stage.data..", "outputs": outputs,
            "inputs": [{"id": "nt-load-poll", "property": "n_intervals", "value": 1}],
            "state": [{"id": "nt-page-stage", "property": "data", "value": shown},
                      {"id": "nt-carry", "property": "data", "value": carry}],
            "changedPropIds": ["nt-load-poll.n_intervals"]}
    res = client.post("/_dash-update-component", json=body)
    return res.status_code, res.get_data(as_text=True)


def test_the_server_shows_the_preview_then_the_full_index(real: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "PREVIEW_MIN_EVENTS", 1)
    seen: list[Any] = []
    state = ViewerState("real")
    built = tracks.build

    def build_index(trace: Trace) -> Any:  # what the page shows while the full index is built
        assert state.model is not None
        seen.append((state.status, state.model.index.n_events))
        code, body = _poll(state, server.LOADING)  # the page showed progress: now the preview, polling on
        seen.append((code, "indexing 45," in body, json.loads(body)["response"]["nt-load-poll"]["disabled"]))
        code, body = _poll(state, PREVIEW)  # the preview is on the page: not sent again, the poll goes on
        seen.append((code, sorted(json.loads(body)["response"])))
        return built(trace)

    monkeypatch.setattr(tracks, "build", build_index)
    state.load(lambda _path, progress=None: real, analyse=False)
    assert seen[0][0] == PREVIEW and 0 < seen[0][1] < real.num_events
    assert seen[1] == (200, True, False) and seen[2] == (200, ["nt-load-poll"])
    assert state.status == READY and state.model is not None
    assert state.model.index.n_events == real.num_events and state.model.index.n_lanes > len(state.model.index.groups)
    code, body = _poll(state, PREVIEW)  # the full page replaces the preview; the poll stops
    assert code == 200 and "indexing 45," not in body and json.loads(body)["response"]["nt-load-poll"]["disabled"]
    assert json.loads(_poll(state, READY)[1])["response"] == {"nt-load-poll": {"disabled": True}}


def _props(tree: Any, ident: str) -> dict[str, Any]:
    """The props of the component with id ``ident`` in a page sent as JSON."""
    if isinstance(tree, dict):
        if tree.get("props", {}).get("id") == ident:
            return dict(tree["props"])
        tree = list(tree.values())
    for item in tree if isinstance(tree, list) else []:
        found = _props(item, ident)
        if found:
            return found
    return {}


def test_the_full_page_opens_where_the_user_was_on_the_preview(models: tuple[ViewModel, ViewModel]) -> None:
    """A zoom, the groups, Python frames, levels and the selection chosen on the preview (the nt-carry store
    CARRY_JS keeps) are what the page replacing it opens on; left alone, it opens as it would have."""
    pm, fm = models
    state = ViewerState("real")
    state.model, state.status = fm, READY
    span = fm.index.span_ns
    zoom = (span // 3, span // 3 + span // 40)
    group = fm.index.groups[-1].key
    picked = int(pm.index.event_id[len(pm.index.event_id) // 2])  # an event the preview drew
    chosen = {"view": {"t0": zoom[0], "t1": zoom[1], "origin": 0, "auto": False}, "groups": [group, "nope"],
              "python": ["python"], "depth": 4, "selected": picked}
    page = json.loads(_poll(state, PREVIEW, chosen)[1])["response"]["nt-page"]["children"]
    view = _props(page, "nt-view")["data"]
    assert (view["t0"], view["t1"], view["auto"]) == (*zoom, False)
    assert f"start_ns={fm.absolute(zoom[0])}&end_ns={fm.absolute(zoom[1])}&event={picked}" in view["query"]
    origin = view["origin"]
    assert _props(page, "nt-timeline")["figure"]["layout"]["xaxis"]["range"] == \
        [(zoom[0] - origin) / 1e6, (zoom[1] - origin) / 1e6]
    assert _props(page, "nt-groups")["value"] == [group]  # an unknown key dropped
    assert (_props(page, "nt-python")["value"], _props(page, "nt-depth")["value"]) == (["python"], 4)
    assert _props(page, "nt-selected")["data"] == picked
    untouched = {"view": {"t0": 0, "t1": span, "origin": 0, "auto": True}, "python": [], "depth": 10}
    page = json.loads(_poll(state, PREVIEW, untouched)[1])["response"]["nt-page"]["children"]
    view = _props(page, "nt-view")["data"]
    assert (view["t0"], view["t1"], view["auto"]) == (0, span, True)  # still free to move to the analysis window
    assert _props(page, "nt-groups")["value"] == layout.default_expanded(fm) != []
    # the preview's URL, written from its own view, is no move: the page keeps following the analysis window
    assert callbacks.on_url(fm, view["query"], view)[1] is no_update
    assert callbacks.on_url(fm, _props(page, "nt-view")["data"]["query"], {**view, "t1": span // 2})[1]["t1"] == span
