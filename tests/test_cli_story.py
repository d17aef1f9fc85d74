"""One story across commands (#27), held as users meet it: each command run as a subprocess with no terminal
(as in a pipe or a CI log), its output read as text."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, corpus_root

PAIR = (SAMPLES / "compare" / "baseline.pt.trace.json.gz", SAMPLES / "compare" / "slowed.pt.trace.json.gz")


def piped(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The command with its output going to a pipe: no terminal, no COLUMNS (what a CI log gets)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([sys.executable, "-m", "neurontrace", *map(str, args)], capture_output=True, text=True,
                          timeout=180, check=False, env=env, stdin=subprocess.DEVNULL)


@functools.cache
def ran(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``piped``, run once per session for commands that read only (several tests read one output)."""
    return piped(*args)


def test_piped_reports_print_whole_names_and_headers() -> None:
    """Names used to be cut at 80 columns in pipes (``aten:…``, ``kern…``, ``TFLOP…``)."""
    import json

    from neurontrace.render.diff_report import TOP_OPS

    res = ran("diff", *PAIR)
    assert res.returncode == 0, res.stderr
    assert "…" not in res.stdout
    shown = [o for o in json.loads(ran("diff", *PAIR, "--json").stdout)["ops"] if o["status"] != "unchanged"]
    names = [o["name"] for o in shown[:TOP_OPS]]
    assert any(len(n) >= 30 for n in names)  # names long enough to have been cut at 80 columns
    assert all(n in res.stdout for n in names)


def test_piped_ops_table_keeps_every_header_and_kernel_name() -> None:
    root = corpus_root()
    if root is None:
        pytest.skip("the real-trace corpus is not beside the checkout")
    trace = root / "TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    res = piped("ops", trace)
    assert res.returncode == 0, res.stderr
    assert "…" not in res.stdout
    assert "TFLOP/s" in res.stdout and "% of peak" in res.stdout


def test_view_on_a_busy_port_is_a_named_error_that_suggests_port_0() -> None:
    """It used to exit 1 ("a bug, please report") with the web framework's own text."""
    import socket

    from neurontrace import errors

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        res = piped("view", SAMPLES / "cpu_train_loop.pt.trace.json.gz", "--port", str(busy.getsockname()[1]),
                    "--no-browser")
    assert res.returncode == errors.EXIT_USAGE, res.stderr
    assert "--port 0" in res.stderr and "in use by another program" not in res.stderr
    assert res.stderr.count("\n") == 1  # one line, no framework text


def test_view_of_a_file_that_is_no_trace_exits_instead_of_serving(tmp_path: Path) -> None:
    from neurontrace import errors

    bad = tmp_path / "notes.json"
    bad.write_text("not json at all")
    res = piped("view", bad, "--port", "0", "--no-browser")  # returns: it never starts serving
    assert res.returncode == errors.EXIT_UNKNOWN_FORMAT and "notes.json" in res.stderr
    assert "http://" not in res.stdout


# -- item 1: the step statistics, declared once (analysis/step_stats.py) --------------------------------------


@pytest.fixture(scope="module")
def pair_json() -> dict[str, object]:
    import json

    res = ran("diff", *PAIR, "--json")
    assert res.returncode == 0, res.stderr
    doc: dict[str, object] = json.loads(res.stdout)
    return doc


def test_the_shipped_slowed_run_is_slower_in_every_step(pair_json: dict[str, object]) -> None:
    """The pair used to be faster in the steady state (steady median -4.0%) while "+100.5% per step"."""
    from neurontrace.analysis.step_stats import FIRST_STEP, MEAN_PER_STEP, STEADY_MEDIAN

    steps = pair_json["steps"]
    assert isinstance(steps, dict)
    a, b = steps["durations_ns"]["baseline"], steps["durations_ns"]["change"]
    assert len(a) == len(b) >= 3 and all(y > x for x, y in zip(a, b, strict=True))
    assert steps[STEADY_MEDIAN.key]["pct"] > 0 and steps[FIRST_STEP.key]["pct"] > 0
    devices = pair_json["devices"]
    assert isinstance(devices, list)
    assert all(d[MEAN_PER_STEP.key]["change"] > d[MEAN_PER_STEP.key]["baseline"] for d in devices)


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], str]:
    """Both runs of the pair saved with ``diagnose --save-run`` (tags baseline, slowed): (the catalog, each
    save's report, ``runs list``'s output)."""
    where = tmp_path_factory.mktemp("runs")
    reports = []
    for path, tag in zip(PAIR, ("baseline", "slowed"), strict=True):
        saved = piped("diagnose", path, "--save-run", where, "--tag", tag)
        assert saved.returncode == 0, saved.stderr
        reports.append(saved.stdout)
    listing = piped("runs", "list", "--dir", where)
    assert listing.returncode == 0, listing.stderr
    return where, reports, listing.stdout


