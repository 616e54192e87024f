"""Cost of our ``verl.plugins`` entry point in every process that imports verl: ``import verl`` with and without it.

    python bench/plugin_import.py                 # 7 interleaved fresh-interpreter runs per variant
    python bench/plugin_import.py --runs 11 --lookup --json out.json

Run it with the verl venv's python (the one with microcoder-ext installed). Each run is a fresh interpreter that
does ``import verl`` and nothing else; the variants differ only in verl's own switch ``VERL_USE_EXTERNAL_PLUGINS``
(``verl/__init__.py``: ``auto`` loads every ``verl.plugins`` entry point, ``none`` loads none):

* ``no_plugin``: ``VERL_USE_EXTERNAL_PLUGINS=none``;
* ``plugin``: ``VERL_USE_EXTERNAL_PLUGINS=auto`` (verl's default), the child checks the plugin was loaded;
* ``ep_load``: as ``no_plugin``, then the child times what verl's loop does for our entry point
  (``entry_points(group="verl.plugins")`` and ``ep.load()``) in-process: the plugin's own cost without the
  interpreter-to-interpreter noise of the other variants;
* ``plugin+lookup`` (``--lookup``, for information): ``import verl`` then the trainer lookup ``main_ppo`` does
  (``verl.trainer.ppo.v1.get_trainer_cls('microcoder_sync')``), i.e. what the one process that trains pays.

Runs are interleaved (the order of the variants alternates every round) after one discarded warm-up run each, so
a noisy shared machine hits every variant alike. Per variant, medians of: ``import_s`` (``import verl`` timed inside
the child with ``perf_counter``), ``process_s`` (the child's whole wall time, interpreter start included, measured
by this script), ``modules`` (``len(sys.modules)`` after the import) and ``peak_rss_mb`` (the child's
``ru_maxrss`` from ``os.wait4``). Ratios are ``plugin / no_plugin``. Goal (issue 7): within 5 % of no plugin.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ENV = "VERL_USE_EXTERNAL_PLUGINS"
GOAL = 1.05

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import verl
t1 = time.perf_counter()
out = {"import_s": t1 - t0, "modules": len(sys.modules),
       "plugin_loaded": "microcoder_ext.verl.plugin" in sys.modules,
       "v1_loaded": "verl.trainer.ppo.v1" in sys.modules}
if LOOKUP:
    from verl.trainer.ppo.v1 import get_trainer_cls
    out["found"] = get_trainer_cls("microcoder_sync").__qualname__
    out["lookup_s"] = time.perf_counter() - t1
    out["modules"] = len(sys.modules)
    out["v1_loaded"] = "verl.trainer.ppo.v1" in sys.modules
if LOAD_ENTRY_POINT:  # after import verl without plugins: exactly the extra work verl's loop does for ours
    from importlib.metadata import entry_points
    before = len(sys.modules)
    t2 = time.perf_counter()
    [ep] = [ep for ep in entry_points(group="verl.plugins") if ep.value == "microcoder_ext.verl.plugin"]
    t3 = time.perf_counter()
    ep.load()
    t4 = time.perf_counter()
    out.update(discover_ms=(t3 - t2) * 1e3, load_ms=(t4 - t3) * 1e3, load_modules=len(sys.modules) - before,
               plugin_loaded=False, v1_loaded="verl.trainer.ppo.v1" in sys.modules)
sys.stdout.write("\nRESULT " + json.dumps(out) + "\n")
"""

VARIANTS = {
    "no_plugin": {"env": "none", "lookup": False, "load": False},
    "plugin": {"env": "auto", "lookup": False, "load": False},
    "plugin+lookup": {"env": "auto", "lookup": True, "load": False},
    "ep_load": {"env": "none", "lookup": False, "load": True},
}


def check_verl_switch(python: str) -> str:
    """The opt-out variable really is verl's (read from its source, without importing verl)."""
    code = "import importlib.util as u; print(u.find_spec('verl').origin)"
    origin = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    with open(origin) as f:
        source = f.read()
    if f'os.getenv("{ENV}", "auto")' not in source or '!= "none"' not in source:
        raise SystemExit(f"{origin} no longer reads {ENV} the way this benchmark assumes; check verl/__init__.py")
    return origin


