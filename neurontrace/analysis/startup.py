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

from dataclasses import dataclass, field

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


@dataclass
class FirstUses:
    """What :func:`sliced_startup_calls` carries from slice to slice of a rank, in time order."""

    median_launch_ns: float | None  # the whole rank's median launch (None: it launched nothing)
    names: set[tuple[str, str]] = field(default_factory=set)  # (pid, name) of the calls already seen
    kernels: set[str] = field(default_factory=set)  # kernels already run


def sliced_startup_calls(host: pa.Table, flows: pa.Table, dev: pa.Table, owned: tuple[int, int],
                         seen: FirstUses) -> np.ndarray:
    """The event ids of the start-up calls of one time slice of a rank (slices visited in time order): the two
    rules of :func:`startup_calls` with the whole rank's median launch, a first use being first in the rank
    (``seen`` holds what earlier slices had). A first launch is found through the first run of its kernel in
    the slice where that run starts; a launch call held by an earlier slice only (the run started after it) is
    not seen there, and stays launch time (docs/scale.md, "diagnose DATASET")."""
    start, end = spans(host)
    dur = end - start
    ids = host["event_id"].to_numpy()
    own = (start >= owned[0]) & (start < owned[1])
    calls: np.ndarray = isin(host["category"], ["runtime", "driver"])
    if not calls.any():
        return np.zeros(0, dtype=np.int64)
    api = calls & matches(host["name"], names.DEVICE_API) & ~matches(host["name"], names.SYNC)
    out: np.ndarray = api & (dur > names.STARTUP_CALL_NS)
    launch = calls & matches(host["name"], names.DEVICE_LAUNCH)
    if seen.median_launch_ns is None:
        return np.asarray(ids[out], dtype=np.int64)
    far = api & (dur > max(STARTUP_FACTOR * seen.median_launch_ns, STARTUP_MIN_NS))
    pid = host["pid"].cast(pa.string()).to_pylist()
    name = host["name"].cast(pa.string()).to_pylist()
    for r in np.flatnonzero(api & ~launch & own)[np.argsort(start[api & ~launch & own], kind="stable")].tolist():
        key = (str(pid[r]), str(name[r]))
        if key not in seen.names:
            seen.names.add(key)
            out[r] |= bool(far[r])
    if dev.num_rows:
        work = np.flatnonzero(np.isin(device_categories(dev), list(DEVICE_WORK)) & (
            (dev["ts_ns"].to_numpy() >= owned[0]) & (dev["ts_ns"].to_numpy() < owned[1])))
        if len(work):
            sub = take(lean(dev), work)
            kernel = sub["name"].cast(pa.string()).to_pylist()
            first: dict[str, int] = {}
            for i in np.argsort(sub["ts_ns"].to_numpy(), kind="stable").tolist():
                if kernel[i] not in seen.kernels:
                    first.setdefault(str(kernel[i]), i)
            seen.kernels |= set(first)
            if first and (far & launch).any():
                link = correlation_calls(host, flows, sub, np.flatnonzero(launch))
                call = link[np.fromiter(first.values(), np.int64, len(first))]
                call = call[call >= 0]
                out[call[far[call]]] = True
    return np.asarray(ids[out], dtype=np.int64)
