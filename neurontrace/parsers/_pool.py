"""The memory pool of the Kineto parse's own Arrow allocations, and ``pyarrow.compute`` bound to it.

The scanner's column buffers come from the C heap (malloc). Arrow's default pool (mimalloc in the wheels)
is a second heap beside it that keeps what the parse frees for later reuse: on the corpus linear_kineto
trace (21 MB) the normalizer's 31 MB of short-lived Arrow allocations left peak RSS growth at 2.73x the
JSON, against 1.83x with them on the one C heap (``bench/parse_speed.py --versus``). So the parse
passes :data:`POOL`, the system allocator, to each Arrow call it makes, explicitly: the process's default
pool, which the caller's own Arrow work uses, is never changed. A process that names its pool with
``ARROW_DEFAULT_MEMORY_POOL`` keeps it for the parse too.

``from ._pool import POOL, pc`` gives a drop-in for ``pyarrow.compute`` whose functions are called with
``memory_pool=POOL`` (``fill_null``, which takes no pool, runs as the ``coalesce`` it wraps).
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as _pc

POOL: pa.MemoryPool = (pa.default_memory_pool() if os.environ.get("ARROW_DEFAULT_MEMORY_POOL")
                       else pa.system_memory_pool())


def fill_null(values: Any, fill_value: Any) -> Any:
    """``pyarrow.compute.fill_null`` on :data:`POOL` (the same steps: a scalar of the values' type, then
    ``coalesce``)."""
    if not isinstance(fill_value, pa.Array | pa.ChunkedArray | pa.Scalar):
        fill_value = pa.scalar(fill_value, type=values.type)
    elif values.type != fill_value.type:
        fill_value = pa.scalar(fill_value.as_py(), type=values.type)
    return _pc.call_function("coalesce", [values, fill_value], memory_pool=POOL)


def _takes_pool(fn: Any) -> bool:
    try:
        return "memory_pool" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # not a function with a signature (a class, a constant)
        return False


class _Pooled:
    """``pyarrow.compute``'s names, each function that takes a pool bound to :data:`POOL` (looked up once,
    then an attribute like any other)."""

    def __getattr__(self, name: str) -> Any:
        value = getattr(_pc, name)
        if name == "fill_null":
            value = fill_null
        elif callable(value) and _takes_pool(value):
            value = functools.partial(value, memory_pool=POOL)
        setattr(self, name, value)
        return value


pc: Any = _Pooled()
