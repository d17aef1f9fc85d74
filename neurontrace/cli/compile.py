"""``neurontrace compile``: compiles, recompiles, graph breaks, caches and failures from compile logs alone."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from neurontrace import errors
from neurontrace.cli import _common as common

SCHEMA = "neurontrace.compile/1"


class CompileCommand(common.Command):
    """report compiles, recompiles, graph breaks, cache hits and failures from compile logs

    PATH is a TORCH_TRACE log or a directory of them (one per rank), a file of TORCH_LOGS=recompiles,graph_breaks
    output (a job's stderr), a log holding the Neuron compiler-cache lines or neuron_parallel_compile's summary,
    or a NEFF cache directory; several may be given. With --json it prints the neurontrace.compile/1 document
    (docs/compile.md). Per-rank logs get one section each, then the job's.
    """

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("path", nargs="+", type=Path, help="compile logs or directories of them")
        parser.add_argument("--json", action="store_true", help=f"print the {SCHEMA} JSON document")

    def run(self, args: argparse.Namespace) -> int:
        from neurontrace.analysis.compile import combine, report, text
        from neurontrace.analysis.compile_findings import findings
        from neurontrace.parsers.compile_logs import read

        log = read(args.path)
        warnings = log.warnings()
        by_rank: dict[int | None, list[dict[str, Any]]] = {}
        for row in log.rows:
            by_rank.setdefault(row.get("rank"), []).append(row)
        ranks = sorted(by_rank, key=lambda r: (r is not None, r or 0))
        parts = [(r, report(by_rank[r], None, warnings if len(ranks) == 1 else [])) for r in ranks]
        values = [v for _r, v in parts if v is not None]
        job = combine(values) if values else None
        if job is not None and len(values) > 1:
            job.warnings = warnings
        found = findings(job) if job is not None else []
        if args.json:
            doc = {"schema": SCHEMA, "inputs": log.files, "compile": None if job is None else job.as_dict(),
                   "ranks": [{"rank": r, "compile": v.as_dict()} for r, v in parts if v is not None],
                   "findings": [f.as_dict() for f in found], "warnings": warnings}
            common.out_json(doc)  # streamed: a long log's document is never held twice
            return errors.EXIT_OK
        if job is None:
            common.out("no compile found in these logs")
            for w in warnings:
                common.out(w)
            return errors.EXIT_OK
        if len(values) > 1:
            for r, v in parts:
                if v is not None:
                    common.out(f"rank {r}:")
                    common.out("\n".join("  " + line for line in text(v)))
            common.out("job:")
        common.out("\n".join(text(job)))
        for f in found:
            common.out(f"[{f.severity}] {f.title}: {f.evidence}\n    -> {f.advice}")
        return errors.EXIT_OK