def test_diff_and_runs_list_show_the_same_declared_step_figure(catalog: tuple[Path, list[str], str],
                                                                pair_json: dict[str, object]) -> None:
    """``runs list`` showed the steady median (38.5 ms → 36.9 ms) under "step" while diff compared the mean."""
    from neurontrace.analysis.step_stats import MEAN_PER_STEP, STEADY_MEDIAN
    from neurontrace.units import duration

    where, reports, listing = catalog
    devices = pair_json["devices"]
    assert isinstance(devices, list)
    per_step = devices[0][MEAN_PER_STEP.key]
    assert MEAN_PER_STEP.label in listing
    for figure in (per_step["baseline"], per_step["change"]):
        assert duration(figure) in listing
    text = ran("diff", *PAIR).stdout
    compare = piped("runs", "compare", "tag:baseline", "tag:slowed", "--dir", where).stdout
    for out in (text, compare):  # both say which statistic each figure is, by its declared label
        assert f"{MEAN_PER_STEP.label} {duration(per_step['baseline'])} → {duration(per_step['change'])}" in out
        assert STEADY_MEDIAN.label in out
    shown = reports[1]  # diagnose's own report (--save-run prints it too)
    assert f"{MEAN_PER_STEP.label} {duration(per_step['change'])}" in shown and STEADY_MEDIAN.label in shown


def test_two_statistics_that_disagree_say_which_is_which() -> None:
    """The rule behind "all of the change is in the first step": step durations as the old shipped pair had them
    (first step 2.40 ms → 85.4 ms, the others a little faster), the mean +100.5%, the steady median -4.0%."""
    from neurontrace.analysis.step_stats import why_they_differ

    ms = 1_000_000
    why = why_they_differ(100.5, -4.0, [round(2.40 * ms), round(38.5 * ms), round(44.9 * ms)],
                          [round(85.4 * ms), round(36.9 * ms), round(43.4 * ms)])
    assert why is not None and "all of the change is in the first step" in why
    assert "mean time per step +100.5%" in why and "steady median step -4.0%" in why
    assert why_they_differ(2099.1, 2018.0, [1], [2]) is None  # one story: nothing to explain


# -- item 9: one headline, the verdict in words (analysis/headline.py) -----------------------------------------


def _column(table: str, header: str) -> list[str]:
    """The words of one column of a rich table as printed (cells folded over several lines)."""
    lines = table.splitlines()
    head = next(line for line in lines if "┃" in line and header in line)
    col = [c.strip() for c in head.split("┃")].index(header)
    return [w for line in lines if line.startswith("│") for w in line.split("│")[col].split()]


