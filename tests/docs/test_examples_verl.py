"""The documentation's shell examples that run in the verl venv (verl suite): each test names the commands of one
documentation block, runs that block in a scratch copy of the repository root and compares the output the block
shows with the real one (tests/docs/docblocks.py)."""

from __future__ import annotations

import importlib.util
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from docblocks import ROOT, run_and_check, sandbox_env, venv_env

#: sandbox uids of these tests (clear of tests/reward's 60700.. and tests/eval's 60640..60700)
UID_BASE = 60540 + 2 * (os.getpid() % 30)


def _env(tmp_path, **extra):
    return venv_env(**sandbox_env(tmp_path, UID_BASE), **extra)


def test_microcoder_help(tmp_path):
    ran = run_and_check(["microcoder --help"], tmp_path)
    assert ran[0].returncode == 0


def test_trainer_registered(tmp_path):
    ran = run_and_check(["python -c \"import verl; from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY; "
                         "print('microcoder_sync' in TRAINER_REGISTRY)\""], tmp_path)
    assert ran[0].returncode == 0 and ran[0].stdout.strip().splitlines()[-1] == "True"


def test_recipe_list(tmp_path):
    ran = run_and_check(["microcoder recipe list"], tmp_path)
    assert ran[0].returncode == 0


def test_recipe_show(tmp_path):
    ran = run_and_check(["microcoder recipe show microcoder"], tmp_path)
    assert ran[0].returncode == 0


def test_train_sh_dry_run(tmp_path):
    ran = run_and_check(["DRY_RUN=1 ALGO=grpo_baseline MODEL=ds_8b bash verl_recipes/train.sh"], tmp_path)
    assert ran[0].returncode == 0


def test_slurm_dry_run(tmp_path):
    ran = run_and_check(['DRY_RUN=1 NODES="gpu-a01 gpu-a02" SLURM_JOB_NUM_NODES=2 SLURM_CPUS_PER_TASK=64 MODEL=ds_8b '
                         'ALGO=microcoder TRAIN=/data/train.parquet VAL=/data/val.parquet bash verl_recipes/slurm.sbatch'],
                        tmp_path)
    assert ran[0].returncode == 0


def test_doctor_verl(tmp_path):
    run_and_check([
        "microcoder doctor verl microcoder data.train_batch_size=64 actor_rollout_ref.actor.ppo_mini_batch_size=32 "
        "actor_rollout_ref.rollout.n=8 data.max_response_length=2048 microcoder.mask.rho=0.5 "
        "actor_rollout_ref.actor.use_kl_loss=true --strict",
        "echo $?",
        "microcoder doctor verl microcoder data.train_batch_size=64 actor_rollout_ref.actor.ppo_mini_batch_size=32 "
        "actor_rollout_ref.rollout.n=8 data.max_response_length=4096 --strict",
        "echo $?",
    ], tmp_path)


SAMPLES = [
    {"id": "add-ok", "response": "```python\ndef add(a, b):\n    return a + b\n```",
     "ground_truth": {"fn_name": "add", "inputs": [[1, 2], [5, -3]], "outputs": [3, 2]}},
    {"id": "add-wrong", "response": "```python\ndef add(a, b):\n    return a - b\n```",
     "ground_truth": {"fn_name": "add", "inputs": [[1, 2], [5, -3]], "outputs": [3, 2]}},
    {"id": "echo-stdin", "response": "```python\nprint(input()[::-1])\n```",
     "ground_truth": {"inputs": ["abc\n"], "outputs": ["cba\n"]}},
    {"id": "no-code", "response": "I would reverse the string.",
     "ground_truth": {"inputs": ["abc\n"], "outputs": ["cba\n"]}},
]


def test_eval_code(tmp_path):
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in SAMPLES))
    ran = run_and_check(["cat samples.jsonl", "microcoder eval-code samples.jsonl -o results.jsonl",
                         "head -n 2 results.jsonl", "microcoder eval-code missing.jsonl", "echo $?"],
                        tmp_path, _env(tmp_path))
    assert ran[1].returncode == 0


def test_data_prepare(tmp_path):
    ran = run_and_check(["microcoder data prepare bench/data/leetcode-v0.2.0-train.jsonl.gz "
                         "bench/data/code_contests-20-stdin.jsonl.gz -o data/prepared --test-options "
                         "bench/data/code_contests_refs.jsonl --val-size 64 --seed 0 --report data/prepared/report.json"],
                        tmp_path, _env(tmp_path))
    assert ran[0].returncode == 0
    assert (tmp_path / "data" / "prepared" / "train.parquet").is_file()


def test_data_difficulty(tmp_path):
    ran = run_and_check([
        "microcoder data prepare bench/data/leetcode-v0.2.0-train.jsonl.gz -o lc --format verl,problems",
        "microcoder data difficulty lc/problems.train.jsonl -o lc/problems.scored.jsonl",
        "microcoder data prepare lc/problems.scored.jsonl --source problems -o lc-hard --min-difficulty 0.4 "
        "--format verl",
    ], tmp_path, _env(tmp_path))
    assert [r.returncode for r in ran] == [0, 0, 0]


def _eval_cli_helpers():
    """tests/eval/test_eval_cli.py builds the six-problem set of the evaluation page's example."""
    spec = importlib.util.spec_from_file_location("_docs_eval_cli", ROOT / "tests" / "eval" / "test_eval_cli.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_eval(tmp_path):
    ev = _eval_cli_helpers()
    probs = ev.problems()
    pq.write_table(pa.Table.from_pylist([p.to_verl_row(i, "test") for i, p in enumerate(probs)]),
                   tmp_path / "problems.parquet")
    (tmp_path / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ev.responses_run1(probs)))
    (tmp_path / "refs.jsonl").write_text("".join(json.dumps({"id": p.id, "response": ev.fence(p.solutions[0])}) + "\n"
                                                 for p in probs for _ in "ab"))
    (tmp_path / "bad.jsonl").write_text("".join(json.dumps({"id": i, "response": "x"}) + "\n"
                                                for i in [p.id for p in probs] + ["lcb/abc999_a"]))
    ran = run_and_check([
        "microcoder eval --problems problems.parquet --responses responses.jsonl --k 1,4 --label demo --json demo.json "
        "--png demo.png --compare paper:4b-4k",
        "microcoder eval --problems problems.parquet --responses refs.jsonl --label refs --json refs.json --no-progress",
        "microcoder eval --compare demo.json refs.json paper:4b-4k:dapo --png cmp.png",
        "microcoder eval --problems problems.parquet --responses bad.jsonl",
        "echo $?",
    ], tmp_path, _env(tmp_path))
    assert [r.returncode for r in ran[:3]] == [0, 0, 0]
    demo = {p["id"]: p for p in json.loads((tmp_path / "demo.json").read_text())["problems"]}
    shown = {"id": "leetcode/longest-substring-without-repeating-characters", "n": 4, "c": 2,
             "verdicts": {"correct": 2, "wrong_answer": 1, "runtime_error": 1}, "pass_at": {"1": 0.5, "4": 1.0}}
    assert {k: demo[shown["id"]][k] for k in shown} == shown  # the JSON line the page shows


@pytest.mark.memory(8)  # a real main_ppo launch (tests/conftest.py)
def test_smoke_train_sh(tmp_path):
    ran = run_and_check(["SMOKE=1 MODEL=qwen3_1.7b ALGO=microcoder bash verl_recipes/train.sh"], tmp_path,
                        _env(tmp_path))
    assert ran[0].returncode == 0
