"""Labelled workloads for the code-reward benchmarks and accuracy tests, built at run time from bench/data/.

Data (copied into the repository with their licences; attribution in ``bench/data/README.md``):
  * ``leetcode-v0.2.0-train.jsonl.gz``: newfacade/LeetCodeDataset v0.2.0 train (MIT): 1890 call-based problems
    with a reference ``completion`` and a few tests each.
  * ``code_contests-20-stdin.jsonl.gz``: 20 CodeContests stdin problems (DeepMind CodeContests, CC-BY-4.0, via
    bytedance/SandboxFusion test samples, Apache-2.0) with 35-331 tests each and no solutions; our reference
    solutions (and checkers for problems with several valid answers) are in ``bench/data/code_contests_refs.jsonl``.
The data directory is ``bench/data`` (override: ``MICROCODER_DATA_DIR``, a directory holding the same files).

Program transforms are *wrappers* around a reference solution: the reference runs unchanged (``exec``), its
stdout (stdin problems) or return value (call-based problems) is then rewritten by one function of
``TRANSFORMS_SRC``: semantics-preserving rewrites (must still pass) or mutants (must fail). The same functions
decide, on the expected outputs, whether a transform changes anything on a problem (``applies``).
"""

from __future__ import annotations

import ast
import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MICROCODER_DATA_DIR") or ROOT / "bench" / "data")
LEETCODE = DATA / "leetcode-v0.2.0-train.jsonl.gz"
CODE_CONTESTS = DATA / "code_contests-20-stdin.jsonl.gz"
CC_REFS = ROOT / "bench" / "data" / "code_contests_refs.jsonl"
#: LeetCode problems whose statement accepts the answer in any order (exact-order tests would be wrong)
ANY_ORDER = {"word-ladder-ii"}


class DataMissing(RuntimeError):
    pass


@contextlib.contextmanager
def quiet_stdout():
    """Send fd 1 (and ``sys.stdout``) to /dev/null: in-process evaluators (prime_code) let programs that write
    with ``os.write(1, ...)`` reach the real stdout, and print their own errors there."""
    sys.stdout.flush()
    saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def require(path: Path) -> Path:
    if not path.exists():
        raise DataMissing(f"{path} not found: the benchmarks read the data files in bench/data of the repository "
                          f"(or MICROCODER_DATA_DIR); see bench/data/README.md")
    return path


# --- CodeContests (stdin) ------------------------------------------------------------------------------------
def code_contests(refs: Path = CC_REFS, data: Path = CODE_CONTESTS) -> list[dict]:
    """Problems with a verified reference: ``id, name, solution, checker?, float_tol?, tests=[(stdin, stdout)]``."""
    with gzip.open(require(data), "rt") as f:
        rows = {json.loads(line)["id"]: json.loads(line) for line in f}
    out = []
    with open(refs) as f:
        for line in f:
            ref = json.loads(line)
            row = rows[ref["id"]]
            tests = [(t["input"]["stdin"], t["output"]["stdout"]) for t in json.loads(row["test"])]
            out.append({**ref, "tests": tests})
    return out


def cc_ground_truth(p: dict, tests: list | None = None) -> dict:
    """Ours: SandboxFusion/CodeContests test list plus the per-problem options (checker, tolerance)."""
    gt = {"tests": [{"input": {"stdin": i}, "output": {"stdout": o}} for i, o in (tests or p["tests"])]}
    for key in ("checker", "float_tol"):
        if p.get(key) is not None:
            gt[key] = p[key]
    return gt


def cc_prime_truth(p: dict, tests: list | None = None) -> dict:
    """verl prime_code / APPS format (no checker or tolerance option exists there)."""
    tests = tests or p["tests"]
    return {"inputs": [i for i, _ in tests], "outputs": [o for _, o in tests]}


# --- LeetCode (call-based) -----------------------------------------------------------------------------------
def leetcode_problems(path: Path = LEETCODE, limit: int | None = None, *, min_tests: int = 1) -> list[dict]:
    """Problems usable by both evaluators: no ListNode/TreeNode arguments (prime_code cannot build them), no
    ``sortedcontainers``, no any-order answers. Each: ``id, code (prompt + completion), fn, kwargs, outputs``."""
    from microcoder_ext.reward.leetcode import ConversionError, ground_truth_from_row

    out = []
    with gzip.open(require(path), "rt") as f:
        for line in f:
            row = json.loads(line)
            if "sortedcontainers" in row["completion"] or row["task_id"] in ANY_ORDER:
                continue
            try:
                gt = ground_truth_from_row(row)
            except ConversionError:
                continue
            if gt.get("arg_types") or gt.get("return_type") or len(gt["inputs"]) < min_tests:
                continue
            out.append({"id": row["task_id"], "code": row["prompt"] + "\n" + row["completion"], "fn": gt["fn_name"],
                        "kwargs": gt["inputs"], "outputs": gt["outputs"]})
            if limit and len(out) >= limit:
                break
    return out


