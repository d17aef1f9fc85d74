"""The analysis contract: how a diagnosis section or a family of findings plugs into ``diagnose``.

``diagnose`` always computes the core: the per-device attribution (analysis/attribution.py) and the
host-fallback ops it charges (analysis/fallback.py). Everything else is a plug-in declared in
:mod:`neurontrace.analysis.registry`:

- a **section** (:class:`Section`) is one named part of the result: ``compute(ctx)`` returns its value
  for one rank (``None``: the section is absent for this trace), ``combine(values)`` merges the values of
  a job's ranks (in rank order) into the job's value, ``to_json``/``from_json`` convert it for
  ``diagnose --json`` (the value lands under ``key`` at the top level) and back, and ``text`` gives the
  plain lines the text report prints under the section's title. ``diagnose`` computes every section
  rank by rank (one rank's trace in ``ctx.trace``; on Dask, on the worker holding that rank) and
  combines once; a section without ``combine`` is kept for a single rank and absent for several;
  ``merge(values)`` does the same over the time slices of one rank (``diagnose DATASET`` out of core,
  analysis/slices.py), each slice's value computed with ``ctx.options.owned`` set;
- a **device section** (:class:`DeviceSection`) is the same, once per attributed device: its value lands
  in ``DeviceAttribution.sections[key]`` and in that device's JSON object under ``key``;
- a **finding family** (:class:`FindingFamily`) turns the computed result into :class:`Finding` s. It
  runs once for the whole job, after the combine: it reads ``ctx.devices`` (every rank's), ``ctx.fallback``
  and ``ctx.sections``, never ``ctx.trace`` (no rank's events are held there; it is empty).

Adding one is one new module in ``neurontrace/analysis/`` that declares ``SECTION = Section(...)`` (or
``DeviceSection`` / ``FINDINGS = FindingFamily(...)``) plus one line in the registry. Sections run in
registry order (device sections first, then trace sections) and may read the values of the sections
before them in ``ctx.sections``; finding families run after all sections. A section reads only the
Trace tables and earlier results, never a parser, the CLI or a renderer; its ``text`` returns plain
strings (no styling), so every front end can show it. See docs/diagnose.md, "Adding an analysis".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from neurontrace.analysis.attribution import DeviceAttribution
from neurontrace.analysis.fallback import FallbackOp
from neurontrace.analysis.slices import RankPlan
from neurontrace.trace import Trace

SEVERITIES = ("info", "warning", "error")


@dataclass
class Finding:
    """A plain-language diagnosis with its evidence and a suggested action (severity: SEVERITIES)."""

    id: str
    severity: str
    title: str
    evidence: str
    advice: str
    device: str | None = None
    rank: int | None = None  # the rank of ``device`` in a job of several ranks (None: the job's, or one rank)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "title": self.title, "evidence": self.evidence,
                "advice": self.advice, "device": self.device, "rank": self.rank}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(d["id"], d["severity"], d["title"], d["evidence"], d["advice"], d.get("device"), d.get("rank"))


@dataclass
class Options:
    """What the caller asked for (the CLI's options, library defaults otherwise)."""

    window: tuple[int, int] | None = None
    fallback_ops: tuple[str, ...] = ()
    top: int = 10
    origin_ns: int | None = None  # the report's time 0 when ``window`` was given (attribution.default_origin)
    compiles: pa.Table | None = None  # compile-log rows (schema.COMPILES) for this rank: --compile-log, capture
    compile_warnings: tuple[str, ...] = ()  # what reading those logs skipped
    # Out-of-core diagnose (analysis/slices.py): the time slice [start, end) of one rank this run owns. Its
    # trace holds every event overlapping the slice; a section counts an event only when it starts in the
    # slice and sums time only inside it, so ``merge`` of the slices' values equals the whole rank's value.
    owned: tuple[int, int] | None = None
    # With ``owned``: the whole rank's facts a slice cannot see alone (analysis/slices.RankPlan): each device's
    # window (``plan.window_of(device, rank)``; ``DeviceAttribution.window`` is its part inside the slice).
    plan: RankPlan | None = None


@dataclass
class Context:
    """What a section or finding family may read: the trace, the core results, earlier sections."""

    trace: Trace
    devices: list[DeviceAttribution]
    fallback: list[FallbackOp]
    frames: dict[int, str]  # frame id -> "file:line function" of its user-code frame
    options: Options = field(default_factory=Options)
    sections: dict[str, Any] = field(default_factory=dict)  # key -> value of the sections computed so far
    shared: dict[Any, Any] = field(default_factory=dict)  # intermediate results sections share (never in output)


def _same(value: Any) -> Any:
    return value


def _no_text(value: Any) -> list[str]:
    return []


@dataclass(frozen=True)
class Section:
    key: str  # the JSON key and the key in Diagnosis.sections
    title: str  # the heading the text report prints before ``text``'s lines
    compute: Callable[[Context], Any]
    to_json: Callable[[Any], Any] = _same  # plain JSON values (dict/list/str/int/float/bool/None)
    from_json: Callable[[Any], Any] = _same
    text: Callable[[Any], list[str]] = _no_text
    combine: Callable[[list[Any]], Any] | None = None  # per-rank values -> the job's value
    # One rank's per-slice values (computed with Options.owned, in time order) -> the rank's value, equal to
    # ``compute`` on the whole rank. None: the section cannot be computed out of core (a warning says so).
    merge: Callable[[list[Any]], Any] | None = None
    # Out of core without holding the slices' values: ``fold(state, value)`` (state None before the first slice)
    # folds one slice's value in, in time order, and ``finish(state)`` gives what ``merge`` gives on them all.
    # Without them the values are held and merged at the end (analysis/sliced.py).
    fold: Callable[[Any, Any], Any] | None = None
    finish: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class DeviceSection:
    key: str
    title: str
    compute: Callable[[Context, DeviceAttribution], Any]
    to_json: Callable[[Any], Any] = _same
    from_json: Callable[[Any], Any] = _same
    text: Callable[[Any], list[str]] = _no_text
    merge: Callable[[list[Any]], Any] | None = None  # one device's per-slice values -> its value (as Section)
    fold: Callable[[Any, Any], Any] | None = None  # as Section's
    finish: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class FindingFamily:
    name: str  # what the family looks at, for docs and tests
    find: Callable[[Context], list[Finding]]
