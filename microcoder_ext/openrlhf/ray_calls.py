"""Functions the trainer runs inside OpenRLHF's Ray model actors through ``__ray_call__``.

Every Ray actor handle has ``__ray_call__``: ``RayActorGroup.async_run_method("__ray_call__", fn, *args)`` runs
``fn(actor_self, *args)`` in each actor of the group. Ray pickles ``fn`` **by reference** (module + name), so the
worker imports this module: keep it import-light (no torch, no OpenRLHF, no Ray import) and keep the names stable.

The log-prob temperature lives on the model wrapper ``openrlhf.models.actor.Actor`` (``Actor.temperature``; its
``forward`` divides the fp32 logits by it before the log-probs and the entropy, ``openrlhf/models/actor.py``):

* ``PolicyModelActor`` keeps it in ``.actor`` (old log-probs in ``forward`` and the PPO update use the same object);
* ``ReferenceModelActor`` keeps it in ``.model``.

Both are built with ``args.rollout.temperature`` in ``init_model_from_pretrained``.
"""

from __future__ import annotations

#: attribute of the OpenRLHF model actor that holds the ``Actor``: PolicyModelActor, then ReferenceModelActor
MODEL_ATTRIBUTES = ("actor", "model")


def _log_prob_model(actor_self):
    for name in MODEL_ATTRIBUTES:
        model = getattr(actor_self, name, None)
        if model is not None:
            break
    else:
        raise RuntimeError(
            f"microcoder-ext: {type(actor_self).__name__} has no model yet (neither .actor nor .model is set): "
            "set the log-prob temperature after init_model_from_pretrained"
        )
    if not hasattr(model, "temperature"):
        raise RuntimeError(
            f"microcoder-ext: {type(actor_self).__name__}.{name} is a {type(model).__name__} without a "
            "'temperature' attribute (expected openrlhf.models.actor.Actor)"
        )
    return model


def set_actor_temperature(actor_self, temperature: float) -> float:
    """Set the log-prob temperature of the model inside an OpenRLHF model actor; return the value read back."""
    model = _log_prob_model(actor_self)
    model.temperature = float(temperature)
    return float(model.temperature)


def get_actor_temperature(actor_self) -> float:
    """The log-prob temperature of the model inside an OpenRLHF model actor."""
    return float(_log_prob_model(actor_self).temperature)
