"""The one checked conversion of a number read from a file to a double.

JSON and text numbers have no size limit (``"Bytes": 999...`` with hundreds of digits, a FLOPs
value longer than a double holds); Python's ``float()`` raises ``OverflowError`` on such an int and
gives ``inf`` for such text. Every parser turns numbers it computes with into doubles through
:func:`checked_float`, which answers None for a value beyond a double (or not a number), so the
caller skips and counts it, or keeps the original text, instead of failing.
"""

from __future__ import annotations

import math
from typing import Any

INT64_MAX = (1 << 63) - 1


def checked_float(v: Any) -> float | None:
    """``v`` as a finite double, or None when it is not a number or lies beyond a double."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def checked_text_number(text: str) -> int | float | None:
    """A decimal number written as text: an int when it is one within int64, else a finite double;
    None when the text is a number beyond a double (the caller keeps the text and counts it)."""
    stripped = text.strip()
    if stripped.lstrip("+-").isdigit():
        n = int(stripped)
        return n if abs(n) <= INT64_MAX else checked_float(n)
    try:
        return checked_float(float(stripped))
    except ValueError:
        return None


def int_of(v: Any) -> int | None:
    """An int, or decimal digits as text (ids and sizes that some writers quote), as an int; else None (bools too)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return None