def lc_ground_truth(p: dict, idx: list[int] | None = None) -> dict:
    """Ours: format (a), keyword-argument inputs, exact outputs (the setup code is already in ``p["code"]``)."""
    idx = range(len(p["kwargs"])) if idx is None else idx
    return {"fn_name": p["fn"], "inputs": [p["kwargs"][i] for i in idx], "outputs": [p["outputs"][i] for i in idx]}


def lc_prime_truth(p: dict, idx: list[int] | None = None) -> dict:
    """prime_code: LiveCodeBench-style JSON lines (one positional argument per line), JSON outputs."""
    idx = range(len(p["kwargs"])) if idx is None else idx
    return {"fn_name": p["fn"], "inputs": ["\n".join(json.dumps(v) for v in p["kwargs"][i].values()) for i in idx],
            "outputs": [json.dumps(p["outputs"][i]) for i in idx]}


def cycled_index(n: int, size: int) -> list[int] | None:
    """Test indices cycling tests 0..n-2 up to ``size - 1`` entries, then the last test once: a ~``size``-test list
    whose last test occurs only at the end (so "wrong only on the last test" stays true). None if n < 2."""
    if n < 2:
        return None
    return [i % (n - 1) for i in range(size - 1)] + [n - 1]


# --- transforms ----------------------------------------------------------------------------------------------
#: functions embedded in the wrapped programs (and run here on expected outputs to decide applicability)
TRANSFORMS_SRC = r'''
import re as _mc_re
_MC_TOK = _mc_re.compile(r"\S+")
_MC_INT = _mc_re.compile(r"[+-]?\d+\Z")
_MC_DEC = _mc_re.compile(r"[+-]?(\d+\.\d*|\.\d+)([eE][+-]?\d+)?\Z")


def _mc_sub_first(out, pred, repl):
    for m in _MC_TOK.finditer(out):
        if pred(m.group()):
            return out[:m.start()] + repl(m.group()) + out[m.end():]
    return out


def _mc_num_plus(tok, delta):
    if _MC_INT.match(tok):
        return str(int(tok) + int(delta))
    decimals = len(tok.split(".", 1)[1].split("e")[0].split("E")[0]) if "." in tok else 6
    return "%.*f" % (max(decimals, 6 if delta < 1 else 0), float(tok) + delta)


def _mc_lines(out, fn):
    end = "\n" if out.endswith("\n") else ""
    return "\n".join(fn(ln) for ln in out.rstrip("\n").split("\n")) + end


# stdout transforms (str -> str) ---------------------------------------------------------------------------
def t_identity(out):
    return out


def t_print_star(out):  # print(*a): single spaces, no trailing spaces
    return _mc_lines(out, lambda ln: " ".join(ln.split()))


def t_trailing_spaces(out):
    return _mc_lines(out, lambda ln: ln + "  ")


def t_double_spaces(out):
    return _mc_lines(out, lambda ln: "  ".join(ln.split()))


def t_crlf(out):
    return out.replace("\n", "\r\n")


def t_no_final_newline(out):
    return out.rstrip("\n")


def t_float_short(out):  # 2.50 -> 2.5
    return _mc_re.sub(r"(?<!\S)([+-]?\d+\.\d*?)0+(?!\S)", lambda m: m.group(1).rstrip("."), out)


def t_float_long(out):  # 2.5 -> 2.500000000
    return _mc_re.sub(r"(?<!\S)[+-]?\d+\.\d+(?!\S)", lambda m: "%.9f" % float(m.group()), out)


def t_off_by_one(out):  # first numeric token + 1
    return _mc_sub_first(out, lambda t: bool(_MC_INT.match(t) or _MC_DEC.match(t)), lambda t: _mc_num_plus(t, 1))


def t_float_off(out):  # first decimal token + 1e-3
    return _mc_sub_first(out, lambda t: bool(_MC_DEC.match(t)), lambda t: _mc_num_plus(t, 1e-3))


def t_big_int_off(out):  # first integer of 16+ digits + 1
    return _mc_sub_first(out, lambda t: bool(_MC_INT.match(t)) and len(t.lstrip("+-")) >= 16,
                         lambda t: str(int(t) + 1))


def t_bool_for_int(out):  # first 0/1 token printed as False/True
    return _mc_sub_first(out, lambda t: t in ("0", "1"), lambda t: str(t == "1"))


def t_wrong_case(out):  # first word that is not yes/no: case swapped
    return _mc_sub_first(out, lambda t: any(c.isalpha() for c in t) and t.lower() not in ("yes", "no"),
                         lambda t: t.swapcase())


def t_swap_lines(out):  # first two adjacent lines with different tokens swapped
    lines = out.split("\n")
    for i in range(len(lines) - 1):
        if lines[i].split() and lines[i + 1].split() and lines[i].split() != lines[i + 1].split():
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
            break
    return "\n".join(lines)


def t_truncate(out):  # last token dropped
    ms = list(_MC_TOK.finditer(out))
    return out[:ms[-1].start()] + out[ms[-1].end():] if ms else out


def t_nbsp(out):  # first blank run between two tokens replaced by a no-break space (U+00A0), else one appended
    m = _mc_re.search(r"(?<=\S)[ \t\r\n]+(?=\S)", out)
    if m:
        return out[:m.start()] + "\u00a0" + out[m.end():]
    m = _mc_re.search(r"\S+", out)
    return out[:m.end()] + "\u00a0" + out[m.end():] if m else out


def t_extra_line(out):
    return (out if out.endswith("\n") or not out else out + "\n") + "0\n"


def t_last_off(out):  # "wrong only on the last test" / "every test": first number off (out of any 1e-6
    # tolerance: +1, or +0.1 % of a large decimal), else an extra line
    def off(t):
        if _MC_INT.match(t):
            return str(int(t) + 1)
        return _mc_num_plus(t, max(1.0, abs(float(t)) * 1e-3))
    new = _mc_sub_first(out, lambda t: bool(_MC_INT.match(t) or _MC_DEC.match(t)), off)
    return new if new != out else t_extra_line(out)


# return-value transforms (value -> value) -----------------------------------------------------------------
def v_identity(r):
    return r


def v_tuple(r):  # tuple instead of list (JSON has no tuples)
    return tuple(r) if isinstance(r, list) else r


def v_float_eps(r):  # float computed slightly differently (0.1 + 0.2 style)
    return r + 1e-9 * max(1.0, abs(r)) if type(r) is float else r


def _mc_number(r):
    return isinstance(r, (int, float)) and not isinstance(r, bool)


def v_off_by_one(r):  # (also when an int-typed method returns a float: from math import * shadows pow)
    return r + 1 if _mc_number(r) else r


def v_big_int_off(r):
    return r + 1 if type(r) is int and abs(r) >= 2 ** 53 else r


def v_bool_for_int(r):
    return bool(r) if _mc_number(r) and r in (0, 1) else r


def v_truncate(r):
    return r[:-1] if isinstance(r, (list, tuple, str)) and len(r) > 0 else r


def v_extra(r):
    return list(r) + [r[-1] if r else 0] if isinstance(r, (list, tuple)) else r


def v_wrong_case(r):
    return r.swapcase() if isinstance(r, str) and r.swapcase() != r else r


def v_last_off(r):  # "wrong only on the last test" / "every test": always a different value (a float moves
    # out of any 1e-6 tolerance; inf/nan do not move: callers check)
    if isinstance(r, bool):
        return not r
    if isinstance(r, int):
        return r + 1
    if isinstance(r, float):
        return r + max(1.0, abs(r) * 1e-3)
    if isinstance(r, str):
        return r + "x"
    if isinstance(r, (list, tuple)):
        return list(r) + [0]
    return [r]


def _mc_node_list(o):  # ListNode/TreeNode -> its LeetCode list (linked: values; tree: level order, trailing nulls
    # trimmed); anything else: str (used as json.dumps default for the "last test" key of node arguments)
    if hasattr(o, "val") and hasattr(o, "next"):
        out = []
        while o is not None and len(out) <= 10 ** 6:
            out.append(o.val)
            o = o.next
        return out
    if hasattr(o, "val") and hasattr(o, "left") and hasattr(o, "right"):
        out, queue = [], [o]
        for node in queue:
            if node is None:
                out.append(None)
                continue
            out.append(node.val)
            queue.extend((node.left, node.right))
        while out and out[-1] is None:
            out.pop()
        return out
    return str(o)
'''
_T: dict = {}
exec(compile(TRANSFORMS_SRC, "<transforms>", "exec"), _T)

