"""The LLM judge for the two difficulty dimensions static analysis cannot measure: cognitive level (after Bloom's
taxonomy) and domain knowledge.

Any OpenAI-compatible chat-completions endpoint works (vLLM ``vllm serve``, SGLang, llama.cpp server, OpenAI):
``POST {base_url}/chat/completions`` with ``{"model", "messages", "temperature": 0, "max_tokens"}``; the API key, if
any, is read from the environment variable ``MICROCODER_JUDGE_API_KEY`` and sent as ``Authorization: Bearer``.
Standard library only (``urllib``): no new dependency.

The prompt is :data:`JUDGE_SYSTEM_PROMPT` + :data:`JUDGE_USER_TEMPLATE` (statement cut to
:data:`MAX_STATEMENT_CHARS`, one reference solution cut to :data:`MAX_SOLUTION_CHARS` when the problem has one). The
answer must contain one JSON object ``{"cognitive_level": 1-6, "domain_knowledge": 0-3, "reason": "..."}``
(Markdown fences and text around it are tolerated). A malformed answer, a timeout, a connection error, HTTP 429 or
5xx is retried (``retries`` more times, exponential backoff); other HTTP errors (400, 401, 404: a wrong model name or
key will not fix itself) fail at once. The judge never raises: :meth:`LLMJudge.judge` returns
``{"ok": True, "cognitive_level", "domain_knowledge", "reason", "attempts"}`` or
``{"ok": False, "error", "attempts"}``.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from typing import Any

API_KEY_ENV = "MICROCODER_JUDGE_API_KEY"
MAX_STATEMENT_CHARS = 6000
MAX_SOLUTION_CHARS = 3000

JUDGE_SYSTEM_PROMPT = """\
You rate the difficulty of competitive-programming problems. Answer with one JSON object and nothing else."""

JUDGE_USER_TEMPLATE = """\
Rate the programming problem below on two dimensions.

cognitive_level: the highest level of Bloom's taxonomy a solver must reach, an integer 1-6:
  1 remember (recall a known fact or formula and apply it directly),
  2 understand (restate the task; a direct simulation of the statement),
  3 apply (apply one standard technique or algorithm as is),
  4 analyze (break the problem down, find the key observation or structure),
  5 evaluate (compare approaches, prove an approach correct or fast enough, handle subtle cases),
  6 create (design a new algorithm or combine several techniques in a non-obvious way).
domain_knowledge: the specialised knowledge needed beyond basic programming, an integer 0-3:
  0 none, 1 standard data structures or algorithms (sorting, hashing, BFS/DFS, simple DP),
  2 advanced algorithms (segment trees, flows, string algorithms, advanced DP, number theory),
  3 specialised mathematics or rare techniques (FFT, combinatorial identities, game theory, geometry proofs).

Answer with exactly this JSON object:
{{"cognitive_level": <1-6>, "domain_knowledge": <0-3>, "reason": "<one sentence>"}}

Problem:
{statement}
{solution_block}"""

SOLUTION_BLOCK = """
A correct reference solution (for context only, do not rate its style):
```python
{solution}
```
"""


def build_messages(statement: str, solution: str | None = None) -> list[dict]:
    """The chat messages sent for one problem (system + user, :data:`JUDGE_USER_TEMPLATE`)."""
    st = (statement or "").strip()
    if len(st) > MAX_STATEMENT_CHARS:
        st = st[:MAX_STATEMENT_CHARS] + "\n[... statement cut ...]"
    block = ""
    if solution and solution.strip():
        sol = solution.strip()
        if len(sol) > MAX_SOLUTION_CHARS:
            sol = sol[:MAX_SOLUTION_CHARS] + "\n# [... cut ...]"
        block = SOLUTION_BLOCK.format(solution=sol)
    return [{"role": "system", "content": JUDGE_SYSTEM_PROMPT},
            {"role": "user", "content": JUDGE_USER_TEMPLATE.format(statement=st, solution_block=block)}]


class JudgeAnswerError(ValueError):
    """The model's answer is not the JSON object asked for."""


