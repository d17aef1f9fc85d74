"""TorchNeuron / Neuron inspect capture directories → one `Trace` (neuron.md §1.2, §2, §8).

Layouts read (neuron.md §1.2, §8.3 and the addendum "TorchNeuron capture layouts")::

    profile_output/                       # documented NeuronConfig API (SDK 2.31+), one or many ranks
      i-0123..._pid_98399/<timestamp>/    # one leaf per session
          trace.json                      # framework trace (Kineto JSON, privateuse1_runtime/_driver)
          profile_nc_<n>_session_<m>.ntff  neff_<h>_vnc_<n>.neff
          ntrace.pb  trace_info.pb  cpu_util.pb  host_mem.pb
          <name>_parquet/                 # optional: neuron-explorer's Parquet output, already made

    out/                                  # open-source backend (April 2026) and inspect captures: flat
      pytorch_trace.json | neuron_trace.json    # framework trace, beside the process folder
      framework_mapping_<YYYYMMDD_HHMMSS_mmm>.json
      i-0123..._pid_98399/
          <h>_instid_<i>_vnc_<n>.ntff  neff_<h>.neff  ntrace.pb  trace_info.pb  cpu_util.pb  host_mem.pb

A framework trace beside a single process folder belongs to it; beside several, each loads on its own
(its rank from ``distributedInfo``).

Per leaf: the framework trace is loaded by the Kineto parser; device and system profiles come from
an Explorer Parquet directory inside the leaf, else from running ``neuron-explorer view -d <leaf>``
(cached like :mod:`.ntff`), else (tool missing) they are left out with a
:class:`~neurontrace.errors.NeuronToolMissingWarning` naming each undecoded device profile and the
exact ``neuron-explorer`` command for it; the framework trace is analysed alone. A capture with no
framework trace and nothing decoded raises :class:`~neurontrace.errors.NeuronToolMissingError`
(exit code 9) with those commands, never an empty trace. Framework events Explorer copies from
``trace.json`` are not loaded twice. Empty NTFFs (cores that ran nothing) are warned about and skipped.

``framework_mapping_*.json`` (``{"version": 1, "data": [{"nrta_seq_id": N, "framework_op_exec_ids":
[{"seq_nr": N, "th_id": N, "stream_id": N}]}]}``, torch-neuronx ``profiling.py``) is joined once the
system profile is decoded: each runtime event carrying that NRT async sequence id (``nrta_seq_id`` /
``nrt_sequence_id`` in its attributes: the exact key is not public) gets a ``launch`` flow from the
framework op with that ``Sequence number`` on thread ``th_id``.

Every row gets ``host`` = the instance id from the folder name, and ``rank`` = the framework trace's
rank (``distributedInfo``, else ``..._rank_<N>`` in its name), else, in a multi-rank root, the
folder's position in name order (``rank_source`` says which). Times: the Kineto trace is on the
Unix-epoch clock (``baseTimeNanoseconds``); device rows are moved onto it by the Explorer parser
(``nc_exec_running`` pairing, else ``Metadata.first_ts``). Metadata ``alignment`` records, per leaf,
how each part was aligned.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.errors import (
    NeuronProfileWarning,
    NeuronToolMissingError,
    NeuronToolMissingWarning,
    NeurontraceError,
    UnknownFormatError,
)
from neurontrace.load import Probe
from neurontrace.progress import Progress, no_progress
from neurontrace.schema import DICT_STRING
from neurontrace.trace import ACCOUNTING_KEY, ParseAccounting, Trace, metadata_table

from . import _neuron_pb as pb
from . import neuron_explorer, ntff
from ._neuron_arrow import constant
from ._neuron_common import warn
from ._neuron_ntff import check_version, find_neff, is_session, read_header
from ._neuron_read import looks_like_explorer
from ._neuron_tool import cache_root, decode, find_tool, timeout_default
from ._normalized_meta import with_normalized
from .kineto import parse as kineto_parse

FORMAT = "torchneuron-capture"
INSTANCE_DIR = re.compile(r"^(?P<instance>i-[0-9A-Za-z]+)_pid_(?P<pid>\d+)$")
_FRAMEWORK = re.compile(
    r"^(trace|pytorch_trace|neuron_trace|neuron_framework_trace_rank_\d+)\.json(\.gz)?$|\.pt\.trace\.json")
_MAPPING = re.compile(r"^framework_mapping_[0-9_]+\.json$")
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
    outer, mappings = _beside(path, roots)
    traces: list[Trace] = []
    leaves: list[dict[str, Any]] = []
    undecoded: list[dict[str, str]] = []
    system_pb: list[dict[str, Any]] = []
    options = {"tool": tool, "cache_dir": cache_dir, "timeout_s": timeout_s, "detail": detail}
    for position, root in enumerate(roots):
        m = INSTANCE_DIR.match(root.name)
        host = m.group("instance") if m else None
        for i, leaf in enumerate(_leaves(root)):
            progress("capture", len(leaves), None)
            rank_hint = position if multi else None
            extra = outer if len(roots) == 1 and i == 0 else []
            part, facts = _load_leaf(leaf, acct, host=host, rank_hint=rank_hint, options=options, extra=extra)
            traces.extend(part)
            undecoded += facts.pop("undecoded", [])
            system_pb += facts.pop("system_pb", [])
            leaves.append(facts)
    if len(roots) > 1:
        for fw in outer:  # beside several process folders: each framework trace on its own
            traces.append(kineto_parse(fw, device_elsewhere=True))
            acct.events_read += 1
            acct.keep("framework traces", 1)
    if not leaves:
        raise UnknownFormatError(
            f"{path}: no capture found (expected <instance>_pid_<pid>/ folders with trace.json, .ntff or .pb files)")
    mapping = read_framework_mapping(mappings, acct)
    if undecoded:
        framework = any(leaf["framework"] for leaf in leaves) or (len(roots) > 1 and outer)
        if not framework and not any(leaf["device"] for leaf in leaves):
            raise NeuronToolMissingError(_undecoded_message(path, undecoded, framework=False))
        warn(acct, _undecoded_message(path, undecoded, framework=True), NeuronToolMissingWarning)
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
    if undecoded:
        facts["undecoded_profiles"] = undecoded
    if system_pb:
        facts["neuron.system_pb"] = system_pb
    progress("capture", len(leaves), len(leaves))
    # The capture's own facts first, so trace.meta("format"/"clock"/"alignment") describe the whole.
    whole = with_normalized(Trace.concat([Trace(metadata=metadata_table(facts, source=str(path))), *traces]))
    return join_framework_mapping(whole, mapping, [str(m) for m in mappings]) if mappings else whole


# -- framework_mapping_<ts>.json: NRT async sequence id -> the framework ops that issued it ---------

_SEQ_NR = re.compile(r'"Sequence number"\s*:\s*(?P<n>\d{1,19})')
# In args either as a key or inside the extra_attributes_json text (its quotes escaped there).
_NRTA_SEQ = re.compile(r'\\?"(?:nrta_seq_id|nrt_sequence_id|nrta_sequence_id)\\?"\s*:\s*\\?"?(?P<n>\d{1,20})')


def read_framework_mapping(files: list[Path], acct: ParseAccounting) -> list[tuple[int, int, str]]:
    """(nrta_seq_id, seq_nr, th_id) of every entry; a malformed file or entry is counted skipped."""
    out: list[tuple[int, int, str]] = []
    for f in files:
        acct.events_read += 1
        try:
            doc = json.loads(f.read_text())
            data = doc["data"] if isinstance(doc, dict) else None
            if not isinstance(data, list):
                raise ValueError("no 'data' list")
        except (OSError, ValueError, KeyError, RecursionError) as exc:
            acct.skip("framework_mapping file not as documented", 1)
            warn(acct, f"{f}: not a framework_mapping file as torch-neuronx writes it ({exc}); not joined",
                 NeuronProfileWarning)
            continue
        acct.keep("framework_mapping files", 1)
        acct.events_read += len(data)
        for entry in data:
            ids = entry.get("framework_op_exec_ids") if isinstance(entry, dict) else None
            seq = entry.get("nrta_seq_id") if isinstance(entry, dict) else None
            if not isinstance(seq, int) or not isinstance(ids, list):
                acct.skip("framework_mapping entry without nrta_seq_id / framework_op_exec_ids", 1)
                continue
            acct.keep("framework_mapping entries", 1)
            out += [(seq, int(op["seq_nr"]), str(op["th_id"])) for op in ids
                    if isinstance(op, dict) and isinstance(op.get("seq_nr"), int) and op.get("th_id") is not None]
    return out


def join_framework_mapping(trace: Trace, mapping: list[tuple[int, int, str]], files: list[str]) -> Trace:
    """``launch`` flows: framework op → each runtime event carrying the entry's NRT async sequence id.

    The op is a top-level framework op with ``Sequence number`` = seq_nr on thread th_id (nested ops
    share their parent's number). Sequence numbers repeat (they only advance for autograd-recorded
    ops), so among several such ops the one that started last before the runtime event is taken
    (the clocks are aligned at load); a single candidate is taken whatever the times. Without a
    decoded system profile there is no runtime side yet; the facts say how many entries found both ends.
    """
    ev = trace.system_events
    args = pc.fill_null(ev["args"].cast(pa.string()), "")
    ids, ts, durs = ev["event_id"].to_pylist(), ev["ts_ns"].to_pylist(), ev["dur_ns"].to_pylist()
    tids = ev["tid"].cast(pa.string()).to_pylist()
    ops: dict[tuple[int, str], list[int]] = {}
    runtime: dict[int, list[int]] = {}
    for i, (a, b) in enumerate(zip(pc.extract_regex(args, _SEQ_NR.pattern).to_pylist(),
                                   pc.extract_regex(args, _NRTA_SEQ.pattern).to_pylist(), strict=True)):
        if a is not None:
            ops.setdefault((int(a["n"]), str(tids[i])), []).append(i)
        if b is not None:
            runtime.setdefault(int(b["n"]), []).append(i)
    for key, rows in ops.items():  # keep the outermost ops: drop those inside an earlier one's span
        rows.sort(key=lambda i: (ts[i], -durs[i]))
        top, reach = [], None
        for i in rows:
            if reach is None or ts[i] >= reach:
                top.append(i)
                reach = ts[i] + durs[i]
        ops[key] = top
    src, dst, flow_id, ambiguous = [], [], [], 0
    for seq, nr, tid in mapping:
        cands = ops.get((nr, tid), [])
        for r in runtime.get(seq, []) if cands else []:
            before = [i for i in cands if ts[i] <= ts[r]]
            op = before[-1] if before else (cands[0] if len(cands) == 1 else None)
            ambiguous += len(cands) > 1
            if op is not None:
                src.append(op)
                dst.append(r)
                flow_id.append(str(seq))
    n = len(src)
    flows = pa.table({
        "flow_id": pa.array(flow_id, pa.string()), "kind": pa.array(["launch"] * n, DICT_STRING.value_type),
        "raw_category": pa.array(["framework_mapping"] * n, pa.string()),
        "src_event_id": pa.array([ids[i] for i in src], pa.int64()),
        "dst_event_id": pa.array([ids[i] for i in dst], pa.int64()),
        "src_ts_ns": pa.array([ts[i] for i in src], pa.int64()), "dst_ts_ns": pa.array([ts[i] for i in dst], pa.int64()),
        "rank": pa.array([ev["rank"][i].as_py() for i in src], pa.int32()),
    }).cast(trace.flows.schema)
    fact: dict[str, Any] = {
        "files": files, "entries": len(mapping),
        "framework_ops_found": sum((nr, t) in ops for _, nr, t in mapping),
        "runtime_events_with_seq_id": sum(len(v) for v in runtime.values()), "flows": n,
        "picked_by_time_among_several_ops": ambiguous}
    if not runtime:
        fact["note"] = ("no runtime event carries an NRT async sequence id: decode the system profile with "
                        "neuron-explorer to link executions to the framework ops that issued them")
    tables = trace.tables
    tables["flows"] = pa.concat_tables([trace.flows, flows])
    tables["metadata"] = pa.concat_tables([trace.metadata, metadata_table({"torchneuron.framework_mapping": fact})])
    return Trace(**tables)


def _beside(path: Path, roots: list[Path]) -> tuple[list[Path], list[Path]]:
    """Framework traces and framework_mapping files beside the process folders (the flat layout
    writes them to ``{out}/``); for a process folder given alone, those in its parent when it is the
    parent's only process folder."""
    where = path.parent if INSTANCE_DIR.match(path.name) else path
    if where == path.parent and sum(1 for c in where.iterdir() if c.is_dir() and INSTANCE_DIR.match(c.name)) != 1:
        return [], []
    if where == path and roots == [path]:
        return [], sorted(c for c in path.iterdir() if c.is_file() and _MAPPING.match(c.name))
    files = sorted(c for c in where.iterdir() if c.is_file())
    return [c for c in files if _FRAMEWORK.search(c.name)], [c for c in files if _MAPPING.match(c.name)]


