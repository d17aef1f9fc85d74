"""The warnings raised while loading the inputs, so they reach every report (``--json``: ``warnings``).

Loading warns where it could go on but something is missing or unusual, e.g. a capture whose device
profiles were not decoded (the warning names each profile and the ``neuron-explorer`` command to run).
Those warnings live in each input's parse accounting; this section lists them, with the input they
came from, in load order.
"""

from __future__ import annotations

from typing import Any

from neurontrace.analysis.contract import Context, Section


def _compute(ctx: Context) -> list[dict[str, Any]]:
    return [{"source": a.source, "format": a.format, "message": w} for a in ctx.trace.accounting for w in a.warnings]


def _text(warnings: list[dict[str, Any]]) -> list[str]:
    return [line for w in warnings for line in str(w["message"]).splitlines()]


SECTION = Section("warnings", "load warnings", _compute, text=_text,
                  combine=lambda parts: [w for p in parts for w in p])  # every rank's, in rank order
