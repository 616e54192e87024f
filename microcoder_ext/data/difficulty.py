"""Five-dimension difficulty of a coding problem, after MicroCoder-Dataset's filter (``microcoder data difficulty``).

The paper (MicroCoder-Dataset, arXiv 2603.07779) filters problems by an LLM-predicted, pass-rate-calibrated score over
five weighted dimensions; it does not publish the dimension definitions, scales, weights or thresholds
(docs/paper.md#dataset). This module computes our reading of those dimensions, each a score in
``[0, 1]`` (higher = harder) with its raw measurements kept:

================  =====================================================================  ===========================
dimension         measured on                                                            how
================  =====================================================================  ===========================
``structural``    the reference solutions                                                McCabe (``radon``)
``halstead``      the reference solutions                                                Halstead (``radon``)
``algorithmic``   the statement's input constraints + the solutions' loops / recursion   static (``ast`` + regex)
``cognitive``     statement (+ one reference solution)                                   LLM judge, Bloom level 1-6
``domain``        statement (+ one reference solution)                                   LLM judge, 0-3
================  =====================================================================  ===========================

``score`` is the weighted mean over the dimensions that are available (not ``None``): without a judge ``cognitive``
and ``domain`` are ``None`` and the weights renormalise over the other three; without a reference solution
``structural`` and ``halstead`` are ``None`` and ``algorithmic`` rests on the statement alone (``None`` when the
statement states no bound either). The weights are equal by default (:data:`DEFAULT_WEIGHTS`): the paper's are not
published.

Several reference solutions: each is measured and the per-solution scores are combined by the **median** (robust
to one unusually long or short solution). Solutions that do not parse as Python 3 are skipped and counted in
``raw["code"]["unparsable"]``.

Scales (all saturating, documented so scores can be compared across runs):

* structural: ``cc`` = the McCabe number of the whole solution, ``1 + sum of the decision points`` of the module
  body and of every function, method and closure (radon's per-function complexity minus one each); score
  ``1 - exp(-(cc - 1) / 10)``: cc 1 -> 0, 3 -> 0.18, 5 -> 0.33, 10 -> 0.59, 20 -> 0.85, 40 -> 0.98 (radon's rank
  A, 1-5, stays below 0.33). LeetCodeDataset medians: Easy 3, Medium 5, Hard 7.
  radon counts the decision points of ``if``/``elif``/loops/``except``/boolean operators/comprehension ``for`` and
  ``if``; closures are counted once, in their own right.
* halstead: mean of three log/saturating scales of radon's whole-module report (radon counts only arithmetic,
  boolean, comparison and augmented-assignment operators, so its numbers are smaller than textbook Halstead):
  volume ``clip((log10 V - 1) / 2.5)`` (V 10 -> 0, 100 -> 0.4, 1000 -> 0.8, 3162 -> 1), difficulty
  ``1 - exp(-D / 8)`` (D 2 -> 0.22, 5 -> 0.46, 10 -> 0.71, 20 -> 0.92), effort ``clip((log10 E - 1) / 4)``
  (E 10 -> 0, 100 -> 0.25, 1000 -> 0.5, 10^5 -> 1). LeetCodeDataset medians (V, D, E): Easy 36, 1.9, 68; Medium
  80, 3.1, 265; Hard 175, 4.7, 804.
* algorithmic: the mean of the available parts

  - constraint part: the largest size bound ``N`` parsed from the statement (:func:`parse_constraints`) -> the
    complexity class a solution must reach (:data:`COMPLEXITY_CLASSES`):

    =============  =====================================  =====
    N              a solution may be                      score
    =============  =====================================  =====
    <= 20          exponential, O(2^n * n), O(n!) (n<=10)  0.10
    <= 500         O(n^3)                                 0.35
    <= 5,000       O(n^2)                                 0.55
    <= 10^6        O(n log n)                             0.80
    larger         O(n) or sublinear (n / log n, log n, 1) 1.00
    =============  =====================================  =====

  - code part: ``0.5 * depth + 0.25 * recursion + 0.25 * techniques`` with ``depth`` the deepest lexical nesting of
    loops (``for``/``while``/comprehension generators, restarted in each function) mapped 0 -> 0, 1 -> 0.25,
    2 -> 0.5, 3 -> 0.75, >= 4 -> 1; ``recursion`` 1 when a function calls itself (directly, or as ``self.f`` /
    ``dfs`` closure); ``techniques`` = min(1, k / 3) for k distinct algorithmic tools used (:data:`TECHNIQUES`:
    heap, bisection, deque, memoisation, sorted containers, combinatorial iteration, prefix accumulation,
    union-find style ``find``).

Size bounds vs value bounds (``1 <= n <= 2 * 10^5`` vs ``1 <= a_i <= 10^9``): a bound on a subscripted name
(``a_i``, ``a_{i}``, ``nums[i]``, ``f_{i,j}``) is a *value*; a bound on ``n``, ``m``, ``q``, ``t``, ``k`` (any case),
a product such as ``n * m``, anything with ``length``/``len``/``size``/``count``/``number``, or a phrase such as
"the sum of n over all test cases does not exceed 2 * 10^5" is a *size*; everything else is *other*. ``N`` is the
largest size bound, else the largest other bound, else the largest value bound (a problem bounded only by values,
e.g. ``1 <= a, b <= 10^18``, needs arithmetic sublinear in them). Lost exponents: CodeContests statements scraped
from old Codeforces pages read ``t0 <= 106`` for ``10^6``; when a statement has no ``^`` and no ``e`` notation at
all, a bound written ``10d`` (d = 3..9) or ``101d`` (d = 0..8) is read as ``10^d`` / ``10^1d`` and marked
``"repaired": true`` (a genuine ``n <= 105`` in such a statement is misread: rare in contest bounds).
"""

