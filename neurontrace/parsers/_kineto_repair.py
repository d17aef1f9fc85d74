"""JSON that torch.profiler itself writes invalid, repaired where the fault is known and counted.

torch.profiler writes a Python frame's name into the event's ``"name"`` without escaping it. A frame whose
function name holds quotes then makes the whole trace invalid JSON; torch 2.13 does it, now and then, for its own
CUPTI monitor (seen in this project's test runs):

    "name": "torch/profiler/_cupti_monitor.py(0): "off"",

In torch.profiler's layout (one key per line) such a line is unambiguous: the value runs from the key's quote to
the line's last quote. Only such lines are rewritten, their bare quotes escaped; a line that could hold another
key (``": `` or ``", "`` inside the value) is left as it is, and the document is read again only once rewritten.
"""

from __future__ import annotations

import re

from neurontrace._io import Data

# a name line whose value holds a quote (only those reach the Python callback: not one a line)
_NAME_LINE = re.compile(rb'(?m)^([ \t]*"name": ")([^\n]*"[^\n]*)("[ \t]*,?[ \t]*\r?)$')
_BARE_QUOTE = re.compile(rb'(?<!\\)((?:\\\\)*)"')  # a quote after an even run of backslashes (none included)


def unescaped_names(data: Data) -> tuple[bytes, int]:
    """``data`` with the bare quotes of its event names escaped, and how many names were rewritten."""
    rewritten = 0

    def fix(m: re.Match[bytes]) -> bytes:
        nonlocal rewritten
        body = m.group(2)
        if b'": ' in body or b'", "' in body:
            return m.group(0)
        fixed = _BARE_QUOTE.sub(rb'\1\\"', body)
        if fixed == body:
            return m.group(0)
        rewritten += 1
        return m.group(1) + fixed + m.group(3)

    return _NAME_LINE.sub(fix, data), rewritten


def warning(rewritten: int) -> str:
    return (f"{rewritten} event name{'s' if rewritten != 1 else ''} held quotes torch.profiler wrote unescaped "
            "(a Python frame's name written as is), which made the trace invalid JSON: repaired, each name "
            "read as written")
