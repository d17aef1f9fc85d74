"""The step statistics, declared once: each with its JSON key, the label every report prints, and what it means.

``diagnose``, ``diff``, ``runs list/show/compare``, the viewer and the notebooks show step times only
through these declarations, so one name always means one number:

- **mean time per step**: a device's analysis window divided by the profiled steps it covers (the
  figure ``diff`` and ``--fail-on-regression`` compare; one slow step moves it);
- **steady median step**: the median duration of the steps after the first (a slow first step, a
  warm-up or compile, does not move it);
- **first step**: the first profiled step's duration.

A report that shows two of them side by side says why they differ (:func:`why_they_differ`): when the
mean moved and the steady median did not, the change is in the first step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neurontrace.units import duration


@dataclass(frozen=True)
class StepStat:
    key: str  # the key in the JSON documents (diagnose/1, diff/1, run records)
    label: str  # how every report names it
    meaning: str  # one sentence, for the docs and the reports that explain a difference


MEAN_PER_STEP = StepStat("time_per_step_ns", "mean time per step",
                         "the analysis window divided by the profiled steps it covers")
STEADY_MEDIAN = StepStat("steady_median_ns", "steady median step",
                         "the median of the steps after the first (a slow first step does not move it)")
FIRST_STEP = StepStat("first_step_ns", "first step", "the first profiled step")
STEP_STATS: tuple[StepStat, ...] = (MEAN_PER_STEP, STEADY_MEDIAN, FIRST_STEP)

# Two statistics "disagree" when their changes differ by more than this many percentage points and by
# more than this fraction of the larger change (+2099% next to +2018% tell one story).
DISAGREE_POINTS = 10.0
DISAGREE_FRACTION = 0.25


def mean_per_step_ns(device: Mapping[str, Any]) -> float | None:
    """A ``diagnose/1`` device's mean time per step (None when its window covers no step)."""
    steps = int(device.get("window_steps") or 0)
    win = int(device["window"]["end_ns"]) - int(device["window"]["start_ns"])
    return win / steps if steps else None


def of_diagnosis(doc: Mapping[str, Any]) -> dict[str, float | None]:
    """The three statistics of a ``diagnose/1`` document, by key. The mean per step is the slowest
    device's (the job's step is as long as its slowest device's)."""
    phases = doc.get("phases") or {}
    means = [m for d in doc.get("devices") or [] if (m := mean_per_step_ns(d)) is not None]
    return {MEAN_PER_STEP.key: max(means, default=None), STEADY_MEDIAN.key: phases.get(STEADY_MEDIAN.key),
            FIRST_STEP.key: phases.get(FIRST_STEP.key)}


def why_they_differ(mean_pct: float | None, steady_pct: float | None, durations_a: Sequence[int],
                    durations_b: Sequence[int]) -> str | None:
    """One sentence saying why the mean time per step and the steady median step changed differently,
    or None when they agree (DISAGREE_POINTS, DISAGREE_FRACTION) or one is missing."""
    if mean_pct is None or steady_pct is None:
        return None
    gap = abs(mean_pct - steady_pct)
    if gap <= DISAGREE_POINTS or gap <= DISAGREE_FRACTION * max(abs(mean_pct), abs(steady_pct)):
        return None
    both = f"{MEAN_PER_STEP.label} {mean_pct:+.1f}% but {STEADY_MEDIAN.label} {steady_pct:+.1f}%"
    if not durations_a or not durations_b:
        return f"{both}: the mean counts every step of the window, the steady median only the steps after the first"
    total = sum(durations_b) - sum(durations_a)
    first = durations_b[0] - durations_a[0]
    where = (f"{FIRST_STEP.label} {duration(durations_a[0])} → {duration(durations_b[0])}")
    if total and first * total > 0:  # the first step moved the same way as the whole
        share = min(1.0, first / total)
        part = "all" if share >= 0.95 else f"{100 * share:.0f}%"
        return (f"{both}: {part} of the change is in the first step ({where}); the steady median leaves the "
                "first step out")
    return (f"{both}: the mean counts every step of the window ({where}), the steady median only the steps "
            "after the first")


def one_run_note(mean_ns: float | None, steady_ns: float | None, first_ns: float | None) -> str | None:
    """Within one run: why its mean time per step and steady median step differ (None when they agree
    within DISAGREE_FRACTION, or one is missing)."""
    if mean_ns is None or steady_ns is None or not steady_ns:
        return None
    if abs(mean_ns - steady_ns) <= DISAGREE_FRACTION * max(mean_ns, steady_ns):
        return None
    first = "" if first_ns is None else f"; {FIRST_STEP.label} {duration(first_ns)}"
    return (f"{MEAN_PER_STEP.label} {duration(mean_ns)} and {STEADY_MEDIAN.label} {duration(steady_ns)} differ: "
            f"the mean counts every step of the window, the steady median leaves the first step out{first}")