from __future__ import annotations

import ast
import math
import re
import statistics
from typing import Any, Callable

from microcoder_ext.data.problem import Problem

DIMENSIONS = ("cognitive", "structural", "algorithmic", "halstead", "domain")
#: equal weights: MicroCoder-Dataset weights its five dimensions but does not publish the weights
DEFAULT_WEIGHTS = {d: 1.0 for d in DIMENSIONS}

#: (largest N, class a solution may have, score); the last row holds every larger N
COMPLEXITY_CLASSES: tuple[tuple[float, str, float], ...] = (
    (20, "exponential", 0.10),
    (500, "n^3", 0.35),
    (5_000, "n^2", 0.55),
    (1_000_000, "n log n", 0.80),
    (math.inf, "n or sublinear", 1.00),
)

#: technique -> names whose use (import, call or attribute) marks it
TECHNIQUES: dict[str, tuple[str, ...]] = {
    "heap": ("heapq", "heappush", "heappop", "heapify", "heappushpop", "heapreplace", "nlargest", "nsmallest"),
    "bisection": ("bisect", "bisect_left", "bisect_right", "insort", "insort_left", "insort_right"),
    "deque": ("deque",),
    "memoisation": ("lru_cache", "cache"),
    "sorted_containers": ("SortedList", "SortedDict", "SortedSet", "sortedcontainers"),
    "combinatorial_iteration": ("permutations", "combinations", "combinations_with_replacement", "product"),
    "prefix_accumulation": ("accumulate",),
    "union_find": ("find", "union", "parent"),
}


# ----------------------------------------------------------------------------------------------- scales
def _clip(x: float) -> float:
    return 0.0 if x < 0 else 1.0 if x > 1 else float(x)


def structural_scale(cc: float) -> float:
    """McCabe number of a whole solution -> [0, 1]: ``1 - exp(-(cc - 1) / 10)``."""
    return _clip(1.0 - math.exp(-max(cc - 1.0, 0.0) / 10.0))


