"""The viewer's compile spans: a host event that is compilation is drawn in the ``compile`` colour on its host
row, whatever category its profiler gave it (torch.compile's ``(dynamo_timed)`` ranges are ``cpu_op`` s), by the
same rule the analyses use (analysis/compile_spans.py). The compile summary is the Compile tab
(app/compile_panel.py) and the ``compile`` section's text in the Report tab."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from neurontrace.analysis.compile_spans import compile_mask
from neurontrace.app.palette import CATEGORIES

COMPILE_CODE = CATEGORIES.index("compile")


def with_compile(table: pa.Table, categories: np.ndarray) -> np.ndarray:
    """``categories`` (the palette codes of ``table``'s host events) with compile events coded ``compile``."""
    mask = compile_mask(table)
    if not mask.any():
        return categories
    out: np.ndarray = np.array(categories, copy=True)  # int16 codes
    out[mask] = COMPILE_CODE
    return out
