"""Every metadata key that is written or read is declared in ``schema.METADATA_KEYS``, with its JSON type.

Written keys are checked twice: on the tables the parsers make from real and synthetic inputs of every
format, and in the parsers' source, where keys built at run time show as literals and f-string prefixes.
Read keys are the literals passed to ``Trace.meta`` / ``Trace.meta_all`` anywhere in the package.
"""

from __future__ import annotations

import ast
import json
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import neurontrace
from neurontrace import schema
from neurontrace._capture_record import new_record, write_run_record
from tests.conftest import ROOT, SAMPLES

JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}
NEURON = SAMPLES / "synthetic_neuron"
INPUTS = [
    SAMPLES / "cpu_train_loop.pt.trace.json.gz",
    *sorted((SAMPLES / "compare").glob("*.json*"))[:2],
    SAMPLES / "gloo_8rank",
    NEURON / "synthetic_mlp_parquet",
    NEURON / "synthetic_mlp_v12_parquet",
    NEURON / "synthetic_mlp_device.json",
    NEURON / "synthetic_mlp_system.json",
    NEURON / "synthetic_mlp_summary.json",
    NEURON / "synthetic_mlp_summary.txt",
    NEURON / "synthetic_capture",
]
CORPUS = ROOT.parent / "shared" / "corpus" / "kineto"


def _corpus_sample() -> list[Path]:
    """One trace of each corpus folder (several vendors, ROCm, CPU-only, distributed)."""
    if not CORPUS.is_dir():
        return []
    out = []
    for folder in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        found = sorted(folder.rglob("*.json")) + sorted(folder.rglob("*.json.gz"))
        out += [f for f in found if f.stat().st_size < 20_000_000][:3]
    return out


def _keys_written(path: Path) -> Iterator[tuple[str, object]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            trace = neurontrace.load(path)
        except neurontrace.NeurontraceError:  # a corpus file outside what loads: other tests cover it
            return
    for key, value in zip(trace.metadata["key"].to_pylist(), trace.metadata["value"].to_pylist(), strict=True):
        yield key, json.loads(value)


def _check(key: str, value: object, where: str) -> str | None:
    decl = schema.metadata_key(key)
    if decl is None:
        return f"{where}: metadata key {key!r} is not declared in schema.METADATA_KEYS"
    kind = JSON_TYPES.get(type(value))
    if value is not None and kind not in decl.types:
        return f"{where}: {key!r} holds {kind}, declared {' or '.join(decl.types)}"
    return None


def test_every_key_the_parsers_write_is_declared_with_its_type(tmp_path: Path) -> None:
    capture = tmp_path / "capture"  # a capture directory: the trace and its run.json
    capture.mkdir()
    shutil.copy(INPUTS[0], capture / "trace.pt.trace.json.gz")
    write_run_record(capture, new_record(notes=None, tags=(), out_dir=tmp_path))
    inputs = [*INPUTS, capture / "trace.pt.trace.json.gz", *_corpus_sample()]
    problems, seen = [], set()
    for path in inputs:
        for key, value in _keys_written(path):
            seen.add(key)
            problem = _check(key, value, path.name)
            if problem:
                problems.append(problem)
    assert not problems, "\n".join(sorted(set(problems)))
    for must in ("format", "clock", "decoder", "run", "neurontrace.accounting", "neuron.summary", "kineto.schemaVersion"):
        assert must in seen  # the inputs above reach every parser


def _source(folder: Path) -> Iterator[tuple[Path, ast.AST]]:
    for path in sorted(folder.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def _literal_keys(node: ast.AST) -> Iterator[tuple[str, bool]]:
    """``(key, is_prefix)`` of a key expression: a literal, or the constant head of an f-string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value, False
    elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        yield str(node.values[0].value), True


def _facts_keys(tree: ast.AST) -> Iterator[tuple[ast.AST, int]]:
    """Key expressions of the dicts a parser writes as metadata: in each function, the names it passes to
    ``metadata_table`` (``facts = {...}``, ``facts[...] =``, ``facts.update({...})``, literal dicts passed
    directly), and anywhere a profile's ``.facts[...]``, which the Neuron parsers hand to ``metadata_table``."""
    for func in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
        written = {a.id for n in ast.walk(func) if isinstance(n, ast.Call) and getattr(n.func, "id", None) ==
                   "metadata_table" for a in n.args[:1] if isinstance(a, ast.Name)}

        def is_facts(n: ast.AST, names: set[str] = written) -> bool:
            return (isinstance(n, ast.Name) and n.id in names) or (isinstance(n, ast.Attribute) and n.attr == "facts")

        for node in ast.walk(func):
            dicts: list[ast.AST] = []
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if is_facts(t) and node.value is not None:
                        dicts.append(node.value)
                    if isinstance(t, ast.Subscript) and is_facts(t.value):
                        yield t.slice, node.lineno
            elif isinstance(node, ast.Call):
                if isinstance(node.func, ast.Attribute) and node.func.attr == "update" and is_facts(node.func.value):
                    dicts += node.args
                if getattr(node.func, "id", None) == "metadata_table":
                    dicts += node.args[:1]
            for d in dicts:
                line = getattr(node, "lineno", 0)  # ast.walk yields nodes typed as plain AST
                if isinstance(d, ast.Dict):
                    yield from ((k, line) for k in d.keys if k is not None)
                elif isinstance(d, ast.DictComp):
                    yield d.key, line


def test_every_key_in_the_parsers_source_is_declared() -> None:
    problems = []
    for path, tree in _source(ROOT / "parsers"):
        for expr, line in _facts_keys(tree):
            for key, prefix in _literal_keys(expr):
                declared = any(m.key.endswith(".*") and key.startswith(m.key[:-1]) for m in schema.METADATA_KEYS) \
                    if prefix else schema.metadata_key(key) is not None
                if not declared:
                    problems.append(f"{path.name}:{line}: {key!r}{'...' if prefix else ''} is not declared")
    assert not problems, "\n".join(problems)


def test_every_key_read_is_declared() -> None:
    read, problems = 0, []
    for folder in (ROOT / "neurontrace", ROOT / "parsers", ROOT / "app"):
        for path, tree in _source(folder):
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        node.func.attr in ("meta", "meta_all") and node.args:
                    for key, _ in _literal_keys(node.args[0]):
                        read += 1
                        if schema.metadata_key(key) is None:
                            problems.append(f"{path.relative_to(ROOT)}:{node.lineno}: reads undeclared {key!r}")
    assert not problems, "\n".join(problems)
    assert read >= 10


@pytest.mark.parametrize(("key", "declared"), [("kineto.cupti_version", "kineto.*"), ("neuron.summary", "neuron.summary"),
                                               ("format", "format"), ("kinetoX", None)])
def test_families_and_exact_keys(key: str, declared: str | None) -> None:
    decl = schema.metadata_key(key)
    assert (decl.key if decl else None) == declared