def halstead_scale(volume: float, difficulty: float, effort: float) -> float:
    """Mean of the volume, difficulty and effort scales (module docstring)."""
    v = _clip((math.log10(volume) - 1.0) / 2.5) if volume > 0 else 0.0
    d = _clip(1.0 - math.exp(-max(difficulty, 0.0) / 8.0))
    e = _clip((math.log10(effort) - 1.0) / 4.0) if effort > 0 else 0.0
    return (v + d + e) / 3.0


def depth_scale(depth: int) -> float:
    return min(depth, 4) / 4.0


def complexity_class(n: float) -> tuple[str, float]:
    """The class a solution must reach for inputs of size ``n`` and its score (:data:`COMPLEXITY_CLASSES`)."""
    for bound, name, score in COMPLEXITY_CLASSES:
        if n <= bound:
            return name, score
    raise AssertionError("unreachable")  # pragma: no cover


# ----------------------------------------------------------------------------------------------- constraints
_NUM = r"\d+(?:\.\d+)?(?:\s*\*\s*10\s*\^\s*\d+|\s*\^\s*\d+|[eE]\+?\d+)?"
_UPPER = re.compile(r"(?P<lhs>[^<>=\n;:]{1,60}?)\s*(?P<op><=|<)\s*(?P<num>" + _NUM + r")(?![\d.^]|\s*\*\s*10|[eE]\d)")
_PHRASE = re.compile(r"(?P<lhs>[^\n;:]{0,60}?)\b(?:does not exceed|doesn't exceed|do not exceed|don't exceed|"
                     r"is at most|are at most|at most|no more than|not more than|up to)\s+"
                     r"(?P<num>" + _NUM + r")(?![\d.^])", re.IGNORECASE)
_LOST_EXPONENT = re.compile(r"10(?:[3-9]|1[0-8])")
_SIZE_WORDS = re.compile(r"length|\blen\b|size|count|number|sum|total", re.IGNORECASE)
_SIZE_NAMES = {"n", "m", "q", "t", "k"}
_PHRASE_SIZE_CONTEXT = re.compile(r"sum|total|length|number of|size|characters|elements|nodes|vertices|edges|"
                                  r"queries|letters|words|strings|points|cells|test cases|operations", re.IGNORECASE)


def _normalise(text: str) -> str:
    t = text.replace("\xa0", " ").replace("\u2009", " ").replace("\u202f", " ")
    t = t.replace("$", "")
    for a, b in (("≤", "<="), ("⩽", "<="), ("≦", "<="), ("≥", ">="), ("⩾", ">="), ("&lt;=", "<="),
                 ("&le;", "<="), ("&lt;", "<"), ("⋅", "*"), ("·", "*"), ("×", "*"), ("**", "^"), ("\\,", ""),
                 ("\\ ", " ")):
        t = t.replace(a, b)
    # LaTeX: \le, \leq, \leqslant, \lt, \ge..., \cdot, \times (not \left, \gets)
    t = re.sub(r"\\le(?:q|qslant)?(?![A-Za-z])", "<=", t)
    t = re.sub(r"\\ge(?:q|qslant)?(?![A-Za-z])", ">=", t)
    t = re.sub(r"\\lt(?![A-Za-z])", "<", t)
    t = re.sub(r"\\gt(?![A-Za-z])", ">", t)
    t = re.sub(r"\\(?:cdot|times)(?![A-Za-z])", "*", t)
    t = re.sub(r"\^\s*\{\s*(-?\d+)\s*\}", r"^\1", t)  # 10^{5} -> 10^5
    t = re.sub(r"(\d)\s*\^\s*(-?\d)", r"\1^\2", t)  # 10 ^ 5 -> 10^5
    # digit groups: 100 000, 100,000, 200'000 -> 100000 (only groups of exactly three digits)
    t = re.sub(r"(?<![\d.])(\d{1,3})(?:[ ,'](\d{3}))+(?![\d.])", lambda m: re.sub(r"[ ,']", "", m.group(0)), t)
    return t


