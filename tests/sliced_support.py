"""What an out-of-core diagnosis is compared on (tests/test_sliced.py, tests/test_dataset_stream.py)."""

from __future__ import annotations

import json
from typing import Any

from neurontrace.analysis import critical_path, registry
from neurontrace.analysis.sliced import OUT_OF_CORE


def left_out() -> list[str]:
    """The sections that have no time merge yet (left out of an out-of-core diagnosis, with one warning)."""
    return ([s.key for s in registry.DEVICE_SECTIONS if s.merge is None]
            + [s.key for s in registry.SECTIONS if s.merge is None])


def comparable(doc: dict[str, Any], sliced: bool) -> dict[str, Any]:
    """The document without the sections left out (and, while any is, the headline and findings, which read
    them); the sliced one must say once, in its warnings, which those are."""
    doc = json.loads(json.dumps(doc))
    gone = left_out()
    if sliced:
        said = [w for w in doc.get("warnings", []) if w["format"] == OUT_OF_CORE]
        assert len(said) == (1 if gone else 0)
        if said:
            assert all(key in said[0]["message"] for key in gone)
            doc["warnings"].remove(said[0])
            if not doc["warnings"]:
                doc.pop("warnings")
    for key in gone:
        doc.pop(key, None)
        for d in doc["devices"]:
            d.pop(key, None)
    if gone:
        doc.pop("headline"), doc.pop("findings")
    if not doc.get("warnings"):
        doc.pop("warnings", None)
    return doc


# The critical path's window-path figures: exact when a slice ends at a step start, not where diagnose DATASET's
# planner cuts between two steps (docs/critical_path.md, "Out of core"); its steps, ranks and dropped edges are
# exact at those cuts too.
WINDOW_PATH = ("length_ns", "breakdown_ns", "events", "event_count", "start_ns", "end_ns", "per_rank", "small_kernels")


def without_window_path(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` without the critical path's window-path figures (what a cut between steps can change)."""
    cp = doc.get(critical_path.SECTION.key)
    if isinstance(cp, dict):
        for key in WINDOW_PATH:
            cp.pop(key, None)
    return doc
