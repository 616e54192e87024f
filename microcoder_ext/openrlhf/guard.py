"""The one version guard of the OpenRLHF adapter: every OpenRLHF internal the adapter relies on, checked at once.

OpenRLHF has no plugin API, so the launcher and the trainer subclass depend on internals of 0.11.2 (notes:
``shared/notes/openrlhf-0.11.2.md`` §5, §7). :func:`check_openrlhf` verifies the installed version
(:func:`microcoder_ext.compat.require`) and then each internal in :data:`CHECKS`; it raises
:class:`OpenRLHFInternalsError` listing **every** internal that changed, by name, with what was expected and what
was found. The launcher calls it before patching anything and the trainer calls it again inside its Ray actor
(the worker may run another installation than the driver).

``MICROCODER_ALLOW_UNSUPPORTED=1`` lets another *version* through (with a warning), never a changed internal.
"""

from __future__ import annotations

from microcoder_ext.compat import UnsupportedVersionError
from microcoder_ext.internals import (
    Check,
    exists as _exists,
    fields as _fields,
    name,
    problems as _problems,
    require_internals,
    resolve as _obj,
    signature as _signature,
    source_has as _source_has,
)


class OpenRLHFInternalsError(UnsupportedVersionError):
    """An OpenRLHF internal the adapter relies on is missing or has changed."""


def _ray_actor_class(path: str, base: str | None = None) -> Check:
    def run():
        handle = _obj(path)
        cls = getattr(getattr(getattr(handle, "__ray_metadata__", None), "modified_class", None),
                      "__ray_actor_class__", None)
        if cls is None:
            return f"{type(handle).__name__}, not a Ray actor class with __ray_metadata__.modified_class"
        if base is not None and not issubclass(cls, _obj(base)):
            return f"{cls.__qualname__} no longer subclasses {base}"
        return None

    what = f"{name(path)} is a @ray.remote class" + (f" of {base.split(':')[-1]}" if base else "")
    return Check(what, run)


_TRAINER = "openrlhf.trainer.ppo_trainer"
_MAKER = "openrlhf.trainer.ppo_utils.experience_maker:RemoteExperienceMaker"

#: every OpenRLHF internal the adapter uses, with where it is used
CHECKS: tuple[Check, ...] = (
    # launcher (microcoder_ext.openrlhf.launcher): argparse lives under __main__ of train_ppo_ray, run via runpy
    _exists("openrlhf.utils.config:hierarchize"),
    _source_has("openrlhf.utils.config:hierarchize", "SimpleNamespace", "builds nested SimpleNamespace args"),
    _exists("openrlhf.utils:get_strategy"),
    # trainer subclass: unwrap OpenRLHF's Ray actor class, override train_step and the checkpoint hooks
    _ray_actor_class(f"{_TRAINER}:PPOTrainer", f"{_TRAINER}:BasePPOTrainer"),
    _signature(f"{_TRAINER}:BasePPOTrainer.train_step", ["self", "rollout_samples", "global_step"]),
    _signature(f"{_TRAINER}:BasePPOTrainer.save_logs_and_checkpoints",
               ["self", "global_step", "logs_dict", "client_states"]),
    _signature(f"{_TRAINER}:BasePPOTrainer.init_checkpoint_states", ["self"]),
    _source_has(f"{_TRAINER}:PPOTrainer.__ray_metadata__.modified_class.__ray_actor_class__.fit",
                "generate_samples(**self.generate_kwargs)", "samples every step with self.generate_kwargs"),
    _source_has(f"{_TRAINER}:BasePPOTrainer.__init__", "self.experience_maker = RemoteExperienceMaker(",
                "builds self.experience_maker"),
    # mask: wrap the experience maker's instance method
    _signature(f"{_MAKER}.compute_advantages_and_returns", ["self", "experiences"]),
    _source_has(f"{_MAKER}.make_experience_batch", "self.compute_advantages_and_returns(",
                "calls self.compute_advantages_and_returns"),
    _fields("openrlhf.trainer.ppo_utils.experience:Experience",
            ("sequences", "action_mask", "advantages", "returns", "rewards", "scores", "truncated", "index", "info")),
    # temperature: SamplingParams from generate_kwargs["temperature"]; the actor divides logits by .temperature
    _source_has("openrlhf.trainer.ppo_utils.samples_generator:SamplesGenerator._dispatch_prompts_to_vllm",
                'temperature=generate_kwargs.get("temperature"', "samples at generate_kwargs['temperature']"),
    _source_has("openrlhf.models.actor:Actor.__init__", "self.temperature = temperature",
                "keeps the log-prob temperature in .temperature"),
    _source_has("openrlhf.models.actor:Actor.forward", "self.temperature", "divides the logits by .temperature"),
    _ray_actor_class("openrlhf.trainer.ray.ppo_actor:PolicyModelActor"),
    _source_has("openrlhf.trainer.ray.ppo_actor:PolicyModelActor.__ray_metadata__.modified_class.__ray_actor_class__"
                ".init_model_from_pretrained", "self.actor, self.actor_optim", "keeps the policy Actor in .actor"),
    _ray_actor_class("openrlhf.trainer.ray.launcher:ReferenceModelActor"),
    _source_has("openrlhf.trainer.ray.launcher:ReferenceModelActor.__ray_metadata__.modified_class"
                ".__ray_actor_class__.init_model_from_pretrained", "self.model = ",
                "keeps the reference Actor in .model"),
    _signature("openrlhf.trainer.ray.launcher:RayActorGroup.async_run_method",
               ["self", "method_name", "args", "kwargs"]),
)


def problems(checks: tuple[Check, ...] = CHECKS) -> list[str]:
    """One line per internal that does not hold (empty: all hold)."""
    return _problems(checks)


def check_openrlhf() -> str:
    """Raise unless the installed OpenRLHF is supported and every internal in :data:`CHECKS` holds.

    Returns the installed OpenRLHF version.
    """
    return require_internals("openrlhf", "0.11.2", "OpenRLHF", problems(), OpenRLHFInternalsError)
