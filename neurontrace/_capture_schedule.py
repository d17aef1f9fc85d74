"""Which steps a capture records, and what each recorded window is called (pure arithmetic, no torch).

The first iterations of a run are not like the rest: compilation of unseen shapes (TorchNeuron,
torch.compile, XLA), lazy initialisation, cache loads and first-touch allocations all land there.
So a :class:`Schedule` records them as their own ``startup`` window, then records ``steady``
windows with torch.profiler's wait/warmup/active cycle, and the two are never mixed::

    step:    0 | 1    2      3 4 5 | 6    7      8 9 10 | ...
    startup  R |                   |                    |          (startup=1)
    cycle 0    | wait warmup R R S |                    |          (wait=1, warmup=1, active=3)
    cycle 1    |                   | wait warmup R R S  |          (repeat=2)

``R`` records, ``S`` records and saves (the window is exported after that step), warmup runs the
profiler but discards what it saw (its start-up cost stays out of the window).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Action = Literal["none", "warmup", "record", "save"]

STARTUP = "startup"  # the first steps of the run: compilation, initialisation, first touches
STEADY = "steady"  # a later window: steady-state steps
WHOLE_RUN = "whole_run"  # one window from the first step to the end of the capture

# Unbounded active phase for Schedule.everything(): a window that never closes before the exit.
_FOREVER = 1 << 62


@dataclass(frozen=True)
class Window:
    """A recorded window as planned: its index, phase and the steps it will cover."""

    index: int
    phase: str
    first_step: int
    last_step: int  # as planned; a capture that ends early cuts it short

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Schedule:
    """Steps to record: ``startup`` first steps, then ``repeat`` wait/warmup/active cycles.

    ``repeat=0`` repeats the cycle until the capture ends. ``startup=0`` skips the startup window
    (then the first cycle starts at step 0, as with ``torch.profiler.schedule``).
    """

    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 1
    startup: int = 1

    def __post_init__(self) -> None:
        for name in ("wait", "warmup", "active", "repeat", "startup"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"schedule: {name} must be a whole number >= 0, got {value!r}")
        if self.active < 1:
            raise ValueError(f"schedule: active must be at least 1 step, got {self.active}")

    @classmethod
    def everything(cls) -> Schedule:
        """One window from the first step to the end of the capture."""
        return cls(wait=0, warmup=0, active=_FOREVER, repeat=1, startup=0)

    @classmethod
    def coerce(cls, value: Schedule | tuple[int, ...] | str | None) -> Schedule:
        """A Schedule from a Schedule, ``None`` (the default), ``"all"`` or a tuple.

        A tuple is ``(wait, warmup, active)`` or ``(wait, warmup, active, repeat)`` as in
        ``torch.profiler.schedule``; the startup window keeps its default.
        """
        if value is None:
            return cls()
        if isinstance(value, Schedule):
            return value
        if value == "all":
            return cls.everything()
        if isinstance(value, tuple) and len(value) in (3, 4):
            return cls(*value)
        raise ValueError(
            f"schedule: expected a Schedule, 'all' or a (wait, warmup, active[, repeat]) tuple, got {value!r}"
        )

    @property
    def cycle(self) -> int:
        return self.wait + self.warmup + self.active

    def action(self, step: int) -> Action:
        """What the profiler does during ``step``."""
        if step < self.startup:
            return "save" if step == self.startup - 1 else "record"
        offset = step - self.startup
        cycle, pos = divmod(offset, self.cycle)
        if self.repeat and cycle >= self.repeat:
            return "none"
        if pos < self.wait:
            return "none"
        if pos < self.wait + self.warmup:
            return "warmup"
        return "save" if pos == self.cycle - 1 else "record"

    def window(self, step: int) -> Window | None:
        """The window that records ``step``, or None when the step is not recorded."""
        if self.action(step) in ("none", "warmup"):
            return None
        if step < self.startup:
            return Window(0, STARTUP, 0, self.startup - 1)
        cycle = (step - self.startup) // self.cycle
        first = self.startup + cycle * self.cycle + self.wait + self.warmup
        index = cycle + (1 if self.startup else 0)
        phase = WHOLE_RUN if self.active == _FOREVER else STARTUP if first == 0 else STEADY
        return Window(index, phase, first, first + self.active - 1)

    def next_window(self, step: int) -> Window | None:
        """The first window that records ``step`` or a later step (None when no more will)."""
        if step < self.startup:
            return self.window(step)
        offset = step - self.startup
        cycle, pos = divmod(offset, self.cycle)
        if pos >= self.wait + self.warmup:
            return self.window(step)
        if self.repeat and cycle >= self.repeat:
            return None
        return self.window(self.startup + cycle * self.cycle + self.wait + self.warmup)

    def as_dict(self) -> dict[str, int | str]:
        if self.active == _FOREVER:
            return {"wait": 0, "warmup": 0, "active": "all", "repeat": 1, "startup": 0}
        return asdict(self)


def label(window: Window, *, last_step: int, at_exit: bool) -> str:
    """The phase a recorded window is reported as, once we know where it ended.

    A window that starts at step 0 and is still open when the capture ends covered the whole run.
    """
    if window.first_step == 0 and at_exit and last_step >= window.first_step:
        return WHOLE_RUN
    return window.phase
