"""MkDocs hook: the generated parts of the documentation.

A page asks for a generated table with an HTML comment on a line of its own::

    <!-- generated: microcoder-keys -->

and this hook replaces the comment with Markdown built, at build time, from the code itself (the config dataclasses,
the argparse parsers, ``compat/matrix.toml``), so the reference cannot drift from the code. An unknown name, a
config field without a meaning, or a documented name that no longer exists fails the build.

Generators (``GENERATORS``):

* ``microcoder-keys``: every ``microcoder.*`` key (verl Hydra) with its ``--mc.*`` flag (OpenRLHF launcher, ``microcoder
  train``), type, default and meaning, from :func:`microcoder_ext.core.options.option_specs` (the help metadata of
  :mod:`microcoder_ext.core.config`'s fields, which the flags' help shows too);
* ``mc-run-flags``, ``openrlhf-presets``: the launcher's other ``--mc.*`` flags and its presets;
* ``command-flags:NAME``: the flags of ``microcoder NAME`` (every sub-subcommand too), from the parser that the
  ``microcoder`` command itself builds (``microcoder_ext.cli.build_parser``);
* ``engine-config``, ``sandbox-fusion-config``: the reward engines' settings (dataclass fields, defaults, the
  environment variable ``from_env`` reads for each, the meaning from the module's configuration table);
* ``env-vars``: every ``MICROCODER_*`` environment variable the package reads;
* ``support-matrix``: ``compat/matrix.toml`` and the main pins of each ``compat/constraints-*.txt``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import html
import importlib
import inspect
import re
import sys
import textwrap
import tomllib
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- generated: ([\w:-]+) -->$", re.M)


def on_config(config, **kwargs):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return config


def on_page_markdown(markdown, page, config, files, **kwargs):
    def replace(match: re.Match) -> str:
        name, _, arg = match.group(1).partition(":")
        if name not in GENERATORS:
            raise PluginError(f"{page.file.src_path}: unknown generated section {match.group(1)!r}; "
                              f"known: {', '.join(sorted(GENERATORS))}")
        try:
            return GENERATORS[name](arg) if arg else GENERATORS[name]()
        except PluginError:
            raise
        except Exception as e:  # noqa: BLE001 - name the section that failed
            raise PluginError(f"{page.file.src_path}: generating {match.group(1)!r} failed: "
                              f"{type(e).__name__}: {e}") from e

    return MARKER.sub(replace, markdown)


# --------------------------------------------------------------------------------------------------- helpers


def cell(text: object) -> str:
    """Plain text for a Markdown table cell: newlines folded, HTML and the Markdown characters that would change it
    (pipes, brackets, asterisks) escaped; backticks stay code spans."""
    s = html.escape(" ".join(str(text).split()), quote=False)
    for ch in "\\|[]*":
        s = s.replace(ch, "\\" + ch)
    return s


def code(text: object) -> str:
    """An inline code span (in a table cell) that may contain backticks and pipes."""
    s = " ".join(str(text).split())
    if not s:
        return ""
    return "<code>" + html.escape(s).replace("|", "&#124;") + "</code>"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def show_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, tuple):
        return str([list(v) if isinstance(v, tuple) else v for v in value])
    return str(value)


# ----------------------------------------------------------------------------------- microcoder.* / --mc.*


def microcoder_keys() -> str:
    from microcoder_ext.core import config as core_config
    from microcoder_ext.core import options

    specs = options.option_specs()  # a field without help metadata raises here, failing the build
    out = []
    for section, cls_name in options.SECTIONS.items():
        cls = getattr(core_config, cls_name)
        rows = [[code(f"microcoder.{s.key}") + "<br>" + code(f"{s.flag} {s.metavar}".strip()),
                 code(s.type), code(show_value(s.default)), cell(s.help)]
                for s in specs if s.section == section]
        out.append(f"**`microcoder.{section}`** (`{cls.__module__}.{cls_name}`)\n\n"
                   + table(["verl key<br>flag (OpenRLHF launcher, `microcoder train`)", "type", "default", "meaning"],
                           rows))
    return "\n".join(out)


def mc_run_flags() -> str:
    from microcoder_ext.openrlhf import options

    parser = options.build_parser()
    keyed = {options.flag(s.key) for s in options.specs()}
    rows = []
    for action in parser._actions:
        names = [o for o in action.option_strings if o.startswith(options.PREFIX) and o not in keyed]
        if not names:
            continue
        takes = "" if action.nargs == 0 else (" {" + ",".join(action.choices) + "}" if action.choices else " VALUE")
        default = "off" if action.nargs == 0 else show_value(action.default)
        rows.append([code(names[0] + takes), code(default), cell(action.help.replace("%%", "%"))])
    return table(["flag", "default", "meaning"], rows)


def openrlhf_presets() -> str:
    from microcoder_ext.openrlhf.presets import DEFAULT_PRESET, PRESETS

    rows = []
    for name, p in PRESETS.items():
        flags = ", ".join(" ".join(r.flag) for r in p.requirements if r.flag) or "none"
        rows.append([code(name) + (" (default)" if name == DEFAULT_PRESET else ""), "yes" if p.mask else "no",
                     "yes" if p.temperature_control else "no", cell(p.summary), code(flags)])
    return table(["`--mc.preset`", "mask", "temperature controller", "summary", "flags it puts before yours"], rows)


# ------------------------------------------------------------------------------------------- command flags


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flag_rows(parser: argparse.ArgumentParser) -> list[list[str]]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            name = ", ".join(action.option_strings)
            if action.nargs != 0:
                metavar = action.metavar or (("{" + ",".join(map(str, action.choices)) + "}") if action.choices
                                             else action.dest.upper())
                if isinstance(metavar, tuple):
                    metavar = " ".join(metavar)
                name += f" {metavar}" + (" ..." if action.nargs in ("+", "*") else "")
        else:
            name = action.metavar or action.dest
            if isinstance(name, tuple):
                name = " ".join(name)
            name += " ..." if action.nargs in ("+", "*", argparse.REMAINDER) else ""
        if action.required or not action.option_strings:
            default = "required" if action.nargs not in ("?", "*", argparse.REMAINDER) else ""
        elif action.nargs == 0:
            default = "off" if action.default in (False, None) else show_value(action.default)
        elif action.default in (None, argparse.SUPPRESS):
            default = ""
        else:
            default = show_value(action.default)
        text = (action.help or "")
        try:
            text = text % {"default": action.default, "prog": "", "choices": action.choices}
        except (KeyError, TypeError, ValueError):
            pass
        rows.append([code(name), code(default) if default not in ("", "required", "off") else default, cell(text)])
    return rows


def command_flags(name: str) -> str:
    from microcoder_ext.cli import build_parser

    commands = _subparsers(build_parser())
    if name not in commands:
        raise PluginError(f"`microcoder {name}` is not a subcommand; known: {', '.join(commands)}")
    out = []

    def walk(prog: str, parser: argparse.ArgumentParser) -> None:
        unavailable = parser.get_default("_unavailable")
        if unavailable:
            raise PluginError(f"cannot document `{prog}`: {unavailable}")
        rows = _flag_rows(parser)
        subs = _subparsers(parser)
        if rows or not subs:
            text = (parser.description or "").strip("\n")
            if "\n" in text.strip():  # a usage text with its own layout: as written
                head = f"**`{prog}`**\n\n```text\n{textwrap.dedent(text)}\n```\n\n"
            else:
                head = f"**`{prog}`**" + (f": {cell(text)}" if text else "") + "\n\n"
            out.append(head + (table(["argument", "default", "meaning"], rows) if rows else "No arguments.\n"))
        for sub_name, sub in subs.items():
            walk(f"{prog} {sub_name}", sub)

    walk(f"microcoder {name}", commands[name])
    return "\n".join(out)


# ------------------------------------------------------------------------------------------ reward engines

#: meanings of engine settings that the modules' configuration tables do not list (checked: no stale entries)
ENGINE_EXTRA = {
    "wall_timeout": "wall-clock seconds per test; null: 2 x timeout + 1",
    "seccomp": "install the seccomp filter in every sandboxed program",
    "landlock": "apply landlock (filesystem and network rules) where the kernel has it",
    "uid_drop": "as root: run every program as the unprivileged sandbox uid (``uid``)",
    "debug": "pass the sandbox workers' stderr through to the host's stderr (default: discarded)",
    "request_margin": "seconds added to a batch's budget for start-up and transfer",
    "http_slack": "seconds the HTTP client waits beyond the run budget (queueing, transfer)",
}


def _config_table_meanings(module) -> dict[str, tuple[str, str]]:
    """``{field: (ENV, meaning)}`` from the ``Configuration`` table of a module docstring: lines
    ``  name   ENV_VAR   meaning`` (ENV optional), continued by more-indented lines."""
    doc = inspect.getdoc(module) or ""
    part = doc.split("Configuration", 1)[1] if "Configuration" in doc else ""
    out: dict[str, tuple[str, str]] = {}
    last = None
    for line in part.splitlines()[1:]:
        if not line.strip():
            if out:
                break
            continue
        m = re.match(r"^  (\w+(?:, \w+)*):?\s+(MICROCODER_\w+)?\s*(.*)$", line)
        if m and not line.startswith("   "):
            for name in m.group(1).split(", "):
                out[name] = (m.group(2) or "", m.group(3).strip())
            last = m.group(1).split(", ")
        elif last and line.startswith("   "):
            for name in last:
                env, text = out[name]
                out[name] = (env, f"{text} {line.strip()}")
    return out


def _from_env_vars(cls) -> dict[str, str]:
    """``{field: ENV}`` read off ``cls.from_env``'s source (``field=_env("ENV", ...)`` keywords)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.from_env)))
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg:
            names = [n.value for n in ast.walk(node.value)
                     if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("MICROCODER_")]
            if names:
                found[node.arg] = names[0]
    return found


