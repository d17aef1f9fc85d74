"""neurontrace's breakdown beside Holistic Trace Analysis' temporal breakdown, per corpus trace and device.

HTA (holistictraceanalysis 0.5.0) needs pandas<3, so it runs in its own virtual environment::

    python3 -m venv HTA_VENV && HTA_VENV/bin/pip install holistictraceanalysis==0.5.0 'pandas<3'
    python bench/peers.py --hta-python HTA_VENV/bin/python [--corpus ../shared/corpus/kineto]

For each trace the HTA columns are ``get_temporal_breakdown()``: over its span (first to last GPU kernel, the
last ProfilerStep excluded), compute = union of computation kernels, non-compute = the rest of the kernel union
(communication, memory), idle = span minus the union. neurontrace is shown twice: over its own default window
(docs/diagnose.md, "Window"; rule named) and over the same kind of span as HTA (first to last device work,
``--window abs:``), as compute / collectives + data movement / not busy (host_fallback + host_overhead + idle).
The last column explains what differs: the window, the categories (kernels neurontrace counts as collectives or
copies that HTA counts as compute, and the reverse), and HTA's µs rounding (it keeps µs; neurontrace exact ns).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

HTA_SCRIPT = r"""
import json, sys, logging
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
try:
    df = TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)
    print(json.dumps({"ranks": df.to_dict(orient="records")}, default=str))
except Exception as exc:  # HTA refuses some traces: say why
    print(json.dumps({"error": f"{type(exc).__name__}: {str(exc)[:160]}"}))
"""


def run_hta(python: str, trace: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(trace, Path(tmp) / trace.name)
        res = subprocess.run([python, "-c", HTA_SCRIPT, tmp], capture_output=True, text=True, timeout=600,
                             check=False)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"error": (res.stderr.strip().splitlines() or ["no output"])[-1][:160]}
    out: dict[str, Any] = json.loads(lines[-1])
    return out


def _shares(d: Any) -> tuple[float, float, float]:
    w = d.window_ns or 1
    c = d.causes_ns
    busy_other = c["collectives"] + c["data_movement"]
    return 100 * c["compute"] / w, 100 * busy_other / w, 100 * (w - c["compute"] - busy_other) / w


def _device_span(trace: Any, device: str, rank: int | None) -> tuple[int, int] | None:
    from neurontrace.analysis.attribution import device_rows
    from neurontrace.analysis.work import DEVICE_WORK, device_categories

    dev = device_rows(trace, device, rank)
    work = np.isin(device_categories(dev), list(DEVICE_WORK))
    if not work.any():
        return None
    s = dev["ts_ns"].to_numpy()[work]
    return int(s.min()), int((s + dev["dur_ns"].to_numpy()[work]).max())


def _work_in(trace: Any, device: str, rank: int | None, span: tuple[int, int]) -> int:
    from neurontrace.analysis.attribution import device_rows
    from neurontrace.analysis.work import DEVICE_WORK, device_categories

    dev = device_rows(trace, device, rank)
    s = dev["ts_ns"].to_numpy()
    return int((np.isin(device_categories(dev), list(DEVICE_WORK)) & (s >= span[0]) & (s < span[1])).sum())


def _category_note(trace: Any, device: str, rank: int | None) -> str:
    """Kernels whose category neurontrace's vocabulary decides differently from HTA's name test."""
    import re

    from neurontrace.analysis.attribution import device_rows
    from neurontrace.analysis.work import device_categories

    hta_comm = re.compile(r"(^nccl)|(ncclKernel)|(ncclDevKernel)|(^rccl)|(^hccl)|(^c10d::)")  # HTA's own pattern
    dev = device_rows(trace, device, rank)
    cats = device_categories(dev)
    names = dev["name"].cast("string").to_pylist()
    raw = dev["category"].cast("string").to_pylist()
    moved: dict[str, int] = {}
    for name, ours, parsed in zip(names, cats, raw, strict=True):
        if parsed == "compute" and ours != "compute" and not hta_comm.search(name or ""):
            moved[f"{name} -> {ours}"] = moved.get(f"{name} -> {ours}", 0) + 1
    return "; ".join(f"{k} ({n})" for k, n in sorted(moved.items(), key=lambda kv: -kv[1])[:3])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hta-python", required=True, help="python of a venv with holistictraceanalysis==0.5.0")
    ap.add_argument("--corpus", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "corpus" / "kineto")
    args = ap.parse_args()
    import neurontrace
    from neurontrace.analysis.diagnose import diagnose

    files = sorted(p for p in args.corpus.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))
    if not files:
        print(f"no traces under {args.corpus}", file=sys.stderr)
        return 2
    print("shares in % as compute / non-compute (collectives + copies) / not busy")
    for path in files:
        rel = path.relative_to(args.corpus).as_posix()
        hta = run_hta(args.hta_python, path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trace = neurontrace.load(path)
            diag = diagnose(trace)
        print(f"\n{rel}")
        if "error" in hta:
            print(f"  HTA: refused ({hta['error']})")
        hta_rows = {str(r.get("rank")): r for r in hta.get("ranks", [])}
        for d in diag.devices:
            c, n, i = _shares(d)
            line = f"  {d.device:<8} nt {d.window_rule:<17} {d.window_ns / 1e6:>10.3f} ms  {c:5.1f} / {n:5.1f} / {i:5.1f}"
            span = _device_span(trace, d.device, d.rank) if d.device != "cpu" else None
            if span is not None:
                (same,) = [x for x in diagnose(trace, window=span).devices if (x.device, x.rank) == (d.device, d.rank)]
                sc, sn, si = _shares(same)
                line += f" | nt device span {same.window_ns / 1e6:>10.3f} ms  {sc:5.1f} / {sn:5.1f} / {si:5.1f}"
            r = hta_rows.get(str(d.rank if d.rank is not None else 0)) or (next(iter(hta_rows.values()))
                                                                           if len(hta_rows) == 1 else None)
            if r is not None:
                kt = float(r["kernel_time(us)"]) or 1.0
                hc, hn, hi = (100 * float(r[k]) / kt for k in ("compute_time(us)", "non_compute_time(us)",
                                                                "idle_time(us)"))
                line += f" | HTA {kt / 1e3:>10.3f} ms  {hc:5.1f} / {hn:5.1f} / {hi:5.1f}"
                why = []
                if span is not None:
                    dw = (span[1] - span[0]) / 1e3 - kt
                    if abs(dw) >= 1:
                        why.append(f"window: HTA's span differs by {-dw / 1e3:+.3f} ms from the device span (HTA "
                                   "drops the last ProfilerStep's events and counts GPU user annotations as kernels)")
                    moved = _category_note(trace, d.device, d.rank)
                    if moved:
                        why.append(f"category: {moved}")
                    if abs(hc - sc) < 0.05 and abs(hn - sn) < 0.05 and not why:
                        why.append("same within 0.05 points")
                    elif not why:
                        n = _work_in(trace, d.device, d.rank, span)
                        why.append(f"µs rounding: HTA keeps whole µs, so each of the {n} device ops can lose up "
                                   f"to 1 µs (at most {100 * n * 1000 / max(span[1] - span[0], 1):.1f} points of "
                                   "the span); neurontrace keeps exact ns")
                if d.window_rule != "activity":
                    why.append(f"neurontrace's default window is rule {d.window_rule} ({d.window_source})")
                line += "\n      why: " + "; ".join(why)
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
