"""The shell examples of the documentation (``docs/**/*.md``, ``README.md`` and ``CONTRIBUTING.md``) as data, and a runner for them.

Every fenced block in a shell language (``bash``, ``sh``, ``shell``, ``console``, ``zsh``) comes right after marker
lines, HTML comments that the rendered page does not show and that a reader copying the block does not copy:

* ``<!-- tested-by: tests/<path>.py::<test_name> -->`` (one or more): the named test runs the block's commands; its
  source contains each command (checked by ``tests/docs/test_docs.py``), and where the block shows output
  (``console`` blocks: ``$ command`` lines followed by what it prints) the test compares that output with the real one;
* ``<!-- gpu-only -->`` (optionally ``<!-- gpu-only: why -->``): the commands need GPUs; the CPU test suite does not
  run them.

The marker lines sit directly above the opening fence, one per line. A marker written inside the block (a
``# tested-by:`` or ``# gpu-only`` line) is not one: :attr:`Block.inline_markers` lists it, and the test fails.

Commands: in a ``console`` block the ``$ `` lines (with their ``\\`` continuation lines), in the other shell blocks
every line that is not a comment (a trailing ``  # comment`` is not part of the command). Shown output: the lines
after a ``$`` command up to the next one; ``...`` on a line of its own skips any number of lines, ``...`` inside a
line matches any text, and a run of two or more spaces matches any run of spaces (column padding that depends on
the machine's paths). The shown lines must appear in the real output in that order (other lines may come between
them: the real output of a command is its stdout followed by its stderr).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from host_load import hang_guard  # tests/host_load.py (tests/conftest.py puts tests/ on sys.path)

ROOT = Path(__file__).resolve().parents[2]
SHELL_LANGS = ("bash", "sh", "shell", "console", "zsh")
TESTED_BY = re.compile(r"^\s*<!-- tested-by: (tests/[\w/.-]+\.py)::(\w+) -->\s*$")
GPU_ONLY = re.compile(r"^\s*<!-- gpu-only(: .+)? -->\s*$")
#: a marker written inside a block, where readers see and copy it
INLINE_MARKER = re.compile(r"^\s*# (tested-by:|gpu-only\b)")
FENCE = re.compile(r"^(\s*)(`{3,})\s*([\w+-]*)")


def doc_files() -> list[Path]:
    return sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]


@dataclass
class Block:
    path: Path
    line: int  #: 1-based line of the opening fence
    lang: str
    lines: list[str]
    tested_by: list[tuple[str, str]] = field(default_factory=list)
    gpu_only: bool = False
    inline_markers: list[str] = field(default_factory=list)  #: marker lines inside the block (not markers: an error)

    @property
    def where(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}"

    def steps(self) -> list[tuple[str, list[str]]]:
        """``[(command, shown output lines), ...]`` in block order."""
        out: list[tuple[str, list[str]]] = []
        lines = self.lines
        i = 0
        if self.lang == "console":
            while i < len(lines):
                if not lines[i].startswith("$ "):
                    if out:
                        out[-1][1].append(lines[i])
                    i += 1
                    continue
                cmd = lines[i][2:]
                while cmd.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    cmd = cmd[:-1] + " " + lines[i].strip()
                out.append((normalize(cmd), []))
                i += 1
            return out
        while i < len(lines):
            line = lines[i]
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
            if line.strip() and not line.lstrip().startswith("#"):
                out.append((normalize(strip_comment(line)), []))
        return out

    @property
    def commands(self) -> list[str]:
        return [cmd for cmd, _ in self.steps()]


def normalize(cmd: str) -> str:
    return " ".join(cmd.split())


def strip_comment(line: str) -> str:
    """``cmd   # comment`` -> ``cmd`` (a ``#`` after whitespace and outside quotes starts a comment)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and i > 0 and line[i - 1] in " \t":
            return line[:i].rstrip()
    return line


def parse(path: Path) -> list[Block]:
    """Every fenced code block of a Markdown file (any language)."""
    blocks = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, ticks, lang = m.group(1), m.group(2), m.group(3).lower()
        start = i
        body = []
        i += 1
        while i < len(lines) and not (lines[i].startswith(indent + ticks) and not lines[i].strip().strip("`")):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        i += 1
        block = Block(path, start + 1, lang, body, inline_markers=[l for l in body if INLINE_MARKER.match(l)])
        above = start - 1
        while above >= 0 and (TESTED_BY.match(lines[above]) or GPU_ONLY.match(lines[above])):
            above -= 1
        for line in lines[above + 1:start]:
            t = TESTED_BY.match(line)
            if t:
                block.tested_by.append((t.group(1), t.group(2)))
            else:
                block.gpu_only = True
        blocks.append(block)
    return blocks


def all_blocks() -> list[Block]:
    return [b for path in doc_files() for b in parse(path)]


def shell_blocks() -> list[Block]:
    return [b for b in all_blocks() if b.lang in SHELL_LANGS]