def _engine_table(module_name: str, cls_name: str) -> str:
    module = importlib.import_module(module_name)
    cls = getattr(module, cls_name)
    table_meanings = _config_table_meanings(module)
    envs = _from_env_vars(cls)
    rows = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        env, meaning = table_meanings.get(f.name, ("", ""))
        meaning = meaning or ENGINE_EXTRA.get(f.name, "")
        if not meaning:
            raise PluginError(f"{module_name}.{cls_name}.{f.name} has no meaning: add it to the module's "
                              "Configuration table (or docs/hooks/reference.py ENGINE_EXTRA)")
        env = envs.get(f.name, env)
        rows.append([code(f.name), code(f.type), code(show_value(default)), code(env) if env else "",
                     cell(meaning)])
    return (f"`{module_name}.{cls_name}` (environment: `{cls_name}.from_env()`)\n\n"
            + table(["field", "type", "default", "environment variable", "meaning"], rows))


def engine_config() -> str:
    return _engine_table("microcoder_ext.reward.engine", "EngineConfig")


def sandbox_fusion_config() -> str:
    return _engine_table("microcoder_ext.reward.sandbox_fusion", "SandboxFusionConfig")


# -------------------------------------------------------------------------------------- environment variables

#: what each MICROCODER_* variable outside the two engine tables does (a variable the code reads that is missing
#: here, or one listed here that the code no longer reads, fails the build)
ENV_EXTRA = {
    "MICROCODER_REWARD_BACKEND": "code reward backend: local (default) or sandbox_fusion",
    "MICROCODER_ALLOW_UNSUPPORTED": "1: an unsupported framework version is a warning instead of an error "
                                    "(never a changed internal)",
    "MICROCODER_JUDGE_API_KEY": "API key for `microcoder data difficulty --judge-url` (sent as Authorization: Bearer)",
    "MICROCODER_CACHE": "where `microcoder smoke` keeps its tiny models (default ~/.cache/microcoder-ext; the test "
                        "venvs of compat/venv.sh live there too)",
    "MICROCODER_ENTRY_POINT": "a Hydra application of your own (its module, as the refusal prints it) that passes a "
                              "`+recipe=microcoder*` config unchanged to verl's `main_ppo.run_ppo`: the recipes' "
                              "launch guard lets it through ([verl](verl.md#a-launch-that-would-not-apply-the-"
                              "algorithm-stops))",
    "MICROCODER_VERL_CPU_RUN": "set by the verl CPU backend in a smoke run's driver (not for users): the run's token "
                               "in verl's weight-sync socket names ([vLLM on the CPU](vllm-cpu.md))",
    "MICROCODER_SMOKE_EVIDENCE": "set by `microcoder smoke` for the processes it starts (not for users)",
    "MICROCODER_SMOKE_TIMEOUT": "default of `microcoder smoke --timeout`, seconds (0: never; unset: 1200 + 120 per "
                                "step), for a machine slower than a busy 2 cores",
    "MICROCODER_OPENRLHF_CPU": "set by `microcoder smoke openrlhf`: activates the OpenRLHF CPU backend (not for users)",
    "MICROCODER_OPENRLHF_CPU_CHECKED": "set by the OpenRLHF CPU backend in a smoke run's driver once its guard passed, "
                                       "for its Ray workers (not for users): keyed to the installed OpenRLHF, "
                                       "DeepSpeed and vLLM versions and the interpreter's prefix",
    "MICROCODER_OPENRLHF_CPU_SEED": "seed of the OpenRLHF CPU backend in a smoke run (default 0)",
    "MICROCODER_OPENRLHF_CPU_ENGINE_START": "OpenRLHF CPU backend: `perturbed` starts vLLM on weights that differ "
                                            "from the trainer's in every tensor (so only the weight sync can make it "
                                            "serve the trainer's model; the end-to-end tests set it)",
    "MICROCODER_OPENRLHF_CPU_KV_CACHE_BYTES": "OpenRLHF CPU backend: bytes of KV cache per vLLM engine shard "
                                              "(`microcoder smoke --topology` sets it for the smoke's batch; "
                                              "otherwise vLLM's `VLLM_CPU_KVCACHE_SPACE`, in GiB, applies)",
    "MICROCODER_OPENRLHF_CPU_SYNC_TIMEOUT": "OpenRLHF CPU backend: seconds a weight-sync broadcast waits for a silent "
                                            "vLLM worker before the run fails (default 300)",
    "MICROCODER_OPENRLHF_CPU_FAIL_SYNC": "OpenRLHF CPU backend, fault injection for the tests: the vLLM worker fails "
                                         "instead of receiving its N-th tensor (checks that a failed sync ends the run "
                                         "with the worker's error)",
}


