"""The two-run page's state, without Dash: the two sides, the stage of their analyses and diff, the
alignment of their x axes, and the page's view store.

Each side is a :class:`~neurontrace.app.server.ViewerState` (loading, the :class:`ViewModel`, the
analysis). What is new here is the alignment: each side's x axis is ms from its *first analysed step*
(the first step marker, or Neuron device execution, that starts inside the busiest device's analysis
window; the window's start when there is none), so the two runs line up step for step and one x range
means the same moment of both. Before both analyses are done the page is aligned provisionally at each
run's first step marker (the trace start without one); :meth:`CompareState.stage` says what still runs.

The two-run page is split as the one-trace page is: this module (what the page shows), ``layout.py``
(its components), ``callbacks.py`` (what it does), ``server.py`` (the Dash app); see the package's
docstring.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import dash
import numpy as np

from neurontrace import units
from neurontrace.analysis.diff import Diff, diff
from neurontrace.analysis.step_stats import MEAN_PER_STEP
from neurontrace.app import inputs
from neurontrace.app.model import ViewModel
from neurontrace.app.server import FAILED, LOADING, READY, ViewerState
from neurontrace.errors import NeurontraceError

SIDES = ("a", "b")
LABELS = {"a": "A (baseline)", "b": "B (change)"}
MAX_DIFF_ROWS = 200
READY_STAGE, FAILED_STAGE = "ready", "failed"


def provisional_point(model: ViewModel) -> int:
    """Where the x axis reads 0 before the analysis: the first step marker (or Neuron execution), else
    the trace's first event."""
    starts = model.steps[0]
    return int(starts[0]) if len(starts) else 0


def align_point(model: ViewModel) -> int:
    """ns after the trace's first event where its x axis reads 0 once analysed: the first step (or
    execution) starting inside the analysis window, else the window's start (before the analysis,
    or without a device: :func:`provisional_point`)."""
    focus = model.focus()
    if focus is None:
        return provisional_point(model)
    w0, w1 = focus[1]
    starts = model.steps[0]
    inside = starts[(starts >= w0) & (starts < w1)]
    return int(inside[0]) if len(inside) else int(w0)


class CompareState:
    """Two :class:`ViewerState` sides (A the baseline, B the change) and, once both are analysed, their diff."""

    def __init__(self, a: ViewerState, b: ViewerState) -> None:
        self.sides = {"a": a, "b": b}
        self.diff: Diff | None = None
        self.error: str | None = None  # the diff's failure (the timelines stay on the page)

    @property
    def status(self) -> str:
        """Of loading: READY once both traces are indexed (the page shows then; :meth:`stage` says what
        still runs), FAILED when either could not be loaded."""
        if any(s.status == FAILED for s in self.sides.values()):
            return FAILED
        if any(s.model is None for s in self.sides.values()):
            return LOADING
        return READY

    def stage(self) -> tuple[str, str]:
        """(key, text) of what runs after the page is shown: ``analysing-a``, ``analysing-b``,
        ``comparing``, then ``ready``; ``failed`` with the message when an analysis or the diff failed."""
        for k in SIDES:
            if self.sides[k].analysis_error:
                return FAILED_STAGE, f"{LABELS[k]}: {self.sides[k].analysis_error}; no diff"
        if self.error:
            return FAILED_STAGE, self.error
        for k in SIDES:
            model = self.sides[k].model
            if model is None or model.analysis is None:
                return f"analysing-{k}", f"Analysing {LABELS[k]} (stall attribution)…"
        if self.diff is None:
            return "comparing", "Comparing the two runs (diff)…"
        return READY_STAGE, ""

    def load(self, loader: Callable[..., Any] | None = None) -> None:
        """Load and index both sides (one after the other: the machine may be small), then analyse them
        and diff them (:meth:`analyse`); the page shows between the two."""
        for side in self.sides.values():
            if side.model is None:
                side.load(*([loader] if loader is not None else []), analyse=False)
            if side.status == FAILED:
                return
        self.analyse()

    def analyse(self) -> None:
        for side in self.sides.values():
            if side.model is not None and side.model.analysis is None and side.analysis_error is None:
                side.analyse()
        self.compare()

    def compare(self) -> None:
        a, b = (self.sides[k].model for k in SIDES)
        if a is None or b is None or a.analysis is None or b.analysis is None:
            self.error = "both traces must load and be analysed before they are compared"
            return
        try:
            self.diff = diff(a.trace, b.trace, baseline_diagnosis=a.analysis.diagnosis,
                             change_diagnosis=b.analysis.diagnosis, baseline_label=self.sides["a"].path,
                             change_label=self.sides["b"].path, fallback_ops=a.fallback_ops)
        except NeurontraceError as exc:
            self.error = f"diff failed: {exc}"

    def models(self) -> tuple[ViewModel, ViewModel]:
        a, b = (self.sides[k].model for k in SIDES)
        if a is None or b is None:
            raise dash.exceptions.PreventUpdate
        return a, b

    def alignment(self) -> tuple[dict[str, int], bool]:
        """Each side's x = 0 (ns after its first event), and whether that is the analysed alignment
        (both sides analysed) or the provisional one."""
        models = dict(zip(SIDES, self.models(), strict=True))
        analysed = all(m.analysis is not None for m in models.values())
        return {k: align_point(m) if analysed else provisional_point(m) for k, m in models.items()}, analysed

    def rows(self) -> list[dict[str, Any]]:
        """The diff's changed ops (added, removed, slower, faster), largest change first, for the table."""
        if self.diff is None:
            return []
        out = []
        for r in self.diff.changed_ops().slice(0, MAX_DIFF_ROWS).to_pylist():
            pct = r["delta_pct"]
            out.append({"status": r["status"], "kind": r["kind"], "name": r["name"],
                        "baseline_ms": r["baseline_ns"] / 1e6, "change_ms": r["change_ns"] / 1e6,
                        "delta_ms": r["delta_ns"] / 1e6,
                        "delta_pct": None if pct is None or np.isnan(pct) else round(float(pct), 1)})
        return out

    def counts(self) -> str:
        """The diff's headline (how many ops changed, the worst regression), empty until it is done."""
        d = self.diff
        if d is None:
            return ""
        head = ", ".join(f"{n} {s}" for s, n in d.ops_summary().items() if s != "unchanged")
        worst = d.worst_regression
        if worst is not None and worst.regression_pct is not None:
            head += f" · {worst.label}: {MEAN_PER_STEP.label} {worst.regression_pct:+.1f}%"
        return head + "".join(f" · {line}" for line in memory_peaks(d.memory)) + "".join(
            f" · {LABELS[k]}: {line}" for k, line in self.headlines().items())

    def headlines(self) -> dict[str, str]:
        """Each analysed side's one-line verdict, the headline ``diagnose`` prints first (analysis/headline.py)."""
        out = {}
        for k in SIDES:
            model = self.sides[k].model
            if model is not None and model.analysis is not None:
                out[k] = model.analysis.diagnosis.headline
        return out


