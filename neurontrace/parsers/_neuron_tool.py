"""Running AWS's ``neuron-explorer`` to decode NTFF captures into Parquet, with a content-keyed cache.

The NTFF record format is undocumented; the supported decoder is ``neuron-explorer view`` (package
``aws-neuronx-tools``, installed on Neuron instances under ``/opt/aws/neuron/bin``; the older
``neuron-profile`` takes the same ``view`` options). Results are cached per content:

- the cache key hashes the tool's name and size, the command's options and every input byte, so an
  unchanged capture is decoded once and a changed one never reads stale tables;
- the tool writes into a fresh temporary directory inside the cache; only after it succeeded and
  produced tables is a marker written and the directory renamed into place. A failure, a timeout
  or an interrupt removes the temporary directory: nothing half-written is ever found later.

Environment: ``NEURONTRACE_NEURON_EXPLORER`` (the tool to run), ``NEURONTRACE_CACHE_DIR`` (cache
root; default ``$XDG_CACHE_HOME/neurontrace`` or ``~/.cache/neurontrace``),
``NEURONTRACE_EXPLORER_TIMEOUT_S`` (default 3600).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from neurontrace.errors import NeuronToolFailedError, NeuronToolTimeoutError

from ._neuron_read import looks_like_explorer

TOOL_NAMES = ("neuron-explorer", "neuron-profile")
DOCUMENTED_DIR = Path("/opt/aws/neuron/bin")  # where aws-neuronx-tools installs (neuron.md §11)
MARKER = "neurontrace-cache.json"
DEFAULT_TIMEOUT_S = 3600.0
_CHUNK = 8 << 20


def find_tool(explicit: str | Path | None = None) -> Path | None:
    """The decoder to run: ``explicit``, ``$NEURONTRACE_NEURON_EXPLORER``, PATH, then the documented dir."""
    for given in (explicit, os.environ.get("NEURONTRACE_NEURON_EXPLORER")):
        if given:
            found = shutil.which(str(given))
            return Path(found) if found else None
    for name in TOOL_NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    for name in TOOL_NAMES:
        p = DOCUMENTED_DIR / name
        if p.is_file() and os.access(p, os.X_OK):
            return p
    return None


def cache_root(explicit: str | Path | None = None) -> Path:
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get("NEURONTRACE_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "neurontrace"


def timeout_default() -> float:
    env = os.environ.get("NEURONTRACE_EXPLORER_TIMEOUT_S")
    return float(env) if env else DEFAULT_TIMEOUT_S


def content_key(tool: Path, options: Sequence[str], inputs: Sequence[Path]) -> str:
    """sha256 over the tool identity, the options and the bytes of every input file (in order)."""
    h = hashlib.sha256()
    h.update(json.dumps([tool.name, _size(tool), list(options)]).encode())
    for p in inputs:
        h.update(p.name.encode() + b"\0")
        with p.open("rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()[:40]


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return -1


def view_command(tool: Path | str, inputs: Sequence[str], out: Path | str) -> list[str]:
    return [str(tool), "view", *inputs, "--output-format", "parquet", "--output-file", str(out)]


def decode(tool: Path, inputs: Sequence[str], files: Sequence[Path], *, cache: Path,
           timeout_s: float, what: str) -> Path:
    """Run ``tool view <inputs> --output-format parquet`` into the cache; the Parquet output directory.

    ``files`` are the input files whose content keys the cache; ``what`` names the input in errors.
    """
    # Paths in the options are keyed by name only: moving a capture keeps its cache entry.
    key = content_key(tool, [Path(a).name if os.sep in a else a for a in inputs], files)
    final = cache / "neuron-explorer" / key
    if (final / MARKER).is_file():
        return final / "parquet"
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():  # no marker: not ours to trust (renamed in only once complete); decode again
        shutil.rmtree(final, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}.", suffix=".partial", dir=final.parent))
    try:
        out = tmp / "parquet"
        cmd = view_command(tool, inputs, out)
        output = _run(cmd, timeout_s, what)
        if not out.is_dir() or not _has_tables(out):
            raise NeuronToolFailedError(
                f"{what}: `{' '.join(cmd)}` finished but wrote no Parquet tables; its output ended with:\n"
                f"{_tail(output)}"
            )
        (tmp / MARKER).write_text(json.dumps({"command": cmd, "key": key, "created": time.time(),
                                              "inputs": [str(f) for f in files]}, indent=1) + "\n")
        try:
            tmp.rename(final)
        except OSError:
            if not (final / MARKER).is_file():  # not a concurrent run that finished first
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final / "parquet"


def _has_tables(out: Path) -> bool:
    return looks_like_explorer(out) or any(p.is_dir() and looks_like_explorer(p) for p in out.rglob("*"))


def _run(cmd: list[str], timeout_s: float, what: str) -> str:
    # A new session, so a timeout can stop the tool and anything it started.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        _kill(proc)
        out, _ = proc.communicate()
        raise NeuronToolTimeoutError(
            f"{what}: `{' '.join(cmd)}` did not finish within {timeout_s:g} s and was stopped; nothing was "
            "cached. Large NTFFs (over 5 GB) may not process at all; otherwise allow more time with "
            f"NEURONTRACE_EXPLORER_TIMEOUT_S. Its output ended with:\n{_tail(out)}"
        ) from exc
    except BaseException:
        _kill(proc)
        proc.wait()
        raise
    text = out.decode("utf-8", "replace") if isinstance(out, bytes) else str(out or "")
    if proc.returncode != 0:
        raise NeuronToolFailedError(
            f"{what}: `{' '.join(cmd)}` failed with exit code {proc.returncode}; nothing was cached. "
            f"Its output ended with:\n{_tail(text)}"
        )
    return text


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _tail(out: object, limit: int = 2000) -> str:
    text = out.decode("utf-8", "replace") if isinstance(out, bytes) else str(out or "")
    text = text.strip() or "(no output)"
    return text[-limit:]
