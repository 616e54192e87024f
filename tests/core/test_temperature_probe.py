"""``microcoder temperature probe`` end to end on CPU with a tiny randomly initialised HF model (no download).

The model (2-layer Qwen2, hidden 64) and its tokenizer (byte-level BPE trained here with ``tokenizers``, ChatML
chat template) are built once per module and saved with ``save_pretrained``. Its output head is scaled x30 so
that low temperatures are near-greedy (a random model with the default init samples almost uniformly at any
temperature and every temperature then looks maximally diverse).

The vLLM sampler cannot run here (no GPU, vllm not installable): ``test_vllm_sampler_glue`` drives it with a
hand-made engine object that returns ``vllm.LLM.generate``'s shape. Nothing stubs the ``vllm`` module.
"""

import json
import subprocess
import sys

import pytest

import torch
import transformers
import tokenizers

from microcoder_ext.sampling import prompts as sprompts  # noqa: E402
from microcoder_ext.sampling import samplers as ss  # noqa: E402
from microcoder_ext.cli import main  # noqa: E402
from microcoder_ext.core.temperature import recommend  # noqa: E402
from host_load import hang_guard

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "Write a function that reverses a string.",
    "for i in range(10):\n    print(i * i)\n",
    "class Stack:\n    def push(self, x):\n        self.items.append(x)\n",
]
PROMPTS = [
    {"prompt": "Write a function that reverses a string."},
    {"prompt": [{"role": "user", "content": "def add(a, b):"}]},
    {"prompt": "for i in range(10):"},
    {"prompt": [{"role": "system", "content": "You are a coder."}, {"role": "user", "content": "class Stack:"}]},
]
FAST = ["--max-new-tokens", "32", "--samples", "8", "--cpu-threads", "1", "--no-progress", "--device", "cpu"]


