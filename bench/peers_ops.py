"""neurontrace's op efficiency, overlap and launch statistics beside Holistic Trace Analysis (HTA) on real traces.

    python bench/peers_ops.py --hta-python VENV/bin/python [--corpus ../shared/corpus/kineto]

HTA runs in its own virtual environment (it pins its own pandas), e.g.
``python3 -m venv hta && hta/bin/pip install holistictraceanalysis==0.5.0 'pandas<3'``; this script
calls that interpreter with a small driver and reads its JSON. Per trace it prints:

- neurontrace's op-efficiency classes (time share, % of the roofline bound) and the top GEMM/attention rows;
- communication hidden by compute: neurontrace over the whole trace, and over the span HTA analyses (it drops
  the last ProfilerStep by default), vs HTA's ``get_comm_comp_overlap``;
- launch delay: neurontrace's (kernel start - call start), the same ops measured HTA's way (kernel start -
  call end, clipped at 0), and HTA's ``get_cuda_kernel_launch_stats``;
- queue depth: neurontrace's (launched, not finished) vs HTA's ``get_queue_length_summary`` (launched, not started).

HTA has no FLOP or roofline analysis. With ``--tracelens-python`` (and ``--tracelens-src`` for a source checkout
put on PYTHONPATH, e.g. one fetched from AMD-AGI/TraceLens with only pandas, tqdm, orjson, tabulate, PyYAML and
openpyxl installed beside it), TraceLens's ``TreePerfAnalyzer.build_df_unified_perf_table`` GFLOPs and kernel
time per op are printed beside neurontrace's for the traces that record shapes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import neurontrace
from neurontrace.analysis.driving import driving_host_events
from neurontrace.analysis.launch import LAUNCHED, launch_calls, launch_stats
from neurontrace.analysis.ops import op_table
from neurontrace.analysis.overlap import overlap
from neurontrace.columns import isin, keep, select

TRACES = (
    "HolisticTraceAnalysis/tests/data/nccl_parser_config/nccl_data.json.gz",
    "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "HolisticTraceAnalysis/tests/data/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz",
)

HTA_DRIVER = r"""
import json, sys, logging
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
rank = sorted(a.t.traces)[0]
out = {"rank": int(rank)}
try:
    ov = a.get_comm_comp_overlap(visualize=False)
    out["overlap_pct"] = float(ov["comp_comm_overlap_pctg"].iloc[0])
except Exception as e:
    out["overlap_error"] = repr(e)
try:
    st = a.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False)[rank]
    d = st["launch_delay"]
    out["launch"] = {"n": int(len(d)), "median": float(d.median()), "p90": float(d.quantile(0.9)), "max": float(d.max())}
except Exception as e:
    out["launch_error"] = repr(e)
try:
    q = a.get_queue_length_summary(ranks=[rank])
    out["queue_max"] = {str(k[1]): float(v) for k, v in q[("queue_length", "max")].items()}
except Exception as e:
    out["queue_error"] = repr(e)
print(json.dumps(out))
"""


TRACELENS_DRIVER = r"""
import json, sys, warnings, logging, collections
warnings.filterwarnings("ignore"); logging.disable(logging.CRITICAL)
from TraceLens import TreePerfAnalyzer
df = TreePerfAnalyzer.from_file(sys.argv[1]).build_df_unified_perf_table()
agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
for _, r in df.iterrows():
    if r.get("has_perf_model") and r.get("GFLOPS") == r.get("GFLOPS"):
        a = agg[r["name"]]; a[0] += 1; a[1] += float(r["GFLOPS"]); a[2] += float(r.get("Kernel Time (\u00b5s)", 0.0))
