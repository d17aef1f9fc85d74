"""Text report of the per-op efficiency table (``neurontrace ops``). Rendering only: numbers come from analysis/ops.py."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from neurontrace.analysis.ops import OpsReport
from neurontrace.units import duration


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def render(report: OpsReport, console: Console, *, top: int = 30) -> None:
    if not report.rows:
        console.print("no device kernels and no CPU ops with a FLOP formula in this trace")
    for device, dp in report.devices.items():
        rows = [r for r in report.rows if r.device == device]
        if dp.peak is not None:
            head = f"[bold]{device}[/]: {dp.peak.device} — peak figures from {dp.peak.source}"
        elif dp.name:
            head = f"[bold]{device}[/]: {dp.name} — unknown device, no peak: % of peak is not shown"
        else:
            head = f"[bold]{device}[/]: the trace does not name this device — % of peak is not shown"
        console.print(head)
        t = Table(header_style="bold", box=None, pad_edge=False)
        ranked = any(r.rank is not None for r in rows)
        if ranked:
            t.add_column("rank", justify="right")
        for col in ("op", "kernel class", "kernels", "time", "GFLOP", "MB", "TFLOP/s", "TB/s", "FLOP/B",
                    "% peak", "bound"):
            t.add_column(col, justify="left" if col in ("op", "kernel class", "bound") else "right",
                         overflow="fold")
        for r in rows[:top]:
            t.add_row(*([str(r.rank)] if ranked else []), r.op, r.kernel_class, str(r.kernels), duration(r.device_ns),
                      _num(r.flops / 1e9 if r.flops is not None else None, ",.2f"),
                      _num(r.bytes / 1e6 if r.bytes is not None else None, ",.2f"),
                      _num(r.tflops_per_s, ",.2f"), _num(r.tb_per_s, ".3f"), _num(r.intensity, ",.1f"),
                      _num(r.pct_of_peak, ".1f"), r.bound or "-")
        console.print(t)
        if len(rows) > top:
            console.print(f"  ... {len(rows) - top} more rows (--top N, or --json for all)")
        classes = "; ".join(f"{c['op_class']} {100 * c['share']:.1f}%"
                            + (f" at {c['pct_of_peak']:.1f}% of peak" if c["pct_of_peak"] is not None else "")
                            for c in report.classes(device))
        console.print(f"  by class (share of kernel time; the classes of diagnose's compute.<class>): {classes}")
    if report.links.get("unlinked"):
        total = sum(report.links.values())
        console.print(f"{report.links['unlinked']} of {total} kernels have no launching CPU op (no launch call in "
                      "the trace, or no op around it): listed as (no launching op)")
    for w in report.warnings():
        console.print(f"[yellow]warning[/]: {escape(w)}")
    if report.skipped:
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(report.skipped.items()))
        console.print(f"[yellow]ops with a formula but no estimate[/]: {why} "
                      "(profile with record_shapes=True to record shapes)")
