"""Check that the installed viewer ships its assets folder and serves it: both pages (one trace, two
runs) link every file of ``neurontrace/app/assets`` and answer each with its bytes.

    python scripts/check_viewer_assets.py      # exit 0, or 1 with what is missing

Run by ``.ci/run`` with the wheel installed non-editable (a wheel whose package data missed the
folder fails here), and by tests/test_app_server.py on the checkout.
"""

from __future__ import annotations

import sys
import urllib.request

# Dash links .css and .js files itself; index.html is the page's template (read at import, not served).
LINKED = (".css", ".js")


def problems() -> list[str]:
    """What is wrong with the viewer's assets as installed: empty when nothing."""
    from neurontrace.app import layout
    from neurontrace.app.compare import CompareState, create_compare_app
    from neurontrace.app.server import Server, ViewerState, create_app

    files = sorted(p for p in layout.ASSETS.iterdir() if p.is_file()) if layout.ASSETS.is_dir() else []
    out = [] if files else [f"no assets folder at {layout.ASSETS}"]
    names = {p.name for p in files}
    out += [f"{want} is not in the assets folder" for want in ("index.html", "neurontrace.css", "keys.js")
            if want not in names]
    apps = {"one-trace page": create_app(ViewerState("not-loaded")),
            "two-run page": create_compare_app(CompareState(ViewerState("a"), ViewerState("b")))}
    for page, app in apps.items():
        server = Server(app, "127.0.0.1", 0).start()
        try:
            with urllib.request.urlopen(server.url, timeout=30) as resp:
                html = resp.read().decode()
            for p in files:
                if p.suffix not in LINKED:
                    continue
                if f"/assets/{p.name}" not in html:
                    out.append(f"{page}: the page does not link /assets/{p.name}")
                with urllib.request.urlopen(f"{server.url}assets/{p.name}", timeout=30) as resp:
                    if resp.read() != p.read_bytes():
                        out.append(f"{page}: /assets/{p.name} is not the file's content")
        finally:
            server.stop()
    return out


def main() -> int:
    found = problems()
    for line in found:
        print(f"viewer assets: {line}", file=sys.stderr)
    if not found:
        from neurontrace.app import layout

        print(f"viewer assets: {len(list(layout.ASSETS.iterdir()))} files of {layout.ASSETS}, served by both pages")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
