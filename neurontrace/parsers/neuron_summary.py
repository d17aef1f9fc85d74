"""Neuron ``summary-json`` and ``summary-text`` (``view --output-format summary-*``) → `Trace`.

Spec: shared/formats/neuron.md §4. Both hold one flat metrics object per profile, keyed by the
profile id (``n_<40 hex>`` device, ``s_<40 hex>`` system); summary-text writes a header line per
profile and indented ``key value`` lines (nested ``name:`` blocks in system summaries, flattened to
``name.key``), possibly after log lines or a shell prompt, which are skipped.

Each profile becomes one ``metadata`` row, key ``neuron.summary``::

    {"profile_id": "n_…", "kind": "device" | "system", "device": "neuron:nc0" | null,
     "percent_scale": "...", "metrics": {"total_time": 2.6e-05, "mfu_estimated_percent": 0.0097, ...}}

Units follow the metric names (:func:`metrics_table` spells them out): times in seconds, ``*_ns``
in ns, ``*_bytes`` in bytes, and every ``*_percent`` value is a **fraction 0..1** (Neuron's own
convention despite the name, neuron.md §3.5; an output on the 0-100 scale is divided by 100, and
``percent_scale`` says which). There are no events: the trace's event tables stay empty.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from neurontrace._io import read_all
from neurontrace._numbers import checked_float, checked_text_number
from neurontrace.errors import MalformedTraceError
from neurontrace.load import Probe
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import ACCOUNTING_KEY, ParseAccounting, Trace, metadata_table

from ._neuron_common import SYNTHETIC_NOTE, metric_unit, percent_to_fraction
from ._normalized_meta import with_normalized

FORMAT = "neuron-summary"
_ID = r"[ns]_[0-9a-f]{40}"
_JSON_HEAD = re.compile(rb'^\s*\{\s*"' + _ID.encode() + rb'"\s*:\s*\{')
_TEXT_HEAD = re.compile(rb"(?m)^" + _ID.encode() + rb"[ \t]*\r?\n[ \t]+\S+[ \t]+\S")
_HEADER = re.compile(rf"^({_ID})\s*:?\s*$")
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def sniff(probe: Probe) -> bool:
    if probe.is_dir:
        return False
    head = probe.head
    return bool(_JSON_HEAD.match(head) or _TEXT_HEAD.search(head))


def parse(path: Path, *, progress: Progress = no_progress) -> Trace:
    data, _ = read_all(Path(path), progress)
    acct = ParseAccounting(source=str(path), format=FORMAT)
    text = data.decode("utf-8", "replace")
    if text.lstrip().startswith("{"):
        profiles, synthetic = _from_json(text, acct, str(path)), False
        fmt = "summary-json"
    else:
        profiles, synthetic = _from_text(text, acct)
        fmt = "summary-text"
    if not profiles:
        raise MalformedTraceError(f"{path}: no n_<id>/s_<id> profile in this summary; was the command's output "
                                  "cut off before the first profile header?")
    summaries = []
    for pid, metrics in profiles.items():
        synthetic = synthetic or bool(metrics.get("synthetic"))
        summaries.append(summary_fact(pid, metrics))
    rows = [metadata_table({"neuron.summary": s}, source=str(path)) for s in summaries]
    facts: dict[str, Any] = {"format": FORMAT, "neuron.summary_format": fmt, "backend": "neuron",
                             "clock": "none (summary metrics only, no events)", "synthetic": synthetic}
    if synthetic:
        facts["synthetic_note"] = SYNTHETIC_NOTE
    facts[ACCOUNTING_KEY] = acct.as_dict()
    return with_normalized(Trace(metadata=pa.concat_tables([metadata_table(facts, source=str(path)), *rows])))


def summary_fact(profile_id: str | None, metrics: dict[str, Any]) -> dict[str, Any]:
    """One profile's metrics as stored under ``neuron.summary`` (percent values as fractions)."""
    values, scale = percent_to_fraction(metrics)
    kind = "system" if (profile_id or "").startswith("s_") else "device"
    nc = values.get("nc_idx")
    return {"profile_id": profile_id, "kind": kind, "device": f"neuron:nc{nc}" if isinstance(nc, int) else None,
            "percent_scale": scale, "metrics": values}


