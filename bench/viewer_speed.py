"""Viewer speed: first render, zoom/pan callbacks and payload sizes on a 2,000,000- or 10,000,000-event trace.

    python bench/viewer_speed.py [--events 2000000] [--repeat 3] [--viewport 1600]
    python bench/viewer_speed.py --events 10000000 --repeat 1 --timeline-only --dataset   # issue #28, item 4
    python bench/viewer_speed.py --events 10000000 --repeat 1 --timeline-only --dataset --dataset-trace TILED

``--dataset`` also writes the built trace as a converted dataset (``neurontrace.dataset.write_dataset``, which
stores the viewer's index beside the parts: ``neurontrace/app/index_store.py``), reads it (``neurontrace.load``:
the load, printed on its own line and not part of the first render, as a trace's parse is not) and measures the
first render of ``neurontrace view DATASET`` from there: ``ViewerState.use`` (the stored index, memory-mapped)
and the page; then the same without the stored index (a dataset written before it existed: the index is built
on open), and the zoom/pan callbacks drawn from the stored index too. With ``--dataset-trace TRACE`` the
dataset is made by the CLI instead: ``neurontrace convert TRACE -o DATASET --dataset`` in a process of its own
(which stores the index after the parts; its lines and peak RSS printed), from a real Kineto trace or one tiled
from it (``bench/tile_trace.py``; e.g. ``--target-mb 3400`` for 10 M events). ``--timeline-only`` measures the
first renders and the zoom/pan callbacks of the GPU-like trace only (no background analysis, second trace,
ops tab or two-run page), which is what fits a 10 M-event run on a shared 2-core machine. CPU seconds are
printed beside wall seconds: on a loaded machine wall time is several times the work.

Method. A GPU-like trace is built in memory (no file, so parsing is not measured): one host process
whose main thread runs ProfilerStep# ranges holding Python frames holding framework ops holding
kernel launches (four nesting levels), a data-loader thread, and a device with four compute streams,
a copy stream and a collective stream, launch flows for every device event, and a small frame tree.
The callback functions the Dash app registers are then called directly (no browser, no HTTP):

Two traces are measured: the GPU-like one, and a CPU-only one with 100 threads of deep Python
stacks (500 lanes), viewed as it opens (the big process collapsed) and with everything expanded
(the timeline then draws its first 120 rows and says how many it left out).

1. **first render** = from the server holding the loaded Trace to the page it serves: the viewer's index
   (``tracks.build``), its level-of-detail sums (``lod.prepare``), the rest of the model (``ViewModel.build``:
   steps, counters, frames) and the page's layout and first timeline figure (``server.main_page``), each
   printed, with the CPU seconds and the RSS growth. A trace of ``server.PREVIEW_MIN_EVENTS`` (1 M) events or
   more opens, as the server opens it, on its preview (``app/preview.py``: every process and device as its
   header row) instead: the first render is the preview, the model and that page; the full index, its sums and
   the page with every lane, built behind it, are printed after it ("then the full index ...") and the zoom/pan
   callbacks run on the full index. The trace's parse is not in it (``bench/parse_speed.py``
   measures it). The analysis behind the summary strip and the tables (``diagnose`` plus
   the cause intervals) runs after it in the background and fills those panels when done; its time
   is printed on its own line.
2. **zoom / pan**: ``callbacks.on_timeline`` for a relayout event at every zoom level from the whole
   trace down to a few microseconds, then pans at each level, with a cause highlighted and an event
   selected on some of them. Server time per callback is the best of ``--repeat`` runs.
3. **payload**: the JSON Dash sends back for each callback (``plotly.io.json.to_json_plotly`` of the
   outputs, which is Dash's own serializer), in bytes.

4. **two runs side by side** (``neurontrace view A B``): the GPU-like trace against a second one built
   with another seed and three quarters of the events (so the diff has changed ops to click).
   "Both loaded -> page shown" = both indexes + the page + its first callback (both timelines drawn,
   the shared zoom live, aligned provisionally): what the user waits for once both traces are parsed.
   The server indexes A before it reads B, so after B is read only B's index is left: that figure is
   printed too.
   "Loaded -> diff table complete" adds both analyses, the diff, and what the page's progress poll then
   sends (both cause strips, the diff table) with the redraw at the analysed alignment; the page works
   meanwhile, so it has no target of its own. Then ``compare.callbacks.on_compare`` for zooms/pans of either side
   (both timelines redrawn each time), a diff row click (its op outlined in both) and a search of both
   runs with Enter (``compare.callbacks.on_search_pair``).

Targets (issue "The Dash viewer"): first render <= 3 s; each zoom/pan callback <= 300 ms of server
time; payload per callback <= 2 MB. Times are wall-clock on this machine, which is shared: read the
minima, and rerun before believing a regression.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from plotly.io.json import to_json_plotly

from neurontrace import Trace
from neurontrace.app import callbacks, preview
from neurontrace.app.model import ViewModel
from neurontrace.app.server import PREVIEW_MIN_EVENTS, main_page

TARGET_FIRST_RENDER_S = 3.0
TARGET_CALLBACK_S = 0.300
TARGET_PAYLOAD_BYTES = 2_000_000
T0 = 1_700_000_000_000_000_000

PY_NAMES = ["train.py(41): train_step", "model.py(88): forward", "model.py(102): attention", "model.py(131): mlp",
            "optim.py(12): step", "data.py(20): __next__"]
OP_NAMES = ["aten::mm", "aten::addmm", "aten::layer_norm", "aten::gelu", "aten::softmax", "aten::add_",
            "aten::copy_", "aten::mul"]
KERNELS = ["ampere_sgemm_128x64_nn", "void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernel>",
           "void at::native::layer_norm_kernel<float>", "flash_fwd_kernel", "void at::native::reduce_kernel<512, 1>"]


def build_trace(n_events: int, seed: int = 0) -> Trace:
    """About ``n_events`` events: 3 host + 1 device per op group, plus steps and a loader thread."""
    rng = np.random.default_rng(seed)
    groups = n_events // 4
    per_step = 2_000
    n_steps = max(1, groups // per_step)
    groups = n_steps * per_step
    gap = rng.integers(500, 3_000, groups)
    dur = rng.integers(4_000, 15_000, groups)
    start = np.cumsum(gap + dur) - (gap + dur)  # back to back with gaps, ns from 0
    step_start = start[::per_step] - 200
    step_end = np.r_[start[per_step::per_step] - 300, start[-1] + dur[-1] + 100]
    op_start = start + 500
    op_dur = dur - 1_000
    launch_start = op_start + op_dur // 3
    launch_dur = np.full(groups, 1_800)
    k_start = launch_start + rng.integers(2_000, 6_000, groups)
    k_dur = rng.integers(3_000, 14_000, groups)
    kind = rng.random(groups)
    stream = np.where(kind < 0.02, 7, np.where(kind < 0.03, 9, 11 + np.arange(groups) % 4))
    dev_cat = np.where(stream == 7, "memcpy", np.where(stream == 9, "collective", "compute"))
    dev_name = np.where(stream == 7, "Memcpy HtoD (Pageable -> Device)",
                        np.where(stream == 9, "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                                 np.array(KERNELS)[rng.integers(0, len(KERNELS), groups)]))
    loader = max(1, groups // 20)
    l_start = np.sort(rng.integers(0, int(start[-1]), loader))
    n_host = n_steps + 3 * groups + loader
    ts = np.concatenate([step_start, start, op_start, launch_start, l_start]) + T0
    du = np.concatenate([step_end - step_start, dur, op_dur, launch_dur, rng.integers(20_000, 80_000, loader)])
    name = np.concatenate([
        np.array([f"ProfilerStep#{i}" for i in range(n_steps)], dtype=object),
        np.array(PY_NAMES[:4], dtype=object)[rng.integers(0, 4, groups)],
        np.array(OP_NAMES, dtype=object)[rng.integers(0, len(OP_NAMES), groups)],
        np.full(groups, "cudaLaunchKernel", dtype=object),
        np.full(loader, PY_NAMES[5], dtype=object),
    ])
    cat = np.concatenate([np.full(n_steps, "step", dtype=object), np.full(groups, "python", dtype=object),
                          np.full(groups, "framework_op", dtype=object), np.full(groups, "runtime", dtype=object),
                          np.full(loader, "python", dtype=object)])
    tid = np.concatenate([np.full(n_host - loader, "100", dtype=object), np.full(loader, "101", dtype=object)])
    corr = np.concatenate([np.full(n_steps + 2 * groups, -1), np.arange(groups), np.full(loader, -1)])
    frame = np.concatenate([np.full(n_steps, -1), rng.integers(1, 5, groups), rng.integers(1, 5, groups),
                            rng.integers(1, 5, groups), np.full(loader, 5)])
    host = pa.table({
        "event_id": pa.array(np.arange(n_host, dtype=np.int64)), "ts_ns": pa.array(ts), "dur_ns": pa.array(du),
        "name": pa.array(name, pa.string()).dictionary_encode(), "category": pa.array(cat, pa.string()).dictionary_encode(),
        "pid": pa.array(np.full(n_host, "100", dtype=object), pa.string()), "tid": pa.array(tid, pa.string()),
        "track": pa.array(np.char.add("thread ", tid.astype(str)), pa.string()),
        "correlation": pa.array(corr, mask=corr < 0), "frame_id": pa.array(frame, mask=frame < 0),
        "host": pa.array(np.full(n_host, "bench-host", dtype=object), pa.string()),
    })
    dev_ids = np.arange(n_host, n_host + groups, dtype=np.int64)
    device = pa.table({
        "event_id": pa.array(dev_ids), "ts_ns": pa.array(k_start + T0), "dur_ns": pa.array(k_dur),
        "name": pa.array(dev_name, pa.string()).dictionary_encode(),
        "category": pa.array(dev_cat, pa.string()).dictionary_encode(),
        "device": pa.array(np.full(groups, "cuda:0", dtype=object), pa.string()),
        "track": pa.array(np.char.add("stream ", stream.astype(str)), pa.string()),
        "correlation": pa.array(np.arange(groups)), "pid": pa.array(np.full(groups, "0", dtype=object), pa.string()),
        "direction": pa.array(np.where(stream == 7, "h2d", None), pa.string()),
    })
    launch_ids = np.arange(n_steps + 2 * groups, n_steps + 3 * groups, dtype=np.int64)
    flows = pa.table({"flow_id": pa.array(np.arange(groups).astype(str)), "kind": pa.array(["launch"] * groups),
                      "src_event_id": pa.array(launch_ids), "dst_event_id": pa.array(dev_ids),
                      "src_ts_ns": pa.array(launch_start + T0), "dst_ts_ns": pa.array(k_start + T0)})
    frames = pa.table({
        "frame_id": [0, 1, 2, 3, 4, 5], "parent_id": pa.array([None, 0, 1, 1, 1, None], pa.int64()),
        "file": ["train.py", "train.py", "model.py", "model.py", "model.py", "data.py"],
        "line": pa.array([10, 41, 88, 102, 131, 20], pa.int32()),
        "function": ["<module>", "train_step", "forward", "attention", "mlp", "__next__"],
        "kind": ["python"] * 6, "is_user": [True] * 6,
    })
    return Trace(system_events=host, device_events=device, flows=flows, frames=frames)


def build_threads_trace(n_events: int, threads: int = 100, depth: int = 4, seed: int = 0) -> Trace:
    """A CPU-only trace with many threads and deep stacks: ``threads`` threads of one process, each
    running units of ``depth`` nested Python frames around one framework op (``depth + 1`` lanes)."""
    rng = np.random.default_rng(seed)
    per_unit = depth + 1
    units = n_events // per_unit // threads
    n = units * threads
    dur = rng.integers(20_000, 120_000, n)
    gap = rng.integers(1_000, 20_000, n)
    step = (dur + gap).reshape(threads, units)
    start = (np.cumsum(step, axis=1) - step).reshape(-1)
    tid = np.repeat(np.arange(threads), units)
    ts, du, cat, name, tids = [], [], [], [], []
    for d in range(per_unit):  # one array op per nesting level, not per event
        ts.append(start + d * 500)
        du.append(np.maximum(dur - d * 1_000, 100))
        is_op = d == depth
        cat.append(np.full(n, "framework_op" if is_op else "python", dtype=object))
        name.append(np.full(n, "aten::linear" if is_op else PY_NAMES[d % 4], dtype=object))
        tids.append(tid)
    tid_all = np.concatenate(tids).astype(str)
    total = n * per_unit
    host = pa.table({
        "event_id": pa.array(np.arange(total, dtype=np.int64)), "ts_ns": pa.array(np.concatenate(ts) + T0),
        "dur_ns": pa.array(np.concatenate(du)),
        "name": pa.array(np.concatenate(name), pa.string()).dictionary_encode(),
        "category": pa.array(np.concatenate(cat), pa.string()).dictionary_encode(),
        "pid": pa.array(np.full(total, "7", dtype=object), pa.string()), "tid": pa.array(tid_all, pa.string()),
        "track": pa.array(np.char.add("thread ", tid_all), pa.string()),
    })
    return Trace(system_events=host)


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def payload(outputs: Any) -> int:
    """Bytes of the JSON Dash sends for these callback outputs (its own serializer)."""
    return len(to_json_plotly(list(outputs)).encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--viewport", type=int, default=1600, help="browser window width in pixels")
    parser.add_argument("--dataset", action="store_true",
                        help="also measure the first render from a converted dataset of the same trace")
    parser.add_argument("--dataset-trace", type=Path, metavar="TRACE",
                        help="with --dataset: the dataset is made by the CLI instead, `neurontrace convert TRACE -o "
                             "DATASET --dataset` (which stores the viewer's index), from this Kineto trace (a "
                             "real one, or one tiled from it by bench/tile_trace.py)")
    parser.add_argument("--timeline-only", action="store_true",
                        help="first renders and the GPU-like trace's zoom/pan callbacks only")
    args = parser.parse_args()

    t0 = time.perf_counter()
    trace = build_trace(args.events)
    print(f"trace: {trace.num_events:,} events ({trace.system_events.num_rows:,} host, "
          f"{trace.device_events.num_rows:,} device, {trace.flows.num_rows:,} flows), "
          f"built in {time.perf_counter() - t0:.1f} s")

    first, _cpu, model = first_render_from_trace(trace)
    page_s, page = best_of(1, lambda: main_page(model, ["."]))
    print(f"  page {len(to_json_plotly(page).encode()) / 1e6:.2f} MB")
    if args.dataset:
        if args.dataset_trace is not None:
            print(f"the dataset: {args.dataset_trace} converted by the CLI (its events, not the built trace's)")
        first_ds, ds_model, tmp = from_dataset(trace, args)
        first = max(first, first_ds)
    if args.timeline_only:
        worst_t, worst_b = run_views(model, args, "GPU-like trace, default view (every group open)", expanded=None)
        if args.dataset:  # the same views drawn from the stored index (its arrays memory-mapped)
            t, b = run_views(ds_model, args, "GPU-like trace opened from the dataset (stored index, memory-mapped)",
                             expanded=None)
            worst_t, worst_b = max(worst_t, t), max(worst_b, b)
            tmp.cleanup()
        print(f"\nzoom/pan callback: worst {worst_t * 1e3:.0f} ms (target <= {TARGET_CALLBACK_S * 1e3:.0f} ms): "
              f"{'PASS' if worst_t <= TARGET_CALLBACK_S else 'FAIL'}")
        print(f"payload per callback: worst {worst_b / 1e6:.2f} MB (target <= {TARGET_PAYLOAD_BYTES / 1e6:.0f} MB): "
              f"{'PASS' if worst_b <= TARGET_PAYLOAD_BYTES else 'FAIL'}")
        print(f"first render, trace{' and dataset' if args.dataset else ''}: worst {first:.2f} s "
              f"(target <= {TARGET_FIRST_RENDER_S:.0f} s): {'PASS' if first <= TARGET_FIRST_RENDER_S else 'FAIL'}")
        return
    t0 = time.perf_counter()
    model.analyse()
    print(f"analysis for the summary strip and tables (background, after first render): "
          f"{time.perf_counter() - t0:.2f} s")
    page_s, page = best_of(1, lambda: main_page(model, ["."]))
    print(f"page once the analysis is done (opens on the analysis window): {page_s:.2f} s, "
          f"{len(to_json_plotly(page).encode()) / 1e6:.2f} MB")

    worst_t, worst_b = run_views(model, args, "GPU-like trace, default view (every group open)", expanded=None)
    ops_t, ops_b = run_ops(model, args, "GPU-like trace")
    worst_t, worst_b = max(worst_t, ops_t), max(worst_b, ops_b)

    threads_trace = build_threads_trace(args.events)
    t0 = time.perf_counter()
    threads = ViewModel.build(threads_trace, title="threads")
    index_s = time.perf_counter() - t0
    page_s, _page = best_of(1, lambda: main_page(threads, ["."]))
    ok_threads = index_s + page_s <= TARGET_FIRST_RENDER_S
    first_threads = index_s + page_s
    print(f"\nsecond trace: {threads.trace.num_events:,} events on {len(threads.index.tracks)} threads, "
          f"{threads.index.n_lanes} lanes (CPU only, deep stacks)")
    print(f"first render: {first_threads:.2f} s = index {index_s:.2f} s + layout and first figure {page_s:.2f} s "
          f"(target <= {TARGET_FIRST_RENDER_S:.0f} s): {'PASS' if ok_threads else 'FAIL'}")
    threads.analyse()
    t_default, b_default = run_views(threads, args, "default view (the big process collapsed)", expanded=None)
    t_all, b_all = run_views(threads, args, "everything expanded, Python frames shown 10 levels deep "
                             "(row cap applies)", expanded=[g.key for g in threads.index.groups], python=True)
    ops_t, ops_b = run_ops(threads, args, "CPU-only trace")
    worst_t = max(worst_t, t_default, t_all, ops_t)
    worst_b = max(worst_b, b_default, b_all, ops_b)
    first = max(first, first_threads)

    print(f"\nzoom/pan callback, all views: worst {worst_t * 1e3:.0f} ms (target <= {TARGET_CALLBACK_S * 1e3:.0f} ms): "
          f"{'PASS' if worst_t <= TARGET_CALLBACK_S else 'FAIL'}")
    print(f"payload per callback, all views: worst {worst_b / 1e6:.2f} MB (target <= {TARGET_PAYLOAD_BYTES / 1e6:.0f} MB): "
          f"{'PASS' if worst_b <= TARGET_PAYLOAD_BYTES else 'FAIL'}")
    print(f"first render, both traces: worst {first:.2f} s (target <= {TARGET_FIRST_RENDER_S:.0f} s): "
          f"{'PASS' if first <= TARGET_FIRST_RENDER_S else 'FAIL'}")

    from neurontrace.app.source import SourceReader

    selected = int(model.analysis.top_ops[0]["event_id"]) if model.analysis and model.analysis.top_ops else None
    reader = SourceReader(["."])
    if selected is not None:
        secs, out = best_of(args.repeat, lambda: callbacks.on_details(model, reader, selected))
        print(f"click an event (details + source panel): {secs * 1e3:.1f} ms, {payload(out) / 1e3:.1f} KB")
    secs, out = best_of(args.repeat, lambda: callbacks.on_summary(
        model, "nt-summary", {"points": [{"curveNumber": 4, "customdata": [0, 0]}]}, None))
    print(f"click a cause (summary strip): {secs * 1e3:.1f} ms, {payload(out) / 1e3:.1f} KB")
    pair_first, pair_complete, pair_t, pair_b = run_pair(trace, args)
    print(json.dumps({"events": trace.num_events, "first_render_s": round(first, 3),
                      "worst_callback_ms": round(worst_t * 1e3, 1), "worst_payload_bytes": worst_b,
                      "pair_page_shown_s": round(pair_first, 3), "pair_diff_complete_s": round(pair_complete, 3),
                      "pair_worst_callback_ms": round(pair_t * 1e3, 1),
                      "pair_worst_payload_bytes": pair_b}))


def first_render_from_trace(trace: Trace) -> tuple[float, float, ViewModel]:
    """The first render of ``neurontrace view TRACE`` once the trace is loaded, step by step: the track index
    (``tracks.build``), its level-of-detail sums (``lod.prepare``), the rest of the model (steps, counters,
    frames) and the page (layout and first timeline figure). Returns (wall s, CPU s, the model)."""
    from neurontrace.app import lod, tracks
    from neurontrace.app.model import MARKER_CATEGORIES

    if trace.num_events >= PREVIEW_MIN_EVENTS:  # what the server draws first (app/preview.py), then the lanes
        t0, c0, r0 = time.perf_counter(), time.process_time(), _rss_mb()
        pv = preview.build(trace, markers=MARKER_CATEGORIES)
        model = ViewModel.build(trace, title="bench", index=pv)
        main_page(model, ["."], preview=True)
        first, cpu, t1 = time.perf_counter() - t0, time.process_time() - c0, time.perf_counter()
        print(f"first render from the trace (loaded -> first figure, the preview: every process and device as its "
              f"header row): {first:.2f} s wall, {cpu:.2f} CPU s; RSS +{_rss_mb() - r0:,.0f} MB (target <= "
              f"{TARGET_FIRST_RENDER_S:.0f} s): {'PASS' if first <= TARGET_FIRST_RENDER_S else 'FAIL'}")
        index = tracks.build(trace)
        lod.prepare(index, markers=MARKER_CATEGORIES)
        model.index = index
        main_page(model, ["."])
        print(f"  then the full index (built behind the preview) and the page with every lane: "
              f"{time.perf_counter() - t1:.2f} s more ({time.perf_counter() - t0:.2f} s from loaded)")
        return first, cpu, model
    t0, c0, r0 = time.perf_counter(), time.process_time(), _rss_mb()
    index = tracks.build(trace)
    t1 = time.perf_counter()
    lod.prepare(index, markers=MARKER_CATEGORIES)
    t2 = time.perf_counter()
    model = ViewModel.build(trace, title="bench", index=index)
    t3 = time.perf_counter()
    main_page(model, ["."])
    t4 = time.perf_counter()
    first, cpu = t4 - t0, time.process_time() - c0
    print(f"first render from the trace (loaded -> first figure): {first:.2f} s wall, {cpu:.2f} CPU s = "
          f"index {t1 - t0:.2f} s + level of detail {t2 - t1:.2f} s + steps, counters, frames {t3 - t2:.2f} s + "
          f"layout and first figure {t4 - t3:.2f} s; RSS +{_rss_mb() - r0:,.0f} MB (target <= "
          f"{TARGET_FIRST_RENDER_S:.0f} s): {'PASS' if first <= TARGET_FIRST_RENDER_S else 'FAIL'}")
    return first, cpu, model


def _rss_mb() -> float:
    """This process's resident memory now, MB (Linux; 0 elsewhere)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 1e6
    except (OSError, IndexError, ValueError):
        return 0.0


