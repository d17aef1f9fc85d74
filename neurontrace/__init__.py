"""neurontrace: where did the time go, why was the accelerator waiting, which line is responsible?

    >>> import neurontrace
    >>> trace = neurontrace.load("sample_traces/cpu_train_loop.pt.trace.json.gz")  # doctest: +SKIP

Importing the package loads neither torch nor Dash.
"""

from __future__ import annotations

import importlib
from typing import Any

from neurontrace._version import __version__
from neurontrace.errors import NeurontraceError
from neurontrace.load import FORMATS, detect, load, register
from neurontrace.trace import ParseAccounting, Trace

__all__ = [
    "FORMATS", "NeurontraceError", "ParseAccounting", "Trace", "__version__", "capture", "detect", "load",
    "open_dataset", "register",
]


def __getattr__(name: str) -> Any:
    # `neurontrace.capture` (a callable module) is imported on first use; it loads torch only when
    # a capture starts, so `import neurontrace` stays light.
    if name == "capture":
        return importlib.import_module("neurontrace.capture")
    if name == "open_dataset":  # a many-rank dataset (neurontrace/dataset.py), opened lazily
        return importlib.import_module("neurontrace.dataset").open_dataset
    raise AttributeError(f"module 'neurontrace' has no attribute {name!r}")
