"""``microcoder data prepare`` end to end on the real data in bench/data (a 40-row LeetCodeDataset sample and the
20 CodeContests problems): the CLI in a subprocess (exit codes, summary table, report, --help), the parquet read by
**verl's own** ``RLHFDataset`` with a real tokenizer, every reference solution scored 1.0 through
``microcoder_ext.reward.compute_score`` from the written rows, the OpenRLHF JSONL round trip, malformed rows and
an unknown (MicroCoder-like) schema."""

import gzip
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from microcoder_ext.data.sources import Drop, SchemaReport, iter_source
from microcoder_ext.reward import compute_score
from microcoder_ext.reward.ground_truth import parse_ground_truth
from host_load import hang_guard

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench" / "data"
LEETCODE = DATA / "leetcode-v0.2.0-train.jsonl.gz"
CODE_CONTESTS = DATA / "code_contests-20-stdin.jsonl.gz"
CC_REFS = DATA / "code_contests_refs.jsonl"
N_LEETCODE = 40
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def cli(*argv, cwd=ROOT):
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "microcoder_ext.cli", *map(str, argv)], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=hang_guard(300))


@pytest.fixture
def run_cli(capsys, monkeypatch):
    """The CLI in process (``microcoder_ext.cli.main``): (exit status, stdout, stderr); --help exits 0."""
    from microcoder_ext.cli import main
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")

    def run(*argv):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as e:
            rc = e.code
        out, err = capsys.readouterr()
        return rc, out, err
    return run


@pytest.fixture(scope="module")
def leetcode_sample(tmp_path_factory):
    """The first 40 LeetCodeDataset rows whose tests convert (35 of 1890 do not: positional inputs)."""
    path = tmp_path_factory.mktemp("lc") / "leetcode-sample.jsonl"
    from microcoder_ext.reward.leetcode import ConversionError, ground_truth_from_row
    rows = []
    with gzip.open(LEETCODE, "rt") as f:
        for line in f:
            row = json.loads(line)
            try:
                ground_truth_from_row(row)
            except ConversionError:
                continue
            rows.append(row)
            if len(rows) == N_LEETCODE:
                break
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, {r["task_id"]: r for r in rows}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, leetcode_sample):
    out = tmp_path_factory.mktemp("prepared")
    r = cli("data", "prepare", leetcode_sample[0], CODE_CONTESTS, "-o", out, "--format", "verl,openrlhf,problems",
            "--test-options", CC_REFS, "--val-size", "5", "--seed", "3", "--report", out / "report.json")
    assert r.returncode == 0, r.stderr + r.stdout
    return out, r


def test_cli_summary_and_report(prepared):
    out, r = prepared
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["source", "shape", "rows", "kept", "dropped"]
    lc = next(ln for ln in lines if ln.startswith(str(Path(lines[1].split()[0]))))
    assert lc.split()[1:] == ["leetcodedataset", "40", "40", "0"]
    cc = next(ln for ln in lines if "code_contests-20-stdin" in ln)
    assert cc.split()[1:] == ["code_contests", "20", "19", "1"]
    assert any(ln.split() == ["interactive", "problem", "1"] for ln in lines)
    assert any(ln.split() == ["total", "60", "59", "1"] for ln in lines)
    assert "train 54, val 5" in r.stdout
    rep = json.loads((out / "report.json").read_text())
    assert rep["kept"] == 59
    assert [(d["id"], d["reason"]) for d in rep["drops"]] == [("11", "interactive problem")]
    for name in ("train.parquet", "val.parquet", "train.jsonl", "val.jsonl", "problems.train.jsonl"):
        assert (out / name).stat().st_size > 0


def _verl_dataset(path, tokenizer, tmp_path):
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    cfg = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 65536, "filter_overlong_prompts": True,
                            "filter_overlong_prompts_workers": 1, "truncation": "error",
                            "cache_dir": str(tmp_path / "verl-cache"), "return_raw_chat": True})
    return RLHFDataset(data_files=str(path), tokenizer=tokenizer, config=cfg)


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    t = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                additional_special_tokens=["<|im_start|>"], clean_up_tokenization_spaces=False)
    t.chat_template = CHAT_TEMPLATE
    return t


@pytest.fixture(scope="module")
def verl_rows(prepared, tokenizer, tmp_path_factory):
    out, _ = prepared
    rows = []
    for split in ("train", "val"):
        ds = _verl_dataset(out / f"{split}.parquet", tokenizer, tmp_path_factory.mktemp("verl"))
        rows += [ds[i] for i in range(len(ds))]
    return rows


