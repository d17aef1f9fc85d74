"""What counts as work: the device categories that are work (and the cause each is), the host categories that are."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from neurontrace.analysis import names
from neurontrace.analysis.labels import per_distinct, spans
from neurontrace.columns import codes, isin, matches, row_codes

DEVICE_WORK = {"compute": "compute", "collective": "collectives", "memcpy": "data_movement",
               "memset": "data_movement", "dma": "data_movement"}
HOST_WORK = ("framework_op", "runtime", "driver", "compile", "load", "python", "transfer")


def device_categories(dev: pa.Table) -> np.ndarray:
    """Per device event, the category it counts as (:func:`names.device_category`: the parser's, unless
    its name says it is a collective, a copy or a wait), computed once per distinct (category, name)."""
    code, keys = device_category_codes(dev)
    return np.asarray(keys, dtype=object)[code] if len(keys) else np.zeros(dev.num_rows, dtype=object)


def device_category_codes(dev: pa.Table) -> tuple[np.ndarray, list[str]]:
    """:func:`device_categories` as (a code per row, the categories the codes index): no per-row strings."""
    code, keys = per_distinct([dev["category"], dev["name"]],
                              lambda c, n: names.device_category(c or "", n or ""))
    keys = [str(k) for k in keys]
    if not keys:
        return np.zeros(dev.num_rows, dtype=np.int64), keys
    context = communication_context(dev, np.asarray(keys, dtype=object)[code])
    if context is not None:
        if "collective" not in keys:
            keys.append("collective")
        code = code.copy()
        code[np.flatnonzero([c is not None for c in context])] = keys.index("collective")
    return code, keys


# Kernels that do the math keep their class inside a dispatch/combine range (an expert GEMM is compute).
_MATH_CLASSES = ("gemm", "attention", "conv")


def communication_context(dev: pa.Table, effective: np.ndarray | None = None) -> list[str | None] | None:
    """Per device event, the name of the device annotation naming expert-parallel communication
    (names.COMMUNICATION_CONTEXT: ``dispatch``, ``combine``, ``all_to_all``) it ran inside on its own stream, for
    compute kernels with generic names (GEMM, attention and convolution kernels stay compute); None for the others,
    or None overall when the device has no such range."""
    ann = isin(dev["category"], ["annotation"])
    if not ann.any():
        return None
    ann &= matches(dev["name"], names.COMMUNICATION_CONTEXT)
    if not ann.any():
        return None
    if effective is None:
        code, keys = per_distinct([dev["category"], dev["name"]], lambda c, n: names.device_category(c or "", n or ""))
        effective = np.asarray(keys, dtype=object)[code]
    name_code, distinct = codes(dev["name"])
    math = np.isin(name_code, [i for i, n in enumerate(distinct) if names.kernel_class(str(n)) in _MATH_CLASSES])
    # "collective" too: called again on the categories this marked (attribution asks for the ranges' names)
    kernel = np.isin(effective, ["compute", "collective"]) & ~math
    where = row_codes(codes(dev["device"])[0].astype(np.int64), codes(dev["track"])[0].astype(np.int64))
    start, end = spans(dev)
    out: list[str | None] = [None] * dev.num_rows
    for w in np.unique(where[ann]).tolist():  # one pass per stream that has such ranges
        a = np.flatnonzero(ann & (where == w))
        a = a[np.argsort(start[a], kind="stable")]
        reach = np.maximum.accumulate(end[a])  # ranges may nest: the furthest end opened so far
        k = np.flatnonzero(kernel & (where == w))
        i = np.searchsorted(start[a], start[k], side="right") - 1
        inside = (i >= 0) & (reach[np.maximum(i, 0)] >= end[k])
        for row, j in zip(k[inside].tolist(), i[inside].tolist(), strict=True):
            out[row] = str(distinct[name_code[a[j]]])
    return out