print(json.dumps({k: {"ops": v[0], "gflop": v[1], "kernel_us": v[2]} for k, v in agg.items()}))
"""


def tracelens(python: str, src: str | None, trace: Path) -> dict[str, Any]:
    env = {**os.environ, **({"PYTHONPATH": src} if src else {})}
    run = subprocess.run([python, "-c", TRACELENS_DRIVER, str(trace)], capture_output=True, text=True, timeout=900,
                         check=False, env=env)
    if run.returncode != 0:
        return {"error": run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit {run.returncode}"}
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def hta(python: str, trace: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(trace, Path(d) / trace.name)  # HTA reads a directory of rank traces
        run = subprocess.run([python, "-c", HTA_DRIVER, d], capture_output=True, text=True, timeout=600,
                             check=False)
    if run.returncode != 0:
        return {"error": run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit {run.returncode}"}
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def ours(trace_path: Path) -> dict[str, Any]:
    t = neurontrace.load(trace_path)
    rep = op_table(t)
    out: dict[str, Any] = {"ops": rep}
    devices = sorted({d for d in t.device_events["device"].cast("string").to_pylist() if d})
    dev = select(t.device_events, "device", devices[0])
    host = driving_host_events(t, dev)
    ts = dev["ts_ns"].to_numpy()
    whole = (int(ts.min()), int((ts + dev["dur_ns"].to_numpy()).max()))  # HTA looks at the whole trace
    out["device"] = devices[0]
    out["overlap"] = overlap(dev, whole)
    # HTA drops the last ProfilerStep by default (include_last_profiler_step=False): the same span, for comparison.
    steps = select(host, "category", "step")["ts_ns"].to_numpy()
    out["overlap_hta_span"] = overlap(dev, (whole[0], int(steps.max()))) if len(steps) > 1 else None
    out["launch"] = launch_stats(host, t.flows, dev, whole)
    # The same ops, HTA's way: kernel start - call end, clipped at 0.
    dev = keep(dev, isin(dev["category"], LAUNCHED))
    ts = dev["ts_ns"].to_numpy()
    call = launch_calls(host, t.flows, dev)
    ok = call >= 0
    hta_way = np.maximum(ts[ok] - (host["ts_ns"].to_numpy()[call[ok]] + host["dur_ns"].to_numpy()[call[ok]]), 0)
    out["launch_hta_way"] = {"n": int(ok.sum()), "median": float(np.median(hta_way)) if len(hta_way) else None,
                             "p90": float(np.quantile(hta_way, 0.9)) if len(hta_way) else None,
                             "max": float(hta_way.max()) if len(hta_way) else None}
    return out


def _us(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.1f} µs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hta-python", required=True, help="the python of a venv with holistictraceanalysis installed")
    ap.add_argument("--tracelens-python", help="the python of a venv that can import TraceLens (optional)")
    ap.add_argument("--tracelens-src", help="a TraceLens source checkout to put on PYTHONPATH (optional)")
    ap.add_argument("--corpus", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "corpus" / "kineto")
    args = ap.parse_args()
    for rel in TRACES:
        path = args.corpus / rel
        if not path.is_file():
            print(f"skip {rel}: not in the corpus")
            continue
        n, h = ours(path), hta(args.hta_python, path)
        print(f"\n== {rel}  ({n['device']})")
        rep = n["ops"]
        dp = rep.devices.get(n["device"])
        print(f"  device peak: {dp.peak.device if dp and dp.peak else 'unknown'}"
              f"{'' if not dp or dp.peak else f' ({dp.name!r})'}")
        classes = "; ".join(f"{c['op_class']} {100 * c['share']:.1f}%"
                            + (f" @ {c['pct_of_peak']:.1f}% of peak" if c["pct_of_peak"] is not None else "")
                            for c in rep.classes(n["device"]))
        print(f"  neurontrace op classes (share of kernel time): {classes}")
        for r in [r for r in rep.rows if r.op_class in ("gemm", "attention")][:3]:
            print(f"    {r.op} / {r.kernel_class}: {r.tflops_per_s:.1f} TFLOP/s, {r.tb_per_s:.3f} TB/s, "
                  f"{r.pct_of_peak if r.pct_of_peak is None else round(r.pct_of_peak, 1)}% of peak, {r.bound} bound")
        print("  HTA: no FLOP/roofline analysis")
        if args.tracelens_python and not all(r.flops is None for r in rep.rows):
            tl = tracelens(args.tracelens_python, args.tracelens_src, path)
            if "error" in tl:
                print(f"  TraceLens: {tl['error']}")
            for name, v in sorted(tl.items(), key=lambda kv: -kv[1]["kernel_us"])[:6] if "error" not in tl else []:
                print(f"  TraceLens {name}: {v['ops']} ops, {v['gflop']:,.2f} GFLOP in {v['kernel_us']:,.1f} µs = "
                      f"{v['gflop'] / v['kernel_us'] * 1e3 if v['kernel_us'] else 0:,.1f} TFLOP/s")
            mine: dict[str, list[float]] = {}
            for r in rep.rows:
                if r.flops is not None:
                    m = mine.setdefault(r.op, [0, 0.0, 0.0])
                    m[0] += r.ops
                    m[1] += r.flops / 1e9
                    m[2] += r.device_ns / 1e3
            for name, (ops_n, gflop, us) in sorted(mine.items(), key=lambda kv: -kv[1][2])[:6]:
                print(f"  neurontrace {name}: {ops_n:g} ops, {gflop:,.2f} GFLOP in {us:,.1f} µs = "
                      f"{gflop / us * 1e3 if us else 0:,.1f} TFLOP/s")
        o = n["overlap"]
        ours_pct = "-" if o.collectives_hidden is None else f"{100 * o.collectives_hidden:.2f}%"
        print(f"  comm hidden by compute: neurontrace {ours_pct} of {_us(o.collectives_total_ns)}; "
              f"HTA {h.get('overlap_pct', h.get('overlap_error', h.get('error')))}"
              f"{'%' if 'overlap_pct' in h else ''}")
        hs = n["overlap_hta_span"]
        if hs is not None and hs.collectives_hidden is not None:
            print(f"  comm hidden by compute, neurontrace over HTA's span (before the last step): "
                  f"{100 * hs.collectives_hidden:.2f}% of {_us(hs.collectives_total_ns)}")
        lv = n["launch"]
        print(f"  launch delay (call start -> kernel start), neurontrace: n={lv.kernels} median "
              f"{_us(lv.delay_ns_median)} p90 {_us(lv.delay_ns_p90)} max {_us(lv.delay_ns_max)}; "
              f"median call {_us(lv.call_ns_median)}")
        hw = n["launch_hta_way"]
        print(f"  launch delay HTA's way (call end -> kernel start, >= 0), neurontrace's pairs: n={hw['n']} "
              f"median {_us(hw['median'])} p90 {_us(hw['p90'])} max {_us(hw['max'])}")
        hl = h.get("launch")
        if hl:  # HTA reports µs
            print(f"  launch delay, HTA: n={hl['n']} median {hl['median']:,.1f} µs p90 {hl['p90']:,.1f} µs "
                  f"max {hl['max']:,.1f} µs")
        else:
            print(f"  launch delay, HTA: {h.get('launch_error', h.get('error'))}")
        streams = {s["stream"]: s["queue_depth_max"] for s in lv.streams}
        print(f"  queue depth max per stream, neurontrace (launched, not finished): {streams}; device {lv.queue_depth_max}")
        print(f"  queue length max per stream, HTA (launched, not started): "
              f"{h.get('queue_max', h.get('queue_error', h.get('error')))}")


if __name__ == "__main__":
    sys.exit(main())
