"""The viewer's search box: which event names match, in time linear in the names' length.

A search is a case-insensitive substring, or a regular expression written ``/like this/``. The pattern
comes from whoever types into the page, so it must never freeze the server: Python's ``re``
backtracks (``/(\\w|\\w)*!/`` takes exponential time per name) while holding the GIL, and every
other request waits. Both kinds therefore run in Arrow's compute kernels, whose regular expressions
are RE2's: matching takes time linear in the text for every pattern, and the kernel runs without
the GIL. A pattern RE2 does not accept (backreferences, lookaround) or that would compile too large
is refused by name on the page, never run by another engine.

Pure Arrow and NumPy; no Dash.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MAX_QUERY_CHARS = 500  # longer search text is ignored (the box is for names, not documents)
REFUSED_PATTERN = "refused: not a pattern the linear-time engine (RE2) accepts"


def matching_names(names: np.ndarray, text: object) -> tuple[np.ndarray, str | None]:
    """(codes of the names that match ``text``, None) or (no codes, the reason the search was refused).

    ``names`` is the viewer's table of distinct event names (its codes are positions in it). A query
    that is not text, blank or longer than ``MAX_QUERY_CHARS`` matches nothing, silently."""
    none = np.zeros(0, dtype=np.int64)
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_QUERY_CHARS:
        return none, None
    needle = text.strip()
    if any("\ud800" <= c <= "\udfff" for c in needle):  # Arrow cannot encode it: refuse, by name
        return none, "refused: the search text holds a lone surrogate (not a character), so it matches no name"
    arr = pa.array(names, type=pa.string(), from_pandas=True) if len(names) else pa.array([], pa.string())
    if len(needle) > 2 and needle.startswith("/") and needle.endswith("/"):
        try:
            hit = pc.match_substring_regex(arr, needle[1:-1], ignore_case=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            reason = str(exc).splitlines()[0].removeprefix("Invalid regular expression: ")
            return none, f"{REFUSED_PATTERN} ({reason}); backreferences and lookaround are not supported"
    else:
        hit = pc.match_substring(arr, needle, ignore_case=True)
    mask = np.asarray(pc.fill_null(hit, False).to_numpy(zero_copy_only=False), dtype=bool)
    return np.flatnonzero(mask).astype(np.int64), None
