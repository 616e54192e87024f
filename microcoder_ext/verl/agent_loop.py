"""``microcoder_single_turn``: verl's single-turn agent loop that samples at the training step's temperature.

verl's ``AgentLoopWorkerTQ.generate_sequences`` builds the sampling params from the worker's *static* copy of the
config (``verl/trainer/ppo/v1/agent_loop_tq.py``), so a temperature that changes during training cannot reach the
sampler through ``actor_rollout_ref.rollout.temperature``. The ``microcoder_sync`` trainer therefore puts the step's
temperature into every prompt batch as the float64 column :data:`~microcoder_ext.verl.temperature.TEMPERATURE_FIELD`;
verl hands batch fields to the agent loop as keyword arguments (and stores them with each response in
TransferQueue), and this loop writes the value into ``sampling_params["temperature"]``:

* no field (validation batches, which verl builds without ``_next_train_batch``; other trainers): untouched, so
  validation keeps ``rollout.val_kwargs.temperature``;
* greedy requests (``temperature == 0``, e.g. ``__do_sample__=False``): untouched;
* else a copy of the params with the step temperature (verl shares one dict between the ``n`` samples).

With ``actor_rollout_ref.rollout.custom.microcoder_request_seeds=true`` it also gives each request its own vLLM
``seed`` (:mod:`microcoder_ext.verl.request_seeds`): training and validation samples then repeat from run to run.

Registered as ``microcoder_single_turn`` by :func:`register_agent_loop`, which ``microcoder_ext.verl.trainer`` hooks
(:mod:`microcoder_ext.verl.lazy`) on ``verl.experimental.agent_loop``: every process that runs verl's v1 agent
loops imports ``verl.trainer.ppo.v1`` (``AgentLoopWorkerTQ`` lives there), whose import registers our trainer
and therefore this loop; ``import verl`` alone imports neither.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import _agent_loop_registry, register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from microcoder_ext.verl.request_seeds import request_seed, seeded
from microcoder_ext.verl.temperature import AGENT_LOOP_NAME, TEMPERATURE_FIELD


def apply_step_temperature(sampling_params: dict[str, Any], temperature: Any) -> dict[str, Any]:
    """The sampling params to use: ``sampling_params`` with the step temperature (see the module doc)."""
    if temperature is None:
        return sampling_params
    if float(sampling_params.get("temperature", 1.0)) == 0.0:  # greedy stays greedy
        return sampling_params
    params = dict(sampling_params)
    params["temperature"] = float(temperature)
    return params


class MicrocoderSingleTurnAgentLoop(SingleTurnAgentLoop):
    """:class:`SingleTurnAgentLoop` with the per-step temperature (and, when asked for, a per-request seed) applied to
    the sampling params."""

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> Any:
        temperature = kwargs.pop(TEMPERATURE_FIELD, None)
        params = apply_step_temperature(sampling_params, temperature)
        if seeded(self.rollout_config):
            params = {**params, "seed": request_seed(self.rollout_config.seed, kwargs.get("global_steps", 0),
                                                     kwargs.get("index", 0), kwargs.get("session_id", 0),
                                                     kwargs.get("raw_prompt"))}
        return await super().run(params, **kwargs)


def register_agent_loop(module=None) -> None:
    """Register :class:`MicrocoderSingleTurnAgentLoop` as ``microcoder_single_turn`` (idempotent)."""
    if _agent_loop_registry.get(AGENT_LOOP_NAME, {}).get("_target_") != _fqdn():
        register(AGENT_LOOP_NAME)(MicrocoderSingleTurnAgentLoop)


def _fqdn() -> str:
    return f"{MicrocoderSingleTurnAgentLoop.__module__}.{MicrocoderSingleTurnAgentLoop.__qualname__}"


register_agent_loop()