def from_dataset(trace: Trace, args: argparse.Namespace) -> tuple[float, ViewModel, Any]:
    """The first render of ``neurontrace view DATASET``: the dataset is written as ``convert`` writes it (the
    viewer's index stored beside its parts), read (``neurontrace.load``: the load, measured on its own like
    a trace's parse), then opened as the server does it (``ViewerState.use``: the stored index, memory-mapped)
    and the page drawn. A dataset written without the index (before it was stored) is measured too: the server
    builds the index then, as from a trace. Returns (first render s, the model, the temporary directory)."""
    import shutil
    import tempfile

    import neurontrace
    from neurontrace.app import index_store
    from neurontrace.app.server import ViewerState
    from neurontrace.dataset import write_dataset

    tmp = tempfile.TemporaryDirectory(prefix="nt-viewer-ds-")
    ds = Path(tmp.name) / "ds"
    t0 = time.perf_counter()
    if args.dataset_trace is not None:
        _cli_convert(args.dataset_trace, ds)
    else:
        write_dataset([trace], ds)
    stored = next((ds / index_store.DIRECTORY).iterdir())
    size = sum(f.stat().st_size for f in ds.rglob("*") if f.is_file()) / 1e6
    index_mb = sum(f.stat().st_size for f in stored.iterdir()) / 1e6
    print(f"\nconverted dataset written in {time.perf_counter() - t0:.1f} s ({size:.0f} MB, of which the "
          f"viewer's stored index {index_mb:.0f} MB, uncompressed to be memory-mapped)")
    t0 = time.perf_counter()
    loaded = neurontrace.load(ds)
    read_s = time.perf_counter() - t0
    print(f"dataset read (neurontrace.load, the load: not part of the first render): {read_s:.2f} s")
    t0, c0 = time.perf_counter(), time.process_time()
    state = ViewerState(str(ds))
    model = state.use(loaded)
    open_s = time.perf_counter() - t0
    page_s, _page = best_of(1, lambda: main_page(model, ["."]))
    first = open_s + page_s
    print(f"first render from the dataset (read -> first figure): {first:.2f} s wall, "
          f"{time.process_time() - c0:.2f} CPU s = open the stored index and the model {open_s:.2f} s + layout "
          f"and first figure {page_s:.2f} s (target <= {TARGET_FIRST_RENDER_S:.0f} s): "
          f"{'PASS' if first <= TARGET_FIRST_RENDER_S else 'FAIL'}")
    shutil.rmtree(ds / index_store.DIRECTORY)  # a dataset written before the index was stored
    t0 = time.perf_counter()
    older_model = ViewModel.build(loaded, title=str(ds))  # what use() does without a stored index
    older_s = time.perf_counter() - t0
    main_page(older_model, ["."])
    older_page = time.perf_counter() - t0 - older_s
    print(f"  a dataset without the stored index (written before it existed): {older_s + older_page:.2f} s = "
          f"index built on open {older_s:.2f} s + page {older_page:.2f} s (the server then stores it for the next "
          "view; no target of its own)")
    del older_model
    return first, model, tmp


