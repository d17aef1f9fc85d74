"""Putting device time on the host's wall clock (neuron.md §2).

Device tables are nanoseconds relative to the device profile; system tables are Unix-epoch
nanoseconds. The offset between them comes, best first, from:

1. ``nc_exec_running`` hardware events of the system profile (epoch ns, per NeuronCore) paired with
   the executions of ``ExecutionInfo`` (device ns): offset = median(host start - device start) over
   the paired executions, and the residual (largest deviation from that median) is reported as the
   uncertainty. Pairing tries every shift of one sequence against the other and keeps the one whose
   offsets agree best, because a system profile may hold executions the device profile does not.
2. ``Metadata.first_ts`` (Unix time as text) as the wall-clock time of the profile start, when
   there is no system profile. Its precision is whatever the text carries.
3. Nothing: device times stay relative to the profile start (clock ``neuron_device_relative_ns``).
"""

from __future__ import annotations

import calendar
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

_TS = re.compile(
    r"^\s*(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s*"
    r"(?:(Z)|([+-])(\d{2}):?(\d{2}))?\s*(?:UTC)?\s*$"
)
_MAX_SHIFTS = 4096

EPOCH_CLOCK = "unix_epoch_ns"
DEVICE_CLOCK = "neuron_device_relative_ns"


@dataclass
class Alignment:
    offset_ns: int = 0
    method: str = "none"
    residual_ns: int | None = None
    matched: int = 0
    note: str = "device times are relative to the start of the device profile"

    @property
    def clock(self) -> str:
        return EPOCH_CLOCK if self.method != "none" else DEVICE_CLOCK

    def fact(self) -> dict[str, Any]:
        return {**asdict(self), "clock": self.clock}


def epoch_ns(text: Any) -> int | None:
    """Unix nanoseconds from ``2025-12-18 15:35:56.592459482 +0000 UTC`` and similar; None if not that."""
    if not isinstance(text, str):
        return None
    if text.strip().isdigit():
        return int(text.strip())
    m = _TS.match(text)
    if not m:
        return None
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    frac = (m.group(7) or "").ljust(9, "0")
    seconds = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    if m.group(9):
        sign = 1 if m.group(9) == "+" else -1
        seconds -= sign * (int(m.group(10)) * 3600 + int(m.group(11)) * 60)
    return seconds * 1_000_000_000 + int(frac)


def align(
    *,
    device_exec_starts: list[int],
    host_exec_starts: list[int],
    metadata: dict[str, Any],
    device_min_ts: int | None,
) -> Alignment:
    if device_exec_starts and host_exec_starts:
        return _by_executions(np.array(sorted(device_exec_starts), np.int64),
                              np.array(sorted(host_exec_starts), np.int64))
    first = epoch_ns(metadata.get("first_ts"))
    if first is not None and first > 0:
        hw0 = metadata.get("first_hw_timestamp")
        if isinstance(hw0, int) and hw0 > 0 and device_min_ts is not None and device_min_ts >= hw0:
            # Device rows carry raw hardware timestamps: first_ts is the wall time of first_hw_timestamp.
            return Alignment(first - hw0, "metadata_first_ts", _precision(metadata.get("first_ts")), 0,
                             "Metadata.first_ts is the wall-clock time of Metadata.first_hw_timestamp")
        return Alignment(first, "metadata_first_ts", _precision(metadata.get("first_ts")), 0,
                         "Metadata.first_ts is the wall-clock time of device time 0 (the profile start); "
                         "residual_ns is the precision of that text")
    return Alignment()


def _by_executions(dev: np.ndarray, host: np.ndarray) -> Alignment:
    short, long_, dev_is_short = (dev, host, True) if len(dev) <= len(host) else (host, dev, False)
    best: tuple[int, np.ndarray] | None = None
    for k in range(min(len(long_) - len(short), _MAX_SHIFTS) + 1):
        window = long_[k:k + len(short)]
        offsets = window - short if dev_is_short else short - window
        spread = int(offsets.max() - offsets.min())
        if best is None or spread < best[0]:
            best = (spread, offsets)
    assert best is not None
    offsets = best[1]
    # Median around the first offset: epoch-ns values do not survive float64 (spacing 256 ns).
    offset = int(offsets[0]) + round(float(np.median(offsets - offsets[0])))
    residual = int(np.abs(offsets - offset).max().item())
    return Alignment(offset, "nc_exec_running", residual, len(offsets),
                     "median of (nc_exec_running start - ExecutionInfo.execution_start_ts) over paired "
                     "executions; residual_ns is the largest deviation from it")


def _precision(text: Any) -> int:
    m = _TS.match(text) if isinstance(text, str) else None
    digits: int = len(m.group(7) or "") if m else 0
    return int(10 ** (9 - digits))