def test_verl_rlhf_dataset_reads_every_row(prepared, verl_rows):
    out, _ = prepared
    problems = {}
    for split in ("train", "val"):
        for line in (out / f"problems.{split}.jsonl").read_text().splitlines():
            d = json.loads(line)
            problems[d["id"]] = d
    assert len(verl_rows) == len(problems) == 59  # no prompt filtered out, nothing lost
    for row in verl_rows:
        info = row["extra_info"]
        p = problems[info["id"]]
        assert row["data_source"] == f"microcoder/{p['source']}"
        msgs = [dict(m) for m in row["raw_prompt"]]
        assert len(msgs) == 1 and msgs[0]["role"] == "user" and msgs[0]["content"].startswith(p["statement"].strip())
        assert json.loads(row["reward_model"]["ground_truth"]) == json.loads(p["tests"])
        assert (info["difficulty"], info["platform"], info["title"]) == (p["difficulty"], p["platform"], p["title"])
        assert info["split"] in ("train", "val") and isinstance(info["index"], int)
    assert sum(r["extra_info"]["split"] == "val" for r in verl_rows) == 5
    lc = [r for r in verl_rows if r["extra_info"]["source"] == "leetcodedataset"]
    assert len(lc) == N_LEETCODE and all(r["extra_info"]["fn_name"] for r in lc)
    assert {r["extra_info"]["difficulty"] for r in lc} <= {"easy", "medium", "hard"}


def _score(row, code):
    info = {k: v for k, v in row["extra_info"].items() if v is not None}
    return compute_score(row["data_source"], f"```python\n{code}\n```", row["reward_model"]["ground_truth"], info)


def test_reference_solutions_score_one_from_the_parquet(verl_rows, leetcode_sample):
    """One reference per row: LeetCodeDataset's ``completion``; CodeContests: bench/data/code_contests_refs.jsonl
    (19 of 20; the 20th is interactive and dropped). Checkers/tolerances came in through --test-options."""
    refs = {f"code_contests/{json.loads(ln)['id']}": json.loads(ln)["solution"]
            for ln in CC_REFS.read_text().splitlines()}
    lc = {f"leetcode/{k}": r["completion"] for k, r in leetcode_sample[1].items()}
    jobs = [(row, {**lc, **refs}[row["extra_info"]["id"]]) for row in verl_rows]
    assert len(jobs) == 59
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda j: _score(*j), jobs))
    bad = [(j[0]["extra_info"]["id"], r["verdict"], r["detail"][:200]) for j, r in zip(jobs, results)
           if r["score"] != 1.0]
    assert bad == []
    # and a wrong answer is not 1.0 (the ground truth is not vacuous)
    assert _score(jobs[0][0], "print(1)")["score"] == 0.0


def test_openrlhf_jsonl_round_trip(prepared):
    out, _ = prepared
    verl = {}
    import pyarrow.parquet as pq
    for row in pq.read_table(out / "train.parquet").to_pylist():
        verl[row["extra_info"]["id"]] = row
    lines = [json.loads(ln) for ln in (out / "train.jsonl").read_text().splitlines()]
    assert len(lines) == len(verl) == 54
    for d in lines:
        row = verl[d["meta_id"]]
        assert d["prompt"] == row["prompt"] and d["datasource"] == row["data_source"]
        assert json.loads(d["label"]) == json.loads(row["reward_model"]["ground_truth"])
        a, b = parse_ground_truth(d["label"]), parse_ground_truth(row["reward_model"]["ground_truth"])
        assert (a.mode, a.fn_name, len(a.tests)) == (b.mode, b.fn_name, len(b.tests)) and len(a.tests) > 0
        assert [t.expected for t in a.tests] == [t.expected for t in b.tests]
    # the written files are SOURCEs again (shape "problems"): same problems back
    back = [p for p in iter_source(str(out / "train.parquet")) if not isinstance(p, Drop)]
    assert sorted(p.id for p in back) == sorted(verl)
    back_j = [p for p in iter_source(str(out / "train.jsonl")) if not isinstance(p, Drop)]
    assert sorted(p.id for p in back_j) == sorted(verl)


def test_malformed_rows_become_drop_reasons(tmp_path, leetcode_sample):
    good = next(iter(leetcode_sample[1].values()))
    rows = [good,
            {**good, "task_id": "no-entry", "entry_point": ""},
            {**good, "task_id": "bad-io", "input_output": [{"input": "nums = [1,", "output": "1"}]},
            {**good, "task_id": "no-io", "input_output": []},
            {**good, "task_id": "positional", "input_output": [{"input": "[1,2]", "output": "1"}]}]
    path = tmp_path / "lc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = list(iter_source(str(path)))
    drops = {d.id: d.reason for d in items if isinstance(d, Drop)}
    assert drops == {"no-entry": "missing entry_point", "bad-io": "unconvertible tests",
                     "no-io": "missing input_output", "positional": "unconvertible tests"}
    cc = [{"id": 1, "content": "Print 1.", "labels": "{}", "test": "[{oops"},
          {"id": 2, "content": "Print 1.", "labels": "{}", "test": "[]"},
          {"id": 3, "content": "", "labels": "{}",
           "test": json.dumps([{"input": {"stdin": ""}, "output": {"stdout": "1"}}])},
          {"id": 4, "content": "Print 1.", "labels": "{\"difficulty\": \"A\"}",
           "test": json.dumps([{"input": {"stdin": ""}, "output": {"stdout": "1"}}])},
          {"id": 5, "content": "Print 1.", "labels": "{}", "test": json.dumps([{"input": 1}])}]
    path = tmp_path / "cc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in cc))
    items = list(iter_source(str(path), "code_contests"))
    drops = {d.id: d.reason for d in items if isinstance(d, Drop)}
    assert drops == {"1": "malformed test", "2": "no tests", "3": "missing statement",
                     "5": "tests unreadable by the reward"}
    kept = [p for p in items if not isinstance(p, Drop)]
    assert [(p.id, p.difficulty) for p in kept] == [("code_contests/4", "easy")]


