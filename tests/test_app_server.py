"""The viewer's callbacks as plain functions, its loading states, and `neurontrace view` as a process."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dash")

from dash import no_update
from plotly.io.json import to_json_plotly

import neurontrace
from neurontrace import errors
from neurontrace.app import callbacks, figures, layout
from neurontrace.app.model import ViewModel
from neurontrace.app.server import FAILED, READY, ViewerState, create_app, main_page
from neurontrace.app.source import SourceReader
from neurontrace.cli.view import ViewCommand
from tests.app_support import US, source_root, tiny_trace
from tests.conftest import ROOT, SAMPLES

MAX_PAYLOAD = 2_000_000


def _tiny_model() -> ViewModel:
    model = ViewModel.build(tiny_trace())
    model.analyse()
    return model


def _text(component: Any) -> str:
    """All text in a Dash component tree."""
    return json.dumps(component, default=lambda c: c.to_plotly_json() if hasattr(c, "to_plotly_json") else str(c))


def test_relayout_events_become_windows() -> None:
    model = _tiny_model()
    span = model.index.span_ns
    assert callbacks.parse_relayout({"xaxis.range[0]": 0.01, "xaxis.range[1]": 0.05}, span) == (10_000, 50_000)
    assert callbacks.parse_relayout({"xaxis.range": [0.02, 0.03]}, span) == (20_000, 30_000)
    assert callbacks.parse_relayout({"xaxis.autorange": True}, span) == (0, span)
    assert callbacks.parse_relayout({"autosize": True}, span) is None
    fig, view, status = callbacks.on_timeline(model, "nt-timeline", {"xaxis.range[0]": 0.01, "xaxis.range[1]": 0.05},
                                              None, {"t0": 0, "t1": span})
    assert (view["t0"], view["t1"], view["origin"]) == (10_000, 50_000, 0)
    assert fig["layout"]["xaxis"]["range"] == [0.01, 0.05] and not view["auto"]
    assert view["query"] == f"?start_ns={model.index.origin_ns + 10_000}&end_ns={model.index.origin_ns + 50_000}"
    assert "events shown" in status
    assert callbacks.on_timeline(model, "nt-timeline", {"autosize": True}, None, None) == (no_update,) * 3
    _, view, _ = callbacks.on_timeline(model, "nt-reset", None, None, {"t0": 5, "t1": 9})
    assert (view["t0"], view["t1"]) == (0, span)
    # A zoom (stamped by the page) not yet drawn wins over a redraw that read the view from before it ...
    zoom = {"xaxis.range[0]": 0.02, "xaxis.range[1]": 0.03, "nt.zoom": 4}
    _, view, _ = callbacks.on_timeline(model, "nt-viewport", zoom, None, {"t0": 0, "t1": span})
    assert (view["t0"], view["t1"], view["zoom"]) == (20_000, 30_000, 4)
    # ... once: a later redraw keeps the view it is given.
    _, later, _ = callbacks.on_timeline(model, "nt-viewport", zoom, None, view | {"t0": 0, "t1": span})
    assert (later["t0"], later["t1"]) == (0, span)


def test_clicks_select_events_and_table_rows_zoom() -> None:
    model = _tiny_model()
    assert model.analysis is not None
    click = {"points": [{"customdata": [2, 40.0], "x": 0.02}]}
    assert callbacks.on_navigate(model, "nt-timeline", click, None) == (2, no_update)
    # A binned pixel: zoom in around it.
    _, goto = callbacks.on_navigate(model, "nt-timeline", {"points": [{"x": 0.05, "customdata": 40}]},
                                    {"t0": 0, "t1": 100 * US})
    assert goto["t0"] < 50 * US < goto["t1"] and goto["t1"] - goto["t0"] == 100 * US // callbacks.BIN_CLICK_ZOOM
    stall = model.analysis.stalls[0]
    _, goto = callbacks.on_navigate(model, {"type": "nt-row", "table": "stalls", "index": 0}, None, None)
    assert goto["t0"] <= stall["t0_ns"] and goto["t1"] >= stall["t1_ns"]
    assert goto["t1"] - goto["t0"] < 2 * (stall["t1_ns"] - stall["t0_ns"])
    selected, goto = callbacks.on_navigate(model, {"type": "nt-row", "table": "ops", "index": 0}, None, None)
    assert selected == model.analysis.top_ops[0]["event_id"] and isinstance(goto, dict)
    assert callbacks.on_navigate(model, {"type": "nt-flow", "event": 10}, None, None)[0] == 10
    assert callbacks.on_navigate(model, {"type": "nt-row", "table": "ops", "index": 999}, None, None) == \
        (no_update, no_update)
    # A zoom request the figure then honours.
    fig, view, _ = callbacks.on_timeline(model, "nt-goto", None, goto, None)
    assert fig["layout"]["xaxis"]["range"][0] * 1e6 == pytest.approx(view["t0"], abs=1)


def test_details_and_source_for_an_event(tmp_path: Path) -> None:
    model = _tiny_model()
    reader = SourceReader([source_root(tmp_path)])
    details, source = callbacks.on_details(model, reader, 3)
    text = _text(details) + _text(source)
    assert "cudaLaunchKernel" in text and "launch: volta_sgemm" in text  # the flow to its kernel
    assert "pkg/model.py:3 forward" in text and "def forward(x):  # line 3" in text
    assert '"nt-code-line nt-hl"' in text
    for event_id, shown in ((4, "../../etc/passwd"), (5, "/etc/passwd")):
        _, source = callbacks.on_details(model, reader, event_id)
        text = _text(source)
        assert "refused" in text and shown in text and "root:" not in text


def test_details_start_reads_from_the_time_origin(tmp_path: Path) -> None:
    """One time origin (#18): an event's start in its details is measured as the x axis is, from the
    analysis window start once analysed, and from the trace start before (a real CPU capture, whose
    window starts 1.19 ms after its first event)."""
    trace = neurontrace.load(SAMPLES / "compare/baseline.pt.trace.json.gz")
    model = ViewModel.build(trace)
    reader = SourceReader([source_root(tmp_path)])
    event_id = int(trace.system_events["event_id"][trace.system_events.num_rows // 2].as_py())
    event = model.event(event_id)
    assert event is not None
    before, _ = callbacks.on_details(model, reader, event_id)
    assert f"{layout._fmt_ns(event['rel_ns'])} from trace start" in _text(before)
    model.analyse()
    focus = model.focus()
    assert focus is not None and focus[1][0] > 0
    after, _ = callbacks.on_details(model, reader, event_id)
    assert f"{layout._fmt_ns(event['rel_ns'] - focus[1][0])} from the analysis window start" in _text(after)


def test_summary_click_toggles_the_highlight_and_the_timeline_draws_it() -> None:
    model = _tiny_model()
    hi = {"points": [{"curveNumber": 4, "customdata": [0.07, 0]}]}  # host_overhead on device 0
    fig, highlight = callbacks.on_summary(model, "nt-summary", hi, None)
    assert highlight == {"device": "cuda:0", "rank": None, "cause": "host_overhead"}
    assert fig["data"][4]["marker"]["line"]["width"] == [2]
    assert callbacks.on_summary(model, "nt-summary", hi, highlight)[1] is None
    assert callbacks.on_summary(model, "nt-clear-highlight", None, highlight)[1] is None
    drawn = figures.timeline(model, callbacks.request(model, (0, model.index.span_ns), highlight=highlight))
    bands = [t for t in drawn.figure["data"] if t["name"] == "highlight:host_overhead"]
    assert bands and bands[0]["fill"] == "toself"


def test_brackets_follow_the_selected_events_flow_out_and_back_in() -> None:
    model = _tiny_model()  # cudaLaunchKernel (3) → volta_sgemm (10): a launch flow and correlation 7
    kernel, goto = callbacks.on_follow(model, 3, "next", None)
    assert kernel == 10 and goto["t0"] <= model.index.start[model.index.position(10)] < goto["t1"]
    assert callbacks.on_follow(model, 10, "prev", None)[0] == 3
    assert callbacks.on_follow(model, 10, "next", None) == (no_update, no_update)  # no flow out of a kernel
    assert callbacks.on_follow(model, float("nan"), "next", None) == (no_update, no_update)


def test_selected_event_draws_its_outline_and_flow() -> None:
    model = _tiny_model()
    drawn = figures.timeline(model, callbacks.request(model, (0, model.index.span_ns), selected=3))
    assert any(t["name"] == "flows" for t in drawn.figure["data"])
    assert any(s["type"] == "rect" and s["xref"] == "x" for s in drawn.figure["layout"]["shapes"])
    labels = [r.label for r in drawn.rows]
    assert labels.index("thread 1") < labels.index("stream 7")  # host above device
    assert any("stall causes" in label for label in labels)


def test_first_page_of_the_sample_serializes_small() -> None:
    model = ViewModel.build(neurontrace.load(SAMPLES / "cpu_train_loop.pt.trace.json.gz"))
    model.analyse()
    page = main_page(model, [str(SAMPLES)])
    fig = figures.timeline(model, callbacks.request(model, (0, model.index.span_ns)))
    assert len(to_json_plotly(fig.figure)) < MAX_PAYLOAD
    assert len(to_json_plotly(page)) < MAX_PAYLOAD
    json.loads(to_json_plotly(fig.figure))


def test_load_failures_show_one_line_on_the_page(tmp_path: Path) -> None:
    bad = tmp_path / "not_a_trace.json"
    bad.write_text("this is not a trace\n")
    state = ViewerState(str(bad))
    state.load()
    assert state.status == FAILED and state.error and "expected one of" in state.error
    text = _text(state.page())
    assert "could not be loaded" in text and "Traceback" not in text
    truncated = tmp_path / "cut.json"
    truncated.write_text('{"traceEvents": [')
    state = ViewerState(str(truncated))
    state.load()
    assert state.status == FAILED and "Traceback" not in _text(state.page())


def test_loading_then_ready_and_the_app_serves_its_page(tmp_path: Path) -> None:
    state = ViewerState("tiny", source_roots=[source_root(tmp_path)])
    assert "Loading trace" in _text(state.page())
    state.use(tiny_trace())
    state.analyse()
    assert state.status == READY and state.model is not None and state.model.analysis is not None
    app = create_app(state)
    client = app.server.test_client()
    res = client.get("/")
    assert res.status_code == 200 and b"neurontrace" in res.data
    layout_json = client.get("/_dash-layout").get_json()
    assert "nt-timeline" in json.dumps(layout_json)


def test_default_expansion_keeps_the_page_short() -> None:
    model = _tiny_model()
    assert layout.default_expanded(model) == [g.key for g in model.index.groups]


def test_tables_sort_filter_and_name_rows_by_position() -> None:
    model = _tiny_model()
    assert model.analysis is not None
    ops = model.analysis.top_ops
    rows = layout.table_rows("ops", ops, sort={"column": "name", "desc": False})
    names = [json.loads(_text(r))["props"]["children"][0]["props"]["children"] for r in rows]
    assert names == sorted(names, key=str.lower)
    first = json.loads(_text(rows[0]))["props"]["id"]
    assert ops[first["index"]]["name"] == names[0]
    assert len(layout.table_rows("ops", ops, text="volta")) == 1
    assert "No row matches" in _text(layout.table_rows("ops", ops, text="zzz"))


def _run_view(argv: list[str]) -> int:
    cmd = ViewCommand()
    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    return cmd.run(parser.parse_args(argv))


def test_view_command_checks_its_input_before_serving(tmp_path: Path) -> None:
    with pytest.raises(errors.InputNotFoundError):
        _run_view([str(tmp_path / "missing.json")])
    with pytest.raises(errors.InputNotFoundError, match="--source-root"):
        _run_view([str(SAMPLES / "cpu_train_loop.pt.trace.json.gz"), "--source-root", str(tmp_path / "nope")])
    with pytest.raises(errors.UsageError):
        _run_view([str(SAMPLES / "cpu_train_loop.pt.trace.json.gz"), "--port", "70000"])


def test_view_command_serves_on_loopback_and_prints_the_url() -> None:
    code = ("import argparse, sys; from neurontrace.cli.view import ViewCommand; c = ViewCommand(); "
            "p = argparse.ArgumentParser(); c.add_arguments(p); sys.exit(c.run(p.parse_args(sys.argv[1:])))")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    args = [sys.executable, "-c", code, str(SAMPLES / "cpu_train_loop.pt.trace.json.gz"), "--port", "0",
            "--no-browser", "--source-root", str(SAMPLES)]
    with subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert "http://127.0.0.1:" in line, line
            url = line.split(" at ", 1)[1].split()[0]
            deadline = time.monotonic() + 30
            body = b""
            while time.monotonic() < deadline and b"nt-timeline" not in body:
                with urllib.request.urlopen(url + "_dash-layout", timeout=10) as res:
                    body = res.read()
                time.sleep(0.1)
            assert b"nt-timeline" in body
        finally:
            proc.terminate()
            _out, err = proc.communicate(timeout=10)
    assert "Traceback" not in err, err


def test_the_timeline_draws_at_most_max_rows_and_says_how_many_it_left_out() -> None:
    import pyarrow as pa

    from neurontrace import Trace

    n = 300
    host = pa.table({"event_id": list(range(n)), "ts_ns": [i * 1_000 for i in range(n)], "dur_ns": [500] * n,
                     "name": ["aten::mm"] * n, "category": ["framework_op"] * n, "pid": ["1"] * n,
                     "tid": [str(i) for i in range(n)], "track": [f"thread {i}" for i in range(n)]})
    model = ViewModel.build(Trace(system_events=host))
    model.analyse()
    assert layout.default_expanded(model) == []  # too many rows to open at first sight
    drawn = figures.timeline(model, callbacks.request(model, (0, model.index.span_ns),
                                                      expanded=[g.key for g in model.index.groups]))
    assert len(drawn.rows) == figures.MAX_ROWS
    assert f"{n + 2 - figures.MAX_ROWS} more rows not drawn" in drawn.status
    assert len(to_json_plotly(drawn.figure)) < MAX_PAYLOAD


def test_debug_and_non_loopback_hosts_are_warned_about(capsys: pytest.CaptureFixture[str]) -> None:
    from neurontrace.cli import view

    view._warn_exposure("127.0.0.1", debug=False)
    assert capsys.readouterr().err == ""
    view._warn_exposure("127.0.0.1", debug=True)
    err = capsys.readouterr().err
    assert "warning: --debug" in err and "anyone" not in err
    view._warn_exposure("0.0.0.0", debug=True)
    err = capsys.readouterr().err
    assert "anyone who can reach this machine" in err and "warning: --debug" in err and "0.0.0.0" in err


BAD_VALUES: list[Any] = [float("nan"), float("inf"), -float("inf"), "x", "1e400", 1e300, -(2**70), True, None,
                         [], [float("nan")], {}, {"t0": float("nan"), "t1": "y", "origin": float("inf")},
                         {"points": [{"x": float("inf"), "customdata": [float("nan"), "a", None, 1e400]}]},
                         {"device": 5, "cause": [], "rank": float("nan")}, {"xaxis.range[0]": float("nan"),
                                                                             "xaxis.range[1]": float("inf")},
                         # the shapes the newer views take (a toggle's list, a highlight naming a view, a
                         # step or allocation pick), each with a hostile member
                         ["on", float("nan")], ["on", {"x": 1e400}], {"critical_path": True, "t0": float("nan")},
                         {"critical_path": "yes"}, {"step": float("inf"), "rank": "0"},
                         {"frame": -(2**70), "address": float("nan"), "size": "1e400"}, "\ud800", "x" * 100_000]


def _dash_post(url: str, body: dict[str, Any]) -> int:
    # allow_nan: the page's JSON parser (Flask's) accepts NaN and Infinity, so a hostile page can send them.
    data = json.dumps(body, allow_nan=True).encode()
    req = urllib.request.Request(url + "_dash-update-component", data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_every_callback_survives_nan_infinity_and_strings_over_http() -> None:
    """Each callback of the page, called over HTTP as the browser calls it, with every input and state
    replaced by hostile values: answered (200, or 204 "nothing to update"), never an HTTP 500."""
    from neurontrace.app.server import serve_trace

    server, state = serve_trace(tiny_trace(), port=0)
    try:
        deadline = time.monotonic() + 30
        while (state.model is None or state.model.analysis is None) and time.monotonic() < deadline:
            time.sleep(0.05)
        # the Report tab's callback (every registered section's text) and the ops panel's are among them
        # the critical-path toggle's (the newer views' callback; compile and memory draw in the timeline's own)
        every_callback_survives_hostile_values(server.url, covers=("nt-report.children", "nt-roof-graph.figure",
                                                                   "nt-cp-breakdown.children", "nt-compile.children",
                                                                   "nt-source.children@"))
    finally:
        server.stop()


def every_callback_survives_hostile_values(url: str, callbacks_at_least: int = 10, covers: tuple[str, ...] = ()) -> None:
    """Post every callback of the app at ``url`` (it has at least ``callbacks_at_least``, and one updating each
    output of ``covers``) with each of BAD_VALUES in every input and state."""
    with urllib.request.urlopen(url + "_dash-dependencies", timeout=30) as resp:
        deps = json.loads(resp.read())
    assert len(deps) >= callbacks_at_least
    for output in covers:
        assert any(output in dep["output"] and not dep.get("clientside_function") for dep in deps), output
    statuses: dict[int, int] = {}
    for dep in deps:
        if dep.get("clientside_function"):
            continue  # runs in the browser, never reaches the server

        def spec(item: dict[str, Any], value: Any) -> Any:
            ident = item["id"]
            if ident.startswith("{"):  # a pattern-matching id: ALL gives a list, MATCH one item
                concrete = json.loads(ident)
                for k, v in concrete.items():
                    if isinstance(v, list):
                        concrete[k] = 0 if k in ("index", "event", "frame") else "stalls"
                one = {"id": concrete, "property": item["property"], "value": value}
                return [one] if '["ALL"]' in ident else one
            return {"id": ident, "property": item["property"], "value": value}

        for value in BAD_VALUES:
            inputs = [spec(i, value) for i in dep["inputs"]]
            body = {"output": dep["output"], "outputs": _outputs(dep["output"]),
                    "inputs": inputs, "state": [spec(s, value) for s in dep["state"]],
                    "changedPropIds": [f"{i['id']}.{i['property']}" for i in dep["inputs"][:1]]}
            code = _dash_post(url, body)
            statuses[code] = statuses.get(code, 0) + 1
            assert code in (200, 204), (dep["output"], value, code)
    assert statuses.get(200, 0) > 0  # some hostile calls are answered with a page update, not refused


def _outputs(output: str) -> Any:
    """The "outputs" field Dash's renderer sends for an output spec such as "..a.b...c.d.." ."""
    parts = output.strip(".").split("...") if output.startswith("..") else [output]
    out = []
    for part in parts:
        ident, prop = part.rsplit(".", 1)
        prop = prop.split("@", 1)[0]
        if ident.startswith("{"):
            concrete = json.loads(ident)
            concrete = {k: ("stalls" if isinstance(v, list) else v) for k, v in concrete.items()}
            out.append({"id": concrete, "property": prop})
        else:
            out.append({"id": ident, "property": prop})
    return out if output.startswith("..") else out[0]


def _decode(spec: Any) -> Any:
    import base64

    import numpy as np

    if isinstance(spec, list):
        return np.asarray(spec, dtype=np.float64)
    return np.frombuffer(base64.b64decode(spec["bdata"]), dtype={"f8": np.float64, "i4": np.int32, "f4": np.float32,
                                                                  "u1": np.uint8, "i2": np.int16}[spec["dtype"]])


def test_the_page_opens_on_the_analysis_window_and_counts_time_from_its_start() -> None:
    model = ViewModel.build(neurontrace.load(SAMPLES / "cpu_train_loop.pt.trace.json.gz"))
    assert model.time_origin == 0 and model.focus() is None  # before the analysis: the first event
    model.analyse()
    focus = model.focus()
    assert focus is not None and model.analysis is not None
    (device, rank), (w0, w1) = focus
    d = model.analysis.diagnosis.devices[0]
    assert (device, rank) == (d.device, d.rank) and (w0, w1) == (d.window[0] - model.index.origin_ns,
                                                                  d.window[1] - model.index.origin_ns)
    assert model.time_origin == w0
    page = main_page(model, [str(SAMPLES)])
    view = page.children[-7].data  # the nt-view store
    assert view["origin"] == w0 and not view["auto"] and view["t0"] < w0 < w1 < view["t1"]
    fig, _view, _ = callbacks.on_timeline(model, "nt-focus", None, None, view)
    lo, hi = fig["layout"]["xaxis"]["range"]
    assert lo == pytest.approx(-0.01 * (w1 - w0) / 1e6, rel=1e-3) and hi > (w1 - w0) / 1e6
    assert fig["layout"]["xaxis"]["ticktext"][0] == "0" and fig["layout"]["xaxis"]["tickvals"][0] == 0
    # Every drawn interval (events, cause runs, counters) lies on the same axis: within the padded view.
    width = hi - lo
    for t in fig["data"]:
        xs = _decode(t["base"]) if "base" in t else (_decode(t["x"]) if t["type"] == "scatter" and
                                                       t["name"].startswith("counter") else None)
        if xs is not None and len(xs):
            assert xs.min() >= lo - 0.2 * width and xs.max() <= hi + 0.2 * width, t["name"]
    # The stall table reads like diagnose: from the window start.
    stall = model.analysis.stalls[0]
    s = d.top_stalls[0]
    assert stall["start_ms"] == round((s.start_ns - d.window[0]) / 1e6, 4)


def test_counter_rows_hold_the_highest_value_of_each_pixel() -> None:
    import numpy as np

    from neurontrace.app import counters
    from neurontrace.app.lod import Window

    s = counters.Series("c", "bytes", np.array([10, 20, 21, 40], dtype=np.int64), np.array([1.0, 5.0, 2.0, 3.0]), 5.0)
    held = counters.binned(s, Window(0, 50, 5))  # pixels of 10 ns
    assert np.isnan(held[0]) and held.tolist()[1:] == [1.0, 5.0, 2.0, 3.0]  # 2 is carried through 30..40
    model = ViewModel.build(neurontrace.load(SAMPLES / "cpu_train_loop.pt.trace.json.gz"))
    assert [c.label for c in model.counters] == ["[memory] Total Allocated · cpu"]  # Bytes (per event) and a zero series left out
    rows, _ = figures.rows(model, layout.default_expanded(model), 10)
    assert [r.label for r in rows if r.kind == "counter"] == ["[memory] Total Allocated · cpu"]
    drawn = figures.timeline(model, callbacks.request(model, (0, model.index.span_ns)))
    area = next(t for t in drawn.figure["data"] if t["name"].startswith("counter:"))
    assert area["fill"] == "toself" and "KiB" in " ".join(area["text"])


def _assets_check() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_viewer_assets", ROOT / "scripts" / "check_viewer_assets.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_both_pages_link_and_serve_every_file_of_the_assets_folder(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The CSS, the key handler and the HTML index are files of neurontrace/app/assets, which Dash serves;
    the check .ci/run makes on the installed wheel passes on the checkout, and fails on a folder missing them."""
    assert {"index.html", "neurontrace.css", "keys.js"} <= {p.name for p in layout.ASSETS.iterdir()}
    assert "{%app_entry%}" in layout.INDEX and "<style>" not in layout.INDEX and "<script>" not in layout.INDEX
    assert "function ntKey" in (layout.ASSETS / "keys.js").read_text()
    assert ".nt-header" in (layout.ASSETS / "neurontrace.css").read_text()
    check = _assets_check()
    assert check.problems() == []
    (tmp_path / "index.html").write_text(layout.INDEX)
    monkeypatch.setattr(layout, "ASSETS", tmp_path)  # an install that lost the CSS and the keys
    assert sorted(check.problems()) == ["keys.js is not in the assets folder",
                                        "neurontrace.css is not in the assets folder"]


def test_the_package_data_ships_every_file_of_the_assets_folder() -> None:
    """pyproject's package data names the folder's files (a wheel without them serves an unstyled page
    with no keys; .ci/run builds one and runs scripts/check_viewer_assets.py on it)."""
    import fnmatch

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["neurontrace"]
    package = ROOT / "neurontrace"
    for path in layout.ASSETS.rglob("*"):
        if path.is_file():
            rel = path.relative_to(package).as_posix()
            assert any(fnmatch.fnmatch(rel, g) for g in globs), rel
