"""Smoke core: the tiny model, the data, the schedule compression, the evidence file and the report."""

import json
import math
import os
import socket
from pathlib import Path

import pytest

from microcoder_ext import tiny
from microcoder_ext import evidence
from microcoder_ext.smoke.data import openrlhf_data, problems_data, verl_data
from microcoder_ext.smoke.model import prepare_model
from microcoder_ext.smoke.report import SmokeReport, StepRecord, Substitution, format_table, require_judged, summary
from microcoder_ext.smoke.schedule import compress_stages
from host_load import hang_guard


# ------------------------------------------------------------------------------------------------ model


def _qwen3_checkpoint(path, tok):
    """A 'real' model directory: a Qwen3 config (GQA 4:1, 6 layers), weights and the model's own tokenizer."""
    cfg = tiny.tiny_config("qwen3", tok, tiny.TinyShape(hidden_size=96, num_layers=6, num_heads=8, num_kv_heads=2,
                                                        intermediate_size=192))
    tiny.build_model(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return cfg


def test_shrinks_a_local_config_keeping_family_tokenizer_and_gqa(tmp_path):
    tok = tiny.train_tokenizer(["def f(x):\n    return x + 1\n"] * 20, 300)
    _qwen3_checkpoint(tmp_path / "user", tok)
    info = prepare_model(str(tmp_path / "user"), warm_steps=0, out_dir=tmp_path / "smoke")
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(info.path)
    assert (info.family, info.architecture) == ("qwen3", "Qwen3ForCausalLM")
    assert cfg.num_hidden_layers == 2 and cfg.num_attention_heads == 4 and cfg.num_key_value_heads == 1  # 4:1
    assert cfg.vocab_size == len(tok) and "config.json of" in info.config_source
    assert info.tokenizer_source.startswith("the model's") and any("num_hidden_layers: 6 -> 2" in c
                                                                     for c in info.changes)


def test_builtin_family_from_the_name_when_nothing_is_local(tmp_path):
    info = prepare_model("some-org/Qwen3-8B-NotDownloaded", warm_steps=0, out_dir=tmp_path / "m")
    assert info.family == "qwen3" and "built-in tiny qwen3" in info.config_source
    assert info.tokenizer_source.startswith("built-in byte-level BPE")
    info2 = prepare_model("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", warm_steps=0, out_dir=tmp_path / "m2")
    assert info2.family == "qwen2"


def test_cache_reuses_a_built_model(tmp_path, monkeypatch):
    monkeypatch.setenv("MICROCODER_CACHE", str(tmp_path))
    a = prepare_model(None, warm_steps=2)
    b = prepare_model(None, warm_steps=2)
    assert not a.cached and b.cached and a.path == b.path
    assert prepare_model(None, warm_steps=3).path != a.path


def test_a_build_does_not_depend_on_the_processs_torch_threads(tmp_path):
    """The same arguments give the same weights whatever thread count the building process runs at (a model that
    followed it differed between a smoke run and a test process on one machine, and a test calibrated on one failed
    with the other)."""
    import hashlib

    import torch

    from microcoder_ext.smoke.model import BUILD_THREADS

    before = torch.get_num_threads()
    digests = []
    try:
        for n in (1, BUILD_THREADS + 1):
            torch.set_num_threads(n)
            info = prepare_model(None, warm_steps=20, out_dir=tmp_path / f"t{n}")
            digests.append(hashlib.sha256((Path(info.path) / "model.safetensors").read_bytes()).hexdigest())
            assert torch.get_num_threads() == n  # restored
    finally:
        torch.set_num_threads(before)
    assert digests[0] == digests[1]


def test_runs_starting_together_build_a_cache_entry_once(tmp_path):
    """Three processes ask for the same uncached model at once (make test's concurrent lanes): one builds it, the
    others wait for it and reuse it; all get the same complete directory."""
    import subprocess
    import sys

    code = ("import json; from microcoder_ext.smoke.model import prepare_model; "
            "i = prepare_model(None, warm_steps=2); print(json.dumps([i.path, i.cached]))")
    env = {**os.environ, "MICROCODER_CACHE": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for _ in range(3)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=hang_guard(300))
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert len({path for path, _ in results}) == 1
    assert sorted(cached for _, cached in results) == [False, True, True]
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(results[0][0]) is not None
    assert not [p.name for p in (tmp_path / "smoke-models").iterdir() if ".tmp" in p.name]


def test_warm_start_makes_answers_end(tmp_path):
    info = prepare_model(None, warm_steps=60, out_dir=tmp_path / "w")
    assert info.warm_start_steps == 60 and info.warm_start_loss[1] < info.warm_start_loss[0] / 3


# ------------------------------------------------------------------------------------------------ data


def test_verl_data_first_rows_or_bundled(tmp_path):
    import pyarrow.parquet as pq

    from microcoder_ext.data.writers import write_verl_parquet
    from microcoder_ext.smoke.data import bundled_problems

    src = write_verl_parquet(bundled_problems("train")[:10], tmp_path / "user.parquet")
    got = verl_data([str(src)], tmp_path / "out.parquet", 4)
    rows = pq.read_table(got.path).to_pylist()
    assert not got.bundled and got.rows == 4 and rows == pq.read_table(src).to_pylist()[:4]
    for missing in (None, str(tmp_path / "nope.parquet"), "hdfs://cluster/train.parquet"):
        fb = verl_data(missing, tmp_path / "fb.parquet", 3)
        assert fb.bundled and fb.rows == 3 and "bundled" in fb.source


def test_openrlhf_and_problem_data(tmp_path):
    src = tmp_path / "user.jsonl"
    src.write_text("".join(json.dumps({"q": f"p{i}", "a": str(i)}) + "\n" for i in range(9)))
    got = openrlhf_data(str(src), tmp_path / "o.jsonl", 5)
    assert not got.bundled and [json.loads(l)["q"] for l in open(got.path)] == [f"p{i}" for i in range(5)]
    fb = openrlhf_data(None, tmp_path / "fb.jsonl", 2)
    row = json.loads(open(fb.path).readline())
    assert fb.bundled and set(row) >= {"prompt", "label"}
    rec = problems_data(None, tmp_path / "p", 2)
    assert rec.bundled and rec.path.endswith(".jsonl") and "tests" in json.loads(open(rec.path).readline())


# ------------------------------------------------------------------------------------------------ schedule


def test_compress_stages():
    assert compress_stages([[0, 0.6], [140, 1.2]], 3) == [[0, 0.6], [2, 1.2]]
    assert compress_stages([[0, 0.6], [100, 1.0], [300, 1.2]], 3) == [[0, 0.6], [2, 1.0], [3, 1.2]]
    assert compress_stages([[0, 0.6], [10, 0.8], [20, 1.0], [30, 1.2]], 2) == [[0, 0.6], [1, 0.8], [2, 1.0]]
    assert compress_stages([[0, 0.6], [140, 1.2]], 3, first_step=0) == [[0, 0.6], [1, 1.2]]


# ------------------------------------------------------------------------------------------------ evidence


def test_evidence_appends_lines_only_when_enabled(tmp_path, monkeypatch):
    path = tmp_path / "ev.jsonl"
    monkeypatch.delenv(evidence.ENV, raising=False)
    evidence.record("generate", temperature=1.2)
    assert not path.exists() and not evidence.enabled()
    monkeypatch.setenv(evidence.ENV, str(path))
    evidence.record("generate", temperature=1.2)
    evidence.record("weights_loaded", checksum="ab")
    path.write_text(path.read_text() + '{"torn": ')  # a torn last line is skipped
    got = evidence.read(path)
    assert [e["event"] for e in got] == ["generate", "weights_loaded"] and all("t" in e and "pid" in e for e in got)
    assert evidence.read(tmp_path / "missing.jsonl") == []


def test_evidence_names_the_ray_node_of_the_process(tmp_path, monkeypatch):
    """Each raylet of a local multi-node cluster is a node of its own: the host plus the raylet's pid, which Ray puts
    in its workers' environment (and their children, vLLM's engine processes, inherit)."""
    path = tmp_path / "ev.jsonl"
    monkeypatch.setenv(evidence.ENV, str(path))
    monkeypatch.delenv("RAY_RAYLET_PID", raising=False)
    evidence.record("reward", seconds=0.1)
    monkeypatch.setenv("RAY_RAYLET_PID", "4321")
    evidence.record("reward", seconds=0.1)
    host = socket.gethostname()
    assert [e["node"] for e in evidence.read(path)] == [host, f"{host}:4321"]


# ------------------------------------------------------------------------------------------------ report


def _report(ok=True):
    steps = [StepRecord(step=1, times={"generation": 2.0, "reward": 0.3, "old_log_prob": 0.1, "update": 0.5,
                                       "weight_sync": 0.02},
                        microcoder={"microcoder/masked_frac": 0.25, "microcoder/truncated_frac": 0.5},
                        framework={"pg_loss": -0.05}, verdicts={"correct": 3, "no_answer": 5},
                        weights_changed=True, engine_synced=True, sampler_temperature=[1.2],
                        logprob_temperature=1.2,
                        logprob_check={"metric": "training/rollout_probs_diff_max", "value": 2e-6})]
    return SmokeReport(framework="verl", ok=ok, exit_code=0 if ok else 1, steps_requested=1 if ok else 2,
                       substitutions=[Substitution("rollout engine", "sglang", "vllm", "no GPU")], steps=steps,
                       wall_s=80.0, error=None if ok else "boom")


def test_table_summary_and_json(tmp_path):
    r = _report()
    table = format_table(r)
    assert "masked" in table and "0.250" in table and "ok3" in table and "na5" in table and "2.0e-06" in table
    text = summary(r)
    assert "1 training step(s) ran of 1 (ok" in text and "sampled at T = 1.2; log-probs at T = 1.2" in text
    r.steps[0].framework["pg_loss"] = math.nan
    data = json.loads(r.write_json(tmp_path / "r.json").read_text())
    assert data["steps"][0]["framework"]["pg_loss"] is None and data["substitutions"][0]["smoke"] == "vllm"
    failed = _report(ok=False)
    assert "FAILED" in summary(failed) and "error: boom" in summary(failed)


def test_a_response_the_reward_could_not_judge_fails_the_smoke_with_its_reason():
    r = _report()
    assert require_judged(r, []) and r.ok and r.error is None
    r.steps[0].verdicts["sandbox_error"] = 2
    events = [{"event": "reward", "verdict": "sandbox_error", "detail": "malformed ground truth: no tests"}] * 2
    events += [{"event": "reward", "verdict": "correct"}, {"event": "weights_sent"}]
    assert not require_judged(r, events)
    assert not r.ok and r.exit_code == 1
    assert r.error == ("the reward could not judge 2 of 10 responses (verdict sandbox_error): malformed tests in the "
                       "data (`microcoder data prepare` drops them) or a sandbox failure; reasons: 2x malformed ground "
                       "truth: no tests")
    assert "FAILED" in summary(r) and "could not judge 2 of 10" in summary(r)


def test_error_excerpt_names_the_workers_root_cause_and_the_entry_points_error(tmp_path):
    from microcoder_ext.smoke.runner import error_excerpt

    log = tmp_path / "log"
    log.write_text("\n".join([
        "some output",
        "\x1b[36m(AgentLoopWorker pid=12)\x1b[0m Traceback (most recent call last):",
        "\x1b[36m(AgentLoopWorker pid=12)\x1b[0m   File \"r.py\", line 2, in compute_score",
        "\x1b[36m(AgentLoopWorker pid=12)\x1b[0m ray.exceptions.RayTaskError(RuntimeError): ray::Reward.f() (pid=9)",
        "\x1b[36m(AgentLoopWorker pid=12)\x1b[0m   File \"r.py\", line 3, in f",
        "\x1b[36m(AgentLoopWorker pid=12)\x1b[0m RuntimeError: reward exploded",
        "(AgentLoopWorker pid=12) Traceback (most recent call last):",
        "(AgentLoopWorker pid=12) RuntimeError: reward exploded",
        "Traceback (most recent call last):",
        '  File "main.py", line 1, in <module>',
        "    run()",
        "ValueError: the trainer gave up",
    ]) + "\n")
    text = error_excerpt(log)
    assert text.count("reward exploded") == 1 and "(AgentLoopWorker) RuntimeError: reward exploded" in text
    assert text.rstrip().endswith("ValueError: the trainer gave up") and "\x1b" not in text
    plain = tmp_path / "plain"
    plain.write_text("starting\nCUDA Error: no device\nbye\n")
    assert error_excerpt(plain) == "CUDA Error: no device"


def test_smoke_timeout_default_flag_and_environment(monkeypatch, capsys):
    """``--timeout`` wins; unset, ``$MICROCODER_SMOKE_TIMEOUT`` (0: never), else 1200 + 120 s per step; a bad value
    of the variable is a usage error (exit 2) before anything starts."""
    from microcoder_ext.cli import main
    from microcoder_ext.cli.smoke import TIMEOUT_ENV, default_timeout

    monkeypatch.delenv(TIMEOUT_ENV, raising=False)  # the suite's conftest sets it for every test
    assert default_timeout(3) == 1200 + 360
    monkeypatch.setenv(TIMEOUT_ENV, "90.5")
    assert default_timeout(3) == 90.5
    monkeypatch.setenv(TIMEOUT_ENV, "0")
    assert default_timeout(3) == 0
    for bad in ("soon", "-5", "nan"):
        monkeypatch.setenv(TIMEOUT_ENV, bad)
        assert main(["smoke", "verl", "+recipe=microcoder"]) == 2
        assert f"${TIMEOUT_ENV}={bad!r}: expected seconds >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--topology", "trl"], "--topology keeps a Ray launch's nodes and ranks: verl and OpenRLHF"),
    (["--topology", "--ray-address", "127.0.0.1:6379", "openrlhf", "--vllm.num_engines", "1"],
     "--ray-address runs verl launches only so far, not openrlhf's"),
])
def test_smoke_refuses_what_a_framework_cannot_keep_before_importing_it(capsys, argv, message):
    from microcoder_ext.cli import main

    assert main(["smoke", *argv]) == 2
    assert message in capsys.readouterr().err