def _from_json(text: str, acct: ParseAccounting, source: str) -> dict[str, dict[str, Any]]:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past the parser's limit
        raise MalformedTraceError(f"{source}: not valid JSON ({exc}); was the summary cut off?") from exc
    out: dict[str, dict[str, Any]] = {}
    for pid, metrics in doc.items() if isinstance(doc, dict) else ():
        if not isinstance(metrics, dict):
            acct.events_read += 1
            acct.skip("top-level value that is not a profile's metrics", 1)
            continue
        flat = _flatten(metrics)
        acct.events_read += len(flat)
        acct.keep("metadata", len(flat))
        out[pid] = flat
    return out


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _from_text(text: str, acct: ParseAccounting) -> tuple[dict[str, dict[str, Any]], bool]:
    out: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    blocks: list[tuple[int, str]] = []  # (indent, name) of the open nested blocks
    synthetic = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        acct.events_read += 1
        if line.lstrip().startswith("#"):
            synthetic = synthetic or "SYNTHETIC" in line
            acct.skip("comment line", 1)
            continue
        header = _HEADER.match(line.strip()) if not line[0].isspace() else None
        if header:
            current = out.setdefault(header.group(1), {})
            blocks = []
            acct.skip("profile header line", 1)
            continue
        if current is None or not line[0].isspace():
            acct.skip("log or prompt line outside a profile block", 1)
            continue
        indent = len(line) - len(line.lstrip())
        while blocks and indent <= blocks[-1][0]:
            blocks.pop()
        key, _, value = line.strip().partition(" ")
        prefix = "".join(f"{name}." for _, name in blocks)
        if not value.strip():
            if key.endswith(":"):
                blocks.append((indent, key.rstrip(":")))
                acct.skip("nested block header", 1)
            else:
                acct.skip("line without a value", 1)
            continue
        parsed = _value(value.strip())
        if parsed is _TOO_LARGE:
            acct.skip("metric value beyond a double (kept out)", 1)
            continue
        current[prefix + key.rstrip(":")] = parsed
        acct.keep("metadata", 1)
    return out, synthetic


_TOO_LARGE = object()


def _value(text: str) -> Any:
    """A summary-text value: a number through the one checked conversion (beyond a double:
    ``_TOO_LARGE``, skipped and counted), a boolean, or the text."""
    if re.fullmatch(r"[+-]?\d+", text) or _FLOAT.match(text):
        number = checked_text_number(text)
        return _TOO_LARGE if number is None else number
    if text in ("true", "false"):
        return text == "true"
    return text


def metrics_table(trace: Trace) -> pa.Table:
    """Every ``neuron.summary`` metric of a trace as rows: profile, device, metric, value or text, unit.

    Works for summaries from any Neuron input (Explorer ``Summary`` table, legacy JSON, summary files).
    """
    rows: dict[str, list[Any]] = {k: [] for k in ("profile_id", "kind", "device", "metric", "value", "text", "unit")}
    for fact in trace.meta_all("neuron.summary"):
        for s in fact if isinstance(fact, list) else [fact]:
            for k, v in s.get("metrics", {}).items():
                number = checked_float(v) is not None
                for col, val in zip(rows, (s.get("profile_id"), s.get("kind"), s.get("device"), k,
                                           checked_float(v), None if number else json.dumps(v),
                                           metric_unit(k)), strict=True):
                    rows[col].append(val)
    return pa.table({
        "profile_id": pa.array(rows["profile_id"], pa.string()), "kind": pa.array(rows["kind"], pa.string()),
        "device": pa.array(rows["device"], pa.string()), "metric": pa.array(rows["metric"], pa.string()),
        "value": pa.array(rows["value"], pa.float64()), "text": pa.array(rows["text"], pa.string()),
        "unit": pa.array(rows["unit"], pa.string()),
    })