def _value(num: str) -> float | None:
    s = re.sub(r"\s+", "", num)
    try:
        if "*10^" in s:
            c, e = s.split("*10^")
            return float(c) * 10.0 ** int(e)
        if "^" in s:
            b, e = s.split("^")
            return float(b) ** int(e)
        return float(s)
    except (ValueError, OverflowError):
        return None


def _names(lhs: str) -> list[str]:
    lhs = lhs.strip().rstrip("(").strip()
    # keep only the expression right before the bound: the last comma-separated run of names / products
    m = re.search(r"((?:[A-Za-z_][\w.\[\]{}()]*(?:\s*\*\s*[A-Za-z_][\w.\[\]{}()]*)*\s*,\s*)*"
                  r"[A-Za-z_][\w.\[\]{}()]*(?:\s*\*\s*[A-Za-z_][\w.\[\]{}()]*)*)\s*\)?$", lhs)
    if not m:
        return []
    return [p.strip() for p in m.group(1).split(",") if p.strip()]


def _kind(name: str) -> str:
    if re.search(r"_|\[|\{", name) and not _SIZE_WORDS.search(name):
        return "value"
    base = name.strip("() ")
    if base.lower() in _SIZE_NAMES or _SIZE_WORDS.search(base) or "*" in base:
        return "size"
    return "other"


def parse_constraints(statement: str) -> list[dict]:
    """Upper bounds stated in ``statement``: ``[{"names": [...], "bound": float, "kind": size|value|other,
    "repaired": bool, "text": matched text}]``. Reads ``lo <= x <= HI`` (also ``≤``, ``\\le``, ``<``), lists
    ``1 <= n, m <= 10^5``, products ``n * m <= 2 * 10^5``, numbers as ``2 * 10^5``, ``2 ⋅ 10^{5}``, ``10 ^ 5``,
    ``1e5``, ``200 000``, ``100,000``, and phrases ("the sum of n does not exceed 10^5", "at most 100 characters").
    Negative exponents (tolerances) and non-numeric upper bounds (``i < n``) are ignored."""
    text = _normalise(statement or "")
    no_powers = "^" not in text and not re.search(r"\d[eE][+-]?\d", text)
    found: list[dict] = []
    for m in _UPPER.finditer(text):
        bound = _value(m.group("num"))
        if bound is None:
            continue
        names = _names(m.group("lhs"))
        if not names:
            continue
        kinds = {_kind(n) for n in names}
        kind = "size" if "size" in kinds else "other" if "other" in kinds else "value"
        repaired = False
        if no_powers and _LOST_EXPONENT.fullmatch(m.group("num")):
            bound, repaired = 10.0 ** int(m.group("num")[2:]), True
        found.append({"names": names, "bound": bound, "kind": kind, "repaired": repaired,
                      "text": (m.group("lhs").strip()[-40:] + f" {m.group('op')} {m.group('num')}").strip()})
    for m in _PHRASE.finditer(text):
        bound = _value(m.group("num"))
        if bound is None:
            continue
        ctx = text[max(0, m.start("num") - 60): m.end("num") + 25]
        kind = "size" if _PHRASE_SIZE_CONTEXT.search(ctx) else "other"
        found.append({"names": [m.group("lhs").strip()[-40:]], "bound": bound, "kind": kind, "repaired": False,
                      "text": m.group(0).strip()[-80:]})
    return found


def size_bound(constraints: list[dict]) -> tuple[float | None, str | None]:
    """The ``N`` of the complexity table: largest size bound, else largest other bound, else largest value bound."""
    for kind in ("size", "other", "value"):
        bounds = [c["bound"] for c in constraints if c["kind"] == kind]
        if bounds:
            return max(bounds), kind
    return None, None


# ----------------------------------------------------------------------------------------------- code metrics
def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError):
        return None


