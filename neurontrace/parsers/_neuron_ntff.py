"""What an NTFF shows without decoding its records, and where its NEFF is (neuron.md §1.3, §10.1).

Container layout (observed on real files, v4, v5 and v6): byte 0 is the format version, bytes 1-7 a
little-endian length N, and at offset 128 a protobuf message of N bytes with capture metadata:
field 1 the NEFF file name (or the full compile-workdir path), 2 bytes whose first 16 are the NEFF's
UUID, 7 the capture time (v4), 8/11/12 runtime/driver/collectives versions as small messages of
integer parts (8 also carries the runtime's git hash), 9 the instance type, 17 the EC2 instance id
(v6). Bytes 8-127 differ between writers (trn2 v5: ``(3, 3)`` pairs; inf2 v5: zeros except bytes
8-15; v4: a raw struct) and are not read. Everything after the message is raw hardware records,
which are not decoded here.

The NEFF's UUID is the 16 bytes at offset :data:`NEFF_UUID_OFFSET` of its header (the JSON report's
``neff_header.uuid`` in hex); in every real pair checked it equals the NTFF's field 2 prefix
(neuron.md addendum 2), so it pairs an NTFF with its NEFF before any file name does.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from neurontrace.errors import (
    EmptyNtffError,
    InputNotFoundError,
    NeffMismatchError,
    NeffNotFoundError,
    NtffVersionError,
)

from ._neuron_common import SYNTHETIC_PREFIX
from ._neuron_pb import walk

HEADER = 128
_MAX_META = 64 << 20
NEFF_UUID_OFFSET = 204  # 16 bytes; the NEFF header is 1024 bytes (neuron.md §10.2, addendum 2)
UUID_BYTES = 16
_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8,17}$")
INSPECT_NTFF = re.compile(r"^(?P<hash>\d+)_instid_(?P<inst>\d+)_vnc_(?P<vnc>\d+)\.ntff$")
HASHED_NEFF = re.compile(r"^(?:neff|graph)_(?P<hash>\d+)(?:_vnc_(?P<vnc>\d+))?\.neff$")


@dataclass
class NtffHeader:
    path: str
    size: int
    version: int | None = None
    metadata_bytes: int | None = None
    neff_name: str | None = None
    neff_uuid: str | None = None
    instance_id: str | None = None
    instance_type: str | None = None
    runtime_version: str | None = None
    runtime_git_hash: str | None = None
    driver_version: str | None = None
    collectives_version: str | None = None
    capture_unix_s: int | None = None
    note: str | None = None

    @property
    def neff_file(self) -> str | None:
        """The recorded NEFF's file name (field 1 may hold the full compile-workdir path)."""
        return PurePosixPath(self.neff_name.replace("\\", "/")).name or None if self.neff_name else None

    @property
    def synthetic(self) -> bool:
        return bool(self.neff_file and self.neff_file.startswith(SYNTHETIC_PREFIX))

    def facts(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def describe(self) -> str:
        parts = [(f"NTFF version {self.version}" if self.version is not None else "NTFF of unknown version")
                 + f" ({self.size} bytes)"]
        if self.neff_name:
            parts.append(f"captured against {self.neff_name}")
        if self.neff_uuid:
            parts.append(f"(NEFF UUID {self.neff_uuid})")
        if self.instance_type:
            parts.append(f"on {self.instance_type}")
        tools = [f"{k} {v}" for k, v in (("runtime", self.runtime_version), ("driver", self.driver_version),
                                          ("collectives", self.collectives_version)) if v]
        if tools:
            parts.append("(" + ", ".join(tools) + ")")
        if self.note:
            parts.append(f"[{self.note}]")
        return " ".join(parts)


def read_header(path: Path) -> NtffHeader:
    size = path.stat().st_size
    if size == 0:
        raise EmptyNtffError(
            f"{path}: the NTFF is empty (0 bytes), which is how Neuron marks a NeuronCore that ran nothing "
            "during the capture; load the NTFF of a core that ran the model (a non-empty file)"
        )
    h = NtffHeader(path=str(path), size=size)
    with path.open("rb") as f:
        head = f.read(HEADER)
        h.version = head[0]
        if len(head) < HEADER:
            h.note = "shorter than the 128-byte header"
            return h
        n = int.from_bytes(head[1:8], "little")
        h.metadata_bytes = n
        if n == 0 or n > min(size - HEADER, _MAX_META):
            h.note = "metadata length does not fit the file; header facts unavailable"
            return h
        msg = f.read(n)
    try:
        fields = _fields(msg)
    except ValueError as exc:
        h.note = f"metadata not as observed ({exc})"
        return h
    h.neff_name = _text(fields.get(1))
    uuid = fields.get(2)
    if isinstance(uuid, bytes) and len(uuid) >= UUID_BYTES:
        h.neff_uuid = uuid[:UUID_BYTES].hex()
    instance = _text(fields.get(17))
    h.instance_id = instance if instance and _INSTANCE_ID.match(instance) else None
    h.instance_type = _text(fields.get(9))
    h.capture_unix_s = fields.get(7) if isinstance(fields.get(7), int) else None
    h.runtime_version, h.runtime_git_hash = _version(fields.get(8))
    h.driver_version, _ = _version(fields.get(11))
    h.collectives_version, _ = _version(fields.get(12))
    return h


def _fields(msg: bytes) -> dict[int, Any]:
    """First value of each top-level field of a protobuf message (wire format only, no schema)."""
    out: dict[int, Any] = {}
    for num, _wire, value in walk(msg):
        out.setdefault(num, value)
    return out


def _text(value: Any) -> str | None:
    if not isinstance(value, bytes):
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _version(value: Any) -> tuple[str | None, str | None]:
    if not isinstance(value, bytes):
        return None, None
    try:
        f = _fields(value)
    except ValueError:
        return None, None
    parts = [str(f[k]) for k in (1, 2, 3) if isinstance(f.get(k), int)]
    return (".".join(parts) or None), _text(f.get(5))


# -- pairing with the NEFF ------------------------------------------------------------------------
#
# Rules, tried in this order (neuron.md §1.2, §1.3 and the addenda):
#   1. the NEFF given explicitly (``--neff`` / ``neff=``), refused when its UUID differs from the NTFF's;
#   2. the same UUID: the first 16 bytes of the NTFF's metadata field 2 equal the NEFF header's bytes
#      204-219 in every real pair checked (addendum 2), so the content pairs before any name does;
#   3. the same stem: ``X.ntff``, ``X_exec_N.ntff`` (``--profile-nth-exec``) and ``X_rank_R.ntff``
#      (collectives captures) ↔ ``X.neff`` -- the layout of 5 of 8 observed real CLI captures, whose
#      NTFF records ``file.neff`` because the harness renamed the NEFF afterwards;
#   4. the numeric hash of inspect/TorchNeuron captures: ``<h>_instid_<i>_vnc_<n>.ntff`` ↔
#      ``neff_<h>_vnc_<n>.neff``, else ``neff_<h>.neff`` (``get-started.rst``; a different hash is
#      refused by neuron-explorer, ``troubleshooting.rst``, so it is a named error here);
#   5. the NEFF file name recorded in the NTFF (protobuf field 1; its last path part when it is a path);
#   6. the only NEFF in the folder.
# A NEFF found by a name (rules 3-6) whose UUID differs from the NTFF's is a mismatch, never used.
# Session NTFFs (``profile_nc_<n>_session_<m>.ntff``) pair with no single NEFF: a session runs many
# (``ExecutionInfo.neff_name`` says which, ``troubleshooting.rst``); only ``view -d DIR`` decodes them.

SESSION_NTFF = re.compile(r"^profile_nc_(?P<nc>\d+)_session_(?P<session>\d+)\.ntff$")
_STEM_SUFFIX = re.compile(r"_(?:exec|rank)_\d+$")
MAX_KNOWN_VERSION = 7  # `view` 2.31/2.32 "support v1-7"; inspect has written v129 (addendum)


def is_session(ntff: Path) -> bool:
    return SESSION_NTFF.match(ntff.name) is not None


def check_version(ntff: Path, header: NtffHeader) -> None:
    """Refuse, with what to do, an NTFF version no released decoder was seen to read."""
    if header.version is not None and header.version > MAX_KNOWN_VERSION:
        raise NtffVersionError(
            f"{ntff}: NTFF format version {header.version}; neuron-explorer view 2.31/2.32 parses versions "
            f"1-{MAX_KNOWN_VERSION} only (the deprecated `neuron-explorer inspect` path has written v129, which "
            "view cannot read). Capture again with torch.profiler + NeuronConfig or `neuron-explorer capture`, "
            "or decode it with the neuron-explorer release that wrote it"
        )


def neff_uuid(neff: Path) -> str | None:
    """The UUID in a NEFF's header (16 bytes at offset 204), as lower-case hex; None when it has none."""
    try:
        with neff.open("rb") as f:
            f.seek(NEFF_UUID_OFFSET)
            raw = f.read(UUID_BYTES)
    except OSError:
        return None
    return raw.hex() if len(raw) == UUID_BYTES and any(raw) else None


def find_neff(ntff: Path, header: NtffHeader, explicit: str | Path | None) -> tuple[Path, str]:
    """The NEFF that decodes ``ntff``, and which documented rule found it (see the rules above)."""
    m = INSPECT_NTFF.match(ntff.name)
    if explicit is not None:
        neff = Path(explicit)
        if not neff.is_file():
            raise InputNotFoundError(f"{neff}: no such NEFF (given for {ntff.name})")
        other = _hashed(neff)
        if m and other and other[0] != m.group("hash"):
            raise _mismatch(ntff, m.group("hash"), [neff])
        _same_uuid(ntff, header, neff, "given explicitly")
        return neff, "given explicitly"
    here = ntff.parent
    places = [d for d in (here, here / "neffs", here.parent) if d.is_dir()]
    tried: list[str] = []
    if header.neff_uuid:
        tried.append(f"same UUID: {header.neff_uuid}")
        for d in places:
            for cand in sorted(d.glob("*.neff")):
                if neff_uuid(cand) == header.neff_uuid:
                    return cand, "same UUID as the NTFF (NEFF header bytes 204-219 = NTFF metadata field 2)"
    found, rule = _by_name(ntff, header, places, tried, m)
    if found is not None:
        _same_uuid(ntff, header, found, rule)
        return found, rule
    if is_session(ntff):
        raise NeffNotFoundError(session_message(ntff))
    local = sorted(here.glob("*.neff"))
    listed = ", ".join(p.name for p in local[:12]) or "none"
    want = header.neff_file or "the NEFF it was compiled to"
    uuid = f" (UUID {header.neff_uuid})" if header.neff_uuid else ""
    raise NeffNotFoundError(
        f"{ntff}: the NEFF this NTFF was captured against is not beside it: it needs {want}{uuid} "
        f"({header.describe()}). Tried, in order: {'; '.join(tried)} (in {', '.join(str(d) for d in places)}); "
        f"NEFFs in the folder: {listed}. Pass it explicitly (--neff FILE.neff / neff=), e.g. the compiled "
        "graph from your compile cache or the run's work directory"
    )


def _by_name(ntff: Path, header: NtffHeader, places: list[Path], tried: list[str],
             m: re.Match[str] | None) -> tuple[Path | None, str]:
    here = ntff.parent
    for stem in dict.fromkeys([ntff.stem, _STEM_SUFFIX.sub("", ntff.stem)]):
        tried.append(f"same stem: {stem}.neff")
        if (here / f"{stem}.neff").is_file():
            return here / f"{stem}.neff", "same stem as the NTFF"
    if m:
        want, vnc = m.group("hash"), m.group("vnc")
        tried.append(f"numeric hash: neff_{want}_vnc_{vnc}.neff or neff_{want}.neff")
        hashed = [(p, h) for d in places for p in sorted(d.glob("*.neff")) if (h := _hashed(p)) is not None]
        same = [(p, h) for p, h in hashed if h[0] == want]
        if same:
            exact = [p for p, h in same if h[1] == vnc] or [p for p, h in same if h[1] is None]
            return (exact or [same[0][0]])[0], "same numeric hash as the NTFF name"
        if hashed:
            raise _mismatch(ntff, want, [p for p, _ in hashed])
    if header.neff_file:
        tried.append(f"recorded in the NTFF: {header.neff_name}")
        for d in places:
            cand = d / header.neff_file
            if cand.is_file():
                return cand, "NEFF name recorded in the NTFF"
    local = sorted(here.glob("*.neff"))
    tried.append("the only NEFF in the folder")
    if len(local) == 1:
        return local[0], "the only NEFF in the folder"
    return None, ""


def _same_uuid(ntff: Path, header: NtffHeader, neff: Path, rule: str) -> None:
    theirs = neff_uuid(neff)
    if header.neff_uuid and theirs and theirs != header.neff_uuid:
        raise NeffMismatchError(
            f"{ntff.name}: NEFF/NTFF UUID mismatch: the NTFF was captured against the NEFF with UUID "
            f"{header.neff_uuid} but {neff} (found by: {rule}) has UUID {theirs}; neuron-explorer would refuse "
            "the pair or decode it wrongly. Pass the NEFF the NTFF ran (--neff), e.g. from the same capture or "
            "compile work directory"
        )


def session_message(ntff: Path) -> str:
    return (
        f"{ntff.name} is a session NTFF (profile_nc_<n>_session_<m>.ntff: one per NeuronCore for a whole "
        "profiling session), which pairs with no single NEFF: the session ran every NEFF of the capture "
        "(ExecutionInfo.neff_name tells which execution ran which). Decode its whole folder instead: "
        f"`neuron-explorer view -d {ntff.parent} --output-format parquet --output-file {ntff.parent}/neuron_parquet`"
        f", or load the folder with neurontrace (`neurontrace diagnose {ntff.parent}`)"
    )


def _hashed(p: Path) -> tuple[str, str | None] | None:
    m = HASHED_NEFF.match(p.name)
    return (m.group("hash"), m.group("vnc")) if m else None


def _mismatch(ntff: Path, want: str, neffs: list[Path]) -> NeffMismatchError:
    names = ", ".join(p.name for p in neffs[:8])
    return NeffMismatchError(
        f"{ntff.name}: NEFF/NTFF hash mismatch: the NTFF's numeric hash is {want} but the NEFF(s) found carry "
        f"another ({names}). neuron-explorer refuses such pairs (ERROR_PROCESS_INCOMPLETE: the numeric hashes "
        f"in the file names must be identical); pass the NEFF named neff_{want}.neff from the same capture"
    )
