"""A parser whose accounting does not add up (read 3, kept 1, skipped 1): the loader must refuse it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neurontrace.load import Probe
from neurontrace.trace import ACCOUNTING_KEY, ParseAccounting, Trace, metadata_table


def sniff(probe: Probe) -> bool:
    return False


def parse(path: Path, **_options: Any) -> Trace:
    acct = ParseAccounting(str(path), "unbalanced", events_read=3, kept={"system_events": 1}, skipped={"bad": 1})
    return Trace(metadata=metadata_table({ACCOUNTING_KEY: acct.as_dict()}, source=str(path)))