def env_vars() -> str:
    from microcoder_ext.reward import engine, sandbox_fusion

    meanings: dict[str, str] = {}
    for module, cls in ((engine, engine.EngineConfig), (sandbox_fusion, sandbox_fusion.SandboxFusionConfig)):
        table_meanings = _config_table_meanings(module)
        for name, env in _from_env_vars(cls).items():
            meanings.setdefault(env, table_meanings.get(name, ("", ""))[1] or ENGINE_EXTRA.get(name, "")
                                + f" (`{cls.__name__}.{name}`)")
    meanings.update(ENV_EXTRA)
    readers: dict[str, set[str]] = {}
    for path in sorted((ROOT / "microcoder_ext").rglob("*.py")):
        for env in set(re.findall(r"[\"'](MICROCODER_[A-Z0-9_]+)[\"']", path.read_text())):
            readers.setdefault(env, set()).add(str(path.relative_to(ROOT).with_suffix("")).replace("/", "."))
    missing = sorted(set(readers) - set(meanings))
    stale = sorted(set(ENV_EXTRA) - set(readers))
    if missing or stale:
        raise PluginError(f"environment variables: undocumented {missing}, documented but not read {stale} "
                          "(docs/hooks/reference.py ENV_EXTRA)")
    rows = [[code(env), cell(meanings[env]), ", ".join(code(m) for m in sorted(readers[env]))]
            for env in sorted(readers)]
    return table(["variable", "meaning", "read in"], rows)


