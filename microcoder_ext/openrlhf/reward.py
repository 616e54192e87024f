"""OpenRLHF 0.11.2 ``--reward.remote_url <file>.py`` adapter for the code reward.

``reward_func(queries, prompts, labels, **kwargs)`` never raises for a sample (a bad label is verdict
``sandbox_error``; only a setting the reward cannot run with raises ``RewardSetupError`` and stops the run) and
returns the same keys every time: ``rewards`` and ``scores`` (float tensors, one per query) and ``extra_logs`` with numeric
tensors only: ``pass_rate``, ``num_tests`` and one-hot ``mc_verdict_<verdict>`` for every verdict of
``microcoder_ext.core.verdicts`` (OpenRLHF crashes on string values). ``labels`` are the JSON test specs
(``--data.label_key``). The response is ``query[len(prompt):]`` when the query starts with the prompt,
else the text after the last assistant header; special tokens are stripped.

Under ``microcoder smoke`` (:mod:`microcoder_ext.evidence` enabled) each scored query is also recorded as a
``reward_func`` event: ``query`` (:func:`query_digest` of the text OpenRLHF passed, which the CPU engine records for
the same sample), ``reward`` and ``verdict``, so a test can follow every sample from the engine to its advantage.
"""

from __future__ import annotations

import hashlib
import re

from microcoder_ext.core import verdicts as V

_SPECIAL = re.compile(r"<\|[^|>]{1,40}\|>|</s>|<eos>|<end_of_turn>")
_ASSISTANT = ("<|im_start|>assistant", "<|start_header_id|>assistant<|end_header_id|>", "<start_of_turn>model",
              "Assistant:")


def response_text(query: str, prompt: str) -> str:
    """The generated part of ``query`` (decoded prompt + response, special tokens kept)."""
    if isinstance(prompt, str) and prompt and query.startswith(prompt):
        text = query[len(prompt):]
    else:
        cut = max((query.rfind(h) + len(h) if query.rfind(h) >= 0 else -1) for h in _ASSISTANT)
        text = query[cut:] if cut >= 0 else query
    return _SPECIAL.sub("", text)


def _as_list(x) -> list:
    """OpenRLHF passes lists; a bare value (str, bytes, dict, ...) counts as one sample and None as none."""
    if x is None:
        return []
    if isinstance(x, (str, bytes, dict)):
        return [x]
    try:
        return list(x)
    except Exception:  # noqa: BLE001 - not iterable, or iteration fails
        return [x]


def _text(x) -> str:
    if x is None:
        return ""
    if isinstance(x, (bytes, bytearray)):
        return bytes(x).decode("utf-8", "replace")
    return x if isinstance(x, str) else str(x)


def _one(query, prompt, label) -> dict:
    from microcoder_ext.reward import RewardSetupError, compute_score
    try:
        return compute_score("openrlhf", response_text(_text(query), _text(prompt)), label)
    except RewardSetupError:  # a setting no sample can be judged with: stop the run, do not train on zeros
        raise
    except Exception as e:  # noqa: BLE001 - compute_score raises for no sample; belt and braces
        return {"score": 0.0, "pass_rate": 0.0, "num_tests": 0, "verdict": V.SANDBOX_ERROR, "detail": str(e)}


def query_digest(query: str) -> str:
    """16 hex digits of SHA-256 of a query (decoded prompt + response, special tokens kept)."""
    return hashlib.sha256(query.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _record(queries: list, results: list[dict]) -> None:
    from microcoder_ext import evidence

    if not evidence.enabled():
        return
    for q, r in zip(queries, results):
        evidence.record("reward_func", query=query_digest(_text(q)), reward=float(r["score"]), verdict=r["verdict"])


def reward_func(queries, prompts, labels, **kwargs) -> dict:
    import torch

    queries, prompts, labels = _as_list(queries), _as_list(prompts), _as_list(labels)
    results = [_one(q, prompts[i] if i < len(prompts) else "", labels[i] if i < len(labels) else "")
               for i, q in enumerate(queries)]
    _record(queries, results)
    rewards = torch.tensor([float(r["score"]) for r in results], dtype=torch.float32)
    logs = {"pass_rate": torch.tensor([float(r["pass_rate"]) for r in results], dtype=torch.float32),
            "num_tests": torch.tensor([float(r["num_tests"]) for r in results], dtype=torch.float32)}
    for v in V.ALL:
        logs[f"mc_verdict_{v}"] = torch.tensor([1.0 if r["verdict"] == v else 0.0 for r in results],
                                               dtype=torch.float32)
    return {"rewards": rewards, "scores": rewards.clone(), "extra_logs": logs}
