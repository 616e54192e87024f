"""Seeded rollouts for verl's vLLM rollout: a run that repeats, sample for sample, on one machine.

verl 0.9.1 seeds vLLM's engine once (``rollout.seed`` + replica rank) and sends requests without a seed, so every
sample draws from the engine's one random stream in the order vLLM happens to schedule it: two runs with the same
seeds sample different completions. verl's own ``rollout.full_determinism`` gives every request the *same* seed
(all ``n`` samples of a prompt would be one completion) and turns on vLLM's batch-invariant kernels (CUDA/XPU only).

Asked for with ``+actor_rollout_ref.rollout.custom.microcoder_request_seeds=true`` (:data:`SWITCH`; off by default:
vLLM samples seeded requests one by one, which costs time on a GPU):

* the ``microcoder_single_turn`` agent loop (:mod:`microcoder_ext.verl.agent_loop`) gives each request its own seed,
  :func:`request_seed` of ``rollout.seed``, the step, the prompt's row index, the sample number and the prompt, so a
  sample's random draws no longer depend on which requests vLLM batched it with or in which order;
* the ``microcoder_sync`` trainer puts each step's rows in submission order (prompt, then sample:
  :func:`submission_order`) instead of the order they finished in, so the mask's coins, the advantages and the
  loss's sums see the same rows in the same places.

vLLM's rollout only (:func:`seeded` refuses another engine). On vLLM's CPU build ``microcoder smoke`` / ``microcoder
demo`` also turn chunked prefill off: after a partial prefill vLLM rewinds a seeded request's generator by offset,
which a CPU generator has not (``RuntimeError: CPU Generator does not use offset``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Sequence

#: the key under verl's ``actor_rollout_ref.rollout.custom`` (verl's extension point for custom settings)
SWITCH = "microcoder_request_seeds"
OVERRIDE = f"+actor_rollout_ref.rollout.custom.{SWITCH}=true"


def seeded(rollout_config: Any) -> bool:
    """Whether ``actor_rollout_ref.rollout`` (a DictConfig or mapping) asks for per-request seeds; raises for an
    engine other than vLLM, which would not read the ``seed`` sampling parameter the same way."""
    custom = _get(rollout_config, "custom")
    on = bool(_get(custom, SWITCH)) if custom is not None else False
    if on and _get(rollout_config, "name") != "vllm":
        raise ValueError(f"actor_rollout_ref.rollout.custom.{SWITCH}=true needs rollout.name=vllm, got "
                         f"{_get(rollout_config, 'name')!r}")
    return on


def request_seed(base: int, step: int, index: Any, sample: int, prompt: Any) -> int:
    """The vLLM ``seed`` of one request: a 63-bit hash of ``rollout.seed``, the step (``global_steps``), the prompt's
    dataset row index, the sample number within its group (``session_id``) and the prompt itself (its messages)."""
    text = json.dumps([int(base), int(step), _plain(index), int(sample), _plain(prompt)], sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & ((1 << 63) - 1)


def submission_order(keys: Sequence[str], uid_rank: Mapping[str, int]) -> list[int]:
    """Row positions that sort TransferQueue keys ``{uid}_{session}_{index}`` by the prompt's submission rank
    (``uid_rank``; unknown uids last), then session, then output index. Stable: ties keep their order."""
    def rank(position: int) -> tuple:
        uid, session, index = _split(keys[position])
        return (uid_rank.get(uid, len(uid_rank)), session, index)

    return sorted(range(len(keys)), key=rank)


def _split(key: str) -> tuple[str, int, int]:
    parts = key.rsplit("_", 2)
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        return parts[0], int(parts[1]), int(parts[2])
    return key, 0, 0


def _plain(value: Any) -> Any:
    """numpy / tensor values as plain Python (for a stable JSON text)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _get(node: Any, key: str) -> Any:
    if node is None:
        return None
    if isinstance(node, Mapping) or hasattr(node, "get"):
        return node.get(key, None)
    return getattr(node, key, None)
