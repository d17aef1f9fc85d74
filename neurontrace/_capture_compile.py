"""A capture's compile evidence: torch.compile's structured log, its recompile and graph-break text, Dynamo's counters.

While a capture runs, torch._logging writes ``TORCH_TRACE`` records to ``<capture>/compile/torch_trace/`` and the
``recompiles`` / ``graph_breaks`` text to ``<capture>/compile/torch_logs.txt`` (``TORCH_LOGS_OUT``; torch prints
it on stderr as well), unless the user set ``TORCH_TRACE`` / ``TORCH_LOGS`` already (then theirs are kept and
recorded). At the end Dynamo's
``counters`` and ``compile_times()`` go to ``<capture>/compile/dynamo.json``. ``diagnose`` reads ``compile/``
beside the trace (docs/compile.md). Everything here fails soft: a torch without these hooks records nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

_ENV = ("TORCH_TRACE", "TORCH_LOGS", "TORCH_LOGS_OUT")


class CompileRecorder:
    def __init__(self, torch: ModuleType, capture_dir: Path) -> None:
        self._torch = torch
        self.dir = capture_dir / "compile"
        self._saved: dict[str, str | None] = {}
        self._active = False

    def start(self) -> dict[str, Any]:
        """Point torch's compile logs into the capture; the facts for run.json."""
        facts: dict[str, Any] = {"dir": "compile", "torch_trace": os.environ.get("TORCH_TRACE"),
                                 "torch_logs": os.environ.get("TORCH_LOGS"), "recorded_by_capture": False}
        if os.environ.get("TORCH_TRACE") or os.environ.get("TORCH_LOGS"):
            return facts  # the user's own settings win
        self.dir.mkdir(parents=True, exist_ok=True)
        self._saved = {k: os.environ.get(k) for k in _ENV}
        os.environ["TORCH_TRACE"] = str(self.dir / "torch_trace")
        os.environ["TORCH_LOGS"] = "recompiles,graph_breaks"
        os.environ["TORCH_LOGS_OUT"] = str(self.dir / "torch_logs.txt")
        try:
            self._reinit(os.environ["TORCH_LOGS_OUT"])
        except Exception:
            self._restore()
            return facts
        self._active = True
        facts.update(torch_trace="compile/torch_trace", torch_logs="compile/torch_logs.txt", recorded_by_capture=True)
        return facts

    def stop(self) -> dict[str, Any]:
        """Restore torch's logging; dump Dynamo's counters. The facts to add to run.json."""
        out: dict[str, Any] = {}
        if self._active:
            self._restore()
            self._close_file_handlers()
            with contextlib.suppress(Exception):
                self._reinit(os.environ.get("TORCH_LOGS_OUT"))
            self._active = False
        utils = sys.modules.get("torch._dynamo.utils")  # only when the program used torch.compile
        if utils is not None:
            try:
                head, values = utils.compile_times(repr="csv")
                doc = {"counters": {k: dict(v) for k, v in utils.counters.items() if v},
                       "compile_times": {str(h): [float(x) for x in str(v).split(", ") if x]
                                         for h, v in zip(head, values, strict=False)}}
                if doc["counters"] or doc["compile_times"]:
                    self.dir.mkdir(parents=True, exist_ok=True)
                    (self.dir / "dynamo.json").write_text(json.dumps(doc, default=str))
                    out["dynamo"] = "compile/dynamo.json"
            except Exception:
                pass
        self._tidy()
        return out

    def _tidy(self) -> None:
        """No compile, no compile/: torch's log handler opens its file at once, so an empty one is removed."""
        with contextlib.suppress(OSError):
            for p in self.dir.glob("*"):
                if p.is_file() and p.stat().st_size == 0:
                    p.unlink()
            if self.dir.is_dir() and not any(self.dir.iterdir()):
                self.dir.rmdir()

    def _reinit(self, log_file: str | None) -> None:
        """torch._logging's own set-up from the environment, as at import; its TORCH_TRACE handler is made once
        per process, so it is dropped first to be made again for the directory now set."""
        internal = self._torch._logging._internal
        internal.LOG_TRACE_HANDLER = None
        internal._init_logs(log_file_name=log_file)

    def _close_file_handlers(self) -> None:
        """torch's reset drops its handlers without closing them: close the ones writing into the capture."""
        target = (self.dir / "torch_logs.txt").resolve()
        for logger in [logging.getLogger(), *(v for v in logging.root.manager.loggerDict.values()
                                              if isinstance(v, logging.Logger))]:
            for h in list(logger.handlers):
                if isinstance(h, logging.FileHandler) and Path(h.baseFilename).resolve() == target:
                    logger.removeHandler(h)
                    h.close()

    def _restore(self) -> None:
        for k, v in self._saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