def test_unknown_schema_is_reported_not_fatal(tmp_path, run_cli):
    """A MicroCoder-Dataset-like file whose schema we guess: fields found by alias, the rest reported."""
    tests = {"inputs": ["2\n"], "outputs": ["4\n"]}
    rows = [{"question": "Print twice n.", "test_cases": json.dumps(tests), "level": "Hard", "oj": "Codeforces",
             "contest_date": "2025-03-01", "pid": f"p{i}", "weird_column": i} for i in range(3)]
    rows.append({"question": "No tests here.", "pid": "p9", "weird_column": 9})
    path = tmp_path / "mc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep = SchemaReport()
    items = list(iter_source(str(path), "microcoder", report=rep))
    kept = [p for p in items if not isinstance(p, Drop)]
    assert len(kept) == 3 and kept[0].difficulty == "hard" and kept[0].platform == "codeforces"
    assert kept[0].date == "2025-03-01" and kept[0].tests == tests
    assert [d.reason for d in items if isinstance(d, Drop)] == ["no tests"]
    d = rep.to_dict()
    assert d["fields_used"]["statement"] == {"question": 4} and d["fields_used"]["tests"] == {"test_cases": 3}
    assert set(d["unknown_columns"]) == {"pid", "weird_column"} and "solutions" in d["missing"]
    rc, out, err = run_cli("data", "prepare", path, "--source", "microcoder", "-o", tmp_path / "out", "--no-progress")
    assert rc == 0, err
    assert "unknown columns (ignored): pid, weird_column" in out and "no tests" in out


def test_cli_exit_codes_and_help(tmp_path, leetcode_sample, run_cli):
    r = cli("data", "prepare", leetcode_sample[0], "-o", tmp_path / "none", "--platform", "atcoder", "--limit", "5")
    assert r.returncode == 1 and "no problem kept" in r.stderr and "platform" in r.stdout  # a real subprocess
    rc, out, err = run_cli("data", "prepare", tmp_path / "missing.jsonl", "-o", tmp_path / "x")
    assert rc == 2 and "missing.jsonl" in err
    rc, out, err = run_cli("data", "prepare", leetcode_sample[0], "-o", tmp_path / "x", "--format", "csv")
    assert rc == 2 and "--format" in err
    rc, out, err = run_cli("data", "prepare", leetcode_sample[0], "-o", tmp_path / "x", "--min-difficulty", "2")
    assert rc == 2 and "min-difficulty" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\n')
    rc, out, err = run_cli("data", "prepare", bad, "-o", tmp_path / "x")
    assert rc == 2 and "cannot tell the dataset shape" in err
    rc, out, err = run_cli("data", "prepare", leetcode_sample[0], "-o", tmp_path / "x", "--test-options",
                           tmp_path / "nope.jsonl")
    assert rc == 2 and "--test-options" in err
    rc, out, err = run_cli("data", "prepare", leetcode_sample[0])  # argparse: -o is required
    assert rc == 2 and "-o/--outdir" in err
    for argv in (("data", "--help"), ("data", "prepare", "--help"), ("data", "difficulty", "--help")):
        rc, out, err = run_cli(*argv)
        assert rc == 0 and "usage: microcoder data" in out, argv
    assert "--decontaminate" in run_cli("data", "prepare", "--help")[1]


def test_cli_decontamination_and_dates(tmp_path, leetcode_sample, run_cli):
    """Decontaminating the sample against 3 of its own problems (as an eval file in our problems form)."""
    from microcoder_ext.data.writers import write_problems_jsonl
    ps = [p for p in iter_source(str(leetcode_sample[0])) if not isinstance(p, Drop)]
    evalf = write_problems_jsonl([ps[0], ps[5], ps[9]], tmp_path / "eval.jsonl")
    rc, out, err = run_cli("data", "prepare", leetcode_sample[0], "-o", tmp_path / "o", "--decontaminate", evalf,
                           "--report", tmp_path / "rep.json", "--format", "openrlhf", "--no-progress")
    assert rc == 0, err
    rep = json.loads((tmp_path / "rep.json").read_text())
    removed = {d["id"]: d["detail"] for d in rep["drops"] if d["reason"] == "contaminated"}
    assert set(removed) == {ps[0].id, ps[5].id, ps[9].id}
    assert all(f"[matched {k}]" in v for k, v in removed.items())
    assert "contaminated" in out and len((tmp_path / "o" / "train.jsonl").read_text().splitlines()) == 37
    # LeetCodeDataset has no dates: a date window keeps nothing, with the reason
    rc, out, err = run_cli("data", "prepare", leetcode_sample[0], "-o", tmp_path / "o2", "--release", "v6",
                           "--no-progress")
    assert rc == 1 and "date unknown" in out