def _undecoded_message(path: Path, undecoded: list[dict[str, str]], *, framework: bool) -> str:
    n = sum(1 for u in undecoded if u["ntff"])
    system = " and the system profile" if len(undecoded) > n else ""
    if n == 0 and framework:
        head = (f"{path}: the system profile was not decoded (what its .pb files show without the tool is in "
                "metadata neuron.system_pb); what else was there was loaded. Decoding it needs")
    elif framework:
        head = (f"{path}: {n} device profile(s){system} not decoded; loaded the framework trace alone (host side, "
                "fallback, phases). The device side needs")
    else:
        head = f"{path}: no framework trace here, and its {n} device profile(s){system} need"
    lines = [(f"{head} AWS's neuron-explorer (package aws-neuronx-tools, on Neuron instances under "
              "/opt/aws/neuron/bin), which is not on PATH here. On a machine that has it, run:")]
    for u in undecoded:
        lines += [f"  {u['profile']}", f"    {u['command']}"]
    lines.append("then load the capture again on any machine: the Parquet folders inside it are picked up")
    return "\n".join(lines)


def _is_raw(p: Path) -> bool:
    """A raw capture file: an NTFF or one of the system-trace protobufs."""
    return p.suffix == ".ntff" or p.name in _SYSTEM_PB


