"""The package's import graph flows one way: no circle, and no import that runs back up a layer.

Built from the source with ``ast`` (nothing is imported), over every module of the installed
``neurontrace`` tree, ``neurontrace.parsers`` and ``neurontrace.app`` included. Imports inside
functions count: a lazy import is still a dependency, and the circles this test exists for were lazy
ones. Imports under ``if TYPE_CHECKING:`` count too: one never runs, but a circle of types is still two
modules that cannot be read (or checked) apart; declare the interface (a Protocol) on the side that needs it.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "neurontrace"

# (importer, imported): modules under the first prefix never import modules under the second.
# The layers, bottom up: the core (errors, schema, trace, load, units, causes, run_record, ...);
# the parsers and the analyses beside each other; rendering, the catalog and the capture;
# the front ends (cli, app). The synthetic writers in testing/ serve tests and samples only.
CORE = ("neurontrace.errors", "neurontrace._version", "neurontrace.causes", "neurontrace.units",
        "neurontrace.progress", "neurontrace._optional", "neurontrace._io", "neurontrace._allocator", "neurontrace._replace", "neurontrace.schema",
        "neurontrace.trace", "neurontrace.trace_facts", "neurontrace.load", "neurontrace.run_record", "neurontrace.columns")
ABOVE_CORE = ("neurontrace.parsers", "neurontrace.analysis", "neurontrace.render", "neurontrace.catalog",
              "neurontrace.capture", "neurontrace._capture", "neurontrace.cli", "neurontrace.app",
              "neurontrace.testing")
FRONT = ("neurontrace.cli", "neurontrace.app")
CAPTURE = ("neurontrace.capture", "neurontrace._capture")
FORBIDDEN: list[tuple[tuple[str, ...], tuple[str, ...], str]] = [
    (CORE, ABOVE_CORE, "the core knows nothing above it"),
    (("neurontrace.parsers",), ("neurontrace.analysis", "neurontrace.render", "neurontrace.catalog", *CAPTURE,
                                *FRONT), "a parser only turns files into tables"),
    (("neurontrace.analysis",), ("neurontrace.parsers", "neurontrace.render", "neurontrace.catalog", *CAPTURE,
                                 *FRONT), "analyses read Trace tables, whatever format they came from"),
    (("neurontrace.render",), ("neurontrace.parsers", "neurontrace.catalog", *CAPTURE, *FRONT),
     "rendering draws results, it computes and loads nothing"),
    (("neurontrace.catalog",), ("neurontrace.render", *CAPTURE, *FRONT), "the catalog is a store"),
    (CAPTURE, ("neurontrace.analysis", "neurontrace.render", "neurontrace.catalog", *FRONT),
     "a capture records; it does not analyse"),
    (("neurontrace.app",), ("neurontrace.cli",), "the viewer is a library the CLI starts"),
    (("neurontrace",), ("neurontrace.testing",), "test-data writers are not part of the library"),
]


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder, _dirs, files in os.walk(PACKAGE):
        rel = Path(folder).relative_to(PACKAGE)
        for name in files:
            if not name.endswith(".py"):
                continue
            parts = ["neurontrace", *rel.parts] + ([] if name == "__init__.py" else [name[:-3]])
            found[".".join(parts)] = Path(folder) / name
    return found


def _typing_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:``."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def _imports(module: str, path: Path, known: set[str], *, typing: bool) -> Iterator[tuple[str, int]]:
    """``(imported module, line)`` for every import of ``module`` (those for type checkers only if ``typing``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    skip = set() if typing else _typing_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in known else base), node.lineno
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module" and \
                node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            yield node.args[0].value, node.lineno


def _graph(*, typing: bool = True) -> dict[str, dict[str, int]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for module, path in modules.items():
        for target, line in _imports(module, path, known, typing=typing):
            if target in known and target != module:
                graph[module].setdefault(target, line)
    return graph


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") or (p.endswith("_capture") and module.startswith(p))
               for p in prefixes)


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_graph_covers_the_whole_package() -> None:
    graph = _graph()
    for must in ("neurontrace.parsers.kineto", "neurontrace.app.server", "neurontrace.cli._common",
                 "neurontrace.analysis.attribution", "neurontrace.render.report"):
        assert must in graph
    assert "neurontrace.cli._common" in graph["neurontrace.cli.diagnose"]  # `from pkg import module` resolves


