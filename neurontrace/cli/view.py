"""``neurontrace view PATH [OTHER]``: serve the Dash viewer for one trace, or two side by side, on this
machine (docs/viewer.md).

The server binds 127.0.0.1 by default, prints its URL, and runs with production settings (threaded
WSGI server, no reloader, no per-request log) unless ``--debug``. The trace loads in the
background while the page shows progress; a trace that fails to load shows the parser's one-line
error on the page. Dash is imported only when the command runs (``pip install 'neurontrace[viewer]'``).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import webbrowser
from pathlib import Path
from typing import Any

from neurontrace import errors
from neurontrace._optional import require
from neurontrace.cli import _common as common
from neurontrace.load import detect
from neurontrace.trace import Trace

DEFAULT_PORT = 8050
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class ViewCommand(common.Command):
    """open the local timeline viewer: host and device timelines, stall attribution, source lines

    The server listens on this machine only (127.0.0.1) unless --host says otherwise (docs/viewer.md).
    """

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        common.add_input(parser)
        parser.add_argument("other", nargs="?", metavar="OTHER",
                            help="a second trace: compare it (B, the change) with PATH (A, the baseline) side by "
                                 "side, with a shared zoom and the diff table")
        parser.add_argument("--host", default="127.0.0.1",
                            help="address to listen on (default 127.0.0.1: this machine only)")
        parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                            help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)")
        parser.add_argument("--source-root", dest="source_roots", action="append", type=Path, metavar="DIR",
                            help="directory the source panel may read files from (repeatable; "
                                 "default: the current directory); nothing outside these is ever read")
        common.add_fallback_ops(parser, "ops known to have fallen back to the CPU (as for diagnose)")
        parser.add_argument("--debug", action="store_true",
                            help="Dash debug mode: dev tools, error overlay and the code reloader")
        parser.add_argument("--no-browser", action="store_true", help="do not open a web browser")

    def run(self, args: argparse.Namespace) -> int:
        path = Path(args.path)
        for side, p in zip(("A", "B") if args.other else (None,), (path, *([Path(args.other)] if args.other else [])),
                           strict=True):
            with common.naming_input(side, p):  # two inputs: an error says which
                if not p.exists():
                    raise errors.InputNotFoundError(f"{p}: no such file or directory")
                if getattr(args, "format", None) is None:
                    detect(p)  # a file that is no trace is refused now (exit 4), not after the page is up
        roots: list[Path] = args.source_roots or [Path.cwd()]
        for root in roots:
            if not root.is_dir():
                raise errors.InputNotFoundError(f"--source-root {root}: no such directory")
        if not 0 <= args.port <= 65535:
            raise errors.UsageError(f"--port must be between 0 and 65535, got {args.port}")
        require("dash", extra="viewer")
        from neurontrace.app.server import Server, ViewerState, create_app  # imports Dash: only here

        def loader(p: str, progress: Any) -> Trace:
            return common.load_one(p, args, progress)

        state = ViewerState(str(path), source_roots=roots, fallback_ops=args.fallback_ops, log=_log)
        if args.other:  # two runs side by side
            from neurontrace.app.compare import CompareState, create_compare_app

            pair = CompareState(state, ViewerState(str(args.other), source_roots=roots,
                                                   fallback_ops=args.fallback_ops, log=_log))
            app = create_compare_app(pair)
            worker = threading.Thread(target=pair.load, kwargs={"loader": loader}, name="neurontrace-load",
                                      daemon=True)
            if args.debug:
                app.enable_dev_tools(debug=True)
        else:
            app = create_app(state, debug=args.debug)
            worker = threading.Thread(target=state.load, kwargs={"loader": loader, "progress": _TerminalProgress()},
                                      name="neurontrace-load", daemon=True)
        if args.debug:  # Dash's own development server: dev tools and the code reloader
            # The reloader runs this command again in a child process (WERKZEUG_RUN_MAIN=true), which
            # serves; the parent only watches files, so it does not load the trace.
            if os.environ.get("WERKZEUG_RUN_MAIN") != "true":
                _warn_exposure(args.host, debug=True)
            if os.environ.get("WERKZEUG_RUN_MAIN") == "true":
                worker.start()
            # No Werkzeug debugger: its in-browser console runs Python for whoever opens an error page.
            app.run(host=args.host, port=args.port or DEFAULT_PORT, debug=True, use_debugger=False)
            return errors.EXIT_OK
        server = Server(app, args.host, args.port)  # errors.PortInUseError names the way out
        shown = f"{path} and {args.other}" if args.other else str(path)
        _say(f"neurontrace view: {shown} at {server.url}  (Ctrl+C to stop)")
        _warn_exposure(args.host, debug=False)
        worker.start()
        if not args.no_browser:
            threading.Timer(0.5, webbrowser.open, args=(server.url,)).start()
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            _log("neurontrace view: stopped")
        finally:
            server.httpd.server_close()
        return errors.EXIT_OK


def _warn_exposure(host: str, *, debug: bool) -> None:
    """Say who can see what: a non-loopback host shares the trace and the source files; --debug adds
    Dash's development server, whose error pages show tracebacks and local source and whose reloader
    runs code that changes on disk, so it is for developing the viewer, never for sharing a trace."""
    if host not in LOOPBACK:
        _log(f"warning: listening on {host}: anyone who can reach this machine can open the trace "
             "and the source files under the source roots")
    if debug:
        _log("warning: --debug runs Dash's development server (dev tools, error overlays with tracebacks and "
             "source, code reloader): for developing the viewer only"
             + ("" if host in LOOPBACK else f"; and it listens on {host}, so others can reach all of that"))


def _say(message: str) -> None:
    common.out(message)
    sys.stdout.flush()  # the URL must show while the server runs


def _log(message: str) -> None:
    common.note(message if message.startswith("neurontrace") else f"neurontrace view: {message}")


class _TerminalProgress:
    """Loading progress on the terminal: a line per tenth of the work, at most one a second."""

    def __init__(self) -> None:
        self._last = 0.0
        self._step = -1

    def __call__(self, stage: str, done: int, total: int | None) -> None:
        if not total:
            return
        step = int(10 * done / total)
        now = time.monotonic()
        if step > self._step and (now - self._last >= 1.0 or done >= total):
            self._step, self._last = step, now
            _log(f"loading: {stage} {100 * done / total:.0f}%")
