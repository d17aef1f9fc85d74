"""`neurontrace diff` and `neurontrace runs` as users run them: subprocesses, one-line errors, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import neurontrace
from neurontrace import errors
from neurontrace.analysis.diagnose import diagnose
from neurontrace.catalog import RunCatalog
from tests.diff_pairs import write_pair


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    head = ["-m", "neurontrace"]
    env = {**os.environ, "COLUMNS": "200"}  # a wide terminal: tables keep whole cells
    return subprocess.run([sys.executable, *head, *map(str, args)], capture_output=True, text=True, timeout=120,
                          check=False, env=env)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_pair(tmp_path_factory.mktemp("pair"))


def test_diff_report_and_regression_gate(pair: tuple[Path, Path]) -> None:
    a, b = pair
    res = run("diff", a, b, "--fallback-ops", "aten::nonzero")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "cuda:0 rank 0" in out and "+50.0%" in out and "b.py:2 g" in out and "slower" in out
    assert "aten::nonzero" in out and "appeared" in out and "largest change" in out
    res = run("diff", a, b, "--json", "--fail-on-regression", "40")
    assert res.returncode == errors.EXIT_REGRESSION == 11, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "neurontrace.diff/1" and doc["regression"]["worst_pct"] == 50.0
    assert doc["ops_summary"]["slower"] == 2
    res = run("diff", "--baseline", a, "--change", b, "--fail-on-regression", "60", "--threshold", "1000")
    assert res.returncode == 0, res.stderr
    assert "no regression above 60%" in res.stdout
    assert "no op changed beyond the thresholds" not in res.stdout  # added/removed ops still show


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["only-one"], errors.EXIT_USAGE, "expected two runs"),
        (["--baseline", "x"], errors.EXIT_USAGE, "--baseline and --change go together"),
        (["{a}", "missing.json"], errors.EXIT_NOT_FOUND, "missing.json: no such file or directory"),
    ],
    ids=["one-path", "half-options", "missing"],
)
def test_diff_mistakes_give_one_line_and_a_documented_code(pair: tuple[Path, Path], args: list[str], code: int,
                                                           message: str) -> None:
    res = run("diff", *[arg.format(a=pair[0]) for arg in args])
    assert res.returncode == code
    assert message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_runs_list_show_compare(tmp_path: Path, pair: tuple[Path, Path]) -> None:
    a, b = pair
    cat_dir = tmp_path / "catalog"
    with RunCatalog(cat_dir, create=True) as cat:
        for path, tag in ((a, "baseline"), (b, "change")):
            t = neurontrace.load(path)
            cat.save(t, diagnose(t), paths=[path], tags=[tag], model="mlp", note=f"the {tag}")
    res = run("runs", "list", "--dir", cat_dir, "--tag", "change", "--json")
    assert res.returncode == 0, res.stderr
    (record,) = json.loads(res.stdout)
    assert (record["run_id"], record["tags"], record["model"]) == (2, ["change"], "mlp")
    assert "diagnosis" not in record and record["summary"]["steps"] == 2
    res = run("runs", "list", "--dir", cat_dir, "--model", "mlp")
    assert res.returncode == 0 and "2 runs in" in res.stdout and "the baseline" in res.stdout
    res = run("runs", "show", "tag:baseline", "--dir", cat_dir)
    assert res.returncode == 0, res.stderr
    assert "run 1" in res.stdout and "the baseline" in res.stdout and "cuda:0" in res.stdout
    res = run("runs", "compare", "tag:baseline", "latest", "--dir", cat_dir, "--json", "--fail-on-regression", "10")
    assert res.returncode == errors.EXIT_REGRESSION, res.stderr
    doc = json.loads(res.stdout)
    assert doc["baseline"]["label"] == "run 1 mlp [baseline]" and doc["ops_summary"]["added"] == 1
    res = run("runs", "compare", "1", "2", "--dir", cat_dir, "--no-traces")
    assert res.returncode == 0 and "ops: not compared" in res.stdout
    res = run("runs", "show", "9", "--dir", cat_dir)
    assert res.returncode == errors.EXIT_NOT_FOUND and "no run '9'" in res.stderr
    res = run("runs", "list", "--dir", tmp_path / "nothing")
    assert res.returncode == errors.EXIT_NOT_FOUND and "--save-run" in res.stderr


def test_diagnose_save_run(tmp_path: Path, pair: tuple[Path, Path]) -> None:
    def neurontrace_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "neurontrace", *map(str, args)], capture_output=True, text=True,
                              timeout=120, check=False)

    if "--save-run" not in neurontrace_cli("diagnose", "--help").stdout:
        pytest.skip("`neurontrace diagnose` does not offer --save-run yet (cli/diagnose.py calls add_save_run_arguments)")
    res = neurontrace_cli("diagnose", pair[0], "--json", "--save-run", tmp_path / "c", "--tag", "ci", "--model", "mlp")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["schema"] == "neurontrace.diagnose/1"  # stdout stays the JSON document
    assert "saved run 1" in res.stderr
    with RunCatalog(tmp_path / "c") as cat:
        assert cat.get("tag:ci").model == "mlp"
    res = neurontrace_cli("diagnose", pair[0], "--tag", "ci")
    assert res.returncode == errors.EXIT_USAGE and "add --save-run DIR" in res.stderr