#: name -> (label "pass"/"fail", category, description); stdout transforms start with t_, value ones with v_
STDIN_KINDS = {
    "reference": ("pass", "correct", "reference solution"),
    "stdin_buffer": ("pass", "rewrite", "reads sys.stdin.buffer.read()"),
    "stdin_buffer_readline": ("pass", "rewrite", "reads sys.stdin.buffer.readline() until EOF"),
    "stdin_open0": ("pass", "rewrite", "reads open(0).read()"),
    "print_star": ("pass", "rewrite", "print(*a) spacing (no trailing spaces)"),
    "trailing_spaces": ("pass", "rewrite", "trailing spaces on every line"),
    "double_spaces": ("pass", "rewrite", "two spaces between tokens"),
    "crlf": ("pass", "rewrite", "CRLF line endings"),
    "no_final_newline": ("pass", "rewrite", "no final newline"),
    "float_short": ("pass", "rewrite", "float formatting 2.50 -> 2.5"),
    "float_long": ("pass", "rewrite", "float formatting 2.5 -> 2.500000000"),
    "exit_after": ("pass", "rewrite", "exit() after the output"),
    "quit_after": ("pass", "rewrite", "quit() after the output"),
    "sys_exit0_after": ("pass", "rewrite", "sys.exit(0) after the output"),
    "os_write": ("pass", "rewrite", "writes with os.write(1, ...)"),
    "off_by_one": ("fail", "mutant", "first number off by one"),
    "float_off": ("fail", "mutant", "first float off by 1e-3"),
    "big_int_off": ("fail", "mutant", "big integer (16+ digits) off by one"),
    "bool_for_int": ("fail", "mutant", "prints True/False for 1/0"),
    "wrong_case": ("fail", "mutant", "wrong case of a (non yes/no) word"),
    "swap_lines": ("fail", "mutant", "two output lines swapped"),
    "truncate": ("fail", "mutant", "last token missing (truncated output)"),
    "extra_line": ("fail", "mutant", "extra output line"),
    "nbsp": ("fail", "mutant", "no-break space (U+00A0) between two tokens"),
    "crash_after": ("fail", "mutant", "correct output, then an uncaught exception"),
    "last_test": ("fail", "mutant", "wrong only on the LAST test"),
    "flipped_cmp": ("fail", "mutant", "one comparison flipped (source mutation, verified wrong)"),
}
CALL_KINDS = {
    "reference": ("pass", "correct", "reference solution"),
    "tuple": ("pass", "rewrite", "returns a tuple for a list"),
    "float_eps": ("pass", "rewrite", "float result 1e-9 off (different summation order)"),
    "debug_print": ("pass", "rewrite", "prints debug output to stdout"),
    "off_by_one": ("fail", "mutant", "int result off by one"),
    "big_int_off": ("fail", "mutant", "big integer (>= 2^53) off by one"),
    "bool_for_int": ("fail", "mutant", "returns True/False for 1/0"),
    "truncate": ("fail", "mutant", "last list element / character missing"),
    "extra": ("fail", "mutant", "extra list element"),
    "wrong_case": ("fail", "mutant", "string with swapped case"),
    "last_test": ("fail", "mutant", "wrong only on the LAST test"),
    "flipped_cmp": ("fail", "mutant", "one comparison flipped (source mutation, verified wrong)"),
}
_STDOUT_FN = {"print_star": "t_print_star", "trailing_spaces": "t_trailing_spaces", "double_spaces": "t_double_spaces",
              "crlf": "t_crlf", "no_final_newline": "t_no_final_newline", "float_short": "t_float_short",
              "float_long": "t_float_long", "off_by_one": "t_off_by_one", "float_off": "t_float_off",
              "big_int_off": "t_big_int_off", "bool_for_int": "t_bool_for_int", "wrong_case": "t_wrong_case",
              "swap_lines": "t_swap_lines", "truncate": "t_truncate", "extra_line": "t_extra_line",
              "nbsp": "t_nbsp", "every_test": "t_last_off"}
