"""What counts as work: the device categories that are work (and the cause each is), the host categories that are."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from neurontrace.analysis import names
from neurontrace.analysis.labels import per_distinct

DEVICE_WORK = {"compute": "compute", "collective": "collectives", "memcpy": "data_movement",
               "memset": "data_movement", "dma": "data_movement"}
HOST_WORK = ("framework_op", "runtime", "driver", "compile", "load", "python", "transfer")


def device_categories(dev: pa.Table) -> np.ndarray:
    """Per device event, the category it counts as (:func:`names.device_category`: the parser's, unless
    its name says it is a collective, a copy or a wait), computed once per distinct (category, name)."""
    codes, keys = per_distinct([dev["category"], dev["name"]],
                                lambda c, n: names.device_category(c or "", n or ""))
    return np.asarray(keys, dtype=object)[codes] if len(keys) else np.zeros(dev.num_rows, dtype=object)
