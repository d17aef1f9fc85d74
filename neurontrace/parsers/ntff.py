"""A Neuron NTFF device trace (``*.ntff``) → `Trace`, through AWS's ``neuron-explorer``.

The NTFF record format is undocumented and not decoded here (neuron.md §10.1). This parser

1. reads what the container shows: format version, NEFF name, instance type, tool versions;
2. finds the paired NEFF by the rules of :mod:`._neuron_ntff`, in order: ``neff=``; the same stem
   (``X[_exec_N|_rank_R].ntff`` ↔ ``X.neff``); the numeric hash (``<h>_instid_<i>_vnc_<n>.ntff`` ↔
   ``neff_<h>[_vnc_<n>].neff``); the NEFF name recorded in the NTFF; the only NEFF in the folder.
   A session NTFF (``profile_nc_<n>_session_<m>.ntff``) pairs with no single NEFF and is decoded
   with its folder (``view -d DIR``); an NTFF version above 7 is refused before any decode;
3. runs ``neuron-explorer view -n NEFF -s NTFF --output-format parquet`` (or ``neuron-profile``)
   into a cache keyed by the inputs' content, then loads that Parquet directory;
4. without the tool, raises :class:`~neurontrace.errors.NeuronToolMissingError` (exit code 9),
   whose message shows the header facts and the command to run on a Neuron instance; the Parquet
   directory it writes loads with neurontrace on any machine.

A 0-byte NTFF (the sign of a core that ran nothing) raises
:class:`~neurontrace.errors.EmptyNtffError`; a NEFF whose numeric hash differs,
:class:`~neurontrace.errors.NeffMismatchError`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from neurontrace.errors import NeuronToolMissingError, UnknownFormatError
from neurontrace.load import Probe, load
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import Trace, metadata_table

from ._neuron_ntff import (
    HEADER,
    NtffHeader,
    check_version,
    find_neff,
    is_session,
    read_header,
    session_message,
)
from ._neuron_read import looks_like_explorer
from ._neuron_tool import cache_root, decode, find_tool, timeout_default, view_command

FORMAT = "ntff"


def sniff(probe: Probe) -> bool:
    if probe.is_dir:
        return False
    if probe.path.suffix.lower() == ".ntff":
        return True
    head = probe.head
    # Version byte, a metadata length that fits, and a protobuf field 1 (bytes) at offset 128.
    if len(head) <= HEADER or not 1 <= head[0] <= 15 or head[HEADER] != 0x0A:
        return False
    n = int.from_bytes(head[1:8], "little")
    return 0 < n <= probe.path.stat().st_size - HEADER


def parse(
    path: Path,
    *,
    progress: Progress = no_progress,
    neff: str | Path | None = None,
    tool: str | Path | None = None,
    cache_dir: str | Path | None = None,
    timeout_s: float | None = None,
    detail: str = "auto",
) -> Trace:
    path = Path(path)
    header = read_header(path)
    check_version(path, header)
    if is_session(path) and neff is None:
        return _session(path, header, progress=progress, tool=tool, cache_dir=cache_dir, timeout_s=timeout_s,
                        detail=detail)
    neff_path, rule = find_neff(path, header, neff)
    exe = find_tool(tool)
    if exe is None:
        raise NeuronToolMissingError(missing_tool_message(path, header, neff_path))
    progress("neuron-explorer", 0, 1)
    out = decode(exe, ["-n", str(neff_path), "-s", str(path)], [path, neff_path], cache=cache_root(cache_dir),
                 timeout_s=timeout_s if timeout_s is not None else timeout_default(), what=str(path))
    progress("neuron-explorer", 1, 1)
    dirs = explorer_dirs(out)
    from . import neuron_explorer  # heavy: imported when an NTFF is decoded, not whenever a file is sniffed

    traces = [neuron_explorer.parse(d, progress=progress, detail=detail,
                                    source=f"{path} (decoded by {exe.name})") for d in dirs]
    facts: dict[str, Any] = {
        "format": FORMAT,
        "ntff.header": header.facts(),
        "ntff.neff": {"path": str(neff_path), "found_by": rule},
        "ntff.decoded_by": {"tool": exe.name, "command": view_command(exe.name, ["-n", neff_path.name, "-s",
                                                                                 path.name], "<cache>"),
                            "cache": str(out)},
    }
    if header.synthetic:
        facts["ntff.synthetic"] = True
    # The NTFF's own facts first, so trace.meta("format") says what the user loaded.
    return Trace.concat([Trace(metadata=metadata_table(facts, source=str(path))), *traces])


def _session(path: Path, header: NtffHeader, **options: Any) -> Trace:
    """A session NTFF: decoded with its whole folder (``view -d``), which pairs each execution's NEFF."""
    if find_tool(options["tool"]) is None:
        raise NeuronToolMissingError(f"{path}: {header.describe()}. {session_message(path)}. That needs AWS's "
                                     "neuron-explorer (package aws-neuronx-tools), which is not on PATH here")
    # The folder is a capture leaf: handed to that format through the registry (torchneuron_capture
    # itself decodes its NTFFs with this module, so importing it here would close a circle).
    return load(path.parent, format="torchneuron-capture", **options)


def explorer_dirs(out: Path) -> list[Path]:
    """Explorer table directories in a decoder's output (the directory itself, or below it)."""
    if looks_like_explorer(out):
        return [out]
    found = sorted(p for p in out.rglob("*") if p.is_dir() and looks_like_explorer(p))
    if not found:
        raise UnknownFormatError(f"{out}: no Neuron Explorer tables in the decoder's output")
    return found


def missing_tool_message(ntff: Path, header: NtffHeader, neff: Path | None, *, directory: bool = False) -> str:
    stem = re.sub(r"\W+", "_", ntff.stem if not directory else ntff.name).strip("_") or "profile"
    neff_arg = os.path.relpath(neff, ntff.parent) if neff is not None else "<file.neff>"
    inputs = f"-d {ntff.name}" if directory else f"-n {neff_arg} -s {ntff.name}"
    paired = f"; paired NEFF: {neff}" if neff is not None else ""
    return (
        f"{ntff}: {header.describe()}{paired}. Decoding NTFF records needs AWS's neuron-explorer (package "
        "aws-neuronx-tools, installed on Neuron instances and Neuron DLAMIs under /opt/aws/neuron/bin), which "
        f"is not on PATH here. On a machine that has it, in the folder of {ntff.name}, run:\n"
        f"    neuron-explorer view {inputs} --output-format parquet --output-file {stem}_parquet\n"
        f"then copy {stem}_parquet/ anywhere and load it with neurontrace (e.g. `neurontrace diagnose "
        f"{stem}_parquet`); it needs no Neuron tools"
    )
