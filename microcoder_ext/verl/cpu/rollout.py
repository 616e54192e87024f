"""``hf_cpu``: a rollout backend for verl 0.9.1 that serves a Hugging Face model on the CPU
(:class:`microcoder_ext.smoke.engine.CpuEngine`) behind verl's token-in/token-out server contract.

Selected with ``actor_rollout_ref.rollout.name=hf_cpu`` (registered by :func:`microcoder_ext.verl.cpu.activate`,
only under ``VERL_PLATFORM=cpu``). Three pieces, mirroring verl's vLLM backend
(``verl/workers/rollout/vllm_rollout/``):

* :class:`HFServer` (a Ray actor, one per replica): ``generate(request_id, prompt_ids, sampling_params, ...) ->
  TokenOutput`` as ``vLLMHttpServer.generate`` computes it (``max_tokens`` from the request or
  ``min(response_length, prompt_length + response_length - len(prompt))``, clamped to the context;
  ``logprobs``; ``repetition_penalty`` / ``ignore_eos`` defaults from the rollout config; a per-request seed with
  ``full_determinism``; ``extra_fields["global_steps"]`` = the weight version), weight updates, and the lifecycle
  hooks verl calls on every server (no-ops on the CPU);
* :class:`HFReplica` (a ``RolloutReplica``): ``launch_servers`` starts the replica's server;
* :class:`HFServerAdapter` (a ``BaseRollout`` inside each hybrid actor worker): ``update_weights`` drains the
  trainer's weight generator (FSDP gathers full tensors collectively on every rank) and the replica's leader rank
  sends them to the server through Ray (vLLM's adapter uses CUDA IPC / ZMQ).

Evidence (:mod:`microcoder_ext.smoke.evidence`): the temperature of every request, and the checksum of the weights
sent by the trainer and of those the server holds after loading them.
"""

from __future__ import annotations

import asyncio
import os

import ray
import torch

from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from microcoder_ext.smoke import evidence
from microcoder_ext.smoke.engine import CpuEngine, SamplingSettings, weights_checksum

NAME = "hf_cpu"


def server_name(replica_rank: int) -> str:
    """The Ray actor name of a replica's server (the adapter finds it by this name)."""
    return f"{NAME}_server_{replica_rank}"


def _model_path(model_config) -> str:
    return getattr(model_config, "local_path", None) or model_config.path


def _get(config, key, default=None):
    value = getattr(config, key, None)
    if value is None and hasattr(config, "get"):
        value = config.get(key, None)
    return default if value is None else value


