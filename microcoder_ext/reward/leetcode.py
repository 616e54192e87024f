"""Convert LeetCodeDataset rows (newfacade/LeetCodeDataset, MIT) into call-based ground truth.

Row fields used: ``entry_point`` (``Solution().twoSum``), ``input_output`` (``{"input": "nums = [2,7], target
= 9", "output": "[0,1]"}``: Python-style keyword arguments with ``null/true/false`` allowed, LeetCode JSON
outputs), ``prompt`` (import header + ListNode/TreeNode helpers, becomes ``setup_code``) and ``completion``
(its method signature gives which arguments/return values are ``ListNode``/``TreeNode``).

LeetCode's Python 3 judge also provides third-party modules that solutions (and LeetCodeDataset references)
import: ``JUDGE_MODULES`` (dependencies of this package, importable inside the sandbox).
"""

from __future__ import annotations

import ast
import importlib.util
import json

from .compare import big_int
from .sandbox.worker import JUDGE_MODULES  # noqa: F401  (the workers pre-import them)

_NAMES = {"null": None, "None": None, "true": True, "True": True, "false": False, "False": False}


class ConversionError(ValueError):
    pass


def missing_judge_modules() -> list[str]:
    """The ``JUDGE_MODULES`` this interpreter cannot import (should be none: they are dependencies)."""
    return [m for m in JUDGE_MODULES if importlib.util.find_spec(m) is None]


def _literal(node: ast.AST):
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values)}
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ConversionError(f"not a literal: {ast.dump(node)[:80]}") from None


def parse_kwargs(text: str) -> dict:
    """``"nums = [1,null], k = 2"`` -> ``{"nums": [1, None], "k": 2}``."""
    try:
        call = ast.parse(f"f({text})", mode="eval").body
    except SyntaxError as e:
        raise ConversionError(f"unparsable input {text[:80]!r}: {e}") from None
    if call.args or any(kw.arg is None for kw in call.keywords):
        raise ConversionError(f"positional arguments in {text[:80]!r}")
    return {kw.arg: _literal(kw.value) for kw in call.keywords}


def parse_output(text: str):
    try:
        return json.loads(text, parse_int=big_int)
    except ValueError:
        try:
            return _literal(ast.parse(text, mode="eval").body)
        except (SyntaxError, ConversionError) as e:
            raise ConversionError(f"unparsable output {text[:80]!r}: {e}") from None


def node_types(completion: str, fn_name: str) -> tuple[dict, str | None]:
    """Map argument names and the return value annotated ListNode/TreeNode in ``Solution.<fn_name>``."""
    try:
        tree = ast.parse(completion)
    except SyntaxError:
        return {}, None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == fn_name:
            def kind(ann):
                src = ast.unparse(ann) if ann is not None else ""
                return "ListNode" if "ListNode" in src else "TreeNode" if "TreeNode" in src else None
            args = {a.arg: kind(a.annotation) for a in node.args.args[1:] if kind(a.annotation)}
            return args, kind(node.returns)
    return {}, None


def ground_truth_from_row(row: dict) -> dict:
    """Ground-truth dict (format (a) with keyword-argument inputs) for one LeetCodeDataset row."""
    fn_name = row["entry_point"].rsplit(".", 1)[-1]
    arg_types, ret = node_types(row.get("completion", ""), fn_name)
    inputs, outputs = [], []
    for t in row["input_output"]:
        inputs.append(parse_kwargs(t["input"]))
        outputs.append(parse_output(t["output"]))
    gt = {"fn_name": fn_name, "inputs": inputs, "outputs": outputs, "setup_code": row.get("prompt", "")}
    if arg_types:
        gt["arg_types"] = arg_types
    if ret:
        gt["return_type"] = ret
    return gt