_VALUE_FN = {"every_test": "v_last_off", "tuple": "v_tuple", "float_eps": "v_float_eps", "off_by_one": "v_off_by_one",
             "big_int_off": "v_big_int_off", "bool_for_int": "v_bool_for_int", "truncate": "v_truncate",
             "extra": "v_extra", "wrong_case": "v_wrong_case"}


_BLANKS = re.compile(r"[ \t\r\n]+")


def _tokens(s: str) -> list[str]:
    """Tokens as judges (testlib) see them: separated by space, tab, CR, LF only."""
    return [t for t in _BLANKS.split(s) if t]


def stdin_applies(kind: str, p: dict) -> bool:
    """Whether ``kind`` changes the judged output of problem ``p`` on at least one test (rewrites: the bytes;
    mutants: the tokens), and - for problems with several valid answers (a checker) - is certainly wrong there."""
    exp = [o for _, o in p["tests"]]
    has_checker = bool(p.get("checker"))
    if kind in ("reference", "stdin_buffer", "stdin_buffer_readline", "stdin_open0", "exit_after", "quit_after",
                "sys_exit0_after", "os_write", "crash_after", "last_test"):
        return True
    if kind == "flipped_cmp":
        return not has_checker and not p.get("float_tol")
    fn = _T[_STDOUT_FN[kind]]
    label = STDIN_KINDS[kind][0]
    if label == "pass":
        return any(fn(o) != o for o in exp)
    if has_checker:  # the checker accepts other answers: only transforms that break the format for sure
        safe = {"truncate", "extra_line", "nbsp"}
        if p.get("unique_first_line"):
            safe |= {"off_by_one", "bool_for_int", "wrong_case"}
        if p["name"].startswith(("1157_C2", "1214_H", "1256_C")):  # first line is a count/verdict, then content
            safe |= {"swap_lines", "bool_for_int"}
        if kind not in safe:
            return False
    return any(_tokens(fn(o)) != _tokens(o) for o in exp)