class HFServer:
    """One replica's generation server (Ray actor; see the module doc)."""

    def __init__(self, config, model_config, replica_rank: int):
        self.config = config
        self.replica_rank = int(replica_rank)
        self.name = server_name(self.replica_rank)
        self.engine = CpuEngine(_model_path(model_config), dtype="float32", seed=int(_get(config, "seed", 0)),
                                stream=self.replica_rank)
        self.global_steps = None
        evidence.record("engine_loaded", engine=self.name, checksum=self.engine.checksum(), dtype="float32")

    # ------------------------------------------------------------------ generation

    def _settings(self, prompt_len: int, sampling_params: dict) -> SamplingSettings:
        params = dict(sampling_params)
        prompt_length = int(_get(self.config, "prompt_length", 0))
        response_length = int(_get(self.config, "response_length", 1))
        max_model_len = int(_get(self.config, "max_model_len", prompt_length + response_length))
        room = max_model_len - prompt_len
        if room < 1:
            raise ValueError(f"Prompt length ({prompt_len}) leaves no room to generate within the model's maximum "
                             f"context length ({max_model_len}); need at least 1 token of headroom.")
        if "max_tokens" in params:
            max_tokens = params.pop("max_tokens")
        elif "max_new_tokens" in params:
            max_tokens = params.pop("max_new_tokens")
        else:
            max_tokens = min(response_length, prompt_length + response_length - prompt_len)
        seed = params.get("seed")
        if seed is None and bool(_get(self.config, "full_determinism", False)):
            seed = self.replica_rank + int(_get(self.config, "seed", 0))
        return SamplingSettings(
            max_tokens=max(1, min(int(max_tokens), room)),
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            top_k=int(params.get("top_k", -1) or -1),
            repetition_penalty=float(params.get("repetition_penalty", _get(self.config, "repetition_penalty", 1.0))),
            min_tokens=int(params.get("min_tokens", 0) or 0),
            ignore_eos=bool(params.get("ignore_eos", _get(self.config, "ignore_eos", False))),
            logprobs=bool(params.get("logprobs", False)),
            seed=None if seed is None else int(seed),
        )

    def _generate(self, prompt_ids, sampling_params: dict) -> TokenOutput:
        prompt = [int(t) for t in prompt_ids]
        settings = self._settings(len(prompt), sampling_params)
        out = self.engine.generate(prompt, settings)
        evidence.record("generate", engine=self.name, version=out.weight_version, step=self.global_steps,
                        temperature=out.temperature, tokens=len(out.token_ids), finish=out.finish_reason,
                        max_tokens=settings.max_tokens)
        return TokenOutput(token_ids=out.token_ids, log_probs=out.logprobs, stop_reason="completed",
                           num_preempted=0, extra_fields={"global_steps": self.global_steps})

    async def generate(self, request_id, prompt_ids, sampling_params, image_data=None, video_data=None,
                       audio_data=None, mm_processor_kwargs=None, priority: int = 0, **kwargs) -> TokenOutput:
        if image_data is not None or video_data is not None or audio_data is not None:
            raise NotImplementedError(f"{NAME}: multimodal prompts are not supported by the CPU rollout")
        return await asyncio.to_thread(self._generate, prompt_ids, dict(sampling_params))

    # ------------------------------------------------------------------ weights

    def update_weights(self, state_dict: dict, global_steps=None) -> dict:
        before = self.engine.checksum(state_dict)
        names = self.engine.load_weights(state_dict.items(), version=global_steps or 0)
        after = self.engine.checksum(names)
        self.global_steps = global_steps
        evidence.record("weights_loaded", engine=self.name, version=global_steps, checksum=after, tensors=len(names),
                        changed=after != before)
        return {"loaded": len(names), "checksum": after, "changed": after != before}

    def stats(self) -> dict:
        return {"num_requests": self.engine.num_requests, "global_steps": self.global_steps,
                "checksum": self.engine.checksum()}

    # ------------------------------------------------------------------ lifecycle hooks verl calls (no-ops on CPU)

    async def wake_up(self):
        pass

    async def sleep(self):
        pass

    async def clear_kv_cache(self):
        pass

    async def release_kv_cache(self):
        pass

    async def resume_kv_cache(self):
        pass

    async def resume_generation(self):
        pass

    async def start_profile(self, **kwargs):
        pass

    async def stop_profile(self):
        pass

    async def abort_all_requests(self, reject_request: bool = False):
        return {"aborted_count": 0, "request_ids": []}


class HFReplica(RolloutReplica):
    """A rollout replica served by one :class:`HFServer` (hybrid, colocated or standalone mode)."""

    async def launch_servers(self):
        server = (
            ray.remote(HFServer)
            .options(name=server_name(self.replica_rank), num_cpus=0, max_concurrency=self.max_concurrency)
            .remote(self.config, self.model_config, self.replica_rank)
        )
        await server.stats.remote()  # the model is loaded
        self.servers = [server]
        self._server_handle = server
        self._server_address = server_name(self.replica_rank)  # the load balancer's key, not a URL

    def rollout_worker_use_gpu(self) -> bool:
        return False


class HFServerAdapter(BaseRollout):
    """The hybrid worker's side of a weight sync (see the module doc)."""

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ["RANK"])
        world = int(self.config.tensor_model_parallel_size) * int(self.config.data_parallel_size)
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.is_leader = rank % world == 0

    async def update_weights(self, weights, wire_format: str = "named_tensors", global_steps=None, **kwargs):
        if wire_format != "named_tensors":
            raise NotImplementedError(f"{NAME}: weight wire format {wire_format!r} is not supported "
                                      "(actor_rollout_ref.rollout.checkpoint_engine: use the default)")
        # every rank drains the generator (FSDP gathers full tensors collectively); the leader sends them
        state_dict = {name: t.detach().to("cpu", torch.float32).clone() for name, t in weights}
        if self.is_leader:
            evidence.record("weights_sent", sender=f"{NAME}_adapter_{self.replica_rank}", version=global_steps,
                            checksum=weights_checksum(state_dict.items()), tensors=len(state_dict))
            server = ray.get_actor(server_name(self.replica_rank))
            await server.update_weights.remote(state_dict, global_steps)

    async def resume(self, tags: list[str]):
        pass

    async def release(self):
        pass
