"""Start-up calls: the host runtime calls that pay for first use (context creation, module loading, allocation).

Two rules mark a CUDA/HIP runtime or driver call (other than a synchronizing one) as start-up
(``host_overhead.startup``), not launch overhead:

- longer than ``names.STARTUP_CALL_NS`` (20 ms): no steady-state launch, allocation or query takes this long;
- far above the median launch (``STARTUP_FACTOR`` times it and at least ``STARTUP_MIN_NS``) *and* a first use:
  the first launch of its kernel (the kernel it launched, through correlation ids) or the first call of its name
  in its process (``cudaFree``, ``cudaStreamCreateWithFlags``, ``cudaStreamGetPriority``, ``hipModuleLoadData``).
  Lazy module loading (CUDA 11.7+ ``CUDA_MODULE_LOADING=LAZY``, the default since 12.2) loads a kernel's module
  on its first launch, so that launch takes milliseconds; the next launch of the same kernel takes microseconds.

Steady-state repeats of a slow call (every step's ``cudaMalloc`` of a thrashing allocator) stay runtime time.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from neurontrace.analysis import names
from neurontrace.analysis.driving import correlation_calls
from neurontrace.analysis.labels import spans
from neurontrace.analysis.work import DEVICE_WORK, device_categories
from neurontrace.columns import codes, isin, lean, matches, row_codes, take

STARTUP_FACTOR = 50  # a first use this many times the median launch ...
STARTUP_MIN_NS = 1_000_000  # ... and at least this long (1 ms) is start-up


def startup_calls(host: pa.Table, flows: pa.Table, dev: pa.Table | None) -> np.ndarray:
    """Per row of ``host``: the call is start-up (the two rules above)."""
    start, end = spans(host)
    dur = end - start
    calls: np.ndarray = isin(host["category"], ["runtime", "driver"])
    if not calls.any():
        return calls
    api = calls & matches(host["name"], names.DEVICE_API) & ~matches(host["name"], names.SYNC)
    out: np.ndarray = api & (dur > names.STARTUP_CALL_NS)
    launch = calls & matches(host["name"], names.DEVICE_LAUNCH)
    if not launch.any():
        return out
    far = api & (dur > max(STARTUP_FACTOR * float(np.median(dur[launch])), STARTUP_MIN_NS))
    if not far.any():
        return out
    # First calls of their name in their process (launches are judged by their kernel, below).
    key = row_codes(codes(host["pid"])[0], codes(host["name"])[0])
    rows = np.flatnonzero(api & ~launch)
    first_of_name = np.zeros(len(out), dtype=bool)
    if len(rows):
        order = rows[np.lexsort((start[rows], key[rows]))]
        first_of_name[order[np.r_[True, key[order][1:] != key[order][:-1]]]] = True
    out |= far & first_of_name
    if dev is not None and dev.num_rows and (far & launch).any():
        work = np.flatnonzero(np.isin(device_categories(dev), list(DEVICE_WORK)))
        if len(work):
            sub = take(lean(dev), work)  # names, times and links: never a copy of the rows' args
            link = correlation_calls(host, flows, sub, np.flatnonzero(launch))
            kernel = codes(sub["name"])[0]
            order = np.lexsort((sub["ts_ns"].to_numpy(), kernel))
            first = order[np.r_[True, kernel[order][1:] != kernel[order][:-1]]]  # first run of each kernel
            call = link[first]
            call = call[call >= 0]
            out[call[far[call]]] = True
    return out