def memory_peaks(memory: list[dict[str, Any]]) -> list[str]:
    """One line per device of the diff's memory comparison: the peak allocated in A and B (docs/memory.md)."""
    out = []
    for m in memory:
        peak = m["peak_allocated_bytes"]
        if peak["baseline"] is None and peak["change"] is None:
            continue
        who = m["device"] if m["rank"] is None else f"rank {m['rank']} {m['device']}"
        pct = f" ({peak['pct']:+.1f}%)" if peak["pct"] is not None else ""
        out.append(f"{who} memory peak {units.size(peak['baseline'])} → {units.size(peak['change'])}{pct}")
    return out


# -- the view: one aligned window for both sides ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class View:
    """The page's view store: the window in ns from each side's x = 0, the alignment it was drawn
    with (each side's x = 0, and whether analysed), whether the user has moved it, and the stamps of
    the last goto, zoom and diff row pick drawn."""

    t0: int
    t1: int
    origins: dict[str, int]
    analysed: bool
    auto: bool = True
    goto: Any = None
    zoom: Any = None
    pick: Any = None

    @classmethod
    def of(cls, value: Any) -> View | None:
        """The store's value checked (every value from the page is untrusted), or None."""
        if not isinstance(value, dict) or not isinstance(value.get("origins"), dict):
            return None
        t0, t1 = inputs.as_int(value.get("t0")), inputs.as_int(value.get("t1"))
        origins = {k: inputs.as_int(value["origins"].get(k)) for k in SIDES}
        if t0 is None or t1 is None or t1 <= t0 or any(o is None for o in origins.values()):
            return None
        return cls(t0, t1, {k: int(o) for k, o in origins.items() if o is not None}, bool(value.get("analysed")),
                   bool(value.get("auto", True)), value.get("goto"), value.get("zoom"), value.get("pick"))

    @staticmethod
    def undrawn(view: View | None, kind: str, stamp: Any) -> bool:
        """Whether ``stamp``, the stamp of the store ``kind`` ("goto", "zoom" or "pick"; None: empty), is
        one ``view`` was not drawn with (nothing was drawn yet: None)."""
        return stamp is not None and (view is None or getattr(view, kind) != stamp)

    def side(self, side: str) -> dict[str, int]:
        """The window as one side's own view store (ns after its first event), as the single-trace
        functions read it."""
        o = self.origins[side]
        return {"t0": self.t0 + o, "t1": self.t1 + o, "origin": o}


def selection_of(state: CompareState, value: Any) -> tuple[str, int] | None:
    """(side, event id) of the page's selection store when that event is in that side's trace."""
    if not isinstance(value, dict) or value.get("side") not in SIDES:
        return None
    event = inputs.as_int(value.get("event"))
    model = state.sides[str(value["side"])].model
    if event is None or model is None or model.index.position(event) is None:
        return None
    return str(value["side"]), event


def op_positions(model: ViewModel, name: str, t0: int, t1: int) -> np.ndarray:
    """Index positions of the events named ``name`` that overlap [t0, t1) (ns after the first event)."""
    ix = model.index
    codes = np.flatnonzero(ix.names == name)
    if not len(codes):
        return np.zeros(0, dtype=np.int64)
    pos = np.flatnonzero(np.isin(ix.name, codes))
    return pos[(ix.start[pos] < t1) & (ix.end[pos] > t0)]

