"""Human report of a Diagnosis (rich text). Rendering only: the numbers come from analysis/."""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from neurontrace import units
from neurontrace.analysis import registry
from neurontrace.analysis.attribution import DeviceAttribution
from neurontrace.analysis.diagnose import Diagnosis
from neurontrace.analysis.step_stats import MEAN_PER_STEP, one_run_note
from neurontrace.causes import CAUSES, COLORS

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "blue"}
BAR_WIDTH = 60


def _ms(ns: int | None) -> str:
    return units.duration(ns)  # scaled per value: µs-long Neuron executions never read "0.000 ms"


def cause_bar(d: DeviceAttribution, width: int = BAR_WIDTH) -> Text:
    """The six causes as one stacked bar, widths proportional to time."""
    bar = Text()
    total = d.window_ns or 1
    used = 0
    for i, cause in enumerate(CAUSES):
        cells = width - used if i == len(CAUSES) - 1 else round(width * d.causes_ns[cause] / total)
        bar.append("█" * max(0, cells), style=COLORS[cause])
        used += max(0, cells)
    return bar


def _offset(ns: int) -> str:
    return ("-" if ns < 0 else "+") + _ms(abs(ns))


def _device_panel(d: DeviceAttribution, origin: int, diag: Diagnosis) -> Panel:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("cause")
    table.add_column("time", justify="right")
    table.add_column("share", justify="right")
    table.add_column("largest parts", overflow="fold")
    for cause in CAUSES:
        parts = sorted(((k.split(".", 1)[1], v) for k, v in d.detail_ns.items() if k.startswith(cause + ".")),
                       key=lambda kv: -kv[1])[:3]
        table.add_row(Text(cause, style=COLORS[cause]), _ms(d.causes_ns[cause]), f"{100 * d.fraction(cause):.1f}%",
                      ", ".join(f"{k} {_ms(v)}" for k, v in parts))
    stalls = Text("top stalls\n", style="bold")
    for s in d.top_stalls[:5]:
        stalls.append(f"  {_ms(s.dur_ns):>12}  {s.cause}.{s.detail}", style=COLORS[s.cause])
        stalls.append(f" at {_offset(s.start_ns - origin)}: {s.evidence[0] if s.evidence else '-'}")
        stalls.append(f"\n{'':16}source: {s.source or '-'}\n")
    head = Text(f"window {_ms(d.window_ns)} ({d.window_source}), {_offset(d.window[0] - origin)} to "
                f"{_offset(d.window[1] - origin)}")
    if d.window_steps:
        mean = d.window_ns / d.window_steps
        head.append(f"; {MEAN_PER_STEP.label} {_ms(round(mean))} ({MEAN_PER_STEP.meaning})")
        phases = diag.sections.get("phases")
        note = None if phases is None else one_run_note(mean, phases.steady_median_ns, phases.first_step_ns)
        if note:
            head.append(f"\n{note}")
    if d.device_lag_ns is not None and d.device_lag_ns[1] > 0:  # the device lagged the host (docs/diagnose.md)
        head.append(f"; the device lagged the host: its work for these steps started {_ms(d.device_lag_ns[0])} "
                    f"after the first step began and ended {_ms(d.device_lag_ns[1])} after the last step ended")
    for section in registry.DEVICE_SECTIONS:
        if d.sections.get(section.key) is not None:
            for line in section.text(d.sections[section.key]):
                stalls.append(line + "\n", style="bold")
    rank = "" if d.rank is None else f" rank {d.rank}"
    return Panel(Group(head, cause_bar(d), table, stalls), title=f"{d.device}{rank}", title_align="left")


def render(diag: Diagnosis, console: Console) -> None:
    console.print(Text(diag.headline, style="bold"), soft_wrap=True)  # the verdict first, one line (headline.py)
    if diag.synthetic:
        console.print("[bold red]SYNTHETIC INPUT[/]: these figures come from a generated profile, not a measurement.")
    for inp in diag.inputs:
        console.print(f"[bold]{inp['path']}[/] ({inp['format']})")
    origin = diag.origin_ns if diag.origin_ns is not None else min((d.window[0] for d in diag.devices), default=0)
    if diag.devices:
        console.print(f"times count from the analysis window start, abs:{origin} (--window takes offsets from it)")
    for d in diag.devices:
        console.print(_device_panel(d, origin, diag))
    if diag.fallback_ops:
        t = Table(title="host fallback", title_justify="left", header_style="bold")
        for col in ("op", "calls", "host", "device idle", "found by", "evidence", "source"):
            t.add_column(col, overflow="fold")
        for op in diag.fallback_ops[:10]:
            t.add_row(op.name, str(op.calls), _ms(op.host_ns), _ms(op.device_idle_ns), op.found_by,
                      op.evidence + (" (also ran on the device)" if op.also_executed_on_device else ""),
                      op.source or "-")
        console.print(t)
    for section in registry.SECTIONS:  # each registered section's own lines (analysis/contract.py)
        lines = section.text(diag.sections[section.key]) if section.key in diag.sections else []
        if len(lines) == 1:
            console.print(f"[bold]{escape(section.title)}[/]: {escape(lines[0])}")
        elif lines:
            console.print(f"[bold]{escape(section.title)}[/]")
            for line in lines:
                console.print(f"  {escape(line)}")
    if not diag.findings:
        console.print("[green]no findings[/]: nothing above the documented thresholds (docs/diagnose.md)")
    for f in diag.findings:
        where = f" [{f.device}]" if f.device else ""
        console.print(f"[{SEVERITY_STYLE[f.severity]}]{f.severity.upper()}[/] {f.title}{where}\n"
                      f"    evidence: {f.evidence}\n    action:   {f.advice}")
