"""The warnings raised while loading the inputs, so they reach every report (``--json``: ``warnings``).

Loading warns where it could go on but something is missing or unusual, e.g. a capture whose device
profiles were not decoded (the warning names each profile and the ``neuron-explorer`` command to run).
Those warnings live in each input's parse accounting; this section lists them, with the input they
came from, in load order (first, when the host launched device work that was not recorded:
analysis/device_activity.py), then the events each input skipped (by reason) and the malformed events
``diagnose`` found before attribution (analysis/malformed.py, one line per kind).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from neurontrace.analysis import malformed
from neurontrace.analysis.contract import Context, Section
from neurontrace.analysis.device_activity import unrecorded


@dataclass(frozen=True)
class LoadWarning:
    """One warning: the input it came from (or ``diagnose``), its format, the message (may span lines)."""

    source: str
    format: str | None
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "format": self.format, "message": self.message}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoadWarning:
        return cls(str(d["source"]), d.get("format"), str(d["message"]))


@dataclass
class LoadWarnings:
    """The section's value; ``--json``: a list of ``{source, format, message}`` (``warnings``)."""

    items: list[LoadWarning] = field(default_factory=list)

    def as_list(self) -> list[dict[str, Any]]:
        return [w.as_dict() for w in self.items]

    @classmethod
    def from_list(cls, items: list[dict[str, Any]]) -> LoadWarnings:
        return cls([LoadWarning.from_dict(w) for w in items])


def _compute(ctx: Context) -> LoadWarnings:
    out = [LoadWarning(a.source, a.format, w) for a in ctx.trace.accounting for w in a.warnings]
    # Events the parser read but could not keep, by reason (parse accounting: read == kept + skipped).
    out += [LoadWarning(a.source, a.format, f"{a.source}: {n} event(s) skipped: {reason}")
            for a in ctx.trace.accounting for reason, n in sorted(a.skipped.items()) if n]
    # device work launched but not recorded (analysis/device_activity.py); on a time slice, the whole rank's
    missing = unrecorded(ctx.trace) if ctx.options.plan is None else ctx.options.plan.missing
    if missing is not None:
        out.insert(0, LoadWarning("diagnose", "device_activity", missing.message()))
    checks = ctx.sections.get(malformed.SECTION.key)  # malformed events, found before attribution
    if checks is not None:
        out += [LoadWarning("diagnose", malformed.SECTION.key, m) for m in checks.warnings()]
    return LoadWarnings(out)


def _combine(values: list[LoadWarnings]) -> LoadWarnings:
    """Every rank's warnings once each, in rank order (inputs that several ranks share warn once)."""
    seen: dict[tuple[str, str], LoadWarning] = {}
    for value in values:
        for w in value.items:
            seen.setdefault((w.source, w.message), w)
    return LoadWarnings(list(seen.values()))


def _merge(values: list[LoadWarnings]) -> LoadWarnings:
    """One rank's warnings from its time slices': each once, in order, without the malformed-event lines (each
    slice counts its own: the caller adds the merged counts' lines with :func:`with_checks`)."""
    seen: dict[tuple[str, str], LoadWarning] = {}
    for value in values:
        for w in value.items:
            if w.format != malformed.SECTION.key:
                seen.setdefault((w.source, w.message), w)
    return LoadWarnings(list(seen.values()))


def with_checks(warnings: LoadWarnings, checks: malformed.EventChecks | None) -> LoadWarnings:
    """The warnings with the lines of ``checks`` (malformed events) last, as :func:`_compute` places them."""
    lines = [] if checks is None else checks.warnings()
    return LoadWarnings([*warnings.items, *(LoadWarning("diagnose", malformed.SECTION.key, m) for m in lines)])


def _text(warnings: LoadWarnings) -> list[str]:
    return [line for w in warnings.items for line in w.message.splitlines()]


SECTION = Section("warnings", "load warnings", _compute, to_json=lambda v: v.as_list(),
                  from_json=LoadWarnings.from_list, text=_text, combine=_combine, merge=_merge)
