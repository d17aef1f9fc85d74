"""Vocabularies declared once, and the documents that restate them held against the declaration."""

from __future__ import annotations

import re

from neurontrace.causes import CAUSES, COLORS, LABELS, VOCABULARY
from tests.conftest import ROOT


def test_the_causes_table_of_the_docs_is_the_declared_vocabulary_in_order() -> None:
    text = (ROOT / "docs" / "diagnose.md").read_text()
    table = text[text.index("| cause | the device during that time |"):]
    table = table[:table.index("\n\n")]
    rows = re.findall(r"^\| `(\w+)` \| (.+?) \| .+? \|$", table, flags=re.M)
    documented = [(name, meaning) for name, meaning in rows if name in CAUSES]
    assert documented == [(c.name, c.meaning) for c in VOCABULARY]


def test_every_cause_has_one_label_and_a_distinct_colour() -> None:
    assert len(CAUSES) == 6 and set(LABELS) == set(COLORS) == set(CAUSES)
    assert len(set(COLORS.values())) == 6
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in COLORS.values())


def test_the_step_statistics_table_of_the_docs_is_the_declaration() -> None:
    from neurontrace.analysis.step_stats import STEP_STATS

    text = (ROOT / "docs" / "diff.md").read_text()
    table = text[text.index("| label | JSON key | what it is |"):]
    rows = re.findall(r"^\| (.+?) \| `(\w+)` \| (.+?) \|$", table[:table.index("\n\n")], flags=re.M)
    assert rows == [(s.label, s.key, s.meaning) for s in STEP_STATS]
