"""The run catalog: diagnosed runs kept as evidence, to find and compare later.

One SQLite file, ``DIR/runs.sqlite``, holds every saved run: the ``neurontrace.diagnose/1`` JSON,
the facts the trace carries (formats, backend, GPU or instance type, tool, runtime and compiler
versions, the ``run.json`` a neurontrace capture wrote), the user's model name, tags and note, and
the absolute paths of the traces, so a comparison can reload them for the op-level diff.

Why SQLite (docs/diff.md, "Run catalog"): it is in the Python standard library (no new dependency
for a feature every user of ``diagnose`` can reach), one portable file that survives copying into
CI artifacts, transactional (several ranks saving at once serialize on the file lock), and the
catalog's queries (filter a few thousand runs by tag, model, date, version) are point lookups,
not the columnar scans DuckDB is built for. The trace tables themselves stay in Parquet.
"""

from __future__ import annotations

import json
import os
import sqlite3
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from neurontrace import schema, trace_facts
from neurontrace.analysis import step_stats
from neurontrace.analysis.phases import SECTION as _PHASES
from neurontrace.errors import (
    EXIT_MALFORMED,
    EXIT_USAGE,
    InputNotFoundError,
    MalformedTraceError,
    NeurontraceError,
)
from neurontrace.trace import Trace

PHASES_KEY = _PHASES.key  # the stored diagnosis's phases section (analysis/phases.py)

FILE_NAME = "runs.sqlite"
CATALOG_VERSION = 1  # PRAGMA user_version of the file; a newer file is refused, never rewritten
DIR_ENV = "NEURONTRACE_RUNS"  # default catalog directory for `neurontrace runs`
DEFAULT_DIR = "neurontrace-runs"
MAX_FACT_CHARS = 65_536  # metadata values larger than this (lookup tables) are not copied into the catalog
# Metadata keys never copied: bookkeeping that the diagnosis already summarizes, or bulk tables.
_SKIP_KEYS = ("neurontrace.accounting", "kineto.names", "neuron.table.", "neuron.execution_info",
              "neuron.derived_rows", "neuron.opcode_summary", "neuron.tensor_info",
              *(k.key for k in schema.NORMALIZED_KEYS), schema.DEVICE_ACTIVITY.key)  # these are in versions etc.
_BUSY_TIMEOUT_S = 30.0
_TABLES = ("runs", "tags", "versions")

_SCHEMA = """
CREATE TABLE runs (
    run_id INTEGER PRIMARY KEY AUTOINCREMENT,
    saved_at TEXT NOT NULL,             -- UTC ISO 8601, when the run was saved
    run_time TEXT NOT NULL,             -- UTC ISO 8601, when the run happened (run.json, trace clock, else saved_at)
    model TEXT,
    note TEXT,
    backend TEXT,
    device_type TEXT,                   -- GPU name(s) or Neuron instance type
    formats TEXT NOT NULL,              -- JSON list of input formats
    synthetic INTEGER NOT NULL,
    neurontrace_version TEXT NOT NULL,  -- the neurontrace that diagnosed the run
    paths TEXT NOT NULL,                -- JSON list of absolute trace paths
    facts TEXT NOT NULL,                -- JSON object: what the trace says about its run
    diagnosis TEXT NOT NULL             -- JSON neurontrace.diagnose/1 document
);
CREATE TABLE tags (
    run_id INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    tag TEXT NOT NULL,
    PRIMARY KEY (run_id, tag)
);
CREATE TABLE versions (
    run_id INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    name TEXT NOT NULL,                 -- torch, cuda_runtime, neuron_compiler, ...
    value TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE INDEX runs_model ON runs(model);
CREATE INDEX runs_run_time ON runs(run_time);
CREATE INDEX tags_tag ON tags(tag);
CREATE INDEX versions_value ON versions(value);
"""


class CatalogUsageError(NeurontraceError):
    """A run reference, date or catalog directory that cannot be used as given."""

    exit_code = EXIT_USAGE