def stdin_program(src: str, kind: str, last_input: str | None = None, *, several_answers: bool = False) -> str:
    """The reference ``src`` wrapped so that its input is read and its output written as ``kind`` says.
    ``last_test``: wrong only when the input is ``last_input`` (a number off by one, or an extra line when there
    is no number or - ``several_answers`` - when a changed number could still be a valid answer)."""
    read = {"stdin_buffer": "sys.stdin.buffer.read().decode()",
            "stdin_buffer_readline": "b''.join(iter(sys.stdin.buffer.readline, b'')).decode()",
            "stdin_open0": "open(0).read()"}.get(kind, "sys.stdin.read()")
    fn = _STDOUT_FN.get(kind, "t_identity")
    post = f"_mc_out = {fn}(_mc_out)"
    if kind == "last_test":
        digest = hashlib.sha256(last_input.encode()).hexdigest()
        post = (f"if hashlib.sha256(_mc_data.encode()).hexdigest() == {digest!r}:\n"
                f"    _mc_out = {'t_extra_line' if several_answers else 't_last_off'}(_mc_out)")
    emit = "sys.stdout.write(_mc_out)\nsys.stdout.flush()"
    if kind == "os_write":
        emit = "_mc_b = _mc_out.encode()\nwhile _mc_b:\n    _mc_b = _mc_b[os.write(1, _mc_b):]"
    after = {"exit_after": "exit()", "quit_after": "quit()", "sys_exit0_after": "sys.exit(0)",
             "crash_after": "raise RuntimeError('crash after the output')"}.get(kind, "")
    return (f"import hashlib\nimport io\nimport os\nimport sys\n{TRANSFORMS_SRC}\n_MC_SRC = {src!r}\n"
            f"_mc_data = {read}\n"
            "_mc_stdin, _mc_stdout = sys.stdin, sys.stdout\n"
            "sys.stdin, sys.stdout = io.StringIO(_mc_data), io.StringIO()\n"
            "try:\n"
            "    exec(compile(_MC_SRC, '<solution>', 'exec'), {'__name__': '__main__', '__builtins__': __builtins__})\n"
            "finally:\n"
            "    _mc_out = sys.stdout.getvalue()\n"
            "    sys.stdin, sys.stdout = _mc_stdin, _mc_stdout\n"
            f"{post}\n{emit}\n{after}\n")


def call_applies(kind: str, p: dict) -> bool:
    if kind in ("reference", "debug_print", "last_test", "flipped_cmp"):
        return True
    fn = _T[_VALUE_FN[kind]]
    if CALL_KINDS[kind][0] == "pass":
        return any(type(fn(o)) is not type(o) or canon(fn(o)) != canon(o) for o in p["outputs"])
    return any(canon(fn(o)) != canon(o) for o in p["outputs"])


def canon(v) -> str:
    """Type-strict canonical JSON (tuples as lists; ``True`` and ``1`` differ, ``1`` and ``1.0`` differ)."""
    def norm(x):
        if isinstance(x, (list, tuple)):
            return [norm(y) for y in x]
        if isinstance(x, dict):
            return {str(k): norm(y) for k, y in x.items()}
        if type(x) is float:
            return {"__float__": repr(x)}
        return x
    return json.dumps(norm(v), sort_keys=True)


def call_key(args: list) -> str:
    """The key ``call_program`` gives a call's positional-then-keyword argument values (ListNode/TreeNode
    arguments as their LeetCode lists): pass ``node_args_canonical`` values for node arguments."""
    return json.dumps(args, sort_keys=True, default=_T["_mc_node_list"])


def call_program(code: str, fn: str, kind: str, last_args: list | None = None, *,
                 return_type: str | None = None) -> str:
    """The reference ``code`` (defining ``class Solution``) with ``Solution.<fn>`` wrapped as ``kind`` says; only
    the outermost call is changed (recursive methods call themselves). ``last_test``: wrong only when the
    argument values equal ``last_args`` (see ``call_key``); ``every_test``: wrong on every call. A method returning
    a ``ListNode``/``TreeNode`` (``return_type``) is made wrong by one more node in front (a new head, or a new
    root whose left child is the old root): always a different list or tree."""
    if kind == "reference":
        return code
    vfn = _VALUE_FN.get(kind, "v_identity")
    wrong = f"{return_type}(0, r)" if return_type in ("ListNode", "TreeNode") else "v_last_off(r)"
    post = f"r = {wrong}" if kind == "every_test" else f"r = {vfn}(r)"
    if kind == "last_test":
        post = f"if key == {call_key(last_args)!r}:\n            r = {wrong}"
    debug = "print('debug:', a, k)\n        " if kind == "debug_print" else ""
    return (f"{code}\n\nimport json as _mc_json\n{TRANSFORMS_SRC}\n"
            f"_mc_orig = Solution.{fn}\n_mc_depth = [0]\n\n\n"
            "def _mc_outer(self, *a, **k):\n"
            "    key = _mc_json.dumps(list(a) + list(k.values()), sort_keys=True, default=_mc_node_list) "
            "if _mc_depth[0] == 0 else None  # before the call: methods may modify their arguments\n"
            "    _mc_depth[0] += 1\n"
            "    try:\n"
            "        r = _mc_orig(self, *a, **k)\n"
            "    finally:\n"
            "        _mc_depth[0] -= 1\n"
            "    if _mc_depth[0] == 0:\n"
            f"        {debug}{post}\n"
            "    return r\n\n\n"
            f"Solution.{fn} = _mc_outer\n")