# --------------------------------------------------------------------------------------------- versions

#: the packages whose pinned versions the support matrix shows (from each venv's constraints file)
PINNED = ("verl", "openrlhf", "trl", "torch", "transformers", "ray", "vllm", "deepspeed", "peft", "accelerate",
          "hydra-core")


def support_matrix() -> str:
    matrix = tomllib.loads((ROOT / "compat" / "matrix.toml").read_text())
    rows = []
    for name, entry in matrix.items():
        pins = {}
        main = f"constraints-{name}-{entry['main']}.txt"
        for line in (ROOT / "compat" / main).read_text().splitlines():
            m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line.strip())
            if m and m.group(1).lower() in PINNED and m.group(1).lower() != name:
                pins[m.group(1).lower()] = m.group(2)
        shown = ", ".join(f"{k} {v}" for k, v in sorted(pins.items()))
        files = ", ".join(f"`compat/constraints-{name}-{v}.txt`" for v in entry["tested"])
        differences = "; ".join(f"**{v}**: {text}" for v, text in entry.get("differences", {}).items()) or "none"
        rows.append([f"**{name}**", code(entry["supported"]), code(", ".join(entry["tested"])), code(entry["python"]),
                     cell(shown), files, cell(entry.get("notes", "")), cell(differences)])
    return table(["framework", "supported", "tested (a venv each)", "Python", "pinned in its main test venv",
                  "constraints", "notes", "differences inside the range"], rows)


GENERATORS = {
    "microcoder-keys": microcoder_keys,
    "mc-run-flags": mc_run_flags,
    "openrlhf-presets": openrlhf_presets,
    "command-flags": command_flags,
    "engine-config": engine_config,
    "sandbox-fusion-config": sandbox_fusion_config,
    "env-vars": env_vars,
    "support-matrix": support_matrix,
}
