"""Extract the program from a free-text response: the last COMPLETE fenced code block.

Accepted fences: ```python, ```py, ```python3, ```Python and bare ```; other language tags (```cpp,
```text ...) are skipped. A block opened but never closed (a truncated response) is not complete, so a
response whose only block is cut off yields ``None`` (verdict ``no_answer``).
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.#-]*)[^\n]*$", re.MULTILINE)
PYTHON_TAGS = frozenset({"", "python", "py", "python3", "py3"})


def extract_code(response: str) -> str | None:
    """Return the body of the last complete Python (or untagged) fenced block, or ``None``."""
    if not isinstance(response, str):
        return None
    blocks: list[tuple[str, str]] = []
    opened = None  # (fence, tag, body start)
    for m in _FENCE.finditer(response):
        fence, tag = m.group(1), m.group(2).lower()
        if opened is None:
            opened = (fence, tag, m.end() + 1)
        elif fence[0] == opened[0][0] and len(fence) >= len(opened[0]) and not tag:
            blocks.append((opened[1], response[opened[2]: m.start()]))
            opened = None
    for tag, body in reversed(blocks):
        if tag in PYTHON_TAGS and body.strip():
            return body
    return None
