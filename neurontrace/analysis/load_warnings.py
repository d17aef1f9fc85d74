"""The warnings raised while loading the inputs, so they reach every report (``--json``: ``warnings``).

Loading warns where it could go on but something is missing or unusual, e.g. a capture whose device
profiles were not decoded (the warning names each profile and the ``neuron-explorer`` command to run).
Those warnings live in each input's parse accounting; this section lists them, with the input they
came from, in load order (first, when the host launched device work that was not recorded:
analysis/device_activity.py), then the events each input skipped (by reason) and the malformed events
``diagnose`` found before attribution (analysis/malformed.py, one line per kind).
"""

from __future__ import annotations

from typing import Any

from neurontrace.analysis.contract import Context, Section
from neurontrace.analysis.device_activity import unrecorded


def _compute(ctx: Context) -> list[dict[str, Any]]:
    out = [{"source": a.source, "format": a.format, "message": w} for a in ctx.trace.accounting for w in a.warnings]
    # Events the parser read but could not keep, by reason (parse accounting: read == kept + skipped).
    out += [{"source": a.source, "format": a.format, "message": f"{a.source}: {n} event(s) skipped: {reason}"}
            for a in ctx.trace.accounting for reason, n in sorted(a.skipped.items()) if n]
    missing = unrecorded(ctx.trace)  # device work launched but not recorded (analysis/device_activity.py)
    if missing is not None:
        out.insert(0, {"source": "diagnose", "format": "device_activity", "message": missing.message()})
    checks = ctx.sections.get("event_checks")  # malformed events (analysis/malformed.py), found before attribution
    if checks is not None:
        out += [{"source": "diagnose", "format": "event_checks", "message": m} for m in checks.warnings()]
    return out


def _combine(values: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every rank's warnings once each, in rank order (inputs that several ranks share warn once)."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for value in values:
        for w in value:
            seen.setdefault((w["source"], w["message"]), w)
    return list(seen.values())


def _text(warnings: list[dict[str, Any]]) -> list[str]:
    return [line for w in warnings for line in str(w["message"]).splitlines()]


SECTION = Section("warnings", "load warnings", _compute, text=_text, combine=_combine)