def _headline_inputs() -> list[Path]:
    out = [SAMPLES / "cpu_train_loop.pt.trace.json.gz", SAMPLES / "gloo_8rank"]
    root = corpus_root()
    if root is not None:
        out.append(root / "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    return out


@pytest.mark.parametrize("path", _headline_inputs(), ids=lambda p: p.name)
def test_every_diagnose_report_starts_with_the_headline_its_json_carries(path: Path) -> None:
    import json
    import re

    text, doc = ran("diagnose", path), ran("diagnose", path, "--json")
    assert text.returncode == doc.returncode == 0, text.stderr + doc.stderr
    headline = json.loads(doc.stdout)["headline"]
    assert text.stdout.splitlines()[0] == headline
    # The busy share it states is the attribution's compute share of the device it names.
    busy = re.search(r"is busy (?:only )?(\d+)% of the window", headline)
    assert busy is not None, headline
    shares = [round(100 * d["causes_ns"]["compute"] / (d["window"]["end_ns"] - d["window"]["start_ns"]))
              for d in json.loads(doc.stdout)["devices"]]
    assert int(busy.group(1)) in shares
    if path.name == "gloo_8rank":  # the job-level verdict first: the rank the others wait for
        assert headline.startswith("Rank ") and "arrives last at collectives" in headline.split(";")[0]


def test_runs_list_and_the_viewer_title_show_the_same_headline(catalog: tuple[Path, list[str], str]) -> None:
    import json

    _where, _reports, listing = catalog
    headlines = [json.loads(ran("diagnose", p, "--json").stdout)["headline"] for p in PAIR]
    words = " ".join(_column(listing, "headline"))  # folded cells, rejoined; newest run first
    assert words == " ".join(reversed(headlines))
    path, headline = PAIR[1], headlines[1]
    pytest.importorskip("dash")
    import neurontrace
    from neurontrace.app import callbacks, layout
    from neurontrace.app.model import ViewModel
    from neurontrace.app.server import ViewerState

    state = ViewerState(str(path))
    assert callbacks.on_headline(state) == ""  # nothing before the analysis
    state.model = ViewModel.build(neurontrace.load(path))
    state.model.analyse()
    assert callbacks.on_headline(state) == headline
    assert "nt-headline" in json.dumps(layout.header("t", []), default=lambda c: c.to_plotly_json())


# -- item 6: a job's report leads with the job (real 8-rank gloo run, sample_traces/make_multirank.py) -------


def _panel_line(line: str) -> str:
    return line.strip().strip("│").strip()


@pytest.fixture(scope="module")
def gloo_report() -> list[str]:
    res = ran("diagnose", SAMPLES / "gloo_8rank")
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def test_a_job_report_puts_the_straggler_and_slowest_collective_before_the_ranks(gloo_report: list[str]) -> None:
    """The straggler used to come at line ~290 of 295, after eight near-identical rank-less warnings."""
    import re

    straggler = next(i for i, line in enumerate(gloo_report) if re.match(r"WARNING Rank \d+ arrives last", line))
    slowest = next(i for i, line in enumerate(gloo_report) if "slowest collective:" in line)
    table = next(i for i, line in enumerate(gloo_report) if line.startswith("per rank"))
    per_device = next(i for i, line in enumerate(gloo_report) if "Communication is not hidden" in line)
    assert straggler < 5 and straggler < slowest < table < per_device
    rows = [line for line in gloo_report[table:per_device] if re.match(r"│ +\d+ │", line)]
    assert sorted(int(r.split("│")[1]) for r in rows) == list(range(8))  # one line per rank, each names it
    assert "8 of 8 ranks" in gloo_report[per_device]
    evidence = [line for line in gloo_report if "window is collectives" in line]
    assert len(evidence) == 8 and all(re.match(r" +rank \d+ cpu: ", line) for line in evidence)
    assert not any(_panel_line(line) == "top stalls" for line in gloo_report)  # rank detail: --ranks all
    assert gloo_report[-1].endswith("--ranks all")


def test_ranks_all_adds_each_ranks_detail() -> None:
    res = piped("diagnose", SAMPLES / "gloo_8rank", "--ranks", "all")
    assert res.returncode == 0, res.stderr
    assert sum(_panel_line(line) == "top stalls" for line in res.stdout.splitlines()) == 8
    assert all(f"cpu rank {r} " in res.stdout for r in range(8))


def test_no_bus_bandwidth_without_its_message_size(gloo_report: list[str]) -> None:
    import json

    doc = json.loads(ran("diagnose", SAMPLES / "gloo_8rank", "--json").stdout)
    sizes = {c["bytes"] for c in doc["cross_rank"]["collectives"] if c["busbw_gbps"] is not None}
    lines = [line for line in gloo_report if "bus bandwidth" in line]
    assert lines and all(" for " in line and " of " in line for line in lines)
    from neurontrace.units import size

    assert {size(b) for b in sizes} == {line.split(" of ")[1].split(" (")[0] for line in lines}


def test_one_rank_is_not_0_matched_across_0_ranks() -> None:
    res = piped("diagnose", SAMPLES / "gloo_8rank" / "rank-3.pt.trace.json.gz")
    assert res.returncode == 0, res.stderr
    assert "matched across" not in res.stdout and "collectives on one rank: nothing to match" in res.stdout


# -- item 8: small contradictions -----------------------------------------------------------------------------


def test_neuron_description_tables_are_not_reported_as_skipped_data(tmp_path: Path) -> None:
    """SYNTHETIC Neuron profile (written to the documented Parquet layout: Neuron Explorer writes
    SchemaFields.parquet, one row per table and field, formats/neuron.md §3.2). Its rows are a schema
    description summarised into metadata, not events lost: "257 event(s) skipped: SchemaFields" misled."""
    import json

    from tests.app_support import load_quiet, synthetic_neuron

    profile = synthetic_neuron(tmp_path)
    res = ran("diagnose", profile)
    assert res.returncode == 0, res.stderr
    assert "SchemaFields" not in res.stdout and "turned into frames" not in res.stdout
    info = json.loads(ran("diagnose", profile, "--json").stdout)
    assert not any("SchemaFields" in w["message"] for w in info.get("warnings") or [])
    acct = load_quiet(profile).accounting[0]
    assert acct.kept.get("metadata", 0) > 0 and not any("SchemaFields" in r for r in acct.skipped)
    acct.check()  # every row read is still kept or skipped


def test_neuron_summary_figures_are_rounded_in_text(tmp_path: Path) -> None:
    """``mfu_estimated_percent 0.012075471698113209``: a sentence gives 4 significant digits (--json keeps all)."""
    import re

    res = ran("diagnose", SAMPLES / "synthetic_neuron" / "synthetic_mlp_parquet")
    assert res.returncode == 0, res.stderr
    evidence = [line for line in res.stdout.splitlines() if "mfu_estimated_percent" in line]
    assert evidence and "MFU 1.2%" in evidence[0]
    significant = [len(n.replace(".", "").lstrip("0")) for n in re.findall(r"\d+\.\d+", res.stdout)]
    assert significant and max(significant) <= 4


# -- item 5: one classification, one default window, one table of shares ---------------------------------------

RESNET = "kineto-tb_plugin/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


def _corpus_trace(rel: str) -> Path:
    root = corpus_root()
    if root is None or not (root / rel).is_file():
        pytest.skip("the real-trace corpus is not beside the checkout")
    return root / rel


def test_batch_norm_kernels_are_norm_not_conv() -> None:
    """A real ResNet-50 V100 trace: cuDNN's batch norm kernels (cudnn::bn_fw_tr_1C11_..., cudnn::bn_bw_...) were
    classed "conv" by the attribution and "unknown" by the op table."""
    import json

    from neurontrace.analysis import names

    trace = _corpus_trace(RESNET)
    ops = json.loads(ran("ops", trace, "--json").stdout)
    bn = [r for r in ops["rows"] if "batch_norm" in r["op"]]
    assert bn and all(r["kernel_class"] == "norm" for r in bn)
    assert names.kernel_class("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(...)") == "norm"
    # cuDNN kernels of the same trace that are no norm stay conv
    assert names.kernel_class("volta_scudnn_128x64_stridedB_splitK_xregs_large_nn_v1") == "conv"
    assert names.kernel_class("void cudnn::winograd_nonfused::winogradWgradOutput4x4<float, float>(...)") == "conv"


@pytest.mark.parametrize("rel", [RESNET, "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"])
def test_ops_and_diagnose_print_one_table_of_shares(rel: str) -> None:
    """They used to default to different windows and classify by different rules ("conv 375 ms, gemm 121 ms"
    then "unknown 57.5% ... gemm 0.1% of kernel time")."""
    import json

    trace = _corpus_trace(rel)
    diag = json.loads(ran("diagnose", trace, "--json").stdout)
    ops = json.loads(ran("ops", trace, "--json").stdout)
    for dev in diag["devices"]:
        w = next(u for u in ops["windows"] if u["device"] == dev["device"] and u["rank"] == dev["rank"])
        assert (w["start_ns"], w["end_ns"]) == (dev["window"]["start_ns"], dev["window"]["end_ns"])
        from_ops = {c["op_class"]: c["share"] for c in ops["classes"][dev["device"]]}
        assert from_ops == {c["op_class"]: c["share"] for c in dev["ops"]["classes"]}
        assert sum(from_ops.values()) == pytest.approx(1.0)  # the shares shown add up
        # The attribution's compute.<class> are the same classes, in the same proportions (one stream: the
        # union of kernel time is its sum; a few points allow for kernels overlapping across streams).
        compute = dev["causes_ns"]["compute"]
        detail = {k.split(".", 1)[1]: v / compute for k, v in dev["detail_ns"].items() if k.startswith("compute.")}
        assert set(detail) <= set(from_ops)
        top = max(detail, key=lambda c: detail[c])
        assert top == max(from_ops, key=lambda c: from_ops[c])
        assert all(abs(detail[c] - from_ops[c]) < 0.05 for c in detail)
    text = ran("ops", trace).stdout
    assert "the analysis window diagnose reports" in text


# -- item 7: the viewer's roofline after a zoom, and the two-run page ------------------------------------------


def test_the_roofline_names_the_h100_after_any_zoom() -> None:
    """It said "unknown device … 0 kernels" after a zoom on an H100 corpus trace."""
    pytest.importorskip("dash")
    import warnings

    import neurontrace
    from neurontrace.app import callbacks, roofline
    from neurontrace.app.model import ViewModel

    trace = _corpus_trace("TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ViewModel.build(neurontrace.load(trace))
    model.analyse()
    _fig, view, _status = callbacks.on_timeline(model, "nt-analysis-ready", None, None, None)
    window_ms = model.analysis.diagnosis.devices[0].window_ns / 1e6 if model.analysis else 0.0
    # Zooms as the page sends them (ms from the report's time 0): inside the window, and before the first kernel.
    origin = model.absolute(model.time_origin)
    first_kernel = int(min(model.trace.device_events["ts_ns"].to_pylist()))
    before = ((model.index.origin_ns - origin) / 1e6, (first_kernel - 1000 - origin) / 1e6)
    for lo, hi, kernels in ((0.2 * window_ms, 0.4 * window_ms, True), (*before, False)):
        _fig, zoomed, _s = callbacks.on_timeline(model, "nt-timeline", {"xaxis.range[0]": lo, "xaxis.range[1]": hi},
                                                 None, view)
        status = roofline.on_ops(model, roofline.TAB, zoomed, 0, "view", None, None, None, None)[3]
        assert "NVIDIA H100" in status and "unknown device" not in status, status
        assert ("kernels in" in status) == kernels and " 0 kernels" not in status, status
        assert kernels or "no kernel starts in this range" in status


def test_the_two_run_page_draws_both_strips_to_scale_and_the_numbers_first() -> None:
    """Both cause strips were drawn to 100%, hiding a 4x slowdown, and the diff's numbers sat behind a
    horizontal scroll. On the shipped real pair, each strip is as long as its window on one shared scale."""
    pytest.importorskip("dash")
    import json

    from neurontrace.app.compare import layout as compare_layout
    from neurontrace.app.compare.callbacks import on_progress
    from neurontrace.app.compare.model import CompareState
    from neurontrace.app.server import ViewerState

    state = CompareState(ViewerState(str(PAIR[0])), ViewerState(str(PAIR[1])))
    state.load()
    assert state.status == "ready", state.error
    _key, _text, _note, fig_a, fig_b, rows, _counts, _done = on_progress(state, None, None)
    windows = [m.analysis.diagnosis.devices[0].window_ns / 1e6 for m in state.models() if m.analysis]
    for fig, window in zip((fig_a, fig_b), windows, strict=True):
        assert sum(t["x"][0] for t in fig["data"]) == pytest.approx(window)  # its real length, in ms
        assert fig["layout"]["xaxis"]["range"] == pytest.approx([0, max(windows)])  # one scale for both
    assert windows[1] > 2 * windows[0]
    heads = [label for _key, label in compare_layout.DIFF_COLUMNS]
    assert heads.index("Δ (ms)") < heads.index("op") and heads[-1] == "op"  # the name folds, last
    first = json.dumps(rows[0], default=lambda c: c.to_plotly_json())
    assert '"nt-wrap"' in first
