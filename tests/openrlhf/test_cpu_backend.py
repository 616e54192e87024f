"""microcoder_ext.openrlhf.cpu: active only when asked for, never over a real vLLM / flash-attn / GPU, exact names
only; its ``vllm`` engine behind OpenRLHF's real ``RolloutRayActor`` + ``SingleTurnAgentExecutor``.

The process tests run fresh interpreters of this venv (this pytest process holds compat/cpu_stubs.py's test stubs,
and the backend refuses to install over them, see the last test).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.openrlhf
import openrlhf  # noqa: F401,E402  (a missing framework fails, never skips)
import torch  # noqa: E402

from microcoder_ext.openrlhf import cpu  # noqa: E402

STANDINS = ["flash_attn", "flash_attn.bert_padding", "flash_attn.utils", "flash_attn.utils.distributed", "vllm",
            "vllm.distributed", "vllm.distributed.device_communicators",
            "vllm.distributed.device_communicators.pynccl", "vllm.distributed.utils", "vllm.inputs", "vllm.utils"]


def child(code: str, env: dict | None = None, **kwargs) -> dict:
    """Run ``code`` in a fresh interpreter (this pytest's environment without the backend's variables, plus
    ``env``); it prints one JSON object last."""
    full = {k: v for k, v in os.environ.items() if k not in (cpu.ENV, "DS_ACCELERATOR")}
    full.update(env or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full,
                          timeout=300, **kwargs)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


PROBE = """
    import json, sys, torch
    from microcoder_ext.openrlhf.cpu import modules, torch_cuda
    def state(**extra):
        return json.dumps({"standins": sorted(n for n, m in list(sys.modules.items()) if modules.is_standin(m)),
                           "shims": torch_cuda.applied(), "current_device": torch.cuda.current_device.__module__,
                           **extra})
