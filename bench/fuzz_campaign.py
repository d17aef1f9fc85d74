"""The heavier fuzz campaign: the mutation classes of tests/fuzz_inputs.py, many more cases.

Every case must load or fail with a named neurontrace error, with valid tables, and (Kineto) both
decoders must agree; tests/test_fuzz.py runs a few thousand of these in the suite. This script does
not stop at the first failure: it prints one line per distinct failure (exception type and where it
was raised) with a case that reproduces it, saved under --keep.

    python bench/fuzz_campaign.py                     # 20,000 Kineto, 20,000 structured Kineto, 1,000 Neuron, ...
    python bench/fuzz_campaign.py --kineto 2000 --structured 2000 --seed 7

The last lines are the campaign's figures: cases, named errors, tracebacks (any other exception),
decoder disagreements (Kineto), table-validity failures, and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import neurontrace
from tests import fuzz_inputs as fz
from tests import fuzz_new_inputs as fn
from tests import fuzz_structured as fs

TOTALS: Counter[str] = Counter()


class Failures:
    def __init__(self, keep: Path) -> None:
        self.seen: dict[tuple[str, str], str] = {}
        self.keep = keep

    def add(self, exc: BaseException, what: str, case: Path) -> None:
        TOTALS["decoder disagreements" if "decoders disagree" in str(exc) else "invalid tables"
               if "validate(full=True)" in str(exc) else "tracebacks"] += 1
        frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f"{Path(frame.filename).name}:{frame.lineno}" if frame else "?"
        key = (type(exc).__name__, str(exc)[:120] if isinstance(exc, AssertionError) else where)
        if key in self.seen:
            return
        saved = self.keep / f"failure{len(self.seen)}{''.join(case.suffixes) or ''}"
        if case.is_dir():
            shutil.copytree(case, saved)
        else:
            shutil.copy(case, saved)
        self.seen[key] = f"{what} -> {saved}"
        print(f"FAIL {type(exc).__name__} at {where}: {str(exc)[:200]}\n     case: {what} (saved as {saved})",
              flush=True)

    def guard(self, what: str, case: Path, body: Callable[[], str], prefix: str = "") -> str:
        """``prefix`` + the outcome of ``body()``, or + ``FAIL`` with the failure recorded."""
        try:
            return prefix + body()
        except Exception as exc:
            self.add(exc, what, case)
            return prefix + "FAIL"


def run(label: str, cases: int, one: Callable[[int], str]) -> None:
    outcomes: Counter[str] = Counter()
    start = time.perf_counter()
    for i in range(cases):
        result = one(i)
        outcomes[result] += 1
        TOTALS["cases"] += 1
        TOTALS["named errors"] += result.endswith("error")
    took = time.perf_counter() - start
    print(f"{label}: {cases} cases in {took:.0f} s: {dict(outcomes)}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--kineto", type=int, default=20000)
    ap.add_argument("--structured", type=int, default=20000, help="structure-aware Kineto mutations")
    ap.add_argument("--neuron", type=int, default=1000)
    ap.add_argument("--json", type=int, default=4000)
    ap.add_argument("--outputs", type=int, default=500)
    ap.add_argument("--datasets", type=int, default=300, help="damaged two-rank datasets (convert -o)")
    ap.add_argument("--logs", type=int, default=1000, help="damaged real TORCH_TRACE compile logs")
    ap.add_argument("--pickles", type=int, default=1000, help="damaged memory-snapshot pickles")
    ap.add_argument("--max-source-bytes", type=int, default=2_000_000, help="corpus files up to this size")
    ap.add_argument("--no-user-runs", action="store_true",
                    help="skip running `info` and `diagnose` on every input that loads (faster, shallower)")
    ap.add_argument("--keep", type=Path, default=Path("fuzz-failures"), help="where failing cases are saved")
    args = ap.parse_args()
    args.keep.mkdir(parents=True, exist_ok=True)
    failures = Failures(args.keep)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        def users(path: Path, loaded: str) -> str:
            """Also run info and diagnose on an input that loads (the campaign's user path)."""
            if loaded == "ok" and not args.no_user_runs:
                fz.as_user(path)
            return loaded

        kineto = fz.kineto_cases(args.seed, args.kineto, args.max_source_bytes)

        def kineto_case(i: int) -> str:
            source, kind, data = next(kineto)
            path = tmp / ("k.json.gz" if data[:2] == b"\x1f\x8b" else "k.json")
            path.write_bytes(data)
            return failures.guard(f"kineto #{i} {kind} of {source}", path,
                                  lambda: users(path, fz.check_kineto(path).kind), f"{kind}: ")

        structured = fs.cases(args.seed, args.structured, args.max_source_bytes)

        def structured_case(i: int) -> str:
            source, kind, data = next(structured)
            path = tmp / "s.json"
            path.write_bytes(data)
            return failures.guard(f"structured #{i} {kind} of {source}", path,
                                  lambda: users(path, fz.check_kineto(path).kind), f"{kind.split()[0]}: ")

        def neuron_case(i: int) -> str:
            src = rng.choice(fz.NEURON_DIRS)
            kind = fz.neuron_mutation(src, tmp / "n", rng)
            return failures.guard(f"neuron #{i} {kind} of {src.name}", tmp / "n",
                                  lambda: users(tmp / "n", fz.outcome(tmp / "n").kind))

        docs = {p: json.loads(p.read_text()) for p in fz.LEGACY_JSON}

        def json_case(i: int) -> str:
            src = rng.choice(fz.LEGACY_JSON)
            kind, doc = fz.json_value_mutation(docs[src], rng)
            path = tmp / src.name
            path.write_text(json.dumps(doc))
            return failures.guard(f"legacy json #{i} {kind} of {src.name}", path,
                                  lambda: users(path, fz.outcome(path).kind))

        clean = neurontrace.load(fz.ROOT / "sample_traces" / "cpu_train_loop.pt.trace.json.gz").to_parquet(tmp / "c")

        def damaged_copy(clean: Path, out: Path, mutate: Callable[[Path, random.Random], str]) -> str:
            shutil.rmtree(out, ignore_errors=True)
            shutil.copytree(clean, out)
            return mutate(out, rng)

        def output_case(i: int) -> str:
            kind = damaged_copy(clean, tmp / "o", fz.parquet_output_mutation)
            return failures.guard(f"output #{i} {kind}", tmp / "o", lambda: fz.outcome(tmp / "o").kind)

        ranks = tmp / "ranks"
        ranks.mkdir()
        for r in (0, 1):
            shutil.copy(fz.ROOT / "sample_traces" / "gloo_8rank" / f"rank-{r}.pt.trace.json.gz", ranks)
        from neurontrace.cli import main as cli_main

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cli_main(["convert", str(ranks), "-o", str(tmp / "dataset")])

        def dataset_case(i: int) -> str:
            kind = damaged_copy(tmp / "dataset", tmp / "d", fz.dataset_mutation)
            return failures.guard(f"dataset #{i} {kind}", tmp / "d", lambda: users(tmp / "d", fz.outcome(tmp / "d").kind))

        logs = fn.compile_logs()

        def log_case(i: int) -> str:
            src = rng.choice(logs)
            kind, data = fn.log_mutation(src.read_bytes(), rng)
            path = tmp / "x.log"
            path.write_bytes(data)
            return failures.guard(f"compile log #{i} {kind} of {src.name}", path,
                                  lambda: "ok" if fn.run_user("compile", str(path)) == 0 else "error", f"{kind}: ")

        from neurontrace.testing import synthetic_snapshot

        snapshot = synthetic_snapshot.leaky_steps(steps=2)
        canary = tmp / "canary"
        os.environ["NEURONTRACE_FUZZ_CANARY"] = str(canary)

        def pickle_case(i: int) -> str:
            kind, data = fn.pickle_mutation(snapshot, rng)
            path = tmp / "s.pickle"
            path.write_bytes(data)

            def body() -> str:
                codes = [fn.run_user(cmd, str(path)) for cmd in ("memory", "diagnose")]
                if canary.exists():
                    raise AssertionError("a pickle's __reduce__ payload ran")
                return "ok" if codes[0] == 0 else "error"
            return failures.guard(f"pickle #{i} {kind}", path, body, f"{kind}: ")

        run("kineto (both decoders)", args.kineto, kineto_case)
        run("kineto structure-aware (both decoders)", args.structured, structured_case)
        run("neuron explorer directories", args.neuron, neuron_case)
        run("legacy neuron json", args.json, json_case)
        run("convert outputs", args.outputs, output_case)
        run("datasets", args.datasets, dataset_case)
        run("compile logs", args.logs if logs else 0, log_case)
        run("snapshot pickles", args.pickles, pickle_case)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"cases {TOTALS['cases']:,}; named errors {TOTALS['named errors']:,}; tracebacks {TOTALS['tracebacks']:,}; "
          f"decoder disagreements {TOTALS['decoder disagreements']:,}; invalid tables {TOTALS['invalid tables']:,}; "
          f"peak RSS {peak:.0f} MiB")
    print(f"distinct failures: {len(failures.seen)}")
    sys.exit(1 if failures.seen else 0)


if __name__ == "__main__":
    main()
