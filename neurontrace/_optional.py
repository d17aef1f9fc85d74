"""Optional dependencies stay optional: import on first use, name the extra when missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from neurontrace.errors import MissingDependencyError


def require(module: str, *, extra: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"this needs the Python package {module!r}, which is not installed; "
            f"install it with: pip install 'neurontrace[{extra}]'"
        ) from exc