def _build_model(path, with_template=True):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   eos_token="<|im_end|>")
    if with_template:
        fast.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=False, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)  # peaked logits: low temperatures become near-greedy
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return _build_model(tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "probe.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    return str(path)


def test_probe_end_to_end_in_process(tiny_model, prompts_file, tmp_path, capsys):
    out = tmp_path / "probe.json"
    threads = torch.get_num_threads()
    rc = main(["temperature", "probe", "--model", tiny_model, "--prompts", prompts_file,
               "--candidates", "2.0,0.1,1.0", "--target", "0.9", "--json", str(out), *FAST])
    text = capsys.readouterr().out
    assert rc == 0
    assert torch.get_num_threads() == threads  # --cpu-threads is restored for the in-process caller
    assert "backend hf" in text and "distinct4*" in text and "mean_len" in text
    data = json.loads(out.read_text())
    temps = [r["temperature"] for r in data["rows"]]
    assert temps == [0.1, 1.0, 2.0]  # every candidate, sorted
    for t in temps:
        assert f"{t:>11.2f}" in text
    pooled = [r["metrics"]["microcoder/diversity/group_pooled"] for r in data["rows"]]
    distinct = [r["metrics"]["microcoder/diversity/distinct4"] for r in data["rows"]]
    pairwise = [r["metrics"]["microcoder/diversity/pairwise"] for r in data["rows"]]
    # the near-greedy T=0.1 repeats itself across a prompt's 8 samples; T=2.0 samples almost uniformly
    assert pooled[2] - pooled[0] > 0.4, pooled
    assert distinct[2] - distinct[0] > 0.2, distinct
    assert pairwise[2] - pairwise[0] > 0.2, pairwise
    assert pooled[0] <= pooled[1] + 0.02 and pooled[1] <= pooled[2] + 0.02, pooled
    # the recommendation is the core's recommend() on the measured table
    table = {r["temperature"]: r["diversity"] for r in data["rows"]}
    rec, reason = recommend(table, 0.9)
    assert (data["recommended"], data["reason"]) == (rec, reason)
    assert f"recommended starting temperature: {rec} ({reason})" in text
    assert f"{rec:>11.2f}" in [line[:11] for line in text.splitlines() if line.endswith("<- recommended")]
    assert data["settings"]["backend"] == "hf" and data["settings"]["num_prompts"] == 4
    assert data["settings"]["candidates"] == [0.1, 1.0, 2.0] and data["settings"]["samples"] == 8
    for r in data["rows"]:
        assert 0 < r["mean_length"] <= 32 and 0 <= r["truncated"] <= 1


def test_probe_subprocess_parquet_and_no_target(tiny_model, tmp_path):
    """``python -m microcoder_ext.cli`` on a verl-style parquet (prompt = chat messages); no --target."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"data_source": "probe", "prompt": [{"role": "user", "content": c}], "ability": "code",
             "reward_model": {"style": "rule", "ground_truth": "[]"}, "extra_info": {"index": i}}
            for i, c in enumerate(CORPUS)]
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    out = tmp_path / "probe.json"
    proc = subprocess.run(
        [sys.executable, "-m", "microcoder_ext.cli", "temperature", "probe", "--model", tiny_model, "--prompts",
         str(path), "--candidates", "0.1,2.0", "--limit-prompts", "3", "--json", str(out), *FAST],
        capture_output=True, text=True, timeout=hang_guard(120), cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "no recommendation: no target diversity" in proc.stdout
    data = json.loads(out.read_text())
    assert data["recommended"] is None and data["settings"]["num_prompts"] == 3
    pooled = [r["metrics"]["microcoder/diversity/group_pooled"] for r in data["rows"]]
    assert pooled[1] - pooled[0] > 0.4, pooled


@pytest.mark.parametrize(
    "case",
    ["missing_prompts", "missing_model", "model_without_config", "empty_prompts", "bad_line", "no_prompt_key",
     "bad_candidates", "bad_target", "json_dir", "vllm_unavailable", "forced_template_missing"],
)
def test_bad_input_exits_2_with_one_line(case, tiny_model, prompts_file, tmp_path, capsys):
    model, prompts, extra = tiny_model, prompts_file, []
    if case == "missing_prompts":
        prompts = str(tmp_path / "nope.jsonl")
    elif case == "missing_model":
        model = str(tmp_path / "no-such-model")
    elif case == "model_without_config":
        model = str(tmp_path)
    elif case == "empty_prompts":
        prompts = tmp_path / "empty.jsonl"
        prompts.write_text("\n\n")
    elif case == "bad_line":
        prompts = tmp_path / "bad.jsonl"
        prompts.write_text('{"prompt": "ok"}\n{not json\n')
    elif case == "no_prompt_key":
        prompts = tmp_path / "bad.jsonl"
        prompts.write_text('{"question": "x"}\n')
    elif case == "bad_candidates":
        extra = ["--candidates", "0.5,hot"]
    elif case == "bad_target":
        extra = ["--target", "1.5"]
    elif case == "json_dir":
        extra = ["--json", str(tmp_path / "missing-dir" / "x.json")]
    elif case == "vllm_unavailable":
        # the test venvs are CPU-only: vLLM can never run there (the refusal is what this case checks)
        assert not ss.vllm_usable()[0], "vLLM is usable in this environment: this case needs one where it is not"
        extra = ["--backend", "vllm"]
    elif case == "forced_template_missing":
        model = _build_model(tmp_path / "no-template", with_template=False)
        extra = ["--chat-template"]
    fast = FAST[:-2] if case == "vllm_unavailable" else FAST  # not --device cpu: fail on vllm itself
    rc = main(["temperature", "probe", "--model", model, "--prompts", str(prompts), *extra, *fast])
    err = capsys.readouterr().err
    if case == "vllm_unavailable":
        assert "--backend vllm: " in err and "CUDA" not in err.split("--backend vllm: ")[0]
    assert rc == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("microcoder temperature probe: error: "), err
    assert "Traceback" not in err


def test_bad_input_subprocess_one_line(tiny_model, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "microcoder_ext.cli", "temperature", "probe", "--model", tiny_model,
         "--prompts", str(tmp_path / "missing.jsonl")],
        capture_output=True, text=True, timeout=hang_guard(120),
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"microcoder temperature probe: error: prompt file {tmp_path / 'missing.jsonl'} does not exist"]


def test_help_both_levels(capsys):
    for argv in (["temperature", "--help"], ["temperature", "probe", "--help"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 0
    text = capsys.readouterr().out
    assert "{probe}" in text
    for opt in ("--model", "--prompts", "--candidates", "--samples", "--max-new-tokens", "--target", "--n",
                "--metric", "--backend", "--device", "--chat-template", "--no-chat-template", "--seed", "--json",
                "--limit-prompts"):
        assert opt in text, opt


def test_prompt_formats_and_chat_template(tiny_model, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    prompts = sprompts.load_prompts(str(path), limit=2)
    assert prompts == [PROMPTS[0]["prompt"], PROMPTS[1]["prompt"]]
    ids = sprompts.encode_prompts(tok, prompts, None)
    want = tok("<|im_start|>user\nWrite a function that reverses a string.<|im_end|>\n<|im_start|>assistant\n",
               add_special_tokens=False)["input_ids"]
    assert ids[0] == want
    raw = sprompts.encode_prompts(tok, prompts, False)
    assert raw[0] == tok("Write a function that reverses a string.")["input_ids"]


def test_backend_choice():
    assert ss.choose_backend("hf", "auto")[0] == "hf"
    assert ss.choose_backend("auto", "cpu") == ("hf", "auto: --device cpu")
    usable, _ = ss.vllm_usable()
    assert ss.choose_backend("auto", "auto")[0] == ("vllm" if usable else "hf")


# --- vLLM sampler glue only: a hand-made object with vllm.LLM.generate's return shape (not vLLM): the probe's vLLM
# backend runs only where CUDA is (vllm_usable), never in these CPU venvs (listed in docs/tests.md) -----------------


class _Completion:  # vllm.CompletionOutput: the fields the sampler reads
    def __init__(self, token_ids):
        self.token_ids = token_ids


class _RequestOutput:  # vllm.RequestOutput
    def __init__(self, outputs):
        self.outputs = outputs


class _GlueEngine:
    """Records generate() calls; returns one RequestOutput per prompt with params.n completions."""

    EOS = 3

    def __init__(self):
        self.calls = []

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.calls.append((prompts, sampling_params, use_tqdm))
        out = []
        for p, sp in zip(prompts, sampling_params):
            comps = [_Completion(tuple(p["prompt_token_ids"][:1]) + (100 + j, 200 + j, self.EOS))
                     for j in range(sp["n"] - 1)]
            comps.append(_Completion([7] * sp["max_tokens"]))  # cut at max_tokens, no EOS
            out.append(_RequestOutput(comps))
        return out


def test_vllm_sampler_glue():
    engine, seen = _GlueEngine(), []
    sampler = ss.VLLMSampler(engine, dict, max_new_tokens=5, seed=7, stop={_GlueEngine.EOS}, progress=seen.append)
    groups = sampler([[11, 12], [21]], 1.4, 3)
    prompts, params, use_tqdm = engine.calls[0]
    assert prompts == [{"prompt_token_ids": [11, 12]}, {"prompt_token_ids": [21]}] and use_tqdm is False
    assert params == [
        {"n": 3, "temperature": 1.4, "top_p": 1.0, "max_tokens": 5, "seed": 7},
        {"n": 3, "temperature": 1.4, "top_p": 1.0, "max_tokens": 5, "seed": 8},
    ]
    assert groups == [
        [[11, 100, 200], [11, 101, 201], [7] * 5],  # trailing EOS stripped, as the hf sampler cuts at EOS
        [[21, 100, 200], [21, 101, 201], [7] * 5],
    ]
    assert seen == [2]
    assert sampler.stats.truncated[1.4] == pytest.approx(2 / 6)
    assert sampler.stats.mean_length[1.4] == pytest.approx((3 + 3 + 5) * 2 / 6)
