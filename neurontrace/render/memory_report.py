"""Human report of the memory figures (``neurontrace memory``). Rendering only: numbers come from analysis/."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from neurontrace import units
from neurontrace.analysis.contract import Finding
from neurontrace.analysis.memory import DeviceMemory, LiveGroup, Memory
from neurontrace.render.report import SEVERITY_STYLE
from neurontrace.trace import Trace

TOP = 10


def _groups(title: str, groups: list[LiveGroup]) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold", box=None, pad_edge=False)
    for col, just in (("bytes", "right"), ("blocks", "right"), ("largest", "right"), ("op", "left"),
                      ("source", "left")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for g in groups[:TOP]:
        t.add_row(units.size(g.bytes), str(g.count), units.size(g.largest_bytes), escape(g.op or "-"),
                  escape(g.source or "-"))
    return t


def _device(d: DeviceMemory, console: Console) -> None:
    who = d.device if d.rank is None else f"rank {d.rank} {d.device}"
    pid = f" (process {d.pid})" if d.pid else ""
    console.print(f"[bold]{escape(who)}[/]{escape(pid)}: {d.events} memory events")
    cap = f" of {units.size(d.capacity_bytes)} ({escape(d.capacity_source or '')})" if d.capacity_bytes else ""
    rel = "" if d.totals_recorded else " [yellow](no totals recorded: the running sum of Bytes since the trace began)[/]"
    console.print(f"  peak allocated {units.size(d.peak_allocated_bytes)}, peak reserved "
                  f"{units.size(d.peak_reserved_bytes)}{cap}{rel}")
    if d.live_at_peak:
        console.print(_groups("  live at the peak", d.live_at_peak))
    elif d.usage_samples:
        console.print("  usage samples (not allocations): what was in use is by category where recorded")
    elif not d.addresses_recorded:
        console.print("  live at the peak: unknown (the events carry no addresses, so blocks cannot be followed)")
    top = sorted(d.categories_at_peak.items(), key=lambda kv: -kv[1])
    if top:
        console.print("  in use at the peak: " + ", ".join(f"{escape(k)} {units.size(v)}" for k, v in top))
    if d.live_at_peak_before_trace_bytes:
        console.print(f"  and {units.size(d.live_at_peak_before_trace_bytes)} allocated before the trace began")
    if d.steps:
        t = Table(title="  steps", title_justify="left", header_style="bold", box=None, pad_edge=False)
        for col in ("step", "peak", "allocated", "freed", "at end", "largest temporary"):
            t.add_column(col, justify="left" if col == "largest temporary" else "right")
        for s in d.steps:
            tmp = s.largest_temporary
            t.add_row(str(s.step), units.size(s.peak_allocated_bytes), units.size(s.allocated_bytes),
                      units.size(s.freed_bytes), units.size(s.end_allocated_bytes),
                      escape(f"{units.size(tmp.bytes)} {tmp.label()}") if tmp else "-")
        console.print(t)
        console.print(f"  growth per step: {units.size(d.growth_bytes_per_step)}")
    if d.never_freed:
        console.print(_groups("  never freed in the trace", d.never_freed))
    for o in d.ooms:
        asked = LiveGroup(o.op, o.source, 0, 0, 0).label()
        console.print(f"  [bold red]out of memory[/]: {units.size(o.requested_bytes)} asked at {escape(asked)} "
                      f"with {units.size(o.allocated_bytes)} allocated, {units.size(o.reserved_bytes)} reserved")
        if o.live:
            console.print(_groups("    live then", o.live))


def render(m: Memory, findings: list[Finding], segments: list[dict[str, Any]], trace: Trace,
           console: Console) -> None:
    if trace.meta("synthetic", False):
        console.print("[bold red]SYNTHETIC INPUT[/]: these figures come from a generated profile, not a measurement.")
    for d in m.devices:
        _device(d, console)
    for n in m.neuron:
        for line in n.text():
            console.print(escape(line))
    for s in segments:
        console.print(f"[bold]{escape(str(s['device']))}[/] when the snapshot was taken: {s['segments']} segments "
                      f"reserving {units.size(s['reserved_bytes'])}, {units.size(s['allocated_bytes'])} allocated, "
                      f"{s['free_blocks']} free blocks (largest {units.size(s['largest_free_block_bytes'])})")
    for a in trace.accounting:
        for w in a.warnings:
            console.print(f"[yellow]warning[/]: {escape(w)}")
    if not findings:
        console.print("[green]no memory findings[/]: nothing above the thresholds of docs/memory.md")
    for f in findings:
        console.print(f"[{SEVERITY_STYLE[f.severity]}]{f.severity.upper()}[/] {escape(f.title)}\n"
                      f"    evidence: {escape(f.evidence)}\n    action:   {escape(f.advice)}")
