"""Dataset rows -> :class:`~microcoder_ext.data.problem.Problem`, for every source ``microcoder data prepare``
reads. Loading is total: a row that cannot be converted becomes a :class:`Drop` (source, id, short ``reason``,
``detail``), never an exception.

Shapes (``SHAPES``; ``auto`` sniffs the shape from the first rows, :func:`sniff`):

``leetcodedataset``  newfacade/LeetCodeDataset: ``task_id``, ``query`` (statement + starter code; ``prompt`` is the
                     import header), ``entry_point``, ``input_output``, ``completion`` (reference), ``meta``
                     (``difficulty``, ``question_id``; ``estimated_date``/``date`` when present). Tests: our dict
                     format via :func:`microcoder_ext.reward.leetcode.ground_truth_from_row` (keyword arguments,
                     ``setup_code`` = the import header, ListNode/TreeNode types).
``code_contests``    CodeContests as SandboxFusion stores it (``id``, ``content``, ``labels`` JSON, ``test`` JSON list
                     of ``{"input": {"stdin"}, "output": {"stdout"}}``), or DeepMind's ``deepmind/code_contests``
                     rows (``name``, ``description``, ``public_tests``/``private_tests``/``generated_tests`` as
                     ``{"input": [...], "output": [...]}``, ``difficulty``, ``source``, ``cf_rating``).
                     Interactive problems are dropped. Codeforces letters map to difficulty A-B easy, C-D medium,
                     E+ hard (our heuristic; the raw label is kept in ``extra["raw_difficulty"]``).
``livecodebench``    ``code_generation_lite`` rows: :mod:`microcoder_ext.data.lcb`.
``deepcoder``        agentica-org/DeepCoder-Preview-Dataset / rLLM rows: ``problem``, ``tests`` (JSON: LCB-style list
                     with ``testtype`` and ``metadata.func_name``, PrimeIntellect list, TACO dict or codeforces list),
                     ``starter_code``, ``metadata``; tests are kept in their encoding (the reward reads all of them).
``microcoder``       ZongqianLi/MicroCoder-Dataset: schema unknown offline, fields detected from :data:`FIELD_ALIASES`
                     (also verl rows: ``prompt`` messages + ``reward_model.ground_truth`` + ``extra_info``); the
                     fields used and the columns ignored are reported (:class:`SchemaReport`).
``problems``         our own rows: ``Problem.to_dict()`` (``tests`` a dict or its JSON text), a verl parquet row
                     (``to_verl_row``) or an OpenRLHF JSONL line (``to_openrlhf_row``) read back.

Every kept problem's tests are parsed by the reward's own :func:`~microcoder_ext.reward.parse_ground_truth`
(a checker is compiled, not run); a suite the reward cannot read is a drop ``tests unreadable by the reward``.

Rows are loaded by :func:`microcoder_ext.data.rows.load_rows` (local files, directories or hub ids).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from .lcb import LCBRowError, is_lcb_row, iso_day, problem_from_lcb_row
from .problem import DIFFICULTIES, Problem
from .rows import Drop, SourceError, load_rows

SHAPES = ("leetcodedataset", "livecodebench", "code_contests", "deepcoder", "microcoder", "problems")


class RowError(ValueError):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


@dataclass
class SchemaReport:
    """What a defensive loader (``microcoder``) found: Problem attribute -> {column used: rows}, columns never
    used, attributes never found."""
    used: dict = field(default_factory=dict)
    columns: Counter = field(default_factory=Counter)
    rows: int = 0

    def note(self, attr: str, column: str | None) -> None:
        if column is not None:
            self.used.setdefault(attr, Counter())[column] += 1

    def to_dict(self) -> dict:
        consumed = {c.split(".")[0] for cs in self.used.values() for c in cs}
        return {"rows": self.rows, "fields_used": {a: dict(c) for a, c in self.used.items()},
                "missing": [a for a in ("statement", "tests", "difficulty", "platform", "date", "title", "solutions")
                            if a not in self.used],
                "unknown_columns": sorted(c for c in self.columns if c not in consumed)}


# --- helpers -------------------------------------------------------------------------------------------------
def _json(v, what: str):
    if isinstance(v, (bytes, bytearray)):
        v = v.decode()
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError as e:
            raise RowError(f"malformed {what}", f"not JSON ({e})") from None
    return v


def norm_difficulty(v) -> str | None:
    """easy/medium/hard from the labels datasets use (Easy, MEDIUM, 'introductory', Codeforces letters...)."""
    if v is None or v == "":
        return None
    s = str(v).strip().lower()
    if s in DIFFICULTIES:
        return s
    table = {"introductory": "easy", "interview": "medium", "competition": "hard", "simple": "easy",
             "normal": "medium", "difficult": "hard", "very_hard": "hard", "very hard": "hard"}
    if s in table:
        return table[s]
    m = re.fullmatch(r"([a-z])\d*", s)  # Codeforces problem letter (A, B, C1, ...)
    if m:
        return "easy" if m.group(1) in "ab" else "medium" if m.group(1) in "cd" else "hard"
    return None


def _clean_tests(tests) -> dict:
    """Any test container the reward reads -> a dict (``{"tests": list}`` for a list), fn_name hoisted to the top
    level when every test names the same one (rLLM ``metadata.func_name``, PrimeIntellect ``fn_name``)."""
    if isinstance(tests, list):
        tests = {"tests": tests}
    if not isinstance(tests, dict):
        raise RowError("malformed tests", f"a {type(tests).__name__}, neither a list of tests nor an object")
    tests = {k: v for k, v in tests.items() if v is not None}
    if "fn_name" not in tests and isinstance(tests.get("tests"), list):
        names = set()
        for t in tests["tests"]:
            if isinstance(t, dict):
                meta = t.get("metadata")
                if isinstance(meta, str):
                    try:
                        meta = json.loads(meta)
                    except ValueError:
                        meta = None
                n = t.get("fn_name") or (meta.get("func_name") if isinstance(meta, dict) else None)
                names.add(n)
        if len(names) == 1 and next(iter(names)):
            tests["fn_name"] = next(iter(names))
    return tests


def _count_tests(tests: dict) -> int:
    if isinstance(tests.get("inputs"), list):
        return len(tests["inputs"])
    for k in ("tests", "test_cases"):
        if isinstance(tests.get(k), list):
            return len(tests[k])
    return 0


def validate(p: Problem) -> Problem:
    """Raise RowError unless the reward can read ``p.tests`` (the checker is compiled, never executed here)."""
    from microcoder_ext.reward.ground_truth import GroundTruthError, parse_ground_truth

    if not p.statement or not p.statement.strip():
        raise RowError("missing statement")
    gt = p.tests
    if isinstance(gt, dict) and gt.get("checker") is not None:
        if not isinstance(gt["checker"], str):
            raise RowError("tests unreadable by the reward", "checker is not Python source")
        try:
            compile(gt["checker"], "<checker>", "exec")
        except SyntaxError as e:
            raise RowError("tests unreadable by the reward", f"checker does not compile: {e}") from None
        gt = {k: v for k, v in gt.items() if k != "checker"}
    try:
        suite = parse_ground_truth(gt)
    except GroundTruthError as e:
        raise RowError("tests unreadable by the reward", str(e)[:300]) from None
    except Exception as e:  # noqa: BLE001
        raise RowError("tests unreadable by the reward", f"{type(e).__name__}: {e}"[:300]) from None
    if not suite.tests:
        raise RowError("no tests")
    if p.difficulty is not None and p.difficulty not in DIFFICULTIES:
        p.difficulty = norm_difficulty(p.difficulty)
    return p


# --- converters (row -> Problem, raise RowError) -------------------------------------------------------------
def from_leetcodedataset(row: dict, source: str = "leetcodedataset") -> Problem:
    from microcoder_ext.reward.leetcode import ConversionError, ground_truth_from_row

    for k in ("task_id", "entry_point", "input_output"):
        if not row.get(k):
            raise RowError(f"missing {k}")
    try:
        gt = ground_truth_from_row(row)
    except ConversionError as e:
        raise RowError("unconvertible tests", str(e)) from None
    except (KeyError, TypeError, AttributeError) as e:
        raise RowError("malformed input_output", f"{type(e).__name__}: {e}") from None
    meta = row.get("meta") if isinstance(row.get("meta"), dict) else {}
    query = row.get("query") or row.get("problem_description") or ""
    # the query ends with "Please complete the following python code precisely: ```python <starter>```": the
    # statement keeps what comes before it, the starter code is shown once by Problem.prompt_text
    statement = re.split(r"\n\s*Please complete the following python code precisely", query)[0].strip()
    starter = meta.get("lang_code") or row.get("starter_code") or ""
    date = None
    for k in ("estimated_date", "date", "release_date"):
        v = meta.get(k) or row.get(k)
        if v:
            try:
                date = iso_day(v)
            except ValueError:
                pass
            break
    slug = str(row["task_id"])
    solutions = [row["completion"]] if isinstance(row.get("completion"), str) and row["completion"].strip() else []
    extra = {"question_id": str(meta.get("question_id", "")), "n_tests": len(gt["inputs"])}
    return Problem(id=f"leetcode/{slug}", source=source, statement=statement, tests=gt,
                   title=slug.replace("-", " ").title(), starter_code=starter,
                   difficulty=norm_difficulty(meta.get("difficulty") or row.get("difficulty")), platform="leetcode",
                   date=date, solutions=solutions, extra=extra)


_INTERACTIVE = re.compile(r"\binteractive problem\b|^\s*interaction\s*$|\binteractor\b", re.I | re.M)


def from_code_contests(row: dict, source: str = "code_contests") -> Problem:
    if "content" in row:  # SandboxFusion sample rows
        statement = row.get("content") or ""
        labels = _json(row.get("labels") or {}, "labels")
        if not isinstance(labels, dict):
            raise RowError("malformed labels", "not an object")
        tests = _json(row.get("test"), "test")
        if not isinstance(tests, list):
            raise RowError("malformed test", "not a list")
        name, raw_diff, platform = str(labels.get("name") or ""), labels.get("difficulty"), labels.get("source")
        rid = row.get("id")
        pid = f"code_contests/{rid}" if rid not in (None, "") else f"code_contests/{name}"
    else:  # deepmind/code_contests
        statement = row.get("description") or ""
        tests = []
        for k in ("public_tests", "private_tests", "generated_tests"):
            block = row.get(k) or {}
            ins, outs = block.get("input") or [], block.get("output") or []
            if len(ins) != len(outs):
                raise RowError(f"malformed {k}", f"{len(ins)} inputs, {len(outs)} outputs")
            tests += [{"input": {"stdin": i}, "output": {"stdout": o}} for i, o in zip(ins, outs)]
        name, raw_diff = str(row.get("name") or ""), row.get("difficulty")
        platform = {1: "codechef", 2: "codeforces", 3: "hackerearth", 4: "codejam", 5: "atcoder",
                    6: "aizu"}.get(row.get("source"), row.get("source"))
        pid = f"code_contests/{name}"
    if not str(statement).strip():
        raise RowError("missing statement")
    if _INTERACTIVE.search(statement):
        raise RowError("interactive problem", "stdout comparison cannot judge an interactive problem")
    if not tests:
        raise RowError("no tests")
    title = re.sub(r"^\d+_[A-Z]\d*\.\s*", "", name).strip()  # "1000_A. Codehorses T-shirts" -> "Codehorses T-shirts"
    platform = str(platform).lower() if platform not in (None, "") else None
    return Problem(id=pid, source=source, statement=statement, tests={"tests": tests}, title=title,
                   difficulty=norm_difficulty(raw_diff), platform=platform,
                   extra={"raw_difficulty": str(raw_diff) if raw_diff is not None else "", "name": name,
                          "n_tests": len(tests)})


def from_livecodebench(row: dict, source: str = "livecodebench") -> Problem:
    try:
        return problem_from_lcb_row(row, source=source)
    except LCBRowError as e:
        raise RowError(e.reason, e.detail) from None


def from_deepcoder(row: dict, source: str = "deepcoder") -> Problem:
    statement = row.get("problem") or row.get("question") or ""
    if not str(statement).strip():
        raise RowError("missing statement")
    if row.get("tests") in (None, "", []):
        raise RowError("no tests")
    tests = _clean_tests(_json(row["tests"], "tests"))
    meta = _json(row.get("metadata") or {}, "metadata")
    meta = meta if isinstance(meta, dict) else {}
    if "fn_name" not in tests and meta.get("func_name"):
        tests["fn_name"] = meta["func_name"]
    sols = row.get("solutions") or ([row["solution"]] if row.get("solution") else [])
    sols = _json(sols, "solutions") if isinstance(sols, str) else sols
    pid = row.get("id") or row.get("problem_id") or row.get("question_id") or meta.get("question_id")
    if pid in (None, ""):
        import hashlib
        pid = hashlib.sha1(str(statement).encode()).hexdigest()[:12]
    try:
        date = iso_day(meta.get("contest_date") or row.get("contest_date"))
    except ValueError:
        date = None
    extra = {"n_tests": _count_tests(tests)}
    if row.get("dataset") or meta.get("dataset"):
        extra["subset"] = str(row.get("dataset") or meta.get("dataset"))
    return Problem(id=f"deepcoder/{pid}", source=source, statement=str(statement), tests=tests,
                   title=str(row.get("title") or meta.get("question_title") or ""),
                   starter_code=str(row.get("starter_code") or ""),
                   difficulty=norm_difficulty(row.get("difficulty") or meta.get("difficulty")),
                   platform=(str(row.get("platform") or meta.get("platform") or "").lower() or None), date=date,
                   solutions=[s for s in (sols or []) if isinstance(s, str)], extra=extra)


#: Problem attribute -> candidate columns of an unknown schema, first present wins (dotted = nested)
FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "statement": ("question", "problem", "prompt", "description", "question_content", "problem_statement",
                  "statement", "content", "query", "text"),
    "tests": ("tests", "test_cases", "input_output", "testcases", "test", "reward_model.ground_truth",
              "ground_truth", "label", "private_test_cases", "public_test_cases"),
    "id": ("id", "problem_id", "question_id", "task_id", "uid", "uuid", "extra_info.id", "extra_info.index"),
    "title": ("title", "question_title", "name", "problem_name", "extra_info.title"),
    "difficulty": ("difficulty", "level", "difficulty_level", "rating", "extra_info.difficulty"),
    "platform": ("platform", "source", "oj", "website", "judge", "data_source", "extra_info.platform"),
    "date": ("date", "contest_date", "release_date", "created_at", "time", "extra_info.date"),
    "starter_code": ("starter_code", "starter", "prompt_code"),
    "solutions": ("solutions", "solution", "reference_solution", "canonical_solution", "completion", "answer"),
    "fn_name": ("fn_name", "func_name", "entry_point", "metadata.func_name", "extra_info.fn_name"),
}


def _get(row: dict, dotted: str):
    v: Any = row
    for part in dotted.split("."):
        if isinstance(v, str) and part and v[:1] in "{[":
            try:
                v = json.loads(v)
            except ValueError:
                return None
        if not isinstance(v, dict) or part not in v:
            return None
        v = v[part]
    return v


def _pick(row: dict, attr: str, report: SchemaReport | None):
    for col in FIELD_ALIASES[attr]:
        v = _get(row, col)
        if v not in (None, "", [], {}):
            if report is not None:
                report.note(attr, col)
            return v
    return None


def _message_text(v) -> str | None:
    if isinstance(v, str):
        return v
    if isinstance(v, list):  # chat messages: the last user message
        users = [m.get("content") for m in v if isinstance(m, dict) and m.get("role") == "user"]
        return users[-1] if users and isinstance(users[-1], str) else None
    return None


def from_microcoder(row: dict, source: str = "microcoder", report: SchemaReport | None = None) -> Problem:
    if report is not None:
        report.rows += 1
        report.columns.update(row.keys())
    statement = _message_text(_pick(row, "statement", report))
    if not statement or not statement.strip():
        raise RowError("missing statement", f"none of the columns {', '.join(FIELD_ALIASES['statement'])} "
                       f"holds text (columns: {', '.join(sorted(row))[:200]})")
    raw = _pick(row, "tests", report)
    if raw is None:
        raise RowError("no tests", f"none of the columns {', '.join(FIELD_ALIASES['tests'])} (columns: "
                       f"{', '.join(sorted(row))[:200]})")
    if isinstance(raw, str) and raw.strip()[:1] not in ("[", "{"):  # an LCB-encoded private test blob
        from .lcb import decode_private_tests
        try:
            raw = decode_private_tests(raw)
        except LCBRowError as e:
            raise RowError(e.reason, e.detail) from None
    tests = _clean_tests(_json(raw, "tests"))
    fn = _pick(row, "fn_name", report)
    if "fn_name" not in tests and isinstance(fn, str) and fn:
        tests["fn_name"] = fn.rsplit(".", 1)[-1]
    pid = _pick(row, "id", report)
    if pid is None:
        import hashlib
        pid = hashlib.sha1(statement.encode()).hexdigest()[:12]
    try:
        date = iso_day(_pick(row, "date", report))
    except ValueError:
        date = None
    sols = _pick(row, "solutions", report)
    if isinstance(sols, str) and sols.strip()[:1] == "[":
        try:
            sols = json.loads(sols)
        except ValueError:
            sols = [sols]
    sols = [sols] if isinstance(sols, str) else [s for s in (sols or []) if isinstance(s, str)]
    diff = _pick(row, "difficulty", report)
    platform = _pick(row, "platform", report)
    extra = {"n_tests": _count_tests(tests)}
    if diff is not None and norm_difficulty(diff) is None:
        extra["raw_difficulty"] = str(diff)
    return Problem(id=f"{source}/{pid}", source=source, statement=statement, tests=tests,
                   title=str(_pick(row, "title", report) or ""),
                   starter_code=str(_pick(row, "starter_code", report) or ""), difficulty=norm_difficulty(diff),
                   platform=str(platform).lower().removeprefix("microcoder/") if platform else None, date=date,
                   solutions=sols, extra=extra)


def from_problem_dict(row: dict, source: str | None = None) -> Problem:
    """Our own forms read back: ``Problem.to_dict()``, a verl parquet row, an OpenRLHF JSONL line."""
    if "statement" in row and "tests" in row:
        tests = _json(row["tests"], "tests")
        if not isinstance(tests, dict):
            raise RowError("malformed tests", "not an object")
        extra = _json(row.get("extra") or {}, "extra")
        return Problem(id=str(row.get("id") or ""), source=str(row.get("source") or source or "problems"),
                       statement=row["statement"], tests={k: v for k, v in tests.items() if v is not None},
                       title=row.get("title") or "", starter_code=row.get("starter_code") or "",
                       difficulty=row.get("difficulty"), platform=row.get("platform"), date=row.get("date"),
                       solutions=list(row.get("solutions") or []), extra=dict(extra or {}))
    if "reward_model" in row or "label" in row:  # verl / OpenRLHF rows: the prompt is already rendered
        if "reward_model" in row:
            gt, info = (row["reward_model"] or {}).get("ground_truth"), dict(row.get("extra_info") or {})
        else:
            gt = row["label"]
            info = {k[5:]: v for k, v in row.items() if k.startswith("meta_")}
        tests = _json(gt, "ground truth")
        if not isinstance(tests, dict):
            tests = _clean_tests(tests)
        text = _message_text(row.get("prompt")) or ""
        base = {k: info.pop(k, None) for k in ("id", "title", "source", "difficulty", "platform", "date", "fn_name",
                                                 "split", "index")}
        return Problem(id=str(base["id"] or ""), source=str(base["source"] or source or "problems"),
                       statement=text, tests={k: v for k, v in tests.items() if v is not None},
                       title=base["title"] or "", difficulty=base["difficulty"], platform=base["platform"],
                       date=base["date"], extra={k: v for k, v in info.items() if v is not None})
    raise RowError("malformed row", "neither a Problem dict nor a verl/OpenRLHF row")


CONVERTERS: dict[str, Callable[..., Problem]] = {
    "leetcodedataset": from_leetcodedataset, "livecodebench": from_livecodebench,
    "code_contests": from_code_contests, "deepcoder": from_deepcoder, "microcoder": from_microcoder,
    "problems": from_problem_dict,
}


def sniff_row(row: dict) -> str | None:
    if not isinstance(row, dict):
        return None
    keys = set(row)
    if {"task_id", "entry_point", "input_output"} <= keys:
        return "leetcodedataset"
    if is_lcb_row(row):
        return "livecodebench"
    if ({"content", "test", "labels"} <= keys) or ({"description", "public_tests", "private_tests"} <= keys):
        return "code_contests"
    if ({"statement", "tests", "id", "source"} <= keys) or ("reward_model" in keys and "prompt" in keys) or \
            ({"prompt", "label"} <= keys and any(k.startswith("meta_") for k in keys)):
        return "problems"
    if {"problem", "tests"} <= keys:
        return "deepcoder"
    if any(_get(row, c) is not None for c in FIELD_ALIASES["statement"]) and \
            any(_get(row, c) is not None for c in FIELD_ALIASES["tests"]):
        return "microcoder"
    return None


def sniff(rows: list[dict]) -> str:
    """The shape most of the first rows have (``SourceError`` if none is recognised)."""
    votes = Counter(s for s in map(sniff_row, rows) if s)
    if not votes:
        keys = sorted(rows[0]) if rows and isinstance(rows[0], dict) else []
        raise SourceError(f"cannot tell the dataset shape from its columns {keys[:30]}; pass --source "
                          f"({', '.join(SHAPES)})")
    return votes.most_common(1)[0][0]


def convert(row, shape: str, origin: str, index: int, report: SchemaReport | None = None) -> Problem | Drop:
    """One row -> Problem (validated) or Drop. Never raises."""
    rid = f"#{index}"
    try:
        if not isinstance(row, dict):
            raise RowError("malformed row", f"a {type(row).__name__}, not an object")
        for k in ("task_id", "question_id", "id", "name", "problem_id"):
            if row.get(k) not in (None, "") and isinstance(row.get(k), (str, int)):
                rid = str(row[k])
                break
        if shape == "microcoder":
            p = from_microcoder(row, report=report)
        else:
            p = CONVERTERS[shape](row)
        if not p.id:
            p.id = f"{p.source}/{index}"
        return validate(p)
    except RowError as e:
        return Drop(shape, origin, rid, e.reason, e.detail)
    except Exception as e:  # noqa: BLE001 - a loader is total
        return Drop(shape, origin, rid, "malformed row", f"{type(e).__name__}: {e}"[:300])


def iter_source(spec: str, shape: str = "auto", *, split: str = "train", limit: int | None = None,
                report: SchemaReport | None = None, sniff_rows: int = 20) -> Iterator[Problem | Drop]:
    """Problems (and Drops) of one SOURCE. Raises :class:`SourceError` only for an unreadable source."""
    if shape != "auto" and shape not in CONVERTERS:
        raise SourceError(f"unknown --source {shape!r}; one of auto, {', '.join(SHAPES)}")
    rows = load_rows(spec, split=split)
    head: list = []
    try:
        for row in rows:
            head.append(row)
            if len(head) >= sniff_rows:
                break
    except SourceError:
        raise
    except Exception as e:  # noqa: BLE001
        raise SourceError(f"{spec}: unreadable ({type(e).__name__}: {str(e)[:300]})") from None
    if not head:
        raise SourceError(f"{spec}: no rows")
    if shape == "auto":
        shape = sniff(head)
    if shape == "microcoder" and report is None:
        report = SchemaReport()
    n = 0

    def all_rows() -> Iterable:
        yield from head
        yield from rows

    for i, row in enumerate(all_rows()):
        if limit is not None and n >= limit:
            return
        n += 1
        yield convert(row, shape, spec, i, report)


def detect_shape(spec: str, *, split: str = "train") -> str:
    head = []
    for row in load_rows(spec, split=split):
        head.append(row)
        if len(head) >= 20:
            break
    if not head:
        raise SourceError(f"{spec}: no rows")
    return sniff(head)


def read_problems(spec: str, shape: str = "auto", *, split: str = "train", limit: int | None = None,
                  drops: list | None = None) -> list[Problem]:
    """All problems of a SOURCE (drops appended to ``drops`` when given)."""
    out = []
    for item in iter_source(spec, shape, split=split, limit=limit):
        if isinstance(item, Drop):
            if drops is not None:
                drops.append(item)
        else:
            out.append(item)
    return out