def run_once(python: str, variant: str) -> dict:
    spec = VARIANTS[variant]
    env = {**os.environ, ENV: spec["env"]}
    code = f"LOOKUP = {spec['lookup']}\nLOAD_ENTRY_POINT = {spec['load']}\n" + CHILD
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([python, "-c", code], env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # reap it ourselves: its own rusage, not RUSAGE_CHILDREN's max
        wall = time.perf_counter() - t0
        rc = proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    line = next((x for x in stdout.splitlines() if x.startswith("RESULT ")), None)
    if rc != 0 or line is None:
        raise SystemExit(f"{variant}: child failed (rc={rc})\n{stderr[-3000:]}")
    result = json.loads(line[len("RESULT ") :])
    expected_plugin = spec["env"] != "none" and not spec["load"]
    if result["plugin_loaded"] != expected_plugin:
        raise SystemExit(f"{variant}: plugin_loaded={result['plugin_loaded']}, expected {expected_plugin}")
    result["process_s"] = wall
    result["peak_rss_mb"] = usage.ru_maxrss / 1024  # Linux: KiB
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 2)[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7, help="measured runs per variant (default: 7)")
    parser.add_argument("--python", default=sys.executable, help="interpreter of the verl venv (default: this one)")
    parser.add_argument("--lookup", action="store_true", help="also measure import verl + the microcoder_sync lookup")
    parser.add_argument("--no-warmup", action="store_true", help="skip the discarded warm-up run of each variant")
    parser.add_argument("--json", metavar="PATH", help="also write all runs and the summary as JSON")
    args = parser.parse_args(argv)

    origin = check_verl_switch(args.python)
    variants = ["no_plugin", "plugin", "ep_load"] + (["plugin+lookup"] if args.lookup else [])
    if not args.no_warmup:
        for v in variants:
            run_once(args.python, v)
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for i in range(args.runs):
        for v in variants if i % 2 == 0 else variants[::-1]:
            r = run_once(args.python, v)
            runs[v].append(r)
            print(f"  run {i + 1}/{args.runs} {v:14s} import {r['import_s']:6.2f} s  process {r['process_s']:6.2f} s"
                  f"  modules {r['modules']:5d}  peak RSS {r['peak_rss_mb']:6.0f} MB", file=sys.stderr, flush=True)

    keys = ["import_s", "process_s", "modules", "peak_rss_mb"]
    summary = {v: {k: statistics.median(r[k] for r in runs[v]) for k in keys} for v in variants}
    for v in variants:
        summary[v]["v1_loaded"] = any(r["v1_loaded"] for r in runs[v])
    ratios = {v: {k: summary[v][k] / summary["no_plugin"][k] for k in keys} for v in variants if v != "no_plugin"}
    load = {k: statistics.median(r[k] for r in runs["ep_load"]) for k in ("discover_ms", "load_ms", "load_modules")}

    print(f"verl: {origin}")
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
          f"median of {args.runs} interleaved fresh-interpreter runs per variant")
    print(f"{'variant':16s}{'import verl s':>14s}{'process s':>11s}{'modules':>9s}{'peak RSS MB':>13s}  v1 trainer stack")
    for v in variants:
        s = summary[v]
        print(f"{v:16s}{s['import_s']:14.2f}{s['process_s']:11.2f}{s['modules']:9.0f}{s['peak_rss_mb']:13.0f}"
              f"  {'imported' if s['v1_loaded'] else 'not imported'}")
    for v, ratio in ratios.items():
        if v != "ep_load":
            print(f"ratio {v}/no_plugin: " + ", ".join(f"{k} {ratio[k]:.3f}" for k in keys))
    print(f"our entry point alone, timed in-process after import verl (ep_load): load {load['load_ms']:.1f} ms, "
          f"+{load['load_modules']:.0f} modules ({load['load_ms'] / 1e3 / summary['no_plugin']['import_s']:.2%} of "
          f"import verl); verl's entry-point discovery, paid with any plugin installed: {load['discover_ms']:.1f} ms")
    worst = max(ratios["plugin"][k] for k in ("import_s", "process_s", "peak_rss_mb"))
    verdict = "met" if worst <= GOAL else "NOT met"
    print(f"goal (plugin within 5% of no plugin in time and peak RSS): {verdict} (worst ratio {worst:.3f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "summary": summary, "ratios": ratios, "entry_point": load, "goal_met": worst <= GOAL},
                  f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