# --- source mutants (flipped comparison), verified wrong by an independent plain-Python run ------------------
_FLIP = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}


def flipped_sources(src: str, limit: int = 6) -> list[str]:
    """Sources with the i-th ``<``/``>``/``<=``/``>=`` comparison flipped (first ``limit``, in source order)."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return []
    sites = [n for n in ast.walk(tree) if isinstance(n, ast.Compare) and len(n.ops) == 1 and type(n.ops[0]) in _FLIP]
    sites.sort(key=lambda n: (n.lineno, n.col_offset))
    out = []
    for k in range(min(limit, len(sites))):
        t = ast.parse(src)
        s = sorted([n for n in ast.walk(t) if isinstance(n, ast.Compare) and len(n.ops) == 1
                    and type(n.ops[0]) in _FLIP], key=lambda n: (n.lineno, n.col_offset))[k]
        s.ops[0] = _FLIP[type(s.ops[0])]()
        out.append(ast.unparse(t))
    return out


def _clean_env() -> dict:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONINTMAXSTRDIGITS": "0", "PYTHONHASHSEED": "0"}


def oracle_stdin_wrong(src: str, tests: list, timeout: float = 10.0) -> bool | None:
    """Plain ``python -I`` run of ``src`` test by test, outputs compared token by token (strings) with the
    expected: True at the first definite difference (different tokens or an exception), False if every test
    gives the expected tokens, None if undecidable (timeout, recursion/memory error)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "prog.py")
        with open(path, "w") as f:
            f.write(src)
        for stdin, expected in tests:
            try:
                p = subprocess.run([sys.executable, "-I", path], input=stdin, capture_output=True, text=True,
                                   timeout=timeout, env=_clean_env(), cwd=d)
            except subprocess.TimeoutExpired:
                return None
            if p.returncode != 0:
                return None if ("RecursionError" in p.stderr or "MemoryError" in p.stderr) else True
            if _canon_tokens(p.stdout) != _canon_tokens(expected):
                return True
    return False


def _canon_tokens(s: str) -> list[str]:
    return [str(int(t)) if re.fullmatch(r"[+-]?[0-9]+", t) else t for t in _tokens(s)]


_CALL_ORACLE = r'''
import copy, json, sys
sys.setrecursionlimit(100000)
job = json.load(sys.stdin)
ns = {"__name__": "__main__"}
exec(compile(job["code"], "<solution>", "exec"), ns)
def norm(x):
    if isinstance(x, (list, tuple)):
        return [norm(y) for y in x]
    if isinstance(x, dict):
        return {str(k): norm(y) for k, y in x.items()}
    if type(x) is float:
        return {"__float__": repr(x)}
    return x
for i, (kw, exp) in enumerate(zip(job["kwargs"], job["outputs"])):
    try:
        r = getattr(ns["Solution"](), job["fn"])(**copy.deepcopy(kw))
    except RecursionError:
        print("undecided"); sys.exit()
    except Exception:
        print("wrong"); sys.exit()
    if json.dumps(norm(r), sort_keys=True) != json.dumps(norm(exp), sort_keys=True):
        print("wrong"); sys.exit()
print("same")
'''


def oracle_call_wrong(code: str, p: dict, timeout: float = 10.0) -> bool | None:
    """Plain-Python run of a call-based program on every test of ``p`` (type-strict JSON comparison)."""
    job = json.dumps({"code": code, "fn": p["fn"], "kwargs": p["kwargs"], "outputs": p["outputs"]})
    try:
        r = subprocess.run([sys.executable, "-I", "-c", _CALL_ORACLE], input=job, capture_output=True, text=True,
                           timeout=timeout, env=_clean_env())
    except subprocess.TimeoutExpired:
        return None
    verdict = r.stdout.strip().splitlines()[-1:] or [""]
    return {"wrong": True, "same": False}.get(verdict[0])


def flipped_mutant(src: str, is_wrong) -> str | None:
    """The first flipped-comparison source that ``is_wrong(source)`` confirms is wrong (None if none is)."""
    for cand in flipped_sources(src):
        if is_wrong(cand) is True:
            return cand
    return None


