"""Where a ``diagnose`` run spends its time: wall seconds per stage and per registered section.

A caller that wants the figures passes a :class:`Timings` (a ``dict`` of stage name -> seconds) to
:func:`neurontrace.analysis.diagnose.diagnose`; the run adds to it as it goes: the core stages
(``sanitize``, ``frames``, ``fallback``, ``attribution``), one entry per device section
(``device:<key>``, summed over devices and ranks), one per section (``section:<key>``), the combine
(``combine``) and the finding families (``findings``). ``neurontrace diagnose --timings``
adds the loading, compile-log and rendering stages and prints the table on stderr (docs/diagnose.md).
Nothing is timed when no ``Timings`` is given.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Timings(dict[str, float]):
    """Seconds per stage, in the order the stages first ran; a stage run several times adds up."""

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self[name] = self.get(name, 0.0) + time.perf_counter() - t0

    def lines(self) -> list[str]:
        """One plain line per stage, then the total: ``  section:memory   0.412 s  (3.1%)``."""
        total = sum(self.values())
        width = max((len(k) for k in self), default=5)
        out = [f"  {k:<{width}}  {v:8.3f} s  ({100 * v / total if total else 0.0:4.1f}%)" for k, v in self.items()]
        out.append(f"  {'total':<{width}}  {total:8.3f} s")
        return out


@contextmanager
def stage(timings: Timings | None, name: str) -> Iterator[None]:
    """Time the block into ``timings[name]``, or do nothing when ``timings`` is None."""
    if timings is None:
        yield
        return
    with timings.stage(name):
        yield
