"""The viewer's search never freezes the server: RE2 (linear time, no GIL) for every pattern, and a
pattern RE2 refuses is named on the page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neurontrace.app.search import REFUSED_PATTERN, matching_names
from tests.conftest import ROOT

# Python's re needs about 2**n steps for this pattern on a name of n word characters and no "!".
PATHOLOGICAL = r"/(\w|\w)*!/"
NAMES = np.array(["aten::mm", "aten::addmm", "a" * 40, "ProfilerStep#3", "Memcpy HtoD"], dtype=object)


def test_substrings_and_patterns_match_case_insensitively() -> None:
    assert matching_names(NAMES, "MM")[0].tolist() == [0, 1]
    assert matching_names(NAMES, "/^aten::(add)?mm$/")[0].tolist() == [0, 1]
    assert matching_names(NAMES, "/step#\\d+/")[0].tolist() == [3]
    assert matching_names(NAMES, "  ")[0].tolist() == [] and matching_names(NAMES, None)[1] is None
    assert matching_names(NAMES, "x" * 501)[0].tolist() == []
    assert matching_names(np.array([], dtype=object), "/a/")[0].tolist() == []


def test_the_pathological_pattern_is_linear_and_backreferences_are_refused_by_name() -> None:
    t0 = time.monotonic()
    codes, refused = matching_names(np.array(["a" * 40] * 10_000, dtype=object), PATHOLOGICAL)
    assert refused is None and codes.tolist() == [] and time.monotonic() - t0 < 5
    for pattern in (r"/(a)\1/", r"/a(?=b)/", r"/(?<!x)a/"):
        codes, refused = matching_names(NAMES, pattern)
        assert codes.tolist() == [] and refused is not None and refused.startswith(REFUSED_PATTERN), pattern


def _search_body(deps: list[dict[str, Any]], text: str) -> dict[str, Any]:
    from tests.test_app_server import _outputs

    dep = next(d for d in deps if "nt-search-results.children" in d["output"])
    values = {"nt-search.value": text, "nt-search.n_submit": 1}
    spec = [{"id": i["id"], "property": i["property"], "value": values.get(f"{i['id']}.{i['property']}")}
            for i in dep["inputs"]]
    state = [{"id": s["id"], "property": s["property"], "value": None} for s in dep["state"]]
    return {"output": dep["output"], "outputs": _outputs(dep["output"]), "inputs": spec, "state": state,
            "changedPropIds": ["nt-search.value"]}


def _post(url: str, body: dict[str, Any], timeout: float) -> tuple[int, bytes]:
    req = urllib.request.Request(url + "_dash-update-component", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return int(resp.status), resp.read()


def test_the_server_answers_other_requests_while_a_pathological_pattern_is_searched(tmp_path: Path) -> None:
    pytest.importorskip("dash")
    # A trace whose event names include long words: Python's re would take minutes per name on them.
    events = [{"ph": "X", "cat": "cpu_op", "name": ("w" * 36) + str(i), "pid": 1, "tid": 1, "ts": 10.0 * i,
               "dur": 5.0} for i in range(200)]
    trace = tmp_path / "words.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    code = ("import argparse, sys; from neurontrace.cli.view import ViewCommand; c = ViewCommand(); "
            "p = argparse.ArgumentParser(); c.add_arguments(p); sys.exit(c.run(p.parse_args(sys.argv[1:])))")
    args = [sys.executable, "-c", code, str(trace), "--port", "0", "--no-browser", "--source-root", str(tmp_path)]
    with subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert "http://127.0.0.1:" in line, line
            url = line.split(" at ", 1)[1].split()[0]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # the trace loaded and the page is laid out
                with urllib.request.urlopen(url + "_dash-layout", timeout=10) as res:
                    if b"nt-search" in res.read():
                        break
                time.sleep(0.1)
            with urllib.request.urlopen(url + "_dash-dependencies", timeout=10) as res:
                deps = json.loads(res.read())
            found: dict[str, Any] = {}

            def hostile() -> None:
                try:
                    found["search"] = _post(url, _search_body(deps, PATHOLOGICAL), timeout=20)
                except OSError as exc:
                    found["search"] = exc

            t = threading.Thread(target=hostile)
            t.start()
            time.sleep(0.05)
            t0 = time.monotonic()
            status, body = _post(url, _search_body(deps, "w" * 36 + "7"), timeout=10)  # another request meanwhile
            other_s = time.monotonic() - t0
            t.join(timeout=30)
            assert status == 200 and b"11 events match" in body, body[:300]
            assert other_s < 10
            assert isinstance(found.get("search"), tuple), found
            s_status, s_body = found["search"]
            assert s_status == 200 and b"0 events match" in s_body, s_body[:300]
            # a pattern RE2 refuses is named on the page, not run by another engine
            _status, refused = _post(url, _search_body(deps, r"/(w)\1/"), timeout=10)
            assert REFUSED_PATTERN.encode() in refused
        finally:
            proc.terminate()
            _out, err = proc.communicate(timeout=10)
    assert "Traceback" not in err, err
