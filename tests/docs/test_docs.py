"""The documentation site and its shell examples.

* ``mkdocs build --strict`` of ``mkdocs.yml`` succeeds: no broken link or anchor, no page outside the nav, every API
  object of the reference found, the generated configuration reference built from the code (docs/hooks/reference.py);
* every shell example in ``docs/**/*.md``, ``README.md`` and ``CONTRIBUTING.md`` comes right after a marker, an HTML
  comment readers do not see, ``<!-- tested-by: tests/...::test_name -->`` or ``<!-- gpu-only: why -->``
  (tests/docs/docblocks.py), and holds no marker line itself; a named test exists and a string in its source contains each of the
  block's commands, so the test really runs them (the tests in tests/docs run the block itself and compare the output it shows);
* ``make test`` is the test runner (tests/run_all.sh), which runs these tests in every suite.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import docblocks
from docblocks import ROOT
from host_load import hang_guard


def _marker_problems(blocks: list[docblocks.Block]) -> list[str]:
    """What is wrong with the markers of ``blocks``: one line per problem."""
    problems = []
    for block in blocks:
        if block.lang not in docblocks.SHELL_LANGS:
            prompts = [line for line in block.lines if line.startswith("$ ")]
            if prompts:
                problems.append(f"{block.where}: a ```{block.lang or '(no language)'} block with shell prompts "
                                f"({prompts[0]!r}): make it a ```console block with a marker")
            continue
        if not block.tested_by and not block.gpu_only:
            problems.append(f"{block.where}: shell example without '<!-- tested-by: tests/...::test -->' or "
                            f"'<!-- gpu-only: why -->' on the line(s) above its fence")
        if block.inline_markers:
            problems.append(f"{block.where}: a marker inside the block, where readers copy it "
                            f"({block.inline_markers[0]!r}): move it into an HTML comment above the fence")
        if block.tested_by and block.gpu_only:
            problems.append(f"{block.where}: both tested-by and gpu-only")
        if not block.commands:
            problems.append(f"{block.where}: a shell block without a command")
    return problems


def test_every_shell_example_is_tested_or_gpu_only():
    problems = _marker_problems(docblocks.all_blocks())
    assert not problems, "\n".join(problems)


def _test_strings(path: str, name: str) -> list[str] | None:
    """The string constants of test ``name`` in ``path`` (adjacent literals are one constant), with those of the
    module-level names it uses, whitespace-normalised; None if there is no such test."""
    file = ROOT / path
    if not file.is_file():
        return None
    tree = ast.parse(file.read_text())
    module_values = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                     for t in node.targets if isinstance(t, ast.Name)}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            roots = [node] + [module_values[n.id] for n in ast.walk(node)
                              if isinstance(n, ast.Name) and n.id in module_values]
            return [" ".join(c.value.split()) for root in roots for c in ast.walk(root)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    return None


def test_named_tests_exist_and_run_the_commands():
    problems = []
    blocks = [b for b in docblocks.shell_blocks() if b.tested_by]
    assert len(blocks) >= 15, [b.where for b in blocks]
    for block in blocks:
        strings: list[str] = []
        for path, name in block.tested_by:
            found = _test_strings(path, name)
            if found is None:
                problems.append(f"{block.where}: {path}::{name} does not exist")
            else:
                strings += found
        for cmd in block.commands:
            if strings and not any(cmd in s for s in strings):
                problems.append(f"{block.where}: no string in the named tests contains the command {cmd!r}")
    assert not problems, "\n".join(problems)


def test_marker_checker_catches_unmarked_and_hidden_examples(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("```bash\nmicrocoder --help\n```\n\n```text\n$ microcoder --help\n```\n\n"
                    "<!-- gpu-only: needs GPUs -->\n```console\n$ microcoder train --use_vllm\n...\n```\n\n"
                    "<!-- tested-by: tests/x.py::test_y -->\n<!-- tested-by: tests/x.py::test_z -->\n"
                    "```bash\nmake demo   # runs it\nSMOKE=1 bash a.sh \\\n    --flag 'a # b'\n```\n\n"
                    "<!-- tested-by: tests/x.py::test_y -->\n\n```bash\n# tested-by: tests/x.py::test_y\n"
                    "make demo\n```\n")
    blocks = docblocks.parse(page)
    assert [b.lang for b in blocks] == ["bash", "text", "console", "bash", "bash"]
    assert not blocks[0].tested_by and not blocks[0].gpu_only
    assert blocks[2].gpu_only and blocks[2].steps() == [("microcoder train --use_vllm", ["..."])]
    assert blocks[3].tested_by == [("tests/x.py", "test_y"), ("tests/x.py", "test_z")] and not blocks[3].gpu_only
    assert blocks[3].commands == ["make demo", "SMOKE=1 bash a.sh --flag 'a # b'"] and not blocks[3].inline_markers
    # a marker a blank line away from the fence marks nothing; one inside the block is flagged, not obeyed
    assert not blocks[4].tested_by and blocks[4].inline_markers == ["# tested-by: tests/x.py::test_y"]
    problems = _marker_problems(blocks)
    assert [p.split(": ", 1)[0] for p in problems] == [f"{page}:1", f"{page}:5", f"{page}:25", f"{page}:25"], problems
    assert "without '<!-- tested-by" in problems[0] and "a marker inside the block" in problems[3]
    assert docblocks.match_shown(["a", "...", "c ... e"], "a\nb\nc d e\n") is None
    assert docblocks.match_shown(["c ... e", "a"], "a\nb\nc d e\n") is not None  # order matters


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def test_configuration_reference_shows_each_config_fields_help():
    """docs/configuration.md's table of ``microcoder.*`` keys comes from the config fields' help metadata (the one copy
    of each key's help, which the ``--mc.*`` flags show too): each key's row ends with its field's help."""
    import dataclasses
    import importlib.util

    from microcoder_ext.core.config import MaskConfig, TemperatureConfig

    spec = importlib.util.spec_from_file_location("mc_docs_reference", ROOT / "docs" / "hooks" / "reference.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    lines = hook.microcoder_keys().splitlines()
    for section, cls in (("mask", MaskConfig), ("temperature", TemperatureConfig)):
        for f in dataclasses.fields(cls):
            row = [line for line in lines if line.startswith(f"| <code>microcoder.{section}.{f.name}</code><br>")]
            assert len(row) == 1, (f.name, row)
            assert row[0].endswith(f" | {hook.cell(f.metadata['help'])} |"), row[0]


def test_mkdocs_build_strict(tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True, timeout=hang_guard(900))
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-10000:]
    # the nav holds every page, and every page was built
    pages = {p.relative_to(ROOT / "docs").with_suffix(".html") for p in (ROOT / "docs").rglob("*.md")}
    assert pages and all((site / p).is_file() for p in pages), sorted(p for p in pages if not (site / p).is_file())
    # the generated reference: every microcoder.* key and --mc flag, every EngineConfig field, train's flags
    from microcoder_ext.core import config
    from microcoder_ext.reward.engine import EngineConfig

    ref = (site / "configuration.html").read_text()
    for section, cls in (("mask", config.MaskConfig), ("temperature", config.TemperatureConfig)):
        for f in config.dataclasses.fields(cls):
            assert f"microcoder.{section}.{f.name}<" in ref and f"--mc.{section}.{f.name}" in ref, f.name
    for f in config.dataclasses.fields(EngineConfig):
        assert f"<code>{f.name}</code>" in ref, f.name
    assert "--use_conditional_mask" in ref and "--clipping_ratio" in ref  # microcoder train's flags
    commands = (site / "commands.html").read_text()
    assert "--strict" in commands and "--skip-bad" in commands and "--min-difficulty" in commands
    # no link of a built page points at a page that is not there
    broken = []
    for html in site.rglob("*.html"):
        if html.name == "404.html":  # served from any path: its links are absolute
            continue
        parser = _Links()
        parser.feed(html.read_text())
        for href in parser.hrefs:
            if re.match(r"^[a-z]+:|^#", href):
                continue
            target = (html.parent / href.split("#")[0]).resolve()
            if href.split("#")[0] and not target.exists():
                broken.append(f"{html.relative_to(site)} -> {href}")
    assert not broken, broken


def test_readme_links_into_the_docs_and_shows_the_support_matrix():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", text)
    assert links, "the README links into docs/"
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert not missing, missing
    # the README's support matrix is compat/matrix.toml's (the versions page generates the full table from it)
    import tomllib

    matrix = tomllib.loads((ROOT / "compat" / "matrix.toml").read_text())
    names = {"verl": "verl", "openrlhf": "OpenRLHF", "trl": "TRL"}
    rows = {m.group(1): m.groups()[1:] for m in re.finditer(
        r"^\| (\w+) \| `([^`]+)` \| `([^`]+)` \| `([^`]+)` \|$", text, re.M)}
    assert rows == {names[k]: (v["supported"], ", ".join(v["tested"]), v["python"]) for k, v in matrix.items()}


def test_make_test_runs_every_suite():
    """``make test`` (README, quickstart page) is the test runner itself: it cannot run inside the suite, so this
    checks what it runs: ``make -n test`` is ``bash tests/run_all.sh``, which runs the three suites and tests/docs."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}  # under make test
    proc = subprocess.run(["make", "--no-print-directory", "-n", "test"], cwd=ROOT, capture_output=True, text=True,
                          timeout=hang_guard(60), env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "bash tests/run_all.sh"
    run_all = (ROOT / "tests" / "run_all.sh").read_text()
    assert 'SUITES=${SUITES:-verl openrlhf trl verl-0.9.0 openrlhf-0.11.0 openrlhf-0.11.1 trl-1.15.0}' in run_all
    for path in ("tests/docs/test_docs.py", "tests/docs/test_examples_verl.py", "tests/docs/test_examples_openrlhf.py",
                 "tests/docs/test_examples_trl.py"):
        assert path in run_all, path


def test_one_suite_with_pytest_arguments(tmp_path):
    """``SUITES=verl bash tests/run_all.sh -k mask`` (tests page): the same command with ``--collect-only -q``
    appended (running the suite inside itself would recurse): it selects the verl suite's mask tests."""
    proc = subprocess.run("SUITES=verl bash tests/run_all.sh -k mask --collect-only -q", shell=True, cwd=ROOT,
                          env=docblocks.venv_env(), capture_output=True, text=True, timeout=hang_guard(900))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert ids and all("mask" in i.lower() for i in ids), ids[:20]
    assert any(i.startswith("tests/core/test_masking.py::") for i in ids)
    assert not any(i.startswith(("tests/openrlhf/", "tests/trl/")) for i in ids)


def test_one_file_and_one_test():
    """CONTRIBUTING.md's one-file and one-test commands, with ``--collect-only -q`` appended: the file's tests, then
    the one test that ``-k`` names."""
    def collect(cmd: str) -> list[str]:
        proc = subprocess.run(cmd + " --collect-only -q", shell=True, cwd=ROOT, env=docblocks.venv_env(),
                              capture_output=True, text=True, timeout=hang_guard(600))
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return [line for line in proc.stdout.splitlines() if "::" in line]

    whole = collect("bash compat/in_venv.sh verl python -m pytest tests/core/test_masking.py")
    assert len(whole) > 10 and all(i.startswith("tests/core/test_masking.py::") for i in whole), whole[:5]
    one = collect("bash compat/in_venv.sh verl python -m pytest tests/core/test_masking.py -k test_rho_one_masks")
    assert one == ["tests/core/test_masking.py::test_rho_one_masks_every_eligible_and_rho_zero_none"]


def _defined_names(file: Path) -> set[str]:
    tree = ast.parse(file.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _resolves(dotted: str) -> bool:
    """``microcoder_ext.a.b.name[.attr]``: the longest prefix that is a module of the package, then a name defined
    (or imported) at its top level; read from the source, nothing imported (the adapters need their frameworks)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:i])
        file = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if file.is_file():
            rest = parts[i:]
            return not rest or rest[0] in _defined_names(file) or (base.is_dir() and (base / rest[0]).exists())
    return False


def test_names_and_paths_in_the_docs_exist():
    """Every ``microcoder_ext.*`` name and every repository path the pages mention exists (moved code fails here)."""
    problems = []
    for page in docblocks.doc_files():
        text = page.read_text()
        for dotted in sorted(set(re.findall(r"\bmicrocoder_ext(?:\.[A-Za-z_]\w*)+", text))):
            if not _resolves(dotted):
                problems.append(f"{page.relative_to(ROOT)}: {dotted}")
        for path in sorted(set(re.findall(r"\b((?:microcoder_ext|tests|compat|bench|verl_recipes|openrlhf_recipes|"
                                          r"reward_fns)/[\w./-]*\w)", text))):
            if re.search(r"\.\w+$", path) and not (ROOT / path).exists():  # files (alias lists like a/b/c are prose)
                problems.append(f"{page.relative_to(ROOT)}: {path}")
    assert not problems, "\n".join(problems)


#: the package, the recipes and the docs: what a user has, so every citation in them must lead into the project
SHIPPED = ("microcoder_ext", "verl_recipes", "openrlhf_recipes", "reward_fns", "hydra_plugins", "docs", "README.md",
           "CONTRIBUTING.md", "mkdocs.yml")
PAPER_PAGE = ROOT / "docs" / "paper.md"


def _text_files(*names: str):
    for name in names:
        base = ROOT / name
        for file in [base] if base.is_file() else sorted(f for f in base.rglob("*") if f.is_file()):
            if "__pycache__" in file.parts:
                continue
            try:
                yield file, file.read_text(encoding="utf-8")
            except UnicodeDecodeError:  # images, compiled files
                continue


def _paper_anchors() -> set[str]:
    """The section anchors of the paper page: each heading's ``{#id}``, else the id MkDocs derives from its text."""
    anchors = set()
    for line in PAPER_PAGE.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^#{1,6} (.+?)\s*$", line)
        if heading:
            explicit = re.search(r"\{#([\w-]+)\}$", heading.group(1))
            anchors.add(explicit.group(1) if explicit else
                        re.sub(r"[\s-]+", "-", re.sub(r"[^\w\s-]", "", heading.group(1)).strip().lower()))
    return anchors


def test_citations_lead_into_the_project():
    """No file of the package, the recipes or the docs cites the notes this project was built from, which users do
    not have (a "paper-spec" section or a shared/notes path); the paper's statements are on docs/paper.md. Every
    section of that page cited anywhere in the repository (as docs/paper.md#... or, from a page, paper.md#...)
    exists."""
    outside = []
    for file, text in _text_files(*SHIPPED):
        for n, line in enumerate(text.splitlines(), 1):
            if re.search(r"paper-spec|shared/notes", line, re.I):
                outside.append(f"{file.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    assert not outside, "citations of notes users do not have:\n" + "\n".join(outside)
    anchors = _paper_anchors()
    assert {"objective", "conditional-truncation-mask", "non-incorrect", "masking-probability", "kl-and-clipping",
            "diversity-determined-temperature", "training-settings", "main-results", "our-defaults"} <= anchors
    cited, missing = 0, []
    for file, text in _text_files(*SHIPPED, "tests", "bench", "compat", "Makefile"):
        pattern = r"(?:docs/paper\.md|\]\(paper\.md)#([A-Za-z0-9_-]+)" if file.suffix == ".md" \
            else r"docs/paper\.md#([A-Za-z0-9_-]+)"
        for anchor in re.findall(pattern, text):
            cited += 1
            if anchor not in anchors:
                missing.append(f"{file.relative_to(ROOT)}: docs/paper.md#{anchor}")
    assert cited > 50 and not missing, (cited, missing)