# --- every LeetCode problem in every ground-truth encoding (tests/reward/test_accuracy_formats.py) ---------------
#: encoding -> its variants (a problem uses ``variants[index % len(variants)]``, so each variant covers a share)
ENCODINGS = {
    "ours": ("kwargs",),  # keyword-argument dicts, setup_code, arg_types/return_type (ListNode/TreeNode)
    "prime": ("json-strings",),  # verl prime_code: newline-joined JSON arguments, JSON-text outputs
    "apps": ("wrapped", "plain"),  # APPS/TACO native: argument lists; outputs as [result] (APPS) or the value
    "lcb": ("extra_info.fn_name", "extra_info.metadata", "wrapper.metadata"),  # LiveCodeBench functional
    "rllm": ("metadata.func_name",),  # rLLM/DeepCoder: LCB tests with fn_name in each test's metadata
    "stdin": ("codecontests", "lcb", "verl-dict"),  # a stdin driver around the reference; three test shapes
}
#: encodings that can carry ListNode/TreeNode arguments or results (the others leave those problems out)
NODE_ENCODINGS = ("ours", "stdin")

#: value -> stdout text for the stdin encoding, shared by the driver (in the sandbox) and the expected outputs
#: (built here from the dataset's expected values): one line of whitespace-separated tokens, brackets and braces
#: as tokens of their own, ``null``/``true``/``false``, ints exact, floats as ``repr`` (so the judge's float
#: tolerance applies to float leaves), strings as JSON with spaces escaped (``\u0020``: a token never holds a
#: blank), dict keys sorted.
FORMAT_SRC = r'''
import json as _mc_fmt_json


def _mc_fmt(v):
    out = []

    def rec(x):
        if x is None:
            out.append("null")
        elif x is True or x is False:
            out.append("true" if x else "false")
        elif isinstance(x, int):
            out.append(str(x))
        elif isinstance(x, float):
            out.append(repr(x))
        elif isinstance(x, str):
            out.append(_mc_fmt_json.dumps(x).replace(" ", "\\u0020"))
        elif isinstance(x, (list, tuple)):
            out.append("[")
            for y in x:
                rec(y)
            out.append("]")
        elif isinstance(x, dict):
            out.append("{")
            for k in sorted(x, key=str):
                rec(str(k))
                rec(x[k])
            out.append("}")
        else:
            out.append("<" + type(x).__name__ + ">")

    rec(v)
    return " ".join(out) + "\n"
'''
exec(compile(FORMAT_SRC, "<format>", "exec"), _T)

#: builds a ListNode/TreeNode argument from its LeetCode list (the classes of the problem's prompt), as the
#: sandbox's call driver does
BUILD_SRC = r'''
def _mc_build(v, kind):
    if kind == "ListNode":
        head = None
        for x in reversed(v or []):
            head = ListNode(x, head)
        return head
    if kind == "TreeNode":
        if not v or v[0] is None:
            return None
        root = TreeNode(v[0])
        queue, i = [root], 1
        for node in queue:
            if i >= len(v):
                break
            for side in ("left", "right"):
                if i < len(v) and v[i] is not None:
                    child = TreeNode(v[i])
                    setattr(node, side, child)
                    queue.append(child)
                i += 1
        return root
    return v
'''
_NODE_LIST_SRC = "def _mc_node_list" + TRANSFORMS_SRC.split("def _mc_node_list", 1)[1]
_NODE_CLASSES = ("class ListNode:\n    def __init__(self, val=0, next=None):\n"
                 "        self.val, self.next = val, next\n\n\n"
                 "class TreeNode:\n    def __init__(self, val=0, left=None, right=None):\n"
                 "        self.val, self.left, self.right = val, left, right\n")
_NODES: dict = {}
exec(compile(_NODE_CLASSES + BUILD_SRC + _NODE_LIST_SRC, "<nodes>", "exec"), _NODES)

_STDIN_MAIN = r'''

def _mc_main():
    args = [_mc_fmt_json.loads(line) for line in _mc_sys.stdin.read().split("\n") if line.strip()]
    types = {types!r}
    args = [_mc_build(a, types.get(i)) for i, a in enumerate(args)]
    r = Solution().{fn}(*args){node_result}
    _mc_sys.stdout.write(_mc_fmt(r))


_mc_main()
'''


def leetcode_all(path: Path = LEETCODE) -> tuple[list[dict], dict]:
    """Every LeetCodeDataset problem that ``leetcode.ground_truth_from_row`` converts, sorted by id: ``id, prompt,
    completion, code`` (prompt + completion), ``fn, kwargs`` (one dict per test, in the order of the input text,
    which is the signature order), ``outputs, arg_types, return_type, unordered, ours`` (the ground-truth dict).
    Second value: rows left out, by reason (``conversion``)."""
    from microcoder_ext.reward.leetcode import ConversionError, ground_truth_from_row

    out, left_out = [], {"conversion": 0}
    with gzip.open(require(path), "rt") as f:
        for line in f:
            row = json.loads(line)
            try:
                gt = ground_truth_from_row(row)
            except ConversionError:
                left_out["conversion"] += 1
                continue
            unordered = row["task_id"] in ANY_ORDER
            if unordered:
                gt["unordered"] = True
            out.append({"id": row["task_id"], "prompt": row["prompt"], "completion": row["completion"],
                        "code": row["prompt"] + "\n" + row["completion"], "fn": gt["fn_name"], "kwargs": gt["inputs"],
                        "outputs": gt["outputs"], "arg_types": gt.get("arg_types") or {},
                        "return_type": gt.get("return_type"), "unordered": unordered, "ours": gt})
    out.sort(key=lambda p: p["id"])
    return out, left_out