def test_run_logged_bounds_a_silent_hang_and_a_leftover_child(tmp_path):
    """A framework process that hangs without printing is killed at the deadline (exit 124); one that exits while a
    process of its group still holds the output pipe returns its own status (the leftover is killed)."""
    import time

    from microcoder_ext.smoke.runner import run_logged

    # the sleeps (600 s) are far longer than the bounds (300 s, far above any run on a loaded machine): a run_logged
    # that waited for them fails
    t0 = time.monotonic()
    rc = run_logged(["bash", "-c", "echo started; sleep 600"], dict(os.environ), tmp_path / "hang.log", timeout=3)
    assert rc == 124 and time.monotonic() - t0 < 300
    assert "killed after 3 s" in (tmp_path / "hang.log").read_text()
    t0 = time.monotonic()
    rc = run_logged(["bash", "-c", "sleep 600 & echo parent done; exit 3"], dict(os.environ), tmp_path / "left.log")
    assert rc == 3 and time.monotonic() - t0 < 300
    assert "parent done" in (tmp_path / "left.log").read_text()


_LAUNCHING_COMMAND = r"""
import argparse, os, sys
from pathlib import Path
import microcoder_ext.cli as cli
from microcoder_ext.smoke.runner import run_logged

def build_parser():  # a subcommand whose launch is a process group of two: a shell and a child in the background
    parser = argparse.ArgumentParser()
    parser.set_defaults(command="launch", _run=lambda args: run_logged(
        ["bash", "-c", "sleep 600 & echo $! > child; echo $$ > shell; wait"], dict(os.environ),
        Path("launch.log"), cwd=Path(".")))
    return parser

cli.build_parser = build_parser
sys.exit(cli.main([]))
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has stopped running
    except FileNotFoundError:
        return True


def test_sigterm_to_a_microcoder_command_stops_the_launch_it_started(tmp_path):
    """``microcoder smoke`` / ``demo`` start the framework's entry point in a process group of its own; SIGTERM to
    ``microcoder`` (as Ctrl-C) kills that group, so nothing the launch started is left running, and exits 143."""
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", _LAUNCHING_COMMAND], cwd=tmp_path, stderr=subprocess.PIPE,
                            text=True)
    files = [tmp_path / "shell", tmp_path / "child"]
    deadline = time.monotonic() + hang_guard(12)
    while not all(f.is_file() and f.read_text().strip() for f in files) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.1)
    pids = [int(f.read_text()) for f in files]
    assert not any(_gone(pid) for pid in pids)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=hang_guard(12)) == 128 + signal.SIGTERM
    assert "microcoder launch: stopped by SIGTERM" in proc.stderr.read()
    deadline = time.monotonic() + hang_guard(6)
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(pid) for pid in pids), pids


def test_an_entry_point_whose_ray_node_did_not_start_is_started_again_and_nothing_else_is(tmp_path):
    """Ray waits a fixed 30 s for a new node's raylet (not configurable); on a loaded machine a launch can die in
    ``ray.init`` before anything ran. That failure alone is started again; the failed start's log is kept."""
    from microcoder_ext.smoke.runner import RAY_NODE_START_TIMEOUT, RAY_START_ATTEMPTS, run_entry_point

    count = tmp_path / "starts"
    # fails like Ray on its first start, then runs
    script = (f'n=$(cat {count} 2>/dev/null || echo 0); echo $((n+1)) > {count}; '
              f'if [ "$n" = 0 ]; then echo "Exception: {RAY_NODE_START_TIMEOUT}. ..."; exit 1; fi; echo ran')
    said = []
    rc = run_entry_point(["bash", "-c", script], dict(os.environ), tmp_path / "run.log", progress=said.append)
    assert rc == 0 and count.read_text().strip() == "2"
    assert "ran" in (tmp_path / "run.log").read_text()
    assert RAY_NODE_START_TIMEOUT in (tmp_path / "run.attempt1.log").read_text()
    assert len(said) == 1 and "starting again" in said[0]
    # every attempt fails that way: the last status is returned after RAY_START_ATTEMPTS starts
    count.unlink()
    always = f'n=$(cat {count} 2>/dev/null || echo 0); echo $((n+1)) > {count}; echo "{RAY_NODE_START_TIMEOUT}"; exit 1'
    assert run_entry_point(["bash", "-c", always], dict(os.environ), tmp_path / "a.log") == 1
    assert count.read_text().strip() == str(RAY_START_ATTEMPTS)
    # any other failure is the launch's own: never started again
    count.unlink()
    other = f'n=$(cat {count} 2>/dev/null || echo 0); echo $((n+1)) > {count}; echo "ValueError: bad config"; exit 1'
    assert run_entry_point(["bash", "-c", other], dict(os.environ), tmp_path / "b.log") == 1
    assert count.read_text().strip() == "1"
