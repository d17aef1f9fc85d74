"""TEST DOUBLE of ``torch_neuronx`` for neurontrace's tests -- NOT the AWS Neuron SDK package.

Imitates only the surface ``neurontrace.capture`` uses and records every call in :data:`CALLS`
(see the README beside this package). It registers no device and renames no backend.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.0.0+fake-test-double"
IS_TEST_DOUBLE = True

CALLS: list[tuple[str, dict[str, Any]]] = []
FALLBACK_OPS = ["aten::nonzero", "aten::_unique2", "aten::nonzero"]  # duplicates, as a tracker might report
EXECUTED_OPS = ["aten::mm", "aten::add.Tensor"]
FAIL: set[str] = set()  # names of calls that should raise, e.g. {"export_trace"}


def _call(name: str, **details: Any) -> None:
    CALLS.append((name, details))
    if name in FAIL:
        raise RuntimeError(f"fake torch_neuronx: {name} failed on purpose")


def get_fallback_ops() -> list[str]:
    _call("get_fallback_ops")
    return list(FALLBACK_OPS)


def get_executed_ops() -> list[str]:
    _call("get_executed_ops")
    return list(EXECUTED_OPS)


def synchronize(device: int | None = None) -> None:
    _call("synchronize", device=device)


def device_count() -> int:
    return 2


def reset() -> None:
    """Forget recorded calls and planned failures (between tests)."""
    CALLS.clear()
    FAIL.clear()


from . import profiling  # noqa: E402  (the real package exposes it as an attribute too)

__all__ = ["CALLS", "FAIL", "get_executed_ops", "get_fallback_ops", "profiling", "reset", "synchronize"]
