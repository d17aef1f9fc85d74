"""Human units, scaled per value: how every text report shows times, sizes and rates.

Neuron executions are microseconds long and GPU steps milliseconds, so one fixed unit prints either
"0.000 ms" or a wall of digits. Each value here picks its own unit (ns, µs, ms, s; B, KiB, MiB, GiB)
and keeps three significant digits::

    >>> duration(850), duration(20_080), duration(1_500_000), duration(2_350_000_000)
    ('850 ns', '20.1 µs', '1.50 ms', '2.35 s')
    >>> duration(0), duration(None), duration(-4_200), duration(1_200_000, "+")
    ('0 ns', '-', '-4.20 µs', '+1.20 ms')
    >>> duration(118_434_842_380_000_000), duration(3 * 86_400e9)
    ('3.75 years', '3.00 days')
    >>> size(1024), size(655_360), size(3.2e9)
    ('1.00 KiB', '640 KiB', '2.98 GiB')
"""

from __future__ import annotations

# Days and years: only clocks that disagree (two runs on other time bases) give such spans; say so plainly.
_TIME = ((365.25 * 86_400e9, "years"), (86_400e9, "days"), (1e9, "s"), (1e6, "ms"), (1e3, "µs"))
_SIZE = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))
_RATE = ((1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"))  # decimal, as hardware specs quote them


def _digits(v: float, sign: str = "") -> str:
    a = abs(v)
    return f"{v:{sign},.2f}" if a < 10 else f"{v:{sign},.1f}" if a < 100 else f"{v:{sign},.0f}"


def _scaled(v: float, units: tuple[tuple[float, str], ...], sign: str = "") -> str | None:
    """``v`` in the largest of ``units`` (largest first) in which it is at least 1; None below them all.
    999.96 µs prints as 1.00 ms, not 1000 µs."""
    for scale, unit in units:
        if abs(v) >= scale * 0.9995:
            return f"{_digits(v / scale, sign)} {unit}"
    return None


def duration(ns: float | None, sign: str = "") -> str:
    """A duration in nanoseconds, in the largest unit in which it is at least 1 (``-`` for None).

    ``sign="+"`` writes the sign of positive values too (deltas: ``+1.20 ms``).
    """
    if ns is None:
        return "-"
    scaled = _scaled(ns, _TIME, sign)
    if scaled is not None:
        return scaled
    return f"{ns:{sign}.0f} ns" if float(ns).is_integer() else f"{_digits(ns, sign)} ns"


def seconds(s: float | None) -> str:
    """A duration in seconds (Neuron summaries' unit), scaled like :func:`duration`."""
    return "-" if s is None else duration(s * 1e9)


def size(n: float | None) -> str:
    """A byte count in binary units (``-`` for None)."""
    if n is None:
        return "-"
    return _scaled(n, _SIZE) or f"{n:.0f} B"


def rate(bytes_per_s: float | None) -> str:
    """A bandwidth, bytes per second, in decimal units (GB/s as hardware specs quote them)."""
    if bytes_per_s is None:
        return "-"
    return _scaled(bytes_per_s, _RATE) or f"{bytes_per_s:.0f} B/s"


def share(fraction: float | None) -> str:
    """A fraction 0..1 as a percentage; small non-zero shares keep a significant digit."""
    if fraction is None:
        return "-"
    pct = 100 * fraction
    if pct and abs(pct) < 0.1:
        return f"{pct:.2g}%"
    return f"{pct:.1f}%"
