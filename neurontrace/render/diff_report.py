"""Human report of a Diff (rich text). Rendering only: the numbers come from neurontrace.analysis.diff."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from neurontrace import units
from neurontrace.analysis._diff_memory import LABELS as MEMORY_LABELS
from neurontrace.analysis.diff import DeviceDelta, Diff
from neurontrace.analysis.step_stats import FIRST_STEP, MEAN_PER_STEP, STEADY_MEDIAN
from neurontrace.causes import CAUSES, COLORS

STATUS_STYLE = {"added": "bold red", "removed": "green", "slower": "red", "faster": "green", "unchanged": "bright_black"}
TOP_OPS = 15


def fmt_ns(ns: float | None, sign: str = "") -> str:
    """A duration in the largest unit that keeps it readable: 12.3 µs, 4.56 ms, 1.23 s (units.duration)."""
    return units.duration(ns, sign)


def _delta_ns(ns: float | None) -> Text:
    if ns is None:
        return Text("-")
    style = "red" if ns > 0 else "green" if ns < 0 else ""
    return Text(fmt_ns(ns, "+"), style=style)


def _pct(p: float | None) -> str:
    return "" if p is None else f"{p:+.1f}%"


def _device_panel(d: DeviceDelta) -> Panel:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for col, just in (("cause", "left"), ("baseline", "right"), ("change", "right"), ("delta", "right"),
                      ("share", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for cause in CAUSES:
        a, b = d.causes_ns[cause]
        sa, sb = d.share(cause)
        table.add_row(Text(cause, style=COLORS[cause]), fmt_ns(a), fmt_ns(b), _delta_ns(b - a),
                      f"{100 * sa:.1f}% → {100 * sb:.1f}%")
    moved = sorted(((k, b - a) for k, (a, b) in d.detail_ns.items() if a != b), key=lambda kv: -abs(kv[1]))[:4]
    detail = Text("largest detail changes: ", style="bold")
    detail.append(", ".join(f"{k} {fmt_ns(v, '+')}" for k, v in moved) or "none")
    (ta, tb), (sa, sb) = d.time_per_step_ns, d.steps
    per = MEAN_PER_STEP.label if sa and sb else "window"
    reg = d.regression_pct
    head = Text(f"window {fmt_ns(d.window_ns[0])} → {fmt_ns(d.window_ns[1])}; {per} {fmt_ns(ta)} → {fmt_ns(tb)} ")
    head.append(_pct(reg), style="red" if reg and reg > 0 else "green")
    if d.matched_by == "order":
        head.append("  (matched by order: the device names differ)", style="yellow")
    return Panel(Group(head, table, detail), title=escape(d.label), title_align="left")


def _ops_table(diff: Diff, top: int) -> Table | Text:
    if diff.ops is None:
        return Text("ops: not compared (the traces were not available)", style="yellow")
    summary = diff.ops_summary()
    changed = diff.changed_ops().slice(0, top).to_pylist()
    title = "ops: " + ", ".join(f"{n} {s}" for s, n in summary.items())
    t = Table(title=title, title_justify="left", header_style="bold")
    t.add_column("status", no_wrap=True)
    t.add_column("op", ratio=3, overflow="fold")
    t.add_column("source", ratio=2, overflow="fold")
    for col in ("count", "baseline", "change", "delta"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in changed:
        op = Text(f"{r['kind']} ", style="dim")
        op.append(f"{r['unit']}: " if r["unit"] else "")
        op.append(r["name"] if len(r["name"]) <= 80 else r["name"][:77] + "...")
        if r.get("shapes"):
            op.append(f" {r['shapes'] if len(r['shapes']) <= 60 else r['shapes'][:57] + '...'}", style="dim")
        source = r["source"] or "-"
        if r["change_source"]:
            source = f"{source} → {r['change_source']}"
        t.add_row(Text(r["status"], style=STATUS_STYLE[r["status"]]), op, Text(source),
                  f"{r['baseline_count']}→{r['change_count']}", fmt_ns(r["baseline_ns"]), fmt_ns(r["change_ns"]),
                  _delta_ns(r["delta_ns"]))
    if not changed:
        t.add_row("-", "no op changed beyond the thresholds", "", "", "", "", "")
    return t


def _change_line(label: str, c: dict[str, Any]) -> str:
    return f"{label} {fmt_ns(c['baseline'])} → {fmt_ns(c['change'])} {_pct(c['pct'])}".rstrip()


def render(diff: Diff, console: Console, *, top: int = TOP_OPS, fail_on_regression: float | None = None) -> None:
    if diff.synthetic:
        console.print("[bold red]SYNTHETIC INPUT[/]: at least one side is a generated profile, not a measurement.")
    console.print(f"[bold]baseline[/] {escape(diff.baseline['label'])}")
    console.print(f"[bold]change[/]   {escape(diff.change['label'])}")
    th = diff.thresholds
    console.print(f"thresholds: an op is faster or slower past ±{100 * th.relative:g}% and "
                  f"±{th.absolute_ns / 1e3:g} µs of its time")
    for note in diff.notes:
        console.print(f"[yellow]note[/]: {escape(note)}")
    for w in diff.warnings:  # what loading either side warned about: truncation, skipped or malformed events
        console.print(f"[yellow]warning[/] ({w['side']}): {escape(str(w['message']))}")
    for d in diff.devices:
        console.print(_device_panel(d))
    console.print(_ops_table(diff, top))
    fb = diff.fallback
    if fb["appeared"] or fb["disappeared"] or fb["persisted"]:
        t = Table(title="host fallback", title_justify="left", header_style="bold")
        for col in ("op", "status", "calls", "host time", "source"):
            t.add_column(col, overflow="fold")
        for op in fb["appeared"]:
            t.add_row(Text(op["name"]), Text("appeared", style="bold red"), str(op.get("calls")),
                      fmt_ns(op.get("host_ns")), Text(op.get("source") or "-"))
        for op in fb["disappeared"]:
            t.add_row(Text(op["name"]), Text("disappeared", style="green"), str(op.get("calls")),
                      fmt_ns(op.get("host_ns")), Text(op.get("source") or "-"))
        for op in fb["persisted"]:
            t.add_row(Text(op["name"]), "in both", f"{op['calls']['baseline']} → {op['calls']['change']}",
                      f"{fmt_ns(op['host_ns']['baseline'])} → {fmt_ns(op['host_ns']['change'])}",
                      Text(op.get("source") or "-"))
        console.print(t)
    p, s = diff.phases, diff.steps
    console.print("[bold]phases[/]: " + "; ".join(_change_line(label, p[key]) for label, key in (
        ("compile", "compile_ns"), ("load", "load_ns"), ("execution", "execution_ns"),
        ("time to first step", "time_to_first_step_ns"))))
    prep = [(label, p[key]) for label, key in (("recompiles", "compile.recompiles"), ("graph breaks",
            "compile.graph_breaks"), ("cache hits", "compile.cache_hits"), ("cache misses", "compile.cache_misses"),
            ("failed compiles", "compile.failed")) if key in p and (p[key]["baseline"] or p[key]["change"])]
    if prep:
        console.print("[bold]preparation[/]: " + "; ".join(f"{label} {c['baseline']} → {c['change']}"
                                                            for label, c in prep))
    console.print(f"[bold]steps[/]: {s['count']['baseline']} → {s['count']['change']}; "
                  + "; ".join(_change_line(label, s[key]) for label, key in (
                      (STEADY_MEDIAN.label, STEADY_MEDIAN.key), ("steady p90", "steady_p90_ns"),
                      (FIRST_STEP.label, FIRST_STEP.key), ("median of all steps", "median_ns"),
                      ("p90 of all steps", "p90_ns")) if key in s))
    if s.get("why_they_differ"):
        console.print(f"[bold]which is which[/]: {escape(s['why_they_differ'])}")
    for m in diff.memory:
        who = m["device"] if m["rank"] is None else f"rank {m['rank']} {m['device']}"
        console.print(f"[bold]memory[/] {escape(who)}: " + "; ".join(
            f"{label} {units.size(m[key]['baseline'])} → {units.size(m[key]['change'])} {_pct(m[key]['pct'])}".rstrip()
            for key, label in MEMORY_LABELS.items()))
    for label, key in (("[red]new finding[/]", "appeared"), ("[green]resolved[/]", "resolved")):
        for f in diff.findings[key]:
            where = escape(f" [{f['device']}]") if f["device"] else ""
            console.print(f"{label} {f['severity'].upper()} {escape(f['title'])}{where}")
    _verdict(diff, console, fail_on_regression)


def _verdict(diff: Diff, console: Console, pct: float | None) -> None:
    worst = diff.worst_regression
    if worst is None:
        console.print("[yellow]no device could be matched, so nothing was compared per device[/]")
        return
    what = MEAN_PER_STEP.label if all(worst.steps) else "window time"
    figure = escape(f"{worst.label} {what} {_pct(worst.regression_pct)}")
    if pct is None:
        console.print(f"[bold]largest change[/]: {figure}")
    elif diff.regressions(pct):
        console.print(f"[bold red]REGRESSION[/]: {figure} (more than {pct:g}%)")
    else:
        console.print(f"[green]no regression[/] above {pct:g}% (largest: {figure})")
