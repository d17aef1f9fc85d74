"""neurontrace.columns.take: Arrow's take, without concatenating a chunked column first."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from neurontrace.columns import take

CHUNKED = pa.table({"id": pa.chunked_array([[0, 1, 2], [3, 4], [5, 6, 7, 8]]),
                    "args": pa.chunked_array([["a", None, "c"], ["d", "e"], ["f", "g", "h", "i"]])})


@pytest.mark.parametrize("rows", [[1, 3, 8], [8, 0, 4], [2, 2, 7, 2], [], [5]])
def test_take_equals_arrows_take(rows: list[int]) -> None:
    """Sorted, unsorted and repeated rows, of a table and of a column, as Arrow's own take gives them."""
    want = CHUNKED.take(pa.array(rows, pa.int64()))
    assert take(CHUNKED, np.array(rows)).equals(want)
    assert take(CHUNKED["args"], np.array(rows)).equals(want["args"])


def test_take_of_a_single_chunk_is_arrows() -> None:
    col = pa.chunked_array([["x", "y", "z"]])
    assert take(col, np.array([2, 0])).to_pylist() == ["z", "x"]

