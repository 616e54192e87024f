"""The one version guard of the TRL adapter: every TRL internal :mod:`microcoder_ext.trl.trainer` relies on, checked
at once.

TRL's ``GRPOTrainer`` has no hook for "after the advantages" or "the temperature of this regeneration", so
:class:`~microcoder_ext.trl.trainer.MicrocoderGRPOTrainer` overrides methods of TRL 1.15.0-1.16.0 and sets attributes it
reads. :func:`check_trl` verifies the installed version (:func:`microcoder_ext.compat.require`) and then each internal
in :data:`CHECKS`; it raises :class:`TRLInternalsError` listing **every** internal that changed, by name, with what
was expected and what was found. The trainer calls it in ``__init__`` before touching anything.

``MICROCODER_ALLOW_UNSUPPORTED=1`` lets another *version* through (with a warning), never a changed internal.

Nothing here changes TRL: the trainer subclass overrides methods of its own class, and no TRL class or module is
modified for other code in the process.
"""

from __future__ import annotations

import inspect

from microcoder_ext.compat import UnsupportedVersionError
from microcoder_ext.internals import (
    Check,
    fields,
    params_include as _params_include,
    problems as _problems,
    require_internals,
    resolve as _obj,
    signature as _signature,
    source_has as _source_has,
)


class TRLInternalsError(UnsupportedVersionError):
    """A TRL internal the adapter relies on is missing or has changed."""


def _fused_head_closure() -> Check:
    """``add_fused_lm_head`` keeps the log-prob temperature in a closure variable ``temperature`` of the forward it
    installs (``_fused_forward``), which the trainer updates in place (the only place that temperature lives)."""

    def run():
        fn = _obj("trl.trainer.utils:add_fused_lm_head")
        inner = [c for c in fn.__code__.co_consts if inspect.iscode(c) and c.co_name == "_fused_forward"]
        if not inner:
            return "no nested function _fused_forward"
        if "temperature" not in inner[0].co_freevars:
            return f"_fused_forward's free variables are {inner[0].co_freevars}, no `temperature`"
        src = inspect.getsource(fn)
        if "model.forward = types.MethodType(_fused_forward, model)" not in src:
            return "it no longer installs _fused_forward as the instance's forward"
        return None

    return Check("trl.trainer.utils.add_fused_lm_head divides the logits by the closure variable `temperature` of "
                 "the _fused_forward it installs as model.forward", run)


def _config_fields(names: tuple[str, ...]) -> Check:
    return fields("trl:GRPOConfig", names)


_T = "trl.trainer.grpo_trainer:GRPOTrainer"

#: the trainer reads the preset of the GRPOConfig given to GRPOTrainer.__init__ as ``args``
INIT_TAKES_ARGS = _params_include(f"{_T}.__init__", ["self", "model", "reward_funcs", "args"])

#: the keys of the dict ``_generate_and_score_completions`` returns that the trainer reads or writes
OUTPUT_KEYS = ("completion_ids", "completion_mask", "advantages")

#: every TRL internal the adapter uses, with where it is used
CHECKS: tuple[Check, ...] = (
    _config_fields(("beta", "epsilon", "epsilon_high", "loss_type", "scale_rewards", "mask_truncated_completions",
                    "temperature", "num_generations", "max_completion_length", "steps_per_generation",
                    "num_iterations", "entropy_coef", "use_vllm")),
    INIT_TAKES_ARGS,
    # the subclass hooks
    _signature(f"{_T}._generate_and_score_completions", ["self", "inputs"]),
    _signature(f"{_T}._prepare_inputs", ["self", "generation_batch"]),
    _signature(f"{_T}._calculate_rewards", ["self", "inputs", "prompts", "completions", "completion_ids_list"]),
    _signature(f"{_T}._save_checkpoint", ["self", "model", "trial"]),
    _signature(f"{_T}._load_optimizer_and_scheduler", ["self", "checkpoint"]),
    _params_include(f"{_T}._get_per_token_logps_and_entropies",
                    ["self", "model", "input_ids", "attention_mask", "logits_to_keep"]),
    # mask: advantages computed (and sliced to this process) inside _generate_and_score_completions; truncation as
    # TRL defines it; the rows of the returned dict are the local completions in the order the reward saw them
    _source_has(f"{_T}._generate_and_score_completions",
                ("rewards_per_func = self._calculate_rewards(inputs, prompts, completions, completion_ids_list)",
                 "advantages = advantages[process_slice]", "self.accelerator.process_index * len(prompts)",
                 *(f'"{k}": {k}' for k in OUTPUT_KEYS)),
                "computes the group advantages, slices them to this process and returns "
                + ", ".join(OUTPUT_KEYS)),
    _source_has(f"{_T}._generate", ("eos_and_pad = [*self.eos_token_ids, self._tokenizer.pad_token_id]",
                                    "ids[-1] not in eos_and_pad"),
                "defines a truncated completion as one whose last token is neither EOS nor pad"),
    _source_has(f"{_T}._calculate_rewards", ("completion_ids=completion_ids_list", "gather(rewards_per_func)"),
                "calls reward functions with the local completions and gathers the rewards"),
    _source_has(f"{_T}._prepare_inputs",
                ("self._generate_and_score_completions(generation_batch)", "self._buffered_inputs",
                 "generate_every = self.args.steps_per_generation * self.num_iterations"),
                "regenerates only every steps_per_generation * num_iterations steps and buffers the rest"),
    _source_has(f"{_T}.log", ("self._metrics[mode].items()", "self._metrics[mode].clear()"),
                "averages and clears self._metrics[mode] at each log"),
    # temperature: the sampling temperature and the log-prob temperature
    _source_has(f"{_T}.__init__",
                ("self.temperature = args.temperature", "self.generation_config = GenerationConfig(",
                 "self._metrics = {\"train\": defaultdict(list), \"eval\": defaultdict(list)}",
                 "add_fused_lm_head(", "temperature=self.temperature", "self.eos_token_ids = eos_token_ids",
                 "self.reward_funcs = reward_funcs", "self.reward_weights"),
                "keeps temperature, generation_config, _metrics, eos_token_ids, reward_funcs/reward_weights and "
                "builds the fused log-prob head at self.temperature"),
    _source_has(f"{_T}._generate_single_turn", ("generation_config=self.generation_config",
                                                "self.vllm_generation.generate("),
                "samples with self.generation_config (transformers) or self.vllm_generation"),
    _source_has(f"{_T}._get_per_token_logps_and_entropies", ("fused_lm_head=True",),
                "computes log-probs through the fused LM head"),
    _fused_head_closure(),
    _source_has("trl.generation.vllm_generation:VLLMGeneration.generate", ("temperature = self.temperature",),
                "reads its sampling temperature from self.temperature at every call"),
)


def problems(checks: tuple[Check, ...] = CHECKS) -> list[str]:
    """One line per internal that does not hold (empty: all hold)."""
    return _problems(checks)


def check_trl() -> str:
    """Raise unless the installed TRL is supported and every internal in :data:`CHECKS` holds.

    Returns the installed TRL version.
    """
    return require_internals("trl", "TRL", problems(), TRLInternalsError)
