"""Regenerate docs/schema.md from the table declarations in neurontrace/schema.py.

    python scripts/gen_schema_doc.py          # write the page
    python scripts/gen_schema_doc.py --check  # exit 1 when the page is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

from neurontrace.schema import to_markdown

PAGE = Path(__file__).resolve().parent.parent / "docs" / "schema.md"


def main() -> int:
    text = to_markdown()
    if "--check" in sys.argv:
        if not PAGE.is_file() or PAGE.read_text() != text:
            print(f"{PAGE.name} is stale: run python scripts/gen_schema_doc.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