def blocks_running(commands: list[str]) -> list[Block]:
    """The shell blocks whose commands are exactly ``commands`` (normalised): at least one (the README repeats a
    few examples of the docs)."""
    want = [normalize(c) for c in commands]
    found = [b for b in shell_blocks() if b.commands == want]
    assert found, (f"no documentation block has exactly the commands {want} (blocks with the first command: "
                   f"{[(b.where, b.commands) for b in shell_blocks() if want[0] in b.commands]})")
    return found


# ------------------------------------------------------------------------------------------------------ running


@dataclass
class Ran:
    command: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + ("\n" if self.stdout and not self.stdout.endswith("\n") else "") + self.stderr


def venv_env(**extra: str) -> dict[str, str]:
    """The environment the examples run in: this interpreter's venv first on PATH (its ``microcoder``, ``python``),
    ROOT = this checkout (compat/venv.sh), no terminal (80 columns), and the sandbox of the code reward on its own
    slots, temp dir and uids, so that it never meets another test's engine."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["ROOT"] = str(ROOT)
    env["COLUMNS"] = "80"
    env.update(extra)
    return env


def workdir(tmp: Path) -> Path:
    """A scratch directory that looks like the repository root for the examples (``bench``, the recipes, ``compat``,
    ``Makefile`` linked), so that their outputs land in ``tmp`` and not in the checkout."""
    for name in ("bench", "verl_recipes", "openrlhf_recipes", "compat", "Makefile"):
        (tmp / name).symlink_to(ROOT / name)
    return tmp


def sandbox_env(tmp: Path, uid_base: int) -> dict[str, str]:
    slots, sbx = tmp / ".slots", tmp / ".sandbox"
    slots.mkdir()
    sbx.mkdir()
    sbx.chmod(0o711)
    return {"MICROCODER_REWARD_NODE_SLOTS": "2", "MICROCODER_REWARD_SLOTS_DIR": str(slots),
            "MICROCODER_SANDBOX_TMPDIR": str(sbx), "MICROCODER_SANDBOX_UID": str(uid_base)}


def run_block(block: Block, cwd: Path, env: dict[str, str], timeout: float = 900) -> list[Ran]:
    """Run the block's commands one after another in one bash process (``$?`` is the previous command's status,
    as in a terminal); each command's stdout and stderr are kept apart. ``timeout``: seconds the block takes at most
    on a quiet machine (the hang guard is :func:`host_load.hang_guard` of it)."""
    steps = block.steps()
    outdir = cwd / ".docblock"
    outdir.mkdir(exist_ok=True)
    script = ["__rc=0"]
    for i, (cmd, _) in enumerate(steps):
        script.append(f"(exit $__rc); {{ {cmd}\n}} >{outdir}/{i}.out 2>{outdir}/{i}.err; __rc=$?; "
                      f"echo $__rc >{outdir}/{i}.rc")
    subprocess.run(["bash", "-c", "\n".join(script)], cwd=cwd, env=env, timeout=hang_guard(timeout), check=False)
    ran = []
    for i, (cmd, _) in enumerate(steps):
        rc_file = outdir / f"{i}.rc"
        ran.append(Ran(cmd, int(rc_file.read_text()) if rc_file.exists() else -1,
                       (outdir / f"{i}.out").read_text(errors="replace"),
                       (outdir / f"{i}.err").read_text(errors="replace")))
    return ran


def _line_pattern(shown: str) -> re.Pattern:
    parts = [re.sub(r"(?:\\ ){2,}", " +", re.escape(p)) for p in shown.split("...")]
    return re.compile(".*?".join(parts) + r"\Z", re.S)


def match_shown(shown: list[str], actual: str) -> str | None:
    """None if every shown line appears in ``actual`` in order (``...`` rules above), else what is missing."""
    real = [line.rstrip() for line in actual.replace("\r", "\n").splitlines()]
    pos = 0
    for want in (s.rstrip() for s in shown):
        if not want or want == "...":
            continue
        pattern = _line_pattern(want)
        while pos < len(real) and not pattern.match(real[pos]):
            pos += 1
        if pos == len(real):
            return f"not found (in order) in the real output: {want!r}"
        pos += 1
    return None


def check_block(block: Block, ran: list[Ran]) -> None:
    """Assert that each command printed what the block shows (and that a shown ``echo $?`` matches)."""
    for (cmd, shown), r in zip(block.steps(), ran):
        problem = match_shown(shown, r.output)
        assert problem is None, (f"{block.where}: `{cmd}` (exit {r.returncode}): {problem}\n--- stdout:\n"
                                 f"{r.stdout[-6000:]}\n--- stderr:\n{r.stderr[-6000:]}")


def run_and_check(commands: list[str], tmp: Path, env: dict[str, str] | None = None,
                  timeout: float = 900) -> list[Ran]:
    """Find the documentation blocks with exactly ``commands``, run the commands once in a scratch copy of the
    repository root, compare each block's shown output with that run; returns what ran."""
    blocks = blocks_running(commands)
    cwd = workdir(tmp)
    ran = run_block(blocks[0], cwd, env or venv_env(), timeout)
    for block in blocks:
        check_block(block, ran)
    return ran