_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_COMPS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def loop_depth(tree: ast.AST) -> int:
    """Deepest lexical nesting of loops (``for``/``while`` and comprehension generators), restarted in each
    function body (a function may be called from anywhere)."""
    best = 0

    def visit(node: ast.AST, depth: int) -> None:
        nonlocal best
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _FUNCS):
                visit(child, 0)
            elif isinstance(child, _LOOPS):
                best = max(best, depth + 1)
                visit(child, depth + 1)
            elif isinstance(child, _COMPS):
                d = depth + len(child.generators)
                best = max(best, d)
                visit(child, d)
            else:
                visit(child, depth)

    visit(tree, 0)
    return best


def recursive_functions(tree: ast.AST) -> list[str]:
    """Names of functions that call themselves (``f(...)`` or ``self.f(...)`` inside ``def f``)."""
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name == fn.name:
                    out.append(fn.name)
                    break
    return sorted(set(out))


def techniques(tree: ast.AST) -> list[str]:
    """Algorithmic tools the code uses (:data:`TECHNIQUES`)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.update(node.name.split("."))
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.update(node.module.split("."))
    found = [t for t, marks in TECHNIQUES.items() if t != "union_find" and names & set(marks)]
    if {"find", "parent"} <= names or {"find", "union"} <= names:
        found.append("union_find")
    return found


def mccabe(code: str) -> dict:
    """radon's per-function McCabe numbers and the whole solution's ``cc`` (module docstring)."""
    from radon.visitors import ComplexityVisitor

    v = ComplexityVisitor.from_code(code)
    funcs: list[tuple[str, int]] = []

    def add(f, prefix: str = "") -> None:
        funcs.append((prefix + f.name, f.complexity))
        for c in f.closures:
            add(c, prefix + f.name + ".")

    def add_class(c) -> None:
        for m in c.methods:
            add(m, c.name + ".")
        for ic in getattr(c, "inner_classes", []):
            add_class(ic)

    for f in v.functions:
        add(f)
    for c in v.classes:
        add_class(c)
    per = [cc for _, cc in funcs]
    total = 1 + (v.complexity - 1) + sum(cc - 1 for cc in per)
    return {"cc": total, "module_cc": v.complexity, "functions": len(per), "max_cc": max(per) if per else v.complexity,
            "mean_cc": statistics.fmean(per) if per else float(v.complexity)}


def halstead(code: str) -> dict:
    from radon.metrics import h_visit

    t = h_visit(code).total
    return {"volume": float(t.volume), "difficulty": float(t.difficulty), "effort": float(t.effort),
            "vocabulary": int(t.vocabulary), "length": int(t.length)}


def code_metrics(code: str) -> dict | None:
    """Every static measurement of one solution, and its three per-solution scores; ``None`` if it does not parse."""
    tree = _parse(code)
    if tree is None:
        return None
    try:
        mc, hs = mccabe(code), halstead(code)
    except Exception:  # radon on odd but parsable code: treat as unparsable rather than crash a batch
        return None
    depth, rec, tech = loop_depth(tree), recursive_functions(tree), techniques(tree)
    code_alg = 0.5 * depth_scale(depth) + 0.25 * (1.0 if rec else 0.0) + 0.25 * min(1.0, len(tech) / 3.0)
    return {"mccabe": mc, "halstead": hs, "loop_depth": depth, "recursion": rec, "techniques": tech,
            "structural_score": structural_scale(mc["cc"]),
            "halstead_score": halstead_scale(hs["volume"], hs["difficulty"], hs["effort"]),
            "algorithmic_code_score": code_alg}


# ----------------------------------------------------------------------------------------------- the score
def _judge_call(judge: Any, problem: Problem) -> dict:
    fn: Callable = getattr(judge, "judge", None) or judge
    return fn(problem)


def judge_name(judge: Any) -> str | None:
    if judge is None:
        return None
    return str(getattr(judge, "model", None) or getattr(judge, "__name__", None) or type(judge).__name__)


def score_problem(problem: Problem, judge: Any = None, *, weights: dict | None = None) -> dict:
    """Score ``problem`` on the five dimensions (module docstring).

    ``judge``: ``None``, an :class:`microcoder_ext.data.llm_judge.LLMJudge`, or any callable / object with
    ``.judge(problem)`` returning ``{"ok": bool, "cognitive_level": 1-6, "domain_knowledge": 0-3, ...}``.
    Returns ``{"structural", "halstead", "algorithmic", "cognitive", "domain"`` (each in [0, 1] or ``None``),
    ``"score"`` (weighted mean over the available ones, ``None`` if none is), ``"weights"``, ``"raw"``,
    ``"judge"`` (model name or ``None``)``}``. JSON-serialisable; never raises for bad solutions or a failing judge.
    """
    weights = {**DEFAULT_WEIGHTS, **(weights or {})}
    raw: dict[str, Any] = {}

    per = [m for m in (code_metrics(s) for s in problem.solutions if isinstance(s, str) and s.strip()) if m]
    n_sol = sum(1 for s in problem.solutions if isinstance(s, str) and s.strip())
    dims: dict[str, float | None] = {d: None for d in DIMENSIONS}
    code_alg = None
    if per:
        dims["structural"] = statistics.median(m["structural_score"] for m in per)
        dims["halstead"] = statistics.median(m["halstead_score"] for m in per)
        code_alg = statistics.median(m["algorithmic_code_score"] for m in per)
    raw["code"] = {
        "solutions": n_sol, "unparsable": n_sol - len(per),
        "cc": [m["mccabe"]["cc"] for m in per], "max_cc": [m["mccabe"]["max_cc"] for m in per],
        "mean_cc": [round(m["mccabe"]["mean_cc"], 3) for m in per],
        "halstead_volume": [round(m["halstead"]["volume"], 3) for m in per],
        "halstead_difficulty": [round(m["halstead"]["difficulty"], 3) for m in per],
        "halstead_effort": [round(m["halstead"]["effort"], 3) for m in per],
        "loop_depth": [m["loop_depth"] for m in per],
        "recursion": [bool(m["recursion"]) for m in per],
        "techniques": sorted({t for m in per for t in m["techniques"]}),
        "algorithmic_code_score": code_alg,
    }

    constraints = parse_constraints(problem.statement)
    n, kind = size_bound(constraints)
    cls, cons_score = complexity_class(n) if n is not None else (None, None)
    raw["constraints"] = {"n": n, "n_kind": kind, "required_class": cls, "score": cons_score,
                          "found": [f"{c['kind']}: {c['text']}" + (" (read as 10^k)" if c["repaired"] else "")
                                    for c in constraints[:12]]}
    parts = [p for p in (cons_score, code_alg) if p is not None]
    dims["algorithmic"] = sum(parts) / len(parts) if parts else None

    name = judge_name(judge)
    if judge is not None:
        try:
            res = _judge_call(judge, problem) or {}
        except Exception as e:  # a judge must not take the batch down
            res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        raw["judge"] = {k: res.get(k) for k in ("ok", "cognitive_level", "domain_knowledge", "reason", "error",
                                                "attempts")}
        if res.get("ok"):
            dims["cognitive"] = (int(res["cognitive_level"]) - 1) / 5.0
            dims["domain"] = int(res["domain_knowledge"]) / 3.0

    avail = {d: v for d, v in dims.items() if v is not None and weights.get(d, 0) > 0}
    wsum = sum(weights[d] for d in avail)
    score = sum(weights[d] * v for d, v in avail.items()) / wsum if wsum else None
    out: dict[str, Any] = {d: (round(v, 6) if v is not None else None) for d, v in dims.items()}
    out.update({"score": round(score, 6) if score is not None else None, "weights": weights, "raw": raw,
                "judge": name})
    return out
