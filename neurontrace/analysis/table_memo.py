"""Work several sections do on the same Trace table, done once per table: a result kept beside the table.

Arrow tables are immutable, so a result computed from one table object (a mask over its rows, its codes) holds
for as long as that object lives. ``per_table`` keeps it keyed by the object's identity and a name, and drops it
when the table is collected (a weak reference): nothing here keeps a table, or the memory behind it, alive. A
sanitized trace holds new table objects, so nothing computed before sanitizing is reused on it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

T = TypeVar("T")

_KEPT: dict[int, dict[str, Any]] = {}


def _forget(key: int) -> None:
    _KEPT.pop(key, None)


def per_table(table: pa.Table, name: str, compute: Callable[[], T]) -> T:
    """``compute()`` once per (table object, ``name``); later calls with the same table get the same value.
    Callers must not change what they are given (a numpy result is handed out read-only)."""
    key = id(table)
    kept = _KEPT.get(key)
    if kept is None:
        kept = _KEPT[key] = {}
        weakref.finalize(table, _forget, key)
    if name not in kept:
        value = compute()
        for part in value if isinstance(value, tuple) else (value,):
            if isinstance(part, np.ndarray):
                part.flags.writeable = False
        kept[name] = value
    result: T = kept[name]
    return result