def test_the_package_is_a_real_tree() -> None:
    """No symbolic link stands in for a folder or file (a checkout without symlinks must build the same wheel),
    and every folder of modules is a package of its own."""
    links = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*") if p.is_symlink()]
    assert links == []
    for folder in {p.parent for p in PACKAGE.rglob("*.py")}:
        assert (folder / "__init__.py").is_file(), f"{folder.relative_to(ROOT)} has modules but no __init__.py"


def test_no_import_cycles() -> None:
    graph = _graph()
    cycles = _cycles(graph)
    described = [" -> ".join(c) + "".join(f"\n    {a} imports {b} (line {graph[a][b]})" for a in c for b in c
                                          if b in graph[a]) for c in cycles]
    assert not cycles, "import cycles:\n  " + "\n  ".join(described)


def test_no_import_runs_back_up_a_layer() -> None:
    graph = _graph()
    broken = [f"{a} imports {b} (line {line}): {why}"
              for a, targets in graph.items() for b, line in targets.items()
              for low, high, why in FORBIDDEN if _under(a, low) and _under(b, high)
              and not (low == ("neurontrace",) and _under(a, ("neurontrace.testing",)))]
    assert not broken, "\n".join(broken)


def test_nothing_imports_the_package_root() -> None:
    # The root re-exports the public API for users; inside the package every module names the module it
    # needs (the version is in the leaf _version.py), so importing any one never runs the root's imports.
    graph = _graph()
    rooted = [f"{a} (line {line})" for a, targets in graph.items() for b, line in targets.items()
              if b == "neurontrace"]
    assert not rooted, "modules importing the package root: " + ", ".join(rooted)


# A format's own metadata keys (kineto.*, neuron.*, ...) are read inside neurontrace/parsers only: the parsers
# derive the normalized keys (schema.NORMALIZED_KEYS, parsers/_normalized_meta.py) that everything else reads.
# The exceptions, each with its reason; a new reader of a format key fails the test below.
FORMAT_KEY = re.compile(r"^(kineto|neuron|neuron_json|ntff|torchneuron)\.")
FORMAT_KEY_READERS = {
    # the declarations themselves (docs/schema.md is generated from them)
    ("neurontrace/schema.py", "*"): "declares every metadata key",
    # names of bulk keys the catalog does not copy: it reads no value of them
    ("neurontrace/catalog.py", "kineto.names"): "a key not copied",
    ("neurontrace/catalog.py", "neuron.table."): "a key not copied",
    ("neurontrace/catalog.py", "neuron.execution_info"): "a key not copied",
    ("neurontrace/catalog.py", "neuron.derived_rows"): "a key not copied",
    ("neurontrace/catalog.py", "neuron.opcode_summary"): "a key not copied",
    ("neurontrace/catalog.py", "neuron.tensor_info"): "a key not copied",
    # Neuron's own summary metrics (engine active time, DMA and collective shares): analyses of Neuron figures
    # report them on Neuron's terms; no other format has them, so a normalized name would only rename them
    ("neurontrace/analysis/neuron_summary.py", "neuron.summary"): "Neuron evidence read by a Neuron analysis",
    ("neurontrace/analysis/engine_waits.py", "neuron.summary"): "Neuron evidence read by a Neuron analysis",
    # Explorer's HbmUsageSummaryByType: HBM by Neuron's own usage types, which no other format has
    ("neurontrace/analysis/neuron_memory.py", "neuron.hbm_usage_summary_by_type"): "Neuron evidence read by a Neuron analysis",
    # Kineto's process_name / thread_name metadata events: the viewer's track labels, which no other format has
    ("neurontrace/app/tracks.py", "kineto.names"): "Kineto's own track names label Kineto tracks",
}


def _format_key_literals() -> list[tuple[str, str, int]]:
    """(module path, literal, line) of every string naming a format's key, outside neurontrace/parsers/."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel.startswith("neurontrace/parsers/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and FORMAT_KEY.match(node.value):
                found.append((rel, node.value, node.lineno))
    return found


def test_no_format_key_is_read_outside_the_parsers() -> None:
    found = _format_key_literals()
    new = [f"{rel}:{line} names {lit!r}" for rel, lit, line in found
           if (rel, lit) not in FORMAT_KEY_READERS and (rel, "*") not in FORMAT_KEY_READERS]
    assert not new, ("format keys read outside neurontrace/parsers/ (read the normalized keys, "
                     "neurontrace.trace_facts, instead):\n" + "\n".join(new))
    # Every exception is still needed: one whose reader is gone is removed from the list.
    used = {(rel, lit) for rel, lit, _ in found} | {(rel, "*") for rel, _, _ in found}
    assert set(FORMAT_KEY_READERS) <= used, sorted(set(FORMAT_KEY_READERS) - used)