_CONVERT = """
import resource, sys
from neurontrace.cli import main
rc = main(["convert", *sys.argv[1:]])
print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6:.0f} MB", file=sys.stderr)
sys.exit(rc)
"""


def _cli_convert(source: Path, ds: Path) -> None:
    """``neurontrace convert SOURCE -o DS --dataset`` in a process of its own, as a user runs it (the bound on
    the rank's events lifted, so that the index is stored whatever its size); its stderr lines are printed
    (the index stored, its time) with the process's peak RSS. bench/convert_viewer_index.py measures what
    storing the index adds to the convert against a convert without it."""
    import subprocess
    import sys

    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _CONVERT, str(source), "-o", str(ds), "--dataset",
                           "--viewer-index-max-events", str(1 << 62)], capture_output=True, text=True, check=True)
    print(f"\nneurontrace convert {source.name} --dataset: {time.perf_counter() - t0:.1f} s wall")
    for line in done.stderr.splitlines():
        print(f"  {line}")


def run_pair(trace: Trace, args: argparse.Namespace) -> tuple[float, float, float, int]:
    """The two-run page on ``trace`` and a second trace like it: loaded -> page shown, loaded -> diff
    table complete, zoom/pan and a diff row click."""
    from neurontrace.app.compare.callbacks import on_compare, on_progress, on_search_pair, row_pick
    from neurontrace.app.compare.layout import compare_page
    from neurontrace.app.compare.model import CompareState
    from neurontrace.app.server import ViewerState

    other = build_trace(args.events * 3 // 4, seed=1)
    state = CompareState(ViewerState("A"), ViewerState("B"))
    index_s = {}
    for side, tr in zip(("a", "b"), (trace, other), strict=True):
        t0 = time.perf_counter()
        state.sides[side].use(tr)
        index_s[side] = time.perf_counter() - t0
    viewport = {"w": args.viewport, "h": 1000}
    page_s, _page = best_of(1, lambda: compare_page(state))
    draw_s, out = best_of(1, lambda: on_compare(state, None, None, None, viewport))
    first = index_s["a"] + index_s["b"] + page_s + draw_s
    after_b = index_s["b"] + page_s + draw_s
    print(f"\ntwo runs side by side: {trace.num_events:,} + {other.num_events:,} events")
    print(f"both loaded -> page showing both timelines: {first:.2f} s = both indexes {index_s['a']:.2f} + "
          f"{index_s['b']:.2f} s + page {page_s:.2f} s + both timelines {draw_s:.2f} s, {payload(out) / 1e6:.2f} MB "
          f"(target <= {TARGET_FIRST_RENDER_S:.0f} s): {'PASS' if first <= TARGET_FIRST_RENDER_S else 'FAIL'}")
    # The server loads and indexes A, then loads and indexes B: when B is loaded, A's index is already built.
    print(f"  in the server's order (A indexed before B is read), B loaded -> page: {after_b:.2f} s = B's index + "
          f"page + both timelines (target <= {TARGET_FIRST_RENDER_S:.0f} s): "
          f"{'PASS' if after_b <= TARGET_FIRST_RENDER_S else 'FAIL'}")
    span_ms = state.sides["a"].model.index.span_ns / 1e6 if state.sides["a"].model else 1.0
    early = {"side": "b", "relayout": {"xaxis.range[0]": span_ms * 0.4, "xaxis.range[1]": span_ms * 0.41}, "at": 1}
    secs, res = best_of(args.repeat, lambda: on_compare(state, "nt-cmp-zoom", out[4], None, viewport, zoom=early))
    print(f"a zoom before the analyses (both timelines redrawn): {secs * 1e3:.1f} ms, {payload(res) / 1e3:.1f} KB")
    early_t, early_b = secs, payload(res)
    # What the page then fills in, in the background: both analyses, the diff, then the poll that shows
    # them (cause strips, alignment, diff table) and the redraw at the analysed alignment.
    t0 = time.perf_counter()
    for side in ("a", "b"):
        state.sides[side].analyse()
    analyse_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state.compare()
    diff_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    filled = on_progress(state, "analysing-a", None)
    out = on_compare(state, "nt-cmp-stage", out[4], None, viewport)
    fill_s = time.perf_counter() - t0
    complete = first + analyse_s + diff_s + fill_s
    print(f"loaded -> diff table complete: {complete:.2f} s = the above + analyses {analyse_s:.2f} s + diff "
          f"{diff_s:.2f} s + strips, table and redraw {fill_s:.2f} s ({len(state.rows())} changed ops listed, "
          f"{payload(filled) / 1e3:.0f} KB; the browser asks every 0.4 s; no target: the page works meanwhile)")
    view = out[4]
    worst_t, worst_b = early_t, early_b
    print(f"{'zoom':>12} {'side':>5} {'window':>12} {'server ms':>10} {'payload KB':>11}")
    zoom = 1.0
    while span_ms / zoom >= 0.005:
        width = span_ms / zoom
        for side in ("a", "b"):
            relayout = {"xaxis.range[0]": span_ms * 0.3, "xaxis.range[1]": span_ms * 0.3 + width}

            def call(side: str = side, relayout: Any = relayout) -> Any:
                return on_compare(state, "nt-cmp-zoom", view, None, viewport,
                                  zoom={"side": side, "relayout": relayout, "at": 1})

            secs, res = best_of(args.repeat, call)
            size = payload(res)
            worst_t, worst_b = max(worst_t, secs), max(worst_b, size)
            print(f"{'1/' + format(zoom, ',.0f'):>12} {side:>5} {_dur(width * 1e6):>12} {secs * 1e3:>10.1f} "
                  f"{size / 1e3:>11.1f}")
        zoom *= 10
    if not state.rows():
        raise SystemExit("the diff lists no changed op: nothing to click")
    pick = row_pick({"type": "nt-cmp-row", "index": 0})
    secs, res = best_of(args.repeat, lambda: on_compare(state, "nt-cmp-pick", view, None, viewport, pick=pick))
    worst_t, worst_b = max(worst_t, secs), max(worst_b, payload(res))
    print(f"click a diff row ({res[5]} outlined in both): {secs * 1e3:.1f} ms, {payload(res) / 1e3:.1f} KB")
    secs, res = best_of(args.repeat, lambda: on_search_pair(state, "ncclDevKernel", True, None, view, "both"))
    worst_t, worst_b = max(worst_t, secs), max(worst_b, payload(res))
    print(f"search both runs and Enter (select the next match): {secs * 1e3:.1f} ms, {payload(res) / 1e3:.1f} KB")
    print(f"two runs: worst callback {worst_t * 1e3:.0f} ms (target <= {TARGET_CALLBACK_S * 1e3:.0f} ms): "
          f"{'PASS' if worst_t <= TARGET_CALLBACK_S else 'FAIL'}; worst payload {worst_b / 1e6:.2f} MB (target <= "
          f"{TARGET_PAYLOAD_BYTES / 1e6:.0f} MB): {'PASS' if worst_b <= TARGET_PAYLOAD_BYTES else 'FAIL'}")
    return first, complete, worst_t, worst_b


def run_ops(model: ViewModel, args: argparse.Namespace, title: str) -> tuple[float, int]:
    """The ops panel (``neurontrace/app/roofline.py``): its index build, its callback when the tab opens (the analysis
    window) and after zooms at every level (each a new window: nothing cached), a click on a row, and the
    timeline redrawn with that op's kernels outlined; print and return the worst server time and payload."""
    from neurontrace.analysis.ops import OpsIndex
    from neurontrace.app import roofline

    assert model.analysis is not None
    d = model.analysis.diagnosis.devices[0]
    t0 = time.perf_counter()
    OpsIndex(model.trace, device=d.device, rank=d.rank)
    print(f"\nops panel, {title}: index of {d.device} built in {time.perf_counter() - t0:.2f} s (background, "
          "part of the analysis)")
    span = model.index.span_ns
    opened = {"t0": 0, "t1": span, "auto": True}
    device = roofline.device_options(model)[1]

    def panel(view: Any) -> Any:
        model._ops_views.clear()  # every zoom asks for a new window: time it uncached
        return roofline.on_ops(model, "roofline", view, device, "view", None, None, None, None)

    worst_t, worst_b = best_of(args.repeat, lambda: panel(opened))[0], 0
    worst_b = payload(panel(opened))
    print(f"{'zoom':>12} {'window':>12} {'server ms':>10} {'payload KB':>11}  what was shown")
    print(f"{'tab opened':>12} {'analysis':>12} {worst_t * 1e3:>10.1f} {worst_b / 1e3:>11.1f}")
    zoom = 1.0
    while span / zoom >= 5_000:
        width = span / zoom
        view = {"t0": int(span * 0.4), "t1": int(span * 0.4 + width), "auto": False}
        secs, out = best_of(args.repeat, lambda view=view: panel(view))
        size = payload(out)
        worst_t, worst_b = max(worst_t, secs), max(worst_b, size)
        print(f"{'1/' + format(zoom, ',.0f'):>12} {_dur(width):>12} {secs * 1e3:>10.1f} {size / 1e3:>11.1f}  "
              f"{str(out[3])[:90]}")
        zoom *= 10
    pick = roofline.on_pick(model, {"type": "nt-roof-row", "table": "roofline", "index": 0}, None, opened, device,
                            "view", None)
    secs, out = best_of(args.repeat, lambda: roofline.on_pick(model, {"type": "nt-roof-row", "table": "roofline",
                                                                      "index": 0}, None, opened, device, "view", None))
    worst_t = max(worst_t, secs)
    print(f"click a row ({pick['op']} / {pick['kernel_class']}): {secs * 1e3:.1f} ms")
    for label, window in (("whole trace", (0, span)), ("1/100", (int(span * 0.4), int(span * 0.41)))):
        secs, out = best_of(args.repeat, lambda window=window: callbacks.on_timeline(
            model, "nt-goto", None, {"t0": window[0], "t1": window[1], "nonce": 1}, None, highlight=pick,
            viewport={"w": args.viewport, "h": 1000}))
        marked = next((t for t in out[0]["data"] if t["name"] == "marked"), {"x": []})
        size = payload(out)
        worst_t, worst_b = max(worst_t, secs), max(worst_b, size)
        print(f"timeline with the op's kernels outlined ({label}, {marked['x'].count(None)} outlines): "
              f"{secs * 1e3:.1f} ms, {size / 1e3:.1f} KB")
    print(f"worst: {worst_t * 1e3:.0f} ms, {worst_b / 1e6:.2f} MB")
    return worst_t, worst_b


def run_views(model: ViewModel, args: argparse.Namespace, title: str, *, expanded: list[str] | None,
              python: bool = False) -> tuple[float, int]:
    """Zoom from the whole trace down to microseconds (and pan at each level); print and return the
    worst server time and payload."""
    span = model.index.span_ns
    view = {"t0": 0, "t1": span}
    device = next((d.device for d in model.analysis.diagnosis.devices), "cpu") if model.analysis else "cpu"
    selected = int(model.analysis.top_ops[0]["event_id"]) if model.analysis and model.analysis.top_ops else None
    rows = []
    worst_t, worst_b = 0.0, 0
    zoom = 1.0
    rng = np.random.default_rng(1)
    while span / zoom >= 5_000:
        width = span / zoom
        centre = span * (0.3 + 0.4 * rng.random())
        for action, start in (("zoom", centre - width / 2), ("pan", centre - width / 2 + width * 0.3)):
            relayout = {"xaxis.range[0]": start / 1e6, "xaxis.range[1]": (start + width) / 1e6}
            extra: dict[str, Any] = {"expanded": expanded, "depth": 10, "viewport": {"w": args.viewport, "h": 1000},
                                     "python": ["python"] if python else []}
            if action == "pan":  # the common interactive state: a cause highlighted, an event selected
                extra.update(highlight={"device": device, "cause": "host_overhead"}, selected=selected)

            def call(relayout: Any = relayout, extra: Any = extra) -> Any:
                return callbacks.on_timeline(model, "nt-timeline", relayout, None, view, **extra)

            secs, out = best_of(args.repeat, call)
            size = payload(out)
            worst_t, worst_b = max(worst_t, secs), max(worst_b, size)
            rows.append((f"1/{zoom:,.0f}", action, width, out[2], secs, size))
        zoom *= 10
    print(f"\n{title}")
    print(f"{'zoom':>12} {'action':>6} {'window':>12} {'server ms':>10} {'payload KB':>11}  what was sent")
    for z, action, width, status, secs, size in rows:
        print(f"{z:>12} {action:>6} {_dur(width):>12} {secs * 1e3:>10.1f} {size / 1e3:>11.1f}  {status}")
    print(f"worst: {worst_t * 1e3:.0f} ms, {worst_b / 1e6:.2f} MB")
    return worst_t, worst_b


def _dur(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e3:.1f} µs"


if __name__ == "__main__":
    main()