def _leaves(root: Path) -> list[Path]:
    out = [root] if _is_leaf(root) else []
    out += sorted(c for c in root.iterdir() if c.is_dir() and not looks_like_explorer(c) and _is_leaf(c))
    return out


def _load_leaf(leaf: Path, acct: ParseAccounting, *, host: str | None, rank_hint: int | None,
               options: dict[str, Any], extra: list[Path]) -> tuple[list[Trace], dict[str, Any]]:
    files = sorted(p for p in leaf.iterdir() if p.is_file() and not _MAPPING.match(p.name))
    acct.events_read += len(files) + len(extra)
    framework = [*extra, *(p for p in files if _FRAMEWORK.search(p.name))]
    ntffs = [p for p in files if p.suffix == ".ntff"]
    empty = [p for p in ntffs if p.stat().st_size == 0]
    facts: dict[str, Any] = {"leaf": str(leaf), "host": host, "clocks": []}
    if empty:
        warn(acct, f"{leaf}: {len(empty)} NTFF file(s) are empty (0 bytes: those NeuronCores ran nothing during "
             f"the capture): {', '.join(p.name for p in empty[:6])}", NeuronProfileWarning)
        acct.skip("empty NTFF (the NeuronCore ran nothing)", len(empty))
    parts: list[Trace] = []
    for fw in framework:
        parts.append(kineto_parse(fw, device_elsewhere=True))
        acct.keep("framework traces", 1)
    rank, rank_source = _rank(parts, rank_hint)
    facts.update(rank=rank, rank_source=rank_source, framework=[
        {"file": fw.name, "clock": t.meta("clock")} for fw, t in zip(framework, parts, strict=True)])
    facts["clocks"] += [t.meta("clock") for t in parts]
    device_parts, how, undecoded = _device(leaf, files, ntffs, empty, acct, host, rank,
                                           skip_framework=bool(framework), options=options)
    facts["device_source"] = how
    facts["undecoded"] = undecoded
    if undecoded:  # what the system .pb files show without neuron-explorer (framing, instance, CPU, files)
        facts["system_pb"] = [{"folder": str(leaf), **f} for f in pb.describe(leaf)]
    facts["device"] = [t.meta("alignment") for t in device_parts]
    facts["clocks"] += [t.meta("clock") for t in device_parts]
    facts["synthetic"] = any(t.meta("synthetic") or t.meta("kineto.synthetic") for t in [*parts, *device_parts])
    labelled = [_label(t, host=host, rank=rank) for t in [*parts, *device_parts]]
    return labelled, facts


