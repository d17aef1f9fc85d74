"""A Neuron NTFF device trace (``*.ntff``) → `Trace`, through AWS's ``neuron-explorer``.

The NTFF record format is undocumented and not decoded here (neuron.md §10.1). This parser

1. reads what the container shows: format version, NEFF name, instance type, tool versions;
2. loads the JSON report neuron-profile already wrote from this NTFF when it lies beside it
   (``json_reports/<stem>_profile_full.json``, as real capture folders keep it; its
   ``neff_header.uuid`` must be the NTFF's NEFF UUID): nothing to decode, no NEFF needed;
3. otherwise finds the paired NEFF by the rules of :mod:`._neuron_ntff`, in order: ``neff=``; the same
   UUID (NEFF header bytes 204-219 = the NTFF's metadata field 2); the same stem
   (``X[_exec_N|_rank_R].ntff`` ↔ ``X.neff``); the numeric hash (``<h>_instid_<i>_vnc_<n>.ntff`` ↔
   ``neff_<h>[_vnc_<n>].neff``); the NEFF name recorded in the NTFF; the only NEFF in the folder.
   A session NTFF (``profile_nc_<n>_session_<m>.ntff``) pairs with no single NEFF and is decoded
   with its folder (``view -d DIR``); an NTFF version above 7 is refused before any decode;
4. runs ``neuron-explorer view -n NEFF -s NTFF --output-format parquet`` (or ``neuron-profile``)
   into a cache keyed by the inputs' content, then loads that Parquet directory;
5. without the tool, raises :class:`~neurontrace.errors.NeuronToolMissingError` (exit code 9),
   whose message shows the header facts and the command to run on a Neuron instance; the Parquet
   directory it writes loads with neurontrace on any machine.

A 0-byte NTFF (the sign of a core that ran nothing) raises
:class:`~neurontrace.errors.EmptyNtffError`; a NEFF whose UUID or numeric hash differs,
:class:`~neurontrace.errors.NeffMismatchError`; no NEFF beside it,
:class:`~neurontrace.errors.NeffNotFoundError` (exit 2: it names the NEFF needed and ``--neff``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from neurontrace.errors import NeffNotFoundError, NeuronToolMissingError, UnknownFormatError
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
from ._normalized_meta import with_normalized

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
    report = decoded_report(path, header) if neff is None else None
    if report is not None:
        return _from_report(path, header, report, progress=progress)
    if is_session(path) and neff is None:
        return _session(path, header, progress=progress, tool=tool, cache_dir=cache_dir, timeout_s=timeout_s,
                        detail=detail)
    try:
        neff_path, rule = find_neff(path, header, neff)
    except NeffNotFoundError as exc:
        if find_tool(tool) is not None:
            raise
        raise NeffNotFoundError(f"{exc}. Decoding it also needs AWS's neuron-explorer (aws-neuronx-tools), which is "
                                f"not on PATH here: on a Neuron instance run `neuron-explorer view -n <the NEFF> -s "
                                f"{path.name} --output-format parquet --output-file {path.stem}_parquet` and load "
                                "that folder") from exc
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
    return with_normalized(Trace.concat([Trace(metadata=metadata_table(facts, source=str(path))), *traces]))


def decoded_report(ntff: Path, header: NtffHeader) -> Path | None:
    """The full JSON report neuron-profile wrote from this NTFF, when it lies beside it.

    Real capture folders keep ``json_reports/<stem>_profile_full.json`` next to ``<stem>.ntff`` (neuron.md
    addendum 2). A report whose ``neff_header.uuid`` is not the NTFF's NEFF UUID belongs to another
    capture and is not used.
    """
    for d in (ntff.parent / "json_reports", ntff.parent, ntff.parent.parent / "json_reports"):
        cand = d / f"{ntff.stem}_profile_full.json"
        if cand.is_file():
            uuid = report_uuid(cand)
            if header.neff_uuid is None or uuid is None or uuid == header.neff_uuid:
                return cand
    return None


_UUID_IN_REPORT = re.compile(rb'"neff_header"\s*:\s*\[?\s*\{[^{}]*?"uuid"\s*:\s*"(?P<uuid>[0-9a-fA-F-]{32,36})"')


def report_uuid(report: Path) -> str | None:
    """``neff_header.uuid`` of a JSON report, found without decoding the whole file (reports reach 600 MB)."""
    try:
        with report.open("rb") as f:
            chunk, tail = f.read(1 << 20), b""
            while chunk:
                m = _UUID_IN_REPORT.search(tail + chunk)
                if m:
                    return m.group("uuid").decode().replace("-", "").lower()
                tail = (tail + chunk)[-4096:]
                chunk = f.read(1 << 20)
    except OSError:
        return None
    return None


def _from_report(path: Path, header: NtffHeader, report: Path, *, progress: Progress) -> Trace:
    from . import neuron_json  # the JSON reader: imported when a report is there to read

    trace = neuron_json.parse(report, progress=progress)
    facts: dict[str, Any] = {
        "format": FORMAT,
        "ntff.header": header.facts(),
        "ntff.decoded_by": {"report": str(report), "note": "the JSON report neuron-profile wrote from this NTFF, "
                            "found beside it (json_reports/<stem>_profile_full.json); nothing was decoded here"},
    }
    if header.synthetic:
        facts["ntff.synthetic"] = True
    return with_normalized(Trace.concat([Trace(metadata=metadata_table(facts, source=str(path))), trace]))


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
