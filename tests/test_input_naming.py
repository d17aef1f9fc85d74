"""`diff A B` and `view A B` with one bad input: a named error that says which input, never a traceback."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from neurontrace import errors
from neurontrace.cli import _common, main
from tests.conftest import SAMPLES

GOOD = SAMPLES / "compare" / "baseline.pt.trace.json.gz"


def _bad(tmp_path: Path) -> Path:
    """A real trace whose traceEvents is no list (a named error of the Kineto reader)."""
    doc = json.loads(gzip.decompress(GOOD.read_bytes()))
    doc["traceEvents"] = len(doc["traceEvents"])
    path = tmp_path / "bad.pt.trace.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("bad_side", ["A", "B"])
def test_diff_names_the_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], bad_side: str) -> None:
    bad = _bad(tmp_path)
    pair = [str(bad), str(GOOD)] if bad_side == "A" else [str(GOOD), str(bad)]
    code = main(["diff", *pair])
    err = capsys.readouterr().err
    assert code == errors.EXIT_MALFORMED
    side = "A (baseline)" if bad_side == "A" else "B (change)"
    assert f"input {side} ({bad})" in err and "not a list" in err and "Traceback" not in err


def test_diff_names_a_missing_input_and_keeps_its_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", str(GOOD), str(tmp_path / "missing.json")]) == errors.EXIT_NOT_FOUND
    assert "input B (change)" in capsys.readouterr().err


def test_an_input_that_hits_a_bug_is_an_internal_error_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # Synthetic: a reader bug on one input (the crash classes themselves are fixed where they occur); the
    # command still ends with one line naming that input, exit 1, and the cause chained for --traceback.
    real = _common.load_one_named
    bad = tmp_path / "b.json.gz"
    bad.write_bytes(GOOD.read_bytes())

    def buggy(path: str | Path, *a: object, **k: object) -> object:
        if Path(path) == bad:
            raise TypeError("'int' object is not iterable")
        return real(path, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(_common, "load_one_named", buggy)
    assert main(["diff", str(GOOD), str(bad)]) == errors.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert f"input B (change) ({bad}): internal error while reading it (TypeError" in err and "Traceback" not in err
    # --traceback shows the chained cause and keeps the documented exit code (#30 item 8).
    assert main(["--traceback", "diff", str(GOOD), str(bad)]) == errors.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "Traceback" in err and "TypeError: 'int' object is not iterable" in err


def test_view_of_two_names_the_input_that_is_no_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("dash")
    png = tmp_path / "picture.json"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    assert main(["view", str(GOOD), str(png), "--no-browser"]) == errors.EXIT_UNKNOWN_FORMAT
    assert f"input B ({png})" in capsys.readouterr().err
    assert main(["view", str(png), str(GOOD), "--no-browser"]) == errors.EXIT_UNKNOWN_FORMAT
    assert f"input A ({png})" in capsys.readouterr().err