def _device(leaf: Path, files: list[Path], ntffs: list[Path], empty: list[Path], acct: ParseAccounting,
            host: str | None, rank: int | None, *, skip_framework: bool,
            options: dict[str, Any]) -> tuple[list[Trace], str, list[dict[str, str]]]:
    raw = [p for p in files if p not in empty and (_is_raw(p) or p.suffix == ".neff")]
    other = [p for p in files if p not in raw and p not in empty and not _FRAMEWORK.search(p.name)]
    acct.skip("not a profile file", len(other))
    processed = sorted(c for c in leaf.iterdir() if c.is_dir() and looks_like_explorer(c))
    kw = {"skip_framework_events": skip_framework, "host": host, "rank": rank, "detail": options["detail"]}
    if processed:
        acct.skip("raw capture file (an Explorer Parquet directory beside it was loaded instead)", len(raw))
        return ([neuron_explorer.parse(d, **kw) for d in processed], "Explorer Parquet directory in the capture",
                [])
    if not [p for p in raw if _is_raw(p)]:
        acct.skip("NEFF without an NTFF to decode", len(raw))
        return [], "none (no NTFF or system-trace files)", []
    exe = find_tool(options["tool"])
    if exe is None:
        live = [p for p in ntffs if p not in empty]
        reports = {p: r for p in live if (r := ntff.decoded_report(p, read_header(p))) is not None}
        parts = [ntff.parse(p) for p in reports]  # the JSON reports neuron-profile already wrote beside them
        if len(reports) > 1:
            warn(acct, f"{leaf}: {len(reports)} NTFFs were read from their JSON reports; each report's times count "
                 "from its own profile start, so analysed together their executions overlap in time. Load one "
                 f"NTFF (e.g. {next(iter(reports)).name}) to analyse one execution", NeuronProfileWarning)
        acct.keep("NTFFs read from the JSON report beside them", len(reports))
        rest = [p for p in live if p not in reports]
        left = [p for p in raw if p not in reports]
        neffs = [p for p in left if p.suffix == ".neff"] if reports and not rest else []
        acct.skip("NEFF not needed: its NTFFs were read from their JSON reports", len(neffs))
        acct.skip("not decoded: neuron-explorer is not installed", len(left) - len(neffs))
        system = any((leaf / pb).is_file() for pb in ("trace_info.pb", "ntrace.pb"))
        undecoded = undecoded_profiles(leaf, rest) if rest or system else []
        how = "JSON reports beside the NTFFs (json_reports/)" if reports else "not decoded (neuron-explorer missing)"
        return parts, how, undecoded
    out = decode(exe, ["-d", str(leaf)], raw, cache=cache_root(options["cache_dir"]),
                 timeout_s=options["timeout_s"] if options["timeout_s"] is not None else timeout_default(),
                 what=str(leaf))
    acct.keep("files decoded by neuron-explorer", len(raw))
    return [neuron_explorer.parse(d, source=f"{leaf} (decoded by {exe.name})", **kw)
            for d in ntff.explorer_dirs(out)], f"decoded by {exe.name} view -d", []


