"""Data integrity on real inputs: a file rewritten while it loads is refused, never parsed into a table
that mixes old and new content; a complete file whose last string holds a lone surrogate is corrupt,
not cut off."""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest

import neurontrace
from neurontrace import _io
from neurontrace.errors import InputChangedError, MalformedTraceError, NeurontraceError, TruncatedTraceWarning
from tests.conftest import SAMPLES

BASELINE = SAMPLES / "compare" / "baseline.pt.trace.json.gz"
SLOWED = SAMPLES / "compare" / "slowed.pt.trace.json.gz"


def _plain(src: Path, dst: Path) -> bytes:
    data = gzip.decompress(src.read_bytes())
    dst.write_bytes(data)
    return data


def _signature(trace: neurontrace.Trace) -> tuple[int, int, str]:
    names = trace.system_events["name"].cast("string").to_pylist()
    return trace.system_events.num_rows, trace.device_events.num_rows, "|".join(map(str, names))


def test_a_snapshot_never_restores_pages_from_a_rewritten_file(tmp_path: Path) -> None:
    # The mechanism behind "4 of 18 tries mixed old and new": the reference decoder read released pages
    # back from the path, which by then held another trace of the same size.
    path = tmp_path / "t.json"
    old = _plain(BASELINE, path)
    snap = _io.read_content(path, snapshot=True).data
    assert isinstance(snap, _io.Snapshot)
    snap.release(0, len(snap))
    new = bytearray(old)
    new[-200:-100] = b" " * 100  # same size, other content
    with path.open("r+b") as f:  # rewritten in place: truncate + write, same inode
        f.truncate(0)
        f.write(new)
    with pytest.raises(InputChangedError, match="while it was read"):
        snap.restore()


def test_a_file_rewritten_while_it_loads_gives_one_of_its_versions_or_a_named_error(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    versions = [_plain(BASELINE, a), _plain(SLOWED, b)]
    expected = {_signature(neurontrace.load(a)), _signature(neurontrace.load(b))}
    path = tmp_path / "racing.json"
    path.write_bytes(versions[0])
    stop = threading.Event()
    writes = [0]

    def writer() -> None:
        with path.open("r+b") as f:
            while not stop.is_set():
                f.seek(0)
                f.truncate(0)
                f.write(versions[writes[0] % 2])
                f.flush()
                writes[0] += 1
                time.sleep(0.002)

    outcomes: dict[str, int] = {}
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            for decoder in ("", "python"):
                os.environ["NEURONTRACE_KINETO_DECODER"] = decoder
                try:
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        got = _signature(neurontrace.load(path))
                except InputChangedError:
                    outcomes["changed"] = outcomes.get("changed", 0) + 1
                    continue
                except NeurontraceError as exc:  # the sniff or the read saw a moment between truncate and write
                    outcomes[type(exc).__name__] = outcomes.get(type(exc).__name__, 0) + 1
                    continue
                if got in expected:
                    outcomes["whole"] = outcomes.get("whole", 0) + 1
                    continue
                # Read while a version was being written and nothing changed during the read: the prefix
                # written so far, salvaged as a cut-off file and said so; a prefix of one version, never a mix.
                assert any(issubclass(w.category, TruncatedTraceWarning) for w in caught), got[:2]
                names = Counter(got[2].split("|"))
                assert any(not names - Counter(e[2].split("|")) for e in expected), "a table mixing two versions"
                outcomes["prefix"] = outcomes.get("prefix", 0) + 1
    finally:
        os.environ.pop("NEURONTRACE_KINETO_DECODER", None)
        stop.set()
        t.join()
    assert writes[0] > 20 and outcomes.get("changed", 0) > 0, (writes, outcomes)


def _last_string_surrogate(tmp_path: Path, *, as_array: bool) -> Path:
    """A real trace, minified, its last event's last field a string ending in a lone surrogate: the file
    then ends a few bytes after it."""
    doc = json.loads(gzip.decompress(BASELINE.read_bytes()))
    events = doc["traceEvents"]
    last = events[-1]
    name = str(last.pop("name", "event"))
    last["name"] = name + "\ud800"
    text = json.dumps(events if as_array else {"traceEvents": events}, separators=(",", ":"))
    assert text.endswith('\\ud800"}]' if as_array else '\\ud800"}]}')
    path = tmp_path / ("array.json" if as_array else "object.json")
    path.write_text(text)
    return path


@pytest.mark.parametrize("as_array", [False, True])
@pytest.mark.parametrize("decoder", ["", "python"])
@pytest.mark.parametrize("gz", [False, True])
def test_a_complete_file_ending_in_a_lone_surrogate_is_corrupt_not_cut_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, as_array: bool, decoder: str, gz: bool) -> None:
    path = _last_string_surrogate(tmp_path, as_array=as_array)
    if gz:
        path = path.with_suffix(".json.gz")
        path.write_bytes(gzip.compress(path.with_suffix("").with_suffix(".json").read_bytes()))
    monkeypatch.setenv("NEURONTRACE_KINETO_DECODER", decoder)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TruncatedTraceWarning)  # before: "cut off", and the last event dropped
        with pytest.raises(MalformedTraceError, match="lone surrogate"):
            neurontrace.load(path)


def test_a_file_really_cut_inside_a_surrogate_pair_is_still_salvaged(tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress(BASELINE.read_bytes()))
    doc["traceEvents"][-1]["name"] = "smile \U0001F600"  # written as the pair \ud83d\ude00
    text = json.dumps(doc, separators=(",", ":"))
    path = tmp_path / "cut.json"
    path.write_text(text[:text.rindex("\\ude00") + 3])  # the cut falls in the second escape of the pair
    with pytest.warns(TruncatedTraceWarning, match="cut off"):
        trace = neurontrace.load(path)
    assert trace.system_events.num_rows > 0
