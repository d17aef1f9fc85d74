"""TorchNeuron / Neuron inspect capture directories → one `Trace` (neuron.md §1.2, §2, §8).

Layouts read::

    profile_output/                       # a multi-rank root: one folder per process
      i-0123..._pid_98399/<timestamp>/    # TorchNeuron NeuronConfig output (one leaf per session)
          trace.json                      # framework trace (Kineto JSON, privateuse1_runtime/_driver)
          *.ntff  neff_*.neff  ntrace.pb  trace_info.pb  cpu_util.pb  host_mem.pb
          <name>_parquet/                 # optional: neuron-explorer's Parquet output, already made
      i-..._pid_.../                      # inspect capture: the same files without <timestamp>/

Per leaf: the framework trace is loaded by the Kineto parser; device and system profiles come from
an Explorer Parquet directory inside the leaf, else from running ``neuron-explorer view -d <leaf>``
(cached like :mod:`.ntff`), else (tool missing) they are left out with a
:class:`~neurontrace.errors.NeuronToolMissingWarning` that gives the command to run. Framework events
Explorer copies from ``trace.json`` are not loaded twice. Empty NTFFs (cores that ran nothing) are
warned about and skipped.

Every row gets ``host`` = the instance id from the folder name, and ``rank`` = the framework trace's
rank (``distributedInfo``, else ``..._rank_<N>`` in its name), else, in a multi-rank root, the
folder's position in name order (``rank_source`` says which). Times: the Kineto trace is on the
Unix-epoch clock (``baseTimeNanoseconds``); device rows are moved onto it by the Explorer parser
(``nc_exec_running`` pairing, else ``Metadata.first_ts``). Metadata ``alignment`` records, per leaf,
how each part was aligned.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from neurontrace.errors import NeuronProfileWarning, NeuronToolMissingWarning, UnknownFormatError
from neurontrace.load import Probe
from neurontrace.progress import Progress, no_progress
from neurontrace.schema import DICT_STRING
from neurontrace.trace import ACCOUNTING_KEY, ParseAccounting, Trace, metadata_table

from . import neuron_explorer, ntff
from ._neuron_arrow import constant
from ._neuron_common import warn
from ._neuron_ntff import read_header
from ._neuron_read import looks_like_explorer
from ._neuron_tool import cache_root, decode, find_tool, timeout_default
from .kineto import parse as kineto_parse

FORMAT = "torchneuron-capture"
INSTANCE_DIR = re.compile(r"^(?P<instance>i-[0-9A-Za-z]+)_pid_(?P<pid>\d+)$")
_FRAMEWORK = re.compile(r"^(trace|pytorch_trace|neuron_framework_trace_rank_\d+)\.json(\.gz)?$|\.pt\.trace\.json")
_SYSTEM_PB = frozenset({"ntrace.pb", "trace_info.pb", "cpu_util.pb", "host_mem.pb"})  # neuron.md §1.1


def sniff(probe: Probe) -> bool:
    if not probe.is_dir:
        return False
    p = probe.path
    if INSTANCE_DIR.match(p.name):
        return True
    try:
        children = list(p.iterdir())
    except OSError:
        return False
    if any(c.is_dir() and INSTANCE_DIR.match(c.name) for c in children):
        return True
    return _is_leaf(p, children)


def _is_leaf(d: Path, children: list[Path] | None = None) -> bool:
    items = children if children is not None else list(d.iterdir())
    if any(c.is_file() and _is_raw(c) for c in items):
        return True
    return any(c.is_file() and _FRAMEWORK.search(c.name) for c in items) and \
        any(c.is_dir() and looks_like_explorer(c) for c in items)


def parse(
    path: Path,
    *,
    progress: Progress = no_progress,
    tool: str | Path | None = None,
    cache_dir: str | Path | None = None,
    timeout_s: float | None = None,
    detail: str = "auto",
) -> Trace:
    path = Path(path)
    acct = ParseAccounting(source=str(path), format=FORMAT)
    roots = [path] if INSTANCE_DIR.match(path.name) else \
        sorted(c for c in path.iterdir() if c.is_dir() and INSTANCE_DIR.match(c.name)) or [path]
    multi = len(roots) > 1
    traces: list[Trace] = []
    leaves: list[dict[str, Any]] = []
    options = {"tool": tool, "cache_dir": cache_dir, "timeout_s": timeout_s, "detail": detail}
    for position, root in enumerate(roots):
        m = INSTANCE_DIR.match(root.name)
        host = m.group("instance") if m else None
        for leaf in _leaves(root):
            progress("capture", len(leaves), None)
            rank_hint = position if multi else None
            part, facts = _load_leaf(leaf, acct, host=host, rank_hint=rank_hint, options=options)
            traces.extend(part)
            leaves.append(facts)
    if not leaves:
        raise UnknownFormatError(
            f"{path}: no capture found (expected <instance>_pid_<pid>/ folders with trace.json, .ntff or .pb files)")
    acct.check()
    clocks = {c for leaf in leaves for c in leaf["clocks"]}
    facts = {
        "format": FORMAT,
        "clock": clocks.pop() if len(clocks) == 1 else "mixed (see alignment)",
        "backend": "neuron",
        "alignment": [{k: v for k, v in leaf.items() if k != "clocks"} for leaf in leaves],
        "rank_source": sorted({leaf["rank_source"] for leaf in leaves}),
        ACCOUNTING_KEY: acct.as_dict(),
    }
    if any(leaf["synthetic"] for leaf in leaves):
        facts["synthetic"] = True
    progress("capture", len(leaves), len(leaves))
    # The capture's own facts first, so trace.meta("format"/"clock"/"alignment") describe the whole.
    return Trace.concat([Trace(metadata=metadata_table(facts, source=str(path))), *traces])


def _is_raw(p: Path) -> bool:
    """A raw capture file: an NTFF or one of the system-trace protobufs."""
    return p.suffix == ".ntff" or p.name in _SYSTEM_PB


def _leaves(root: Path) -> list[Path]:
    out = [root] if _is_leaf(root) else []
    out += sorted(c for c in root.iterdir() if c.is_dir() and not looks_like_explorer(c) and _is_leaf(c))
    return out


def _load_leaf(leaf: Path, acct: ParseAccounting, *, host: str | None, rank_hint: int | None,
               options: dict[str, Any]) -> tuple[list[Trace], dict[str, Any]]:
    files = sorted(p for p in leaf.iterdir() if p.is_file())
    acct.events_read += len(files)
    framework = [p for p in files if _FRAMEWORK.search(p.name)]
    ntffs = [p for p in files if p.suffix == ".ntff"]
    empty = [p for p in ntffs if p.stat().st_size == 0]
    facts: dict[str, Any] = {"leaf": str(leaf), "host": host, "clocks": []}
    if empty:
        warn(acct, f"{leaf}: {len(empty)} NTFF file(s) are empty (0 bytes: those NeuronCores ran nothing during "
             f"the capture): {', '.join(p.name for p in empty[:6])}", NeuronProfileWarning)
        acct.skip("empty NTFF (the NeuronCore ran nothing)", len(empty))
    parts: list[Trace] = []
    for fw in framework:
        parts.append(kineto_parse(fw))
        acct.keep("framework traces", 1)
    rank, rank_source = _rank(parts, rank_hint)
    facts.update(rank=rank, rank_source=rank_source, framework=[
        {"file": fw.name, "clock": t.meta("clock")} for fw, t in zip(framework, parts, strict=True)])
    facts["clocks"] += [t.meta("clock") for t in parts]
    device_parts, how = _device(leaf, files, ntffs, empty, acct, host, rank, skip_framework=bool(framework),
                                options=options)
    facts["device_source"] = how
    facts["device"] = [t.meta("alignment") for t in device_parts]
    facts["clocks"] += [t.meta("clock") for t in device_parts]
    facts["synthetic"] = any(t.meta("synthetic") or t.meta("kineto.synthetic") for t in [*parts, *device_parts])
    labelled = [_label(t, host=host, rank=rank) for t in [*parts, *device_parts]]
    return labelled, facts


def _device(leaf: Path, files: list[Path], ntffs: list[Path], empty: list[Path], acct: ParseAccounting,
            host: str | None, rank: int | None, *, skip_framework: bool,
            options: dict[str, Any]) -> tuple[list[Trace], str]:
    raw = [p for p in files if p not in empty and (_is_raw(p) or p.suffix == ".neff")]
    other = [p for p in files if p not in raw and p not in empty and not _FRAMEWORK.search(p.name)]
    acct.skip("not a profile file", len(other))
    processed = sorted(c for c in leaf.iterdir() if c.is_dir() and looks_like_explorer(c))
    kw = {"skip_framework_events": skip_framework, "host": host, "rank": rank, "detail": options["detail"]}
    if processed:
        acct.skip("raw capture file (an Explorer Parquet directory beside it was loaded instead)", len(raw))
        return [neuron_explorer.parse(d, **kw) for d in processed], "Explorer Parquet directory in the capture"
    if not [p for p in raw if _is_raw(p)]:
        acct.skip("NEFF without an NTFF to decode", len(raw))
        return [], "none (no NTFF or system-trace files)"
    exe = find_tool(options["tool"])
    if exe is None:
        acct.skip("not decoded: neuron-explorer is not installed", len(raw))
        live = [p for p in ntffs if p not in empty]
        header = read_header(live[0]).describe() if live else "system trace files only"
        warn(acct, f"{leaf}: the device and system profiles were not decoded ({len(live)} NTFF file(s); "
             f"{header}): that needs AWS's neuron-explorer (package aws-neuronx-tools, on Neuron instances under "
             "/opt/aws/neuron/bin), which is not on PATH here; loaded the framework trace alone. On a machine "
             f"that has it, run:\n    neuron-explorer view -d {leaf} --output-format parquet --output-file "
             f"{leaf}/neuron_parquet\nthen load this capture again on any machine", NeuronToolMissingWarning)
        return [], "not decoded (neuron-explorer missing)"
    out = decode(exe, ["-d", str(leaf)], raw, cache=cache_root(options["cache_dir"]),
                 timeout_s=options["timeout_s"] if options["timeout_s"] is not None else timeout_default(),
                 what=str(leaf))
    acct.keep("files decoded by neuron-explorer", len(raw))
    return [neuron_explorer.parse(d, source=f"{leaf} (decoded by {exe.name})", **kw)
            for d in ntff.explorer_dirs(out)], f"decoded by {exe.name} view -d"


def _rank(parts: list[Trace], hint: int | None) -> tuple[int | None, str]:
    for t in parts:
        src = t.meta("rank_source")
        ranks = [r for r in t.metadata["rank"].to_pylist() if r is not None]
        if src in ("distributedInfo", "file name") and ranks:
            return int(ranks[0]), f"framework trace ({src})"
    if hint is not None:
        return hint, "folder position in the capture root (no rank in the framework trace)"
    return None, "unknown"


def _label(trace: Trace, *, host: str | None, rank: int | None) -> Trace:
    """Every row of one capture leaf on its host (instance id) and rank."""
    tables = {}
    for name, table in trace.tables.items():
        t = table
        for col, value, typ in (("host", host, DICT_STRING), ("rank", rank, pa.int32())):
            if value is not None and col in t.column_names:
                i = t.schema.get_field_index(col)
                t = t.set_column(i, t.schema.field(i), constant(value, typ, t.num_rows))
        tables[name] = t
    return Trace(**tables)