class CatalogDamagedError(NeurontraceError):
    """The catalog file, or one run in it, cannot be read: the message says which and what to do."""

    exit_code = EXIT_MALFORMED


class CatalogWarning(UserWarning):
    """Runs of the catalog that could not be read were left out (the message names them)."""


def default_directory() -> Path:
    """``$NEURONTRACE_RUNS``, else ``./neurontrace-runs``."""
    return Path(os.environ.get(DIR_ENV) or DEFAULT_DIR)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class RunRecord:
    """One saved run."""

    run_id: int
    saved_at: str
    run_time: str
    model: str | None
    note: str | None
    tags: list[str]
    paths: list[str]
    formats: list[str]
    backend: str | None
    device_type: str | None
    versions: dict[str, str]
    synthetic: bool
    neurontrace_version: str
    facts: dict[str, Any] = field(default_factory=dict)
    diagnosis: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The headline figures of the stored diagnosis (for listings)."""
        devices = self.diagnosis.get("devices") or []
        phases = self.diagnosis.get(PHASES_KEY) or {}
        findings = self.diagnosis.get("findings") or []
        order = ("info", "warning", "error")
        worst = max((f.get("severity") for f in findings if f.get("severity") in order), key=order.index,
                    default=None)
        shares = []
        for d in devices:
            win = int(d["window"]["end_ns"]) - int(d["window"]["start_ns"])
            compute = int((d.get("causes_ns") or {}).get("compute", 0))
            shares.append(compute / win if win else 0.0)
        stats = step_stats.of_diagnosis(self.diagnosis)
        return {"devices": len(devices), "compute_share": min(shares) if shares else None,
                **{k: None if v is None else round(v) for k, v in stats.items()},  # step_stats' keys
                "steps": len(phases.get("steps") or []),
                "time_to_first_step_ns": phases.get("time_to_first_step_ns"),
                "compile_ns": phases.get("compile_ns"),
                "recompiles": (self.diagnosis.get("compile") or {}).get("recompiles"),
                "cache_hits": (self.diagnosis.get("compile") or {}).get("cache_hits"),
                "fallback_ops": len(self.diagnosis.get("fallback_ops") or []), "worst_finding": worst,
                "headline": self.diagnosis.get("headline")}  # diagnose's verdict line (analysis/headline.py)

    def as_dict(self, *, diagnosis: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": "neurontrace.run-record/1", "run_id": self.run_id, "saved_at": self.saved_at,
            "run_time": self.run_time, "model": self.model, "note": self.note, "tags": self.tags,
            "paths": self.paths, "formats": self.formats, "backend": self.backend, "device_type": self.device_type,
            "versions": self.versions, "synthetic": self.synthetic, "neurontrace_version": self.neurontrace_version,
            "summary": self.summary(), "facts": self.facts,
        }
        if diagnosis:
            out["diagnosis"] = self.diagnosis
        return out

    def traces_present(self) -> bool:
        return bool(self.paths) and all(Path(p).exists() for p in self.paths)


class RunCatalog:
    """The catalog in ``directory`` (one file, ``runs.sqlite``). Use as a context manager or close()."""

    def __init__(self, directory: str | Path, *, create: bool = False) -> None:
        self.directory = Path(directory)
        self.path = self.directory / FILE_NAME
        self.unreadable: dict[int, str] = {}  # run id -> why, for the rows reading left out
        if not self.path.is_file():
            if not create:
                raise InputNotFoundError(f"{self.path}: no run catalog here; save a run first with "
                                         f"`neurontrace diagnose TRACE --save-run {self.directory}`")
            if self.directory.exists() and not self.directory.is_dir():
                raise CatalogUsageError(f"{self.directory} exists and is not a directory; choose another catalog directory")
            self.directory.mkdir(parents=True, exist_ok=True)
        try:
            # Autocommit mode: every write is one explicit BEGIN IMMEDIATE ... COMMIT (_transaction).
            self._db = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA foreign_keys = ON")
            self._init_schema()
        except sqlite3.DatabaseError as exc:
            raise MalformedTraceError(f"{self.path}: not a readable run catalog ({exc})") from exc

    def _init_schema(self) -> None:
        if self._version() == 0:
            with self._transaction() as db:  # re-checked under the write lock: another process may win
                if self._version() == 0:
                    if db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]:
                        raise MalformedTraceError(f"{self.path}: an SQLite file that is not a neurontrace run catalog")
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            db.execute(statement)
                    db.execute(f"PRAGMA user_version = {CATALOG_VERSION}")
        version = self._version()
        if version > CATALOG_VERSION:
            raise MalformedTraceError(f"{self.path}: catalog version {version}, this neurontrace reads up to "
                                      f"{CATALOG_VERSION}; upgrade neurontrace")
        present = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = [t for t in _TABLES if t not in present]
        if missing:
            raise CatalogDamagedError(
                f"{self.path}: a run catalog (version {version}) without its table(s) {', '.join(missing)}: the file "
                "is damaged. Move it aside (e.g. rename it to runs.sqlite.damaged) and save runs again, or restore "
                "it from a copy")

    def _version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> RunCatalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------------

    def save(
        self,
        trace: Trace,
        diagnosis: Any,
        *,
        paths: Sequence[str | Path],
        tags: Iterable[str] = (),
        note: str | None = None,
        model: str | None = None,
    ) -> RunRecord:
        """Keep one diagnosed run; returns the record with its new ``run_id``."""
        from neurontrace._version import __version__

        diag = diagnosis if isinstance(diagnosis, Mapping) else diagnosis.as_dict()
        facts = run_facts(trace, diag)
        run = facts.get("run") or {}
        tag_list = sorted({t.strip() for t in [*tags, *(run.get("tags") or [])] if t and t.strip()})
        note = note if note is not None else run.get("notes")
        abs_paths = [str(Path(p).resolve()) for p in paths]
        saved_at = utc_now()
        run_time = facts.get("run_time") or saved_at
        versions = facts["versions"]
        with self._transaction() as db:
            cur = db.execute(
                "INSERT INTO runs (saved_at, run_time, model, note, backend, device_type, formats, synthetic, "
                "neurontrace_version, paths, facts, diagnosis) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (saved_at, run_time, model, note, facts.get("backend"), facts.get("device_type"),
                 json.dumps(facts["formats"]), int(bool(facts.get("synthetic"))), __version__,
                 json.dumps(abs_paths), json.dumps(facts, default=str), json.dumps(diag)))
            run_id = int(cur.lastrowid or 0)
            db.executemany("INSERT INTO tags (run_id, tag) VALUES (?, ?)", [(run_id, t) for t in tag_list])
            db.executemany("INSERT INTO versions (run_id, name, value) VALUES (?, ?, ?)",
                           [(run_id, k, v) for k, v in sorted(versions.items())])
        return self.get(run_id)

    def delete(self, ref: str | int) -> int:
        """Remove one run (by id, ``latest``... as :meth:`get`); a run that cannot be read goes by its id."""
        text = str(ref).strip()
        if text.isdigit() and self._first("SELECT run_id FROM runs WHERE run_id = ?", [int(text)]) is not None:
            run_id = int(text)
        else:
            run_id = self.get(ref).run_id
        with self._transaction() as db:
            db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
        return run_id

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken with the file's write lock (waits up to 30 s for other writers)."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise MalformedTraceError(f"{self.path}: could not write the run catalog ({exc})") from exc
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # -- reading ---------------------------------------------------------------------------------

    def runs(
        self,
        *,
        tags: Iterable[str] = (),
        model: str | None = None,
        since: str | None = None,
        until: str | None = None,
        version: str | None = None,
        limit: int | None = None,
    ) -> list[RunRecord]:
        """Saved runs, newest first, that have every tag, the model, a run time in [since, until]
        and a matching version (``VALUE``: any version equal to or starting with it; ``NAME=VALUE``:
        that version)."""
        where, params = [], []
        for tag in tags:
            where.append("run_id IN (SELECT run_id FROM tags WHERE tag = ?)")
            params.append(tag)
        if model is not None:
            where.append("model = ?")
            params.append(model)
        if since is not None:
            where.append("run_time >= ?")
            params.append(parse_time(since))
        if until is not None:
            where.append("run_time < ?")
            params.append(parse_time(until, end=True))
        if version is not None:
            name, sep, value = version.partition("=")
            if sep:
                where.append("run_id IN (SELECT run_id FROM versions WHERE name = ? AND "
                             "(value = ? OR value LIKE ? ESCAPE '\\'))")
                params += [name.strip(), value.strip(), _prefix(value.strip())]
            else:
                where.append("run_id IN (SELECT run_id FROM versions WHERE value = ? OR value LIKE ? ESCAPE '\\')")
                params += [version.strip(), _prefix(version.strip())]
        sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY run_time DESC, run_id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(str(int(limit)))
        return self._readable(self._query(sql, params))

    def get(self, ref: str | int) -> RunRecord:
        """A run by id, ``latest``, ``latest~N`` (N runs before the latest) or ``tag:NAME`` (the latest
        run with that tag)."""
        text = str(ref).strip()
        row = None
        if text.isdigit():
            row = self._first("SELECT * FROM runs WHERE run_id = ?", [int(text)])
        elif text == "latest" or text.startswith("latest~"):
            back = text.partition("~")[2]
            if back and not back.isdigit():
                raise CatalogUsageError(f"bad run reference {text!r}: expected latest~N with a whole number N")
            row = self._first("SELECT * FROM runs ORDER BY saved_at DESC, run_id DESC LIMIT 1 OFFSET ?",
                              [int(back or 0)])
        elif text.startswith("tag:"):
            row = self._first("SELECT * FROM runs WHERE run_id IN (SELECT run_id FROM tags WHERE tag = ?) "
                              "ORDER BY saved_at DESC, run_id DESC LIMIT 1", [text[4:]])
        else:
            raise CatalogUsageError(f"bad run reference {text!r}: expected a run id, latest, latest~N or tag:NAME")
        if row is None:
            raise InputNotFoundError(f"no run {text!r} in {self.path}; `neurontrace runs list --dir "
                                     f"{self.directory}` shows the saved runs")
        try:
            return self._record(row)
        except _UnreadableRowError as exc:
            raise CatalogDamagedError(f"{self.path}: run {exc.run_id} cannot be read ({exc.why}); remove it with "
                                      f"`neurontrace runs delete {exc.run_id} --dir {self.directory}`") from None

    def previous(self, record: RunRecord) -> RunRecord | None:
        """The run saved just before ``record`` (of the same model, when it names one)."""
        sql = "SELECT * FROM runs WHERE run_id < ?"
        params: list[int | str] = [record.run_id]
        if record.model:
            sql += " AND model = ?"
            params.append(record.model)
        found = self._readable(self._query(sql + " ORDER BY run_id DESC", params), limit=1)
        return found[0] if found else None

    def _query(self, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
        try:
            return list(self._db.execute(sql, params).fetchall())
        except sqlite3.DatabaseError as exc:  # a damaged page, a table changed by hand
            raise CatalogDamagedError(f"{self.path}: the run catalog cannot be read ({exc}); restore it from a "
                                      "copy, or move it aside and save runs again") from exc

    def _first(self, sql: str, params: Sequence[Any]) -> sqlite3.Row | None:
        rows = self._query(sql, params)
        return rows[0] if rows else None

    def _readable(self, rows: list[sqlite3.Row], limit: int | None = None) -> list[RunRecord]:
        """The records of ``rows``; one that cannot be read is left out with a :class:`CatalogWarning`."""
        out: list[RunRecord] = []
        bad: list[str] = []
        for row in rows:
            try:
                out.append(self._record(row))
            except _UnreadableRowError as exc:
                self.unreadable[exc.run_id] = exc.why
                bad.append(f"run {exc.run_id} ({exc.why})")
            if limit is not None and len(out) >= limit:
                break
        if bad:
            warnings.warn(f"{self.path}: left out {len(bad)} run(s) that cannot be read: {'; '.join(bad)}; "
                          "`neurontrace runs delete ID` removes one", CatalogWarning, stacklevel=3)
        return out

    def _record(self, row: sqlite3.Row) -> RunRecord:
        run_id = row["run_id"]
        try:
            tags = [r[0] for r in self._query("SELECT tag FROM tags WHERE run_id = ? ORDER BY tag", [run_id])]
            versions = {str(r[0]): str(r[1]) for r in
                        self._query("SELECT name, value FROM versions WHERE run_id = ? ORDER BY name", [run_id])}
            record = RunRecord(
                run_id=int(run_id), saved_at=row["saved_at"], run_time=row["run_time"], model=row["model"],
                note=row["note"], tags=tags, paths=json.loads(row["paths"]), formats=json.loads(row["formats"]),
                backend=row["backend"], device_type=row["device_type"], versions=versions,
                synthetic=bool(row["synthetic"]), neurontrace_version=row["neurontrace_version"],
                facts=json.loads(row["facts"]), diagnosis=json.loads(row["diagnosis"]),
            )
            _check_record(record)
        except (TypeError, ValueError, KeyError) as exc:
            raise _UnreadableRowError(run_id, f"{type(exc).__name__}: {exc}"[:200]) from None
        return record

    # -- comparing -------------------------------------------------------------------------------

    def compare(self, baseline: str | int, change: str | int, *, thresholds: Any = None,
                reload: bool = True) -> Any:
        """The diff of two saved runs: a full diff when both runs' traces can be reloaded, else the
        diff of their stored diagnoses (causes, fallback ops, phases, steps; no op level)."""
        from neurontrace.analysis.diff import diff, diff_diagnoses
        from neurontrace.load import load

        a, b = self.get(baseline), self.get(change)
        la, lb = _label(a), _label(b)
        if reload and a.traces_present() and b.traces_present():
            ta = Trace.concat([load(p) for p in a.paths])
            tb = Trace.concat([load(p) for p in b.paths])
            return diff(ta, tb, baseline_diagnosis=a.diagnosis, change_diagnosis=b.diagnosis, thresholds=thresholds,
                        baseline_label=la, change_label=lb)
        out = diff_diagnoses(a.diagnosis, b.diagnosis, thresholds=thresholds, baseline_label=la, change_label=lb)
        missing = [p for r in (a, b) for p in r.paths if not Path(p).exists()]
        if reload and missing:
            out.notes.append(f"trace files not found ({', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}): "
                             "compared the stored diagnoses only")
        return out


class _UnreadableRowError(Exception):
    def __init__(self, run_id: Any, why: str) -> None:
        super().__init__(why)
        self.run_id, self.why = run_id, why


_TEXT_FIELDS = ("saved_at", "run_time", "neurontrace_version")


def _check_record(r: RunRecord) -> None:
    """A record every reader can use: the JSON columns of the right kind, the times and version text."""
    for name in _TEXT_FIELDS:
        if not isinstance(getattr(r, name), str):
            raise TypeError(f"{name} is {type(getattr(r, name)).__name__}, not text")
    for name, kind in (("paths", list), ("formats", list), ("facts", dict), ("diagnosis", dict)):
        if not isinstance(getattr(r, name), kind):
            raise TypeError(f"{name} is {type(getattr(r, name)).__name__}, not {kind.__name__}")
    r.summary()  # what every listing shows must compute


def _label(r: RunRecord) -> str:
    parts = [f"run {r.run_id}"]
    if r.model:
        parts.append(r.model)
    if r.tags:
        parts.append("[" + ", ".join(r.tags) + "]")
    return " ".join(parts)


def _prefix(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def parse_time(text: str, *, end: bool = False) -> str:
    """A date or date-time (ISO 8601, UTC unless it says otherwise) as the catalog's UTC ISO text.

    With ``end``, a bare date means the end of that day (``--until 2026-01-31`` includes the 31st).
    """
    value = text.strip()
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise CatalogUsageError(f"bad date {text!r}: expected YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    if end and len(value) == 10:
        when += timedelta(days=1)
    return when.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


# -- what a trace says about its run -------------------------------------------------------------


def run_facts(trace: Trace, diagnosis: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Setup facts a trace carries: formats, backend, device type, versions, the capture's run.json.

    ``versions`` is flat (``torch``, ``cuda_runtime``, ``cupti``, ``neuron_runtime``,
    ``neuron_compiler`` ...); ``metadata`` keeps the trace's other small metadata values as found.
    """
    meta: dict[str, list[Any]] = {}
    keys = trace.metadata["key"].to_pylist()
    values = trace.metadata["value"].to_pylist()
    for key, value in zip(keys, values, strict=True):  # metadata: a few rows per input file
        if key.startswith(_SKIP_KEYS) or len(value) > MAX_FACT_CHARS:
            continue
        parsed = json.loads(value)
        if parsed not in meta.setdefault(key, []):
            meta[key].append(parsed)
    # The normalized facts the parsers wrote, never a format's own keys; and the capture's own run.json.
    versions = trace_facts.tool_versions(trace)
    device_types = [d.name for d in trace_facts.devices(trace).values() if d.name]
    device_types += trace_facts.instance_types(trace)
    runs = [r for r in meta.get("run", []) if isinstance(r, dict)]
    run = runs[0] if runs else None
    if run is not None:
        for name, v in _flatten(run.get("versions") or {}).items():
            versions.setdefault(name, set()).add(v)
        if run.get("python"):
            versions.setdefault("python", set()).add(str(run["python"]))
        for d in run.get("devices") or []:
            if isinstance(d, dict) and d.get("name"):
                device_types.append(str(d["name"]))
    formats = sorted({a.format for a in trace.accounting})
    synthetic = bool(trace.meta("synthetic", False)) or bool((diagnosis or {}).get("synthetic"))
    return {
        "formats": formats,
        "backend": (run or {}).get("backend") or trace.meta("backend"),  # the capture knows what it ran on
        "synthetic": synthetic,
        "device_type": ", ".join(dict.fromkeys(device_types)) or None,
        "devices": [{"device": d.get("device"), "rank": d.get("rank")} for d in (diagnosis or {}).get("devices", [])],
        "versions": {k: ", ".join(sorted(v)) for k, v in sorted(versions.items())},
        "run_time": _run_time(trace, run, diagnosis),
        "run": run,
        "metadata": {k: (v[0] if len(v) == 1 else v) for k, v in sorted(meta.items()) if k != "run"},
    }


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, name + "."))
        elif v is not None:
            out[name] = str(v)
    return out


def _run_time(trace: Trace, run: Mapping[str, Any] | None, diagnosis: Mapping[str, Any] | None) -> str | None:
    """When the run happened: run.json's start, else the trace's own wall clock (Unix epoch)."""
    if run and run.get("start_time"):
        try:
            return parse_time(str(run["start_time"]))
        except CatalogUsageError:
            pass
    start = ((diagnosis or {}).get(PHASES_KEY) or {}).get("trace_start_ns")
    if trace.meta("clock") == "unix_epoch_ns" and start:
        when = datetime.fromtimestamp(int(start) / 1e9, tz=timezone.utc)
        return when.isoformat(timespec="seconds").replace("+00:00", "Z")
    return None