def parse_answer(text: str) -> dict:
    """``{"cognitive_level": int 1-6, "domain_knowledge": int 0-3, "reason": str}`` from the model's text;
    :class:`JudgeAnswerError` when it is not there or out of range."""
    if not isinstance(text, str) or not text.strip():
        raise JudgeAnswerError("empty answer")
    candidates = [text.strip()]
    candidates += re.findall(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.DOTALL)
    candidates += re.findall(r"\{[^{}]*\}", text, re.DOTALL)
    for c in candidates:
        try:
            obj = json.loads(c)
        except (json.JSONDecodeError, ValueError):
            continue
        if not isinstance(obj, dict) or "cognitive_level" not in obj or "domain_knowledge" not in obj:
            continue
        try:
            cog, dom = obj["cognitive_level"], obj["domain_knowledge"]
            if isinstance(cog, bool) or isinstance(dom, bool):
                raise ValueError
            cog_f, dom_f = float(cog), float(dom)
        except (TypeError, ValueError):
            raise JudgeAnswerError(f"non-numeric levels: {obj!r:.200}") from None
        if cog_f != int(cog_f) or dom_f != int(dom_f) or not (1 <= cog_f <= 6) or not (0 <= dom_f <= 3):
            raise JudgeAnswerError(f"levels out of range: {obj!r:.200}")
        return {"cognitive_level": int(cog_f), "domain_knowledge": int(dom_f), "reason": str(obj.get("reason", ""))}
    raise JudgeAnswerError(f"no JSON object with cognitive_level and domain_knowledge in: {text!r:.200}")


class _Retryable(Exception):
    pass


class LLMJudge:
    """A judge on an OpenAI-compatible endpoint. ``base_url`` is the API root (``http://host:8000/v1``);
    ``/chat/completions`` is appended (a URL already ending in it is used as is)."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 60.0,
                 retries: int = 2, backoff: float = 1.0, temperature: float = 0.0, max_tokens: int = 256,
                 include_solution: bool = True):
        url = base_url.rstrip("/")
        self.url = url if url.endswith("/chat/completions") else url + "/chat/completions"
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV) or None
        self.timeout, self.retries, self.backoff = float(timeout), int(retries), float(backoff)
        self.temperature, self.max_tokens = float(temperature), int(max_tokens)
        self.include_solution = include_solution

    def __repr__(self) -> str:  # never shows the key
        return f"LLMJudge(url={self.url!r}, model={self.model!r})"

    def request_body(self, statement: str, solution: str | None = None) -> dict:
        return {"model": self.model, "messages": build_messages(statement, solution),
                "temperature": self.temperature, "max_tokens": self.max_tokens}

    def _post(self, body: dict) -> str:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                payload = json.loads(resp.read().decode("utf-8", "replace"))
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode("utf-8", "replace") if e.fp else ""
            msg = f"HTTP {e.code}: {detail}".strip()
            if e.code == 429 or e.code >= 500:
                raise _Retryable(msg) from None
            raise RuntimeError(msg) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
            raise _Retryable(f"{type(e).__name__}: {getattr(e, 'reason', e)}") from None
        except json.JSONDecodeError as e:
            raise _Retryable(f"response is not JSON: {e}") from None
        try:
            return payload["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise _Retryable(f"response has no choices[0].message.content: {str(payload)[:200]}") from None

    def judge_text(self, statement: str, solution: str | None = None) -> dict:
        body = self.request_body(statement, solution if self.include_solution else None)
        errors = []
        for attempt in range(1, self.retries + 2):
            try:
                ans = parse_answer(self._post(body))
                return {"ok": True, **ans, "attempts": attempt}
            except (_Retryable, JudgeAnswerError) as e:
                errors.append(str(e))
            except RuntimeError as e:  # not worth retrying
                return {"ok": False, "error": str(e), "attempts": attempt}
            if attempt <= self.retries and self.backoff > 0:
                time.sleep(self.backoff * 2 ** (attempt - 1))
        return {"ok": False, "error": "; ".join(errors[-2:]), "attempts": len(errors)}

    def judge(self, problem: Any) -> dict:
        """Judge a :class:`microcoder_ext.data.problem.Problem` (statement + its first reference solution)."""
        sols = [s for s in getattr(problem, "solutions", []) or [] if isinstance(s, str) and s.strip()]
        return self.judge_text(problem.statement, sols[0] if sols else None)

    __call__ = judge