def undecoded_profiles(leaf: Path, ntffs: list[Path]) -> list[dict[str, str]]:
    """Each device profile of a leaf with the exact command that decodes it on a Neuron machine.

    A leaf with a system profile (``trace_info.pb`` / ``ntrace.pb``, which ``view -d`` requires,
    ``troubleshooting.rst``) is decoded whole with ``view -d``, the only way for session NTFFs; an
    NTFF whose NEFF pairs by the rules of :mod:`._neuron_ntff` also gets its own ``view -n -s``.
    """
    whole = f"neuron-explorer view -d {leaf} --output-format parquet --output-file {leaf}/neuron_parquet"
    system = any((leaf / pb).is_file() for pb in ("trace_info.pb", "ntrace.pb"))
    out, in_whole = [], []
    for p in ntffs:
        try:
            header = read_header(p)
            check_version(p, header)  # an NTFF view cannot read gets the reason, not a command that fails
            neff, _ = (None, "") if is_session(p) else find_neff(p, header, None)
            what = f"{p.name}: {header.describe()}"
        except NeurontraceError as exc:
            neff, what = None, f"{p.name}: {exc}"
        if neff is not None:
            out.append({"profile": what, "ntff": str(p), "command": f"neuron-explorer view -n {neff} -s {p} "
                        f"--output-format parquet --output-file {p.parent / (p.stem + '_parquet')}"})
        elif system:
            in_whole.append(p.name)
            out.append({"profile": what, "ntff": str(p), "command": whole})
        else:
            out.append({"profile": what, "ntff": str(p), "command": f"neuron-explorer view -n <the NEFF it ran> -s "
                        f"{p} --output-format parquet --output-file {p.parent / (p.stem + '_parquet')}"})
    if system:
        out.append({"profile": f"{leaf.name}/: the system profile (ntrace.pb, trace_info.pb) and every device "
                               "profile beside it", "ntff": "", "command": whole})
    return out


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
