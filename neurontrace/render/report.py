"""Human report of a Diagnosis (rich text). Rendering only: the numbers come from analysis/."""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from neurontrace import units
from neurontrace.analysis import cross_rank, dominant, registry
from neurontrace.analysis.attribution import DeviceAttribution
from neurontrace.analysis.contract import Finding
from neurontrace.analysis.diagnose import Diagnosis
from neurontrace.analysis.dominant import headline as device_line
from neurontrace.analysis.step_stats import MEAN_PER_STEP, one_run_note
from neurontrace.causes import CAUSES, COLORS, LABELS

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
    head = Text(device_line(d, d.sections.get(dominant.SECTION.key)) + "\n", style="bold")
    head.append(f"window {_ms(d.window_ns)} ({d.window_source}), {_offset(d.window[0] - origin)} to "
                f"{_offset(d.window[1] - origin)}", style="")
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


def render(diag: Diagnosis, console: Console, *, ranks_all: bool = False) -> None:
    """The report. A job of several ranks leads with what concerns the job (its findings, the cross-rank
    section), then one line per rank; each rank's panel only with ``ranks_all`` (``--ranks all``)."""
    console.print(Text(diag.headline, style="bold"), soft_wrap=True)  # the verdict first, one line (headline.py)
    if diag.synthetic:
        console.print("[bold red]SYNTHETIC INPUT[/]: these figures come from a generated profile, not a measurement.")
    for inp in diag.inputs:
        console.print(f"[bold]{inp['path']}[/] ({inp['format']})")
    origin = diag.origin_ns if diag.origin_ns is not None else min((d.window[0] for d in diag.devices), default=0)
    if diag.devices:
        console.print(f"times count from the analysis window start, abs:{origin} (--window takes offsets from it)")
    job = len({d.rank for d in diag.devices if d.rank is not None}) > 1
    first = (cross_rank.SECTION.key,) if job else ()
    if job:
        _findings(diag, console, job_level=True)
        _sections(diag, console, first)
        console.print(_rank_table(diag, origin))
    if ranks_all or not job:
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
    _sections(diag, console, skip=first)
    if not diag.findings:
        console.print("[green]no findings[/]: nothing above the documented thresholds (docs/diagnose.md)")
    _findings(diag, console, job_level=False if job else None)
    if job and not ranks_all:
        console.print("each rank's cause table, top stalls and op classes: add --ranks all")


def _sections(diag: Diagnosis, console: Console, only: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> None:
    for section in registry.SECTIONS:  # each registered section's own lines (analysis/contract.py)
        if (only and section.key not in only) or section.key in skip:
            continue
        lines = section.text(diag.sections[section.key]) if section.key in diag.sections else []
        if len(lines) == 1:
            console.print(f"[bold]{escape(section.title)}[/]: {escape(lines[0])}")
        elif lines:
            console.print(f"[bold]{escape(section.title)}[/]")
            for line in lines:
                console.print(f"  {escape(line)}")


def _rank_table(diag: Diagnosis, origin: int) -> Table:
    """One line per rank's device: its window, mean time per step, the causes' shares, its longest stall."""
    t = Table(title="per rank", title_justify="left", header_style="bold")
    for col in ("rank", "device", "window", MEAN_PER_STEP.label, *(LABELS[c] for c in CAUSES), "longest stall"):
        t.add_column(col, justify="left" if col in ("device", "longest stall") else "right", overflow="fold")
    for d in diag.devices:
        stall = d.top_stalls[0] if d.top_stalls else None
        where = "-" if stall is None else (f"{_ms(stall.dur_ns)} {stall.cause}.{stall.detail} at "
                                           f"{_offset(stall.start_ns - origin)}: {stall.evidence[0] if stall.evidence else '-'}")
        t.add_row("-" if d.rank is None else str(d.rank), d.device, _ms(d.window_ns),
                  _ms(round(d.window_ns / d.window_steps)) if d.window_steps else "-",
                  *(f"{100 * d.fraction(c):.1f}%" for c in CAUSES), Text(where))
    return t


def _where(f: Finding) -> str:
    rank = "" if f.rank is None else f" rank {f.rank}"
    return f" [{f.device}{rank}]" if f.device else (f" [rank {f.rank}]" if f.rank is not None else "")


def _findings(diag: Diagnosis, console: Console, job_level: bool | None) -> None:
    """Findings, most severe first. ``job_level`` True: only those of the whole job (no device); False: only
    the devices' — one block per finding that several ranks share, a line per rank naming it; None: all."""
    chosen = [f for f in diag.findings if job_level is None or (f.device is None) == job_level]
    groups: dict[tuple[str, str, str], list[Finding]] = {}
    for f in chosen:
        groups.setdefault((f.severity, f.id, f.title) if job_level is False else (f.severity, f.id, str(id(f))),
                          []).append(f)
    for fs in groups.values():
        head = fs[0]
        style = SEVERITY_STYLE[head.severity]
        if len(fs) == 1:
            console.print(f"[{style}]{head.severity.upper()}[/] {escape(head.title)}{escape(_where(head))}\n"
                          f"    evidence: {escape(head.evidence)}\n    action:   {escape(head.advice)}")
            continue
        ranks = {d.rank for d in diag.devices}
        console.print(f"[{style}]{head.severity.upper()}[/] {escape(head.title)}: {len(fs)} of {len(ranks)} ranks")
        for f in fs:
            console.print(f"    rank {f.rank} {escape(f.device or '')}: {escape(f.evidence)}")
        advice = {f.advice for f in fs}
        if len(advice) == 1:
            console.print(f"    action:   {escape(head.advice)}")
        else:
            for f in fs:
                console.print(f"    action (rank {f.rank}): {escape(f.advice)}")