"""


def test_import_openrlhf_and_a_launcher_dry_run_install_none_of_it():
    got = child(PROBE + """
    import os, io, contextlib
    import openrlhf, microcoder_ext, microcoder_ext.openrlhf
    from microcoder_ext.openrlhf import dry_run_imports, launcher
    with contextlib.redirect_stdout(io.StringIO()):
        code = launcher.main(["--actor.model_name_or_path", "Qwen/Qwen3-1.7B", "--rollout.n_samples_per_prompt", "8",
                              "--mc.dry_run"])
    import microcoder_ext.openrlhf.trainer  # our trainer (OpenRLHF's modules import vLLM, here placeholders)
    print(state(code=code, placeholder=dry_run_imports.is_placeholder(sys.modules["vllm"]),
                ds=os.environ.get("DS_ACCELERATOR")))
    """)
    assert got["code"] == 0 and got["placeholder"]  # the dry run's own import placeholders, not the CPU backend
    assert got["standins"] == [] and not got["shims"] and got["current_device"] == "torch.cuda"
    assert got["ds"] is None


def test_setup_refuses_unless_asked():
    got = child(PROBE + """
    from microcoder_ext.openrlhf import cpu
    try:
        cpu.setup()
        error = None
    except cpu.CpuBackendRefused as e:
        error = str(e)
    print(state(error=error))
    """)
    assert "MICROCODER_OPENRLHF_CPU=1 is not set" in got["error"]
    assert got["standins"] == [] and not got["shims"]


def test_setup_refuses_over_a_real_vllm_or_flash_attn(tmp_path):
    for name in ("vllm", "flash_attn"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    got = child(PROBE + """
    from microcoder_ext.openrlhf import cpu
    try:
        cpu.setup()
        error = None
    except cpu.CpuBackendRefused as e:
        error = str(e)
    print(state(error=error))
    """, {cpu.ENV: "1", "PYTHONPATH": str(tmp_path)})
    assert "vllm can be imported here" in got["error"] and "flash_attn can be imported here" in got["error"]
    assert got["standins"] == [] and not got["shims"]


def test_setup_refuses_on_a_cuda_machine():
    got = child(PROBE + """
    import torch
    from microcoder_ext.openrlhf import cpu
    from microcoder_ext.openrlhf.cpu import torch_cuda
    torch.cuda.is_available = lambda: True  # what a GPU machine reports
    errors = []
    for fn in (cpu.setup, torch_cuda.apply):
        try:
            fn()
        except RuntimeError as e:
            errors.append(str(e))
    print(state(errors=errors))
    """, {cpu.ENV: "1"})
    assert len(got["errors"]) == 2 and "CUDA is available" in got["errors"][0]
    assert got["standins"] == [] and not got["shims"]


def test_setup_installs_exact_names_and_the_guard_passes():
    got = child(PROBE + """
    import importlib, os
    from microcoder_ext.openrlhf import cpu, guard
    cpu.setup()
    missing = []
    for name in ("flash_attn.ops", "flash_attn.ops.triton.cross_entropy", "vllm.model_executor", "vllm.LLM"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    from openrlhf.models.utils import log_probs_from_logits  # flash_attn.ops missing -> its torch path
    lp = log_probs_from_logits(torch.zeros(1, 3, 5), torch.zeros(1, 3, dtype=torch.long))
    print(state(missing=missing, version=guard.check_cpu_backend(), ds=os.environ["DS_ACCELERATOR"],
                device=f"cuda:{torch.cuda.current_device()}", as_device=str(torch.tensor(1).to(
                    torch.cuda.current_device()).device), lp=type(lp).__name__,
                seed=torch.initial_seed()))
    """, {cpu.ENV: "1"})
    assert got["standins"] == STANDINS and got["shims"]
    assert got["missing"] == ["flash_attn.ops", "flash_attn.ops.triton.cross_entropy", "vllm.model_executor",
                              "vllm.LLM"]
    assert got["version"] == "0.11.2" and got["ds"] == "cpu" and got["lp"] == "Tensor"
    assert got["device"] == "cuda:0" and got["as_device"] == "cpu"  # replay_buffer.py's f-string / a tensor device
    assert got["seed"] == 0  # MICROCODER_OPENRLHF_CPU_SEED's default


def test_children_of_this_test_process_do_not_inherit_its_stubs():
    import vllm

    from microcoder_ext.openrlhf.cpu import modules

    assert getattr(vllm, "__microcoder_cpu_stub__", False)  # compat/cpu_stubs.py, this process only
    got = child("""
    import importlib.util, json
    print(json.dumps({"vllm": importlib.util.find_spec("vllm") is not None,
                      "flash_attn": importlib.util.find_spec("flash_attn") is not None}))
    """)
    assert got == {"vllm": False, "flash_attn": False}
    assert modules.importable("vllm")  # here: the test stub is in sys.modules, so the backend would refuse
    with pytest.raises(modules.StandinRefused, match="already"):
        from microcoder_ext.openrlhf.cpu import vllm_standin

        vllm_standin.install()


# ------------------------------------------------------------------------------------------------ the engine


@pytest.fixture(scope="module")
def tiny():
    from microcoder_ext.smoke.model import prepare_model

    return prepare_model(None, warm_steps=150)


def test_standin_engine_behind_openrlhfs_rollout_actor(cli, build_rollout_actor, tiny, reward_files, monkeypatch):
    """OpenRLHF's own RolloutRayActor / SingleTurnAgentExecutor drive the stand-in: responses stop at EOS (kept) or
    are cut at max_tokens with finish_reason "length" (OpenRLHF's ``truncated``), the log-probs are the processed
    ones at the sampling temperature, the reward gets decode(prompt + response), and the samples are a function of
    (seed, weights, prompt): a second engine gives the same ones."""
    import vllm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from microcoder_ext.openrlhf.cpu import vllm_standin as S
    from microcoder_ext.smoke.data import bundled_problems

    monkeypatch.setattr(vllm, "__version__", S.__version__, raising=False)
    monkeypatch.setattr(vllm, "AsyncEngineArgs", S.AsyncEngineArgs, raising=False)
    monkeypatch.setattr(vllm, "AsyncLLMEngine", S.AsyncLLMEngine, raising=False)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # RolloutRayActor looks a cluster up otherwise
    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    args = cli("--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "4",
               "--reward.remote_url", str(reward_files["in_wheel"]), "--rollout.max_new_tokens", "12",
               "--algo.advantage.is_correction_level", "token", "--data.max_len", "1024")
    tok = AutoTokenizer.from_pretrained(tiny.path)
    problem = bundled_problems("train")[0]
    row = problem.to_openrlhf_row()
    prompt = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
    sp = S.SamplingParams(temperature=1.2, top_p=1.0, top_k=-1, max_tokens=12, min_tokens=1,
                          skip_special_tokens=False, logprobs=1)

    def rollout():
        actor = build_rollout_actor(args, model=tiny.path, logprobs_mode="processed_logprobs", max_logprobs=1)
        out = asyncio.run(actor.generate_responses(prompt=prompt, label=row["label"], sampling_params=sp,
                                                   max_length=1024, hf_tokenizer=tok, num_samples=4))
        assert actor.get_num_unfinished_requests() == 0
        return out

    outs = rollout()
    model = AutoModelForCausalLM.from_pretrained(tiny.path, dtype=torch.bfloat16).eval()
    for o in outs:
        start, end = o["action_ranges"][0]
        response = o["observation_tokens"][start:end]
        assert 1 <= len(response) <= 12
        assert o["truncated"] == (response[-1] != tok.eos_token_id)  # cut: no EOS; else it ends with EOS
        assert o["truncated"] == (len(response) == 12) or not o["truncated"]
        assert "mc_verdict_correct" in o["extra_logs"] and o["reward"] is not None
        with torch.no_grad():
            logits = model(torch.tensor([o["observation_tokens"]])).logits.float()[0, start - 1:end - 1]
        want = torch.log_softmax(logits / 1.2, -1).gather(-1, torch.tensor(response)[:, None])[:, 0]
        got = torch.tensor(o["rollout_log_probs"][start:end])
        assert torch.allclose(got, want, atol=0.05, rtol=0.01), (got, want)  # bf16 engine (KV cache) vs one bf16 forward
        # and they are the T = 1.2 ones, not T = 1 (a confident tiny model puts both near 0: compare the errors)
        at_t1 = torch.log_softmax(logits, -1).gather(-1, torch.tensor(response)[:, None])[:, 0]
        assert (got - want).abs().mean() < 0.5 * (got - at_t1).abs().mean(), (got, want, at_t1)
    again = rollout()
    assert sorted(map(lambda o: o["observation_tokens"], outs)) == sorted(map(lambda o: o["observation_tokens"], again))
    assert len({tuple(o["observation_tokens"]) for o in outs}) > 1  # the 4 requests got 4 seeds


def test_standin_types_refuse_what_they_do_not_implement(tiny):
    from microcoder_ext.openrlhf.cpu import vllm_standin as S

    with pytest.raises(TypeError, match="unexpected keyword"):
        S.SamplingParams(temperature=1.0, guided_decoding=True)
    with pytest.raises(TypeError, match="unexpected keyword"):
        S.AsyncEngineArgs(model=tiny.path, speculative_config={})
    with pytest.raises(NotImplementedError, match="tensor_parallel_size 1"):
        S.AsyncLLMEngine(S.AsyncEngineArgs(model=tiny.path, tensor_parallel_size=2))
    with pytest.raises(NotImplementedError, match="processed log-probs"):
        S.AsyncLLMEngine(S.AsyncEngineArgs(model=tiny.path, logprobs_mode="raw_logprobs"))
    engine = S.AsyncLLMEngine.from_engine_args(S.AsyncEngineArgs(model=tiny.path, seed=3, dtype="bfloat16"))

    async def one(params):
        return [o async for o in engine.generate(S.TokensPrompt(prompt_token_ids=[5, 6, 7]), params, "r")]

    with pytest.raises(NotImplementedError, match="n=2"):
        asyncio.run(one(S.SamplingParams(n=2)))
    with pytest.raises(NotImplementedError, match="sync_with_ray"):
        asyncio.run(engine.collective_rpc("init_process_group", args=("h", 1, 1, 2, "g", "gloo", True)))
    with pytest.raises(NotImplementedError, match="sync_backend gloo"):
        asyncio.run(engine.collective_rpc("update_weight_cuda_ipc", args=("w", torch.bfloat16, (1,), {})))
    [out] = asyncio.run(one(S.SamplingParams(max_tokens=4, temperature=0.0)))
    assert out.outputs[0].finish_reason in ("stop", "length") and len(out.outputs[0].token_ids) <= 4
