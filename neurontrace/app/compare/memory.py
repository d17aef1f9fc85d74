"""The two-run page's memory comparison: per device, the figures ``neurontrace diff`` prints (peak allocated,
peak reserved, growth per step of A and B, from analysis/_diff_memory.py through the diff the page already
computed) and what was live at each run's peak, by op and source line (each side's memory section,
analysis/memory.py). One story: the same numbers as ``diff``'s report (docs/memory.md).

    stage changes ──► on_stage ──► nt-cmp-memory: one table per device, then the top live-at-peak groups of A and B
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, html

from neurontrace import units
from neurontrace.analysis import memory
from neurontrace.analysis._diff_memory import FIGURES, LABELS
from neurontrace.app.compare.model import LABELS as SIDE_LABELS
from neurontrace.app.compare.model import SIDES, CompareState

TOP_LIVE = 5  # live-at-peak groups listed per run and device


def _size(figure: str, value: Any) -> str:
    if value is None:
        return "-"
    return (units.size(value) + "/step") if figure == "growth_bytes_per_step" else units.size(value)


def rows(state: CompareState) -> list[dict[str, Any]]:
    """The diff's memory entries (one per device and rank), empty until the diff is done or without memory."""
    d = state.diff
    return [] if d is None else [m for m in d.memory
                                 if any(m[f]["baseline"] is not None or m[f]["change"] is not None for f in FIGURES)]


def live_at_peak(state: CompareState) -> dict[str, dict[tuple[str, int | None], list[memory.LiveGroup]]]:
    """Per side, per (device, rank): the largest groups live at that run's peak (the process that peaked
    highest, as the diff counts a device's largest figure)."""
    out: dict[str, dict[tuple[str, int | None], list[memory.LiveGroup]]] = {}
    for side, model in zip(SIDES, state.models(), strict=True):
        found: dict[tuple[str, int | None], memory.DeviceMemory] = {}
        value = model.analysis.diagnosis.sections.get(memory.SECTION.key) if model and model.analysis else None
        for dev in value.devices if isinstance(value, memory.Memory) else []:
            key = (dev.device, dev.rank)
            if key not in found or (dev.peak_allocated_bytes or 0) > (found[key].peak_allocated_bytes or 0):
                found[key] = dev
        out[side] = {k: v.live_at_peak[:TOP_LIVE] for k, v in found.items()}
    return out


def panel(state: CompareState) -> list[Any]:
    entries = rows(state)
    if state.diff is None:
        return [html.Div("The memory comparison appears when both runs are analysed and compared.",
                         className="nt-empty", id="nt-cmp-memory-pending")]
    if not entries:
        return [html.Div("Neither run recorded memory events (profile_memory=True records them; docs/memory.md).",
                         className="nt-empty")]
    live = live_at_peak(state)
    out: list[Any] = []
    for m in entries:
        who = m["device"] if m["rank"] is None else f"rank {m['rank']} {m['device']}"
        head = html.Tr([html.Th(h) for h in ("", SIDE_LABELS["a"], SIDE_LABELS["b"], "Δ", "Δ %")])
        body = [html.Tr([html.Td(LABELS[f]), html.Td(_size(f, m[f]["baseline"])), html.Td(_size(f, m[f]["change"])),
                         html.Td(_signed(f, m[f]["delta"])),
                         html.Td("" if m[f]["pct"] is None else f"{m[f]['pct']:+.1f}%")]) for f in FIGURES]
        out += [html.B(who), html.Table(className="nt-table", children=[html.Thead(head), html.Tbody(body)])]
        for side in SIDES:
            groups = live.get(side, {}).get((m["device"], m["rank"]), [])
            if groups:
                out += [html.Div(f"live at {SIDE_LABELS[side]}'s peak:", className="nt-src-note"),
                        html.Ul([html.Li(f"{units.size(g.bytes)} in {g.count} · {g.op or '-'} · {g.source or '-'}")
                                 for g in groups])]
    return out


def _signed(figure: str, delta: Any) -> str:
    if delta is None:
        return ""
    return ("+" if delta >= 0 else "-") + _size(figure, abs(delta))


def register(app: dash.Dash, state: CompareState) -> None:
    @app.callback(Output("nt-cmp-memory", "children"), Input("nt-cmp-stage", "data"))
    def _stage(_stage: Any) -> list[Any]:
        return panel(state)


__all__ = ["TOP_LIVE", "live_at_peak", "panel", "register", "rows"]
