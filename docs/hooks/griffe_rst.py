"""Griffe extension for the API reference: the docstrings are prose written with a few reStructuredText habits,
rendered here as the Markdown they mean (the docstrings themselves stay as they are).

* cross-reference roles, ``:class:`~microcoder_ext.x.Y``` -> a code span `Y` (``~``: the last component);
* literal blocks, a paragraph ending in ``::`` followed by an indented block -> ``:`` and a fenced code block;
* simple tables (``=====  =====`` borders, continuation lines with an empty first column) -> Markdown tables.
"""

from __future__ import annotations

import re
import textwrap

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const|ref):`(~?)([^`]+)`")
BORDER = re.compile(r"^(=+)( +=+)+\s*$")


def _role(m: re.Match) -> str:
    text = m.group(2)
    target = re.match(r"^(.*?)\s*<([^>]+)>$", text)
    if target:
        return f"`{target.group(1)}`"
    text = text.lstrip(".")
    return f"`{text.rsplit('.', 1)[-1] if m.group(1) else text}`"


def _literal_blocks(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::") and not line.strip().startswith((">>>", "..")):
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            k = j
            while k < len(lines) and (not lines[k].strip() or lines[k].startswith((" ", "\t"))):
                k += 1
            while k > j and not lines[k - 1].strip():
                k -= 1
            if j < len(lines) and k > j and lines[j].startswith((" ", "\t")):
                head = line.rstrip()[:-2].rstrip()
                if head:
                    out.append(head + ":")
                out += ["", "```text", *textwrap.dedent("\n".join(lines[j:k])).splitlines(), "```", ""]
                i = k
                continue
        out.append(line)
        i += 1
    return out


def _columns(border: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(r"=+", border)]


def _cells(line: str, cols: list[tuple[int, int]]) -> list[str]:
    cells = []
    for n, (start, end) in enumerate(cols):
        stop = cols[n + 1][0] if n + 1 < len(cols) else len(line)
        cells.append(line[start:stop].strip() if n + 1 < len(cols) else line[start:].strip())
    return cells


def _tables(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not BORDER.match(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        cols = _columns(lines[i])
        borders = [i]
        j = i + 1
        while j < len(lines) and len(borders) < 3:
            if BORDER.match(lines[j]):
                borders.append(j)
            elif not lines[j].strip():
                break
            j += 1
        if len(borders) < 3:  # not a simple table with a header
            out.append(lines[i])
            i += 1
            continue
        header = _cells(lines[borders[0] + 1][indent:].ljust(cols[-1][1]), [(a - indent, b - indent) for a, b in cols])
        rows: list[list[str]] = []
        for line in lines[borders[1] + 1:borders[2]]:
            cells = _cells(line[indent:], [(a - indent, b - indent) for a, b in cols])
            if rows and not cells[0]:
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells)]
            else:
                rows.append(cells)
        out += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        out.append("")
        i = borders[2] + 1
    return out


def convert(text: str) -> str:
    text = ROLE.sub(_role, text)
    return "\n".join(_tables(_literal_blocks(text.splitlines())))


class RestToMarkdown(griffe.Extension):
    def on_object(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value)