def has_nodes(p: dict) -> bool:
    return bool(p["arg_types"] or p["return_type"])


def positional_types(p: dict) -> dict:
    """``{position: "ListNode"|"TreeNode"}`` for the node arguments (keyword order = signature order)."""
    names = list(p["kwargs"][0]) if p["kwargs"] else []
    return {i: p["arg_types"][n] for i, n in enumerate(names) if n in p["arg_types"]}


def node_args_canonical(p: dict, i: int) -> list:
    """Test ``i``'s argument values as ``call_program`` keys them: ListNode/TreeNode arguments built and read back
    (a level-order list loses trailing nulls and the children of null nodes)."""
    types = positional_types(p)
    out = []
    for k, v in enumerate(p["kwargs"][i].values()):
        if k in types:
            node = _NODES["_mc_build"](v, types[k])
            v = None if node is None else _NODES["_mc_node_list"](node)  # an empty list or tree is None
        out.append(v)
    return out


def stdin_input(p: dict, i: int) -> str:
    return "".join(json.dumps(v) + "\n" for v in p["kwargs"][i].values())


def stdin_expected(p: dict, i: int) -> str:
    return _T["_mc_fmt"](p["outputs"][i])


def stdin_driver(p: dict) -> str:
    """The reference as a stdin program: prompt + completion + a driver that reads one JSON argument per line,
    builds ListNode/TreeNode arguments, calls the method and prints ``_mc_fmt`` of the result."""
    node_result = "\n    r = _mc_node_list(r) if r is not None else []" if p["return_type"] else ""
    return (p["code"] + "\n\n# --- stdin driver ---\nimport sys as _mc_sys\n" + FORMAT_SRC + BUILD_SRC + _NODE_LIST_SRC
            + _STDIN_MAIN.format(fn=p["fn"], types=positional_types(p), node_result=node_result))


def encode(p: dict, encoding: str, variant: str) -> dict:
    """Problem ``p`` in one encoding: ``{"gt": JSON text, "extra_info": dict or None, "code": the reference program
    for that encoding}``. Foreign encodings carry no options: the program brings its own imports (the prompt)."""
    idx = range(len(p["kwargs"]))
    lines = [stdin_input(p, i).rstrip("\n") for i in idx]  # JSON-lines arguments (verl/PRIME, LCB, rLLM)
    extra = None
    if encoding == "ours":
        return {"gt": json.dumps(p["ours"]), "extra_info": None, "code": p["completion"]}
    if encoding == "stdin":
        tests = [(stdin_input(p, i), stdin_expected(p, i)) for i in idx]
        if variant == "codecontests":
            gt = [{"input": {"stdin": a}, "output": {"stdout": e}} for a, e in tests]
        elif variant == "lcb":
            gt = [{"input": a, "output": e, "testtype": "stdin"} for a, e in tests]
        else:
            gt = {"inputs": [a for a, _ in tests], "outputs": [e for _, e in tests]}
        return {"gt": json.dumps(gt), "extra_info": None, "code": stdin_driver(p)}
    if encoding == "prime":
        gt = {"fn_name": p["fn"], "inputs": lines, "outputs": [json.dumps(o) for o in p["outputs"]]}
    elif encoding == "apps":
        wrap = variant == "wrapped"
        gt = {"fn_name": p["fn"], "inputs": [list(kw.values()) for kw in p["kwargs"]],
              "outputs": [[o] if wrap else o for o in p["outputs"]]}
    elif encoding in ("lcb", "rllm"):
        gt = [{"input": a, "output": json.dumps(o), "testtype": "functional"} for a, o in zip(lines, p["outputs"])]
        meta = json.dumps({"func_name": p["fn"]})
        if encoding == "rllm":
            for t in gt:
                t["metadata"] = {"func_name": p["fn"]}
        elif variant == "extra_info.fn_name":
            extra = {"fn_name": p["fn"], "index": 0}
        elif variant == "extra_info.metadata":
            extra = {"metadata": meta, "question_id": p["id"]}
        else:
            gt = {"tests": gt, "metadata": meta}
    else:
        raise ValueError(f"unknown encoding {encoding!r}")
    return {"gt": json.dumps(gt), "extra_info": extra, "code": p["code"]}
