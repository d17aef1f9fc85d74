"""The data model: declared once, documented, and the reference page generated from it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from neurontrace import schema
from neurontrace.trace import conform
from tests.conftest import ROOT


def test_reference_page_is_generated_from_the_declarations() -> None:
    page = (ROOT / "docs" / "schema.md").read_text()
    assert page == schema.to_markdown(), "docs/schema.md is stale: run python scripts/gen_schema_doc.py"


@pytest.mark.parametrize("spec", schema.TABLES.values(), ids=list(schema.TABLES))
def test_every_column_is_documented_with_unit_names(spec: schema.TableSpec) -> None:
    for col in spec.columns:
        field = spec.schema.field(col.name)
        assert field.metadata[b"doc"], col.name
        if col.name.endswith("_ns"):
            assert col.unit == "ns" and col.type == pa.int64(), col.name
    assert len(set(spec.column_names)) == len(spec.column_names)


def test_conform_orders_casts_and_fills_optional_columns() -> None:
    t = conform(pa.table({"value": ['"x"'], "key": ["k"]}), schema.METADATA)
    assert t.schema.equals(schema.METADATA.schema, check_metadata=True)
    assert t.to_pylist() == [{"key": "k", "value": '"x"', "source": None, "rank": None}]


def test_conform_rejects_unknown_and_missing_required_columns() -> None:
    with pytest.raises(ValueError, match="not in the schema"):
        conform(pa.table({"key": ["k"], "value": ["1"], "oops": [1]}), schema.METADATA)
    with pytest.raises(ValueError, match="required column 'value'"):
        conform(pa.table({"key": ["k"]}), schema.METADATA)
