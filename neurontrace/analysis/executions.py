"""Device executions, each counted once.

One NeuronCore execution can appear as several ``execution`` rows: the device profile's
``ExecutionInfo`` row and the system profile's ``nc_exec_running`` row describe the same run (on two
clocks, aligned to within the alignment residual), and with LNC > 1 the system profile holds one
``nc_exec_running`` row per *physical* core (formats/neuron.md addendum, "Parquet in practice":
"merge them per flow_id"). Counting rows would double the executions and halve the time per step.

Rows of one device and rank whose intervals overlap are one execution (overlap, not touch:
back-to-back executions stay apart); it spans from the earliest start to the latest end.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from neurontrace.columns import select


def device_executions(dev: pa.Table) -> pa.Table:
    """One row per execution: ``device``, ``rank``, ``ts_ns``, ``dur_ns``, ``rows`` (rows merged), in time order."""
    ex = select(dev, "category", "execution")
    device = np.asarray(ex["device"].cast(pa.string()).fill_null("").to_numpy(zero_copy_only=False), dtype=object)
    rank = np.asarray(ex["rank"].fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    s = ex["ts_ns"].to_numpy()
    e = s + ex["dur_ns"].to_numpy()
    key = np.unique(device.astype(str), return_inverse=True)[1] if len(device) else np.zeros(0, np.int64)
    order = np.lexsort((s, rank, key))
    k, r, s, e, d = key[order], rank[order], s[order], e[order], device[order]
    new_group = np.ones(len(s), dtype=bool)
    if len(s) > 1:
        # Running max of ends within a (device, rank) run: a row starting before it overlaps the group.
        reach = e.copy()
        for i in range(1, len(s)):  # one pass over executions (few per profile: steps, not instructions)
            if k[i] == k[i - 1] and r[i] == r[i - 1]:
                reach[i] = max(reach[i - 1], e[i])
        same = (k[1:] == k[:-1]) & (r[1:] == r[:-1]) & (s[1:] < reach[:-1])
        new_group[1:] = ~same
    group = np.cumsum(new_group) - 1
    n = int(group[-1]) + 1 if len(group) else 0
    start = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    end = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(start, group, s)
    np.maximum.at(end, group, e)
    first = np.flatnonzero(new_group)
    out = pa.table({
        "device": pa.array([str(x) or None for x in d[first]], pa.string()),
        "rank": pa.array([int(x) if x >= 0 else None for x in r[first]], pa.int32()),
        "ts_ns": pa.array(start, pa.int64()), "dur_ns": pa.array(end - start, pa.int64()),
        "rows": pa.array(np.bincount(group, minlength=n), pa.int64()),
    })
    return out.take(pa.array(np.argsort(start, kind="stable")))
