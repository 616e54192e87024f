"""The CPU generation engine behind the verl and OpenRLHF stand-ins: vLLM's sampling semantics, processed
log-probs, determinism, stop handling and weight loading (checked against a direct forward pass of the model)."""

import pytest
import torch

from microcoder_ext.smoke.engine import CpuEngine, SamplingSettings, weights_checksum


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return CpuEngine(tiny_model_dir.path, seed=7)


@pytest.fixture(scope="module")
def prompt(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir.path)
    text = tok.apply_chat_template([{"role": "user", "content": "Return x plus 3."}], tokenize=False,
                                   add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


def teacher_forced_logprobs(engine, prompt, tokens, temperature):
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = engine.model(ids).logits[0, len(prompt) - 1:-1].float()
    lp = torch.log_softmax(logits / temperature, dim=-1)
    return lp.gather(1, torch.tensor(tokens)[:, None])[:, 0].tolist()


def test_processed_logprobs_are_log_softmax_at_the_temperature(engine, prompt):
    out = engine.generate(prompt, SamplingSettings(max_tokens=12, temperature=1.3, logprobs=True))
    assert len(out.logprobs) == len(out.token_ids) >= 1
    ref = teacher_forced_logprobs(engine, prompt, out.token_ids, 1.3)
    assert max(abs(a - b) for a, b in zip(out.logprobs, ref)) < 1e-4
    other = teacher_forced_logprobs(engine, prompt, out.token_ids, 1.0)
    assert max(abs(a - b) for a, b in zip(out.logprobs, other)) > 1e-3  # the temperature is in them


def test_greedy_and_top_k_1_agree(engine, prompt):
    greedy = engine.generate(prompt, SamplingSettings(max_tokens=10, temperature=0.0))
    top1 = engine.generate(prompt, SamplingSettings(max_tokens=10, temperature=1.0, top_k=1))
    assert greedy.token_ids == top1.token_ids


def test_sampling_is_deterministic_per_prompt_occurrence(tiny_model_dir, prompt):
    a, b = CpuEngine(tiny_model_dir.path, seed=1), CpuEngine(tiny_model_dir.path, seed=1)
    p = SamplingSettings(max_tokens=16, temperature=1.5)
    first = [a.generate(prompt, p).token_ids for _ in range(4)]
    assert [b.generate(prompt, p).token_ids for _ in range(4)] == first  # same k-th sample, same tokens
    assert len({tuple(t) for t in first}) > 1  # the k-th samples differ from each other
    explicit = [a.generate(prompt, SamplingSettings(max_tokens=16, temperature=1.5, seed=3)).token_ids
                for _ in range(2)]
    assert explicit[0] == explicit[1]  # a request seed wins


def test_stop_length_min_tokens_and_ignore_eos(engine, prompt):
    eos = engine.stop_token_ids[0]
    out = engine.generate(prompt, SamplingSettings(max_tokens=200, temperature=0.0))
    assert out.finish_reason == "stop" and out.token_ids[-1] == eos and eos not in out.token_ids[:-1]
    n = len(out.token_ids)
    cut = engine.generate(prompt, SamplingSettings(max_tokens=n - 1, temperature=0.0))
    assert cut.finish_reason == "length" and cut.token_ids == out.token_ids[:n - 1]
    longer = engine.generate(prompt, SamplingSettings(max_tokens=n + 5, temperature=0.0, min_tokens=n + 2))
    assert eos not in longer.token_ids[:n + 1]
    ignore = engine.generate(prompt, SamplingSettings(max_tokens=n + 3, temperature=0.0, ignore_eos=True))
    assert len(ignore.token_ids) == n + 3 and ignore.finish_reason == "length"


def test_repetition_penalty_changes_the_distribution(engine, prompt):
    plain = engine.generate(prompt, SamplingSettings(max_tokens=8, temperature=1.0, seed=5, logprobs=True))
    pen = engine.generate(prompt, SamplingSettings(max_tokens=8, temperature=1.0, seed=5, logprobs=True,
                                                   repetition_penalty=3.0))
    assert plain.logprobs != pen.logprobs


def test_weights_load_and_checksum(tiny_model_dir):
    eng = CpuEngine(tiny_model_dir.path)
    before = eng.checksum()
    state = {k: v.clone() + 0.01 for k, v in eng.named_weights()}
    loaded = eng.load_weights(state.items(), version=5)
    assert sorted(loaded) == sorted(state) and eng.weight_version == 5
    assert eng.checksum() != before and eng.checksum(state) == weights_checksum(state.items())
    with pytest.raises(KeyError, match="no parameter"):
        eng.load_weights([("nope.weight", torch.zeros(1))])
    name, t = next(iter(state.items()))
    with pytest.raises(ValueError, match="shape"):
        eng.load_weights([(name, torch.zeros(t.numel() + 1))])


def test_checksum_is_order_free_and_exact():
    a = {"x": torch.ones(3), "y": torch.arange(4.0)}
    assert weights_checksum(a.items()) == weights_checksum(reversed(list(a.items())))
    b = dict(a, y=torch.arange(4.0) + 1e-7)
    assert weights_checksum(a.items()) != weights_checksum(b.items())
    assert weights_checksum({"x": torch.ones(3, dtype=torch.bfloat16)}.items()) != weights_checksum(
        {"x": torch.ones(3)}.items())


@pytest.mark.parametrize("bad", [dict(max_tokens=0), dict(top_p=0.0), dict(temperature=-1.0),
                                 dict(repetition_penalty=0.0)])
def test_invalid_sampling_settings(bad):
    with pytest.raises(ValueError):
        SamplingSettings(**bad)


def test_engines_of_one_run_do_not_repeat_each_other(tiny_model_dir, prompt):
    p = SamplingSettings(max_tokens=16, temperature=1.5)
    r0 = [CpuEngine(tiny_model_dir.path, seed=1, stream=0).generate(prompt, p).token_ids]
    r1 = [CpuEngine(tiny_model_dir.path, seed=1, stream=1).generate(prompt, p).token_ids]
    assert r0 != r1  # replica 1's first sample of a prompt is not replica 0's
