"""LiveCodeBench ``code_generation_lite`` rows -> :class:`~microcoder_ext.data.problem.Problem`, and the release
windows the evaluation selects by.

Row fields (``livecodebench/code_generation_lite``, files ``test.jsonl`` .. ``test6.jsonl``): ``question_title``,
``question_content``, ``platform`` (leetcode / atcoder / codeforces), ``question_id``, ``contest_id``,
``contest_date`` (ISO datetime), ``starter_code``, ``difficulty`` (easy / medium / hard), ``public_test_cases``
(JSON list of ``{"input", "output", "testtype"}``), ``private_test_cases`` (the same list as JSON, or
base64(zlib(pickle(JSON string))), LCB's ``CodeGenerationProblem.__post_init__`` decoding) and ``metadata``
(JSON string, ``{"func_name": ...}`` for functional problems).

**Private tests are never unpickled with** :func:`pickle.loads`: :class:`RestrictedUnpickler` refuses every
global (``find_class``) and persistent id, so only the pickle opcodes that build plain values (str, bytes, int,
float, bool, None, list, tuple, dict, set) can run; a pickle that names any callable (``os.system`` through
``__reduce__``, a class, ...) raises :class:`UnsafePickleError` before anything is called. The decompressed size is
capped (:data:`MAX_DECOMPRESSED`), and the decoded value must be a JSON list of tests.

**Ground truth: LCB's own encoding is kept** (``{"tests": [public + private], "fn_name": name}``, each test with
``input``, ``output``, ``testtype``; ``setup_code`` = LCB's import header :data:`LCB_IMPORTS`, which LCB prepends to
every program), not converted to our dict format: ``microcoder_ext.reward`` judges LCB-typed
list tests exactly as LCB's ``testing_util`` does (functional: one JSON argument per input line, the output
``json.loads``-ed, compared as it is, **no** APPS ``[result]`` unwrapping, which the dict format would add;
stdin: the input/output strings). ``fn_name`` sits at the top of the wrapper so
:attr:`Problem.fn_name` (call-based prompt) and the reward agree.

Release windows (:data:`RELEASE_WINDOWS`): half-open ``[start, end)`` contest-date windows, ISO days. ``"v6"`` is
the paper's (docs/paper.md#evaluation-protocol: LCB v6 = problems added after ``release_v5``, contests 2025-02-01 .. 2025-05-01, 175 problems).
``"v1"`` .. ``"v5"`` come from the dataset card's change log (``release_v1``: May 2023 - Mar 2024, 400 problems;
``release_v2``: - May 2024, 511; ``release_v3``: - Jul 2024, 612; ``release_v4``: - Sep 2024, 713;
``release_v5``: - Jan 2025, 880; v6: - Apr 2025, 1055): the card states months only, so each window runs from
the first day of its first month to the first day of the month after its last month, an approximation of the
file a release adds (:data:`RELEASE_FILES`); ``"release_vN"`` is the cumulative window from 2023-05-01.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import re
import zlib
from typing import Any, Iterator

from .problem import Problem
from .rows import Drop, load_rows

#: problems added by each release (half-open ISO-day windows on contest_date); see the module docstring
RELEASE_WINDOWS: dict[str, tuple[str, str]] = {
    "v1": ("2023-05-01", "2024-04-01"),
    "v2": ("2024-04-01", "2024-06-01"),
    "v3": ("2024-06-01", "2024-08-01"),
    "v4": ("2024-08-01", "2024-10-01"),
    "v5": ("2024-10-01", "2025-02-01"),
    "v6": ("2025-02-01", "2025-05-01"),
}
RELEASE_WINDOWS.update({f"release_{v}": ("2023-05-01", RELEASE_WINDOWS[v][1]) for v in list(RELEASE_WINDOWS)})
#: the hub files of ``livecodebench/code_generation_lite`` each release adds
RELEASE_FILES: dict[str, list[str]] = {"v1": ["test.jsonl"], **{f"v{i}": [f"test{i}.jsonl"] for i in range(2, 7)}}
RELEASE_FILES.update({f"release_v{i}": [f for j in range(1, i + 1) for f in RELEASE_FILES[f"v{j}"]]
                      for i in range(1, 7)})
#: problem counts of the card's change log (cumulative) and the paper (v6 = 175 added)
RELEASE_SIZES = {"release_v1": 400, "release_v2": 511, "release_v3": 612, "release_v4": 713, "release_v5": 880,
                 "release_v6": 1055, "v6": 175}
HUB_ID = "livecodebench/code_generation_lite"
#: cap on the zlib-decompressed private tests (bytes): a zip bomb is refused, not expanded
MAX_DECOMPRESSED = 1 << 30
PLATFORMS = ("leetcode", "atcoder", "codeforces")
#: the header LCB's ``testing_util.run_test`` prepends to every program (call-based and stdin): the LCB ground
#: truth carries it as ``setup_code`` so that solutions using ``List``, ``defaultdict``, ``inf``... run as in LCB
LCB_IMPORTS = ("from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
               "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\n"
               "from random import *\nfrom statistics import *\nfrom itertools import *\nfrom functools import *\n"
               "from operator import *\nfrom io import *\nfrom sys import *\nfrom json import *\n"
               "from builtins import *\nfrom typing import *\nimport string\nimport re\nimport datetime\n"
               "import collections\nimport heapq\nimport bisect\nimport copy\nimport math\nimport random\n"
               "import statistics\nimport itertools\nimport functools\nimport operator\nimport io\nimport sys\n"
               "import json\nsys.setrecursionlimit(50000)\n")
_FIELDS = ("question_title", "question_content", "platform", "question_id", "contest_id", "contest_date",
           "starter_code", "difficulty", "public_test_cases", "private_test_cases", "metadata")


class LCBRowError(ValueError):
    """A LiveCodeBench row that cannot be converted; ``reason`` is the short drop category."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


class UnsafePickleError(LCBRowError):
    """The private tests are a pickle that references a global (a callable/class) or a persistent id."""

    def __init__(self, detail: str):
        super().__init__("unsafe pickle", detail)


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles plain values only: every global lookup (``GLOBAL``/``STACK_GLOBAL``/``INST``/``EXT*``, which all go
    through :meth:`find_class`) and every persistent id is refused, so ``REDUCE``/``BUILD``/``NEWOBJ`` never get a
    callable. Containers (list, tuple, dict, set, frozenset) and str/bytes/int/float/bool/None are built by
    opcodes of their own and load normally (bytes from protocol 3 on: protocols 0-2 pickle bytes through the global
    ``_codecs.encode``, which is refused; LCB pickles a str)."""

    def find_class(self, module: str, name: str):  # noqa: D401
        raise UnsafePickleError(f"the pickle references the global {module}.{name}; only plain values "
                                f"(str, bytes, numbers, bool, None, list, tuple, dict) are accepted")

    def persistent_load(self, pid):
        raise UnsafePickleError(f"the pickle references a persistent id {pid!r}")


_PLAIN = (str, bytes, int, float, bool, type(None))


def _check_plain(v, depth: int = 0) -> None:
    if depth > 100:
        raise UnsafePickleError("the unpickled value nests deeper than 100 levels")
    if isinstance(v, _PLAIN):
        return
    if isinstance(v, (list, tuple, set, frozenset)):
        for x in v:
            _check_plain(x, depth + 1)
        return
    if isinstance(v, dict):
        for k, x in v.items():
            _check_plain(k, depth + 1)
            _check_plain(x, depth + 1)
        return
    raise UnsafePickleError(f"the unpickled value holds a {type(v).__name__}")


def restricted_loads(data: bytes) -> Any:
    """``pickle.loads`` restricted to plain values (see :class:`RestrictedUnpickler`)."""
    try:
        value = RestrictedUnpickler(io.BytesIO(data)).load()
    except UnsafePickleError:
        raise
    except Exception as e:  # truncated/invalid pickle
        raise LCBRowError("undecodable private tests", f"not a valid pickle ({type(e).__name__}: {e})") from None
    _check_plain(value)
    return value


def _decompress(raw: bytes) -> bytes:
    d = zlib.decompressobj()
    try:
        out = d.decompress(raw, MAX_DECOMPRESSED)
    except zlib.error as e:
        raise LCBRowError("undecodable private tests", f"not zlib data ({e})") from None
    if d.unconsumed_tail:
        raise LCBRowError("undecodable private tests", f"decompresses to more than {MAX_DECOMPRESSED} bytes")
    return out


def decode_private_tests(value) -> list:
    """LCB ``private_test_cases`` -> list of tests: a list as is, JSON text, or base64(zlib(pickle(JSON text)))
    decoded with :func:`restricted_loads`. Raises :class:`LCBRowError` / :class:`UnsafePickleError`."""
    if value is None or value == "":
        return []
    if isinstance(value, list):
        return value
    if not isinstance(value, (str, bytes)):
        raise LCBRowError("undecodable private tests", f"a {type(value).__name__}, not a string")
    text = value.decode() if isinstance(value, bytes) else value
    if text.lstrip()[:1] in ("[", "{"):
        try:
            out = json.loads(text)
        except ValueError as e:
            raise LCBRowError("undecodable private tests", f"JSON text that does not parse ({e})") from None
    else:
        try:
            raw = base64.b64decode(text.encode("ascii"), validate=False)
        except (binascii.Error, UnicodeEncodeError) as e:
            raise LCBRowError("undecodable private tests", f"neither JSON nor base64 ({e})") from None
        inner = restricted_loads(_decompress(raw))
        if isinstance(inner, bytes):
            inner = inner.decode("utf-8", "replace")
        if isinstance(inner, str):
            try:
                out = json.loads(inner)
            except ValueError as e:
                raise LCBRowError("undecodable private tests", f"the pickled string is not JSON ({e})") from None
        else:
            out = inner
    if not isinstance(out, list):
        raise LCBRowError("undecodable private tests", f"decoded to {type(out).__name__}, not a list of tests")
    return out


def encode_private_tests(tests: list) -> str:
    """The inverse, as LCB stores it: base64(zlib(pickle(json.dumps(tests)))) (for tests and fixtures)."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode("ascii")


def _json_field(row: dict, key: str, default):
    v = row.get(key)
    if v is None or v == "":
        return default
    if isinstance(v, (list, dict)):
        return v
    try:
        return json.loads(v)
    except (TypeError, ValueError) as e:
        raise LCBRowError(f"malformed {key}", f"not JSON ({e})") from None


def iso_day(value) -> str | None:
    """``2025-02-01T00:00:00`` / ``2025-02-01 12:30`` / a datetime / date -> ``2025-02-01`` (None if absent)."""
    if value is None or value == "":
        return None
    if hasattr(value, "isoformat"):
        value = value.isoformat()
    if isinstance(value, (int, float)) and not isinstance(value, bool):  # epoch seconds (or ms)
        import datetime as _dt
        v = value / 1000 if value > 1e11 else value
        return _dt.datetime.fromtimestamp(v, _dt.timezone.utc).date().isoformat()
    m = re.match(r"\s*(\d{4})-(\d{2})-(\d{2})", str(value))
    if not m:
        raise ValueError(f"not an ISO date: {str(value)[:40]!r}")
    return "-".join(m.groups())


def is_lcb_row(row: dict) -> bool:
    return "question_content" in row and "public_test_cases" in row


def problem_from_lcb_row(row: dict, *, source: str = "livecodebench") -> Problem:
    """One ``code_generation_lite`` row -> Problem (ground truth in LCB's encoding, see the module docstring).
    Raises :class:`LCBRowError` (with a short ``reason``) for a row that cannot be judged."""
    if not isinstance(row, dict):
        raise LCBRowError("malformed row", f"a {type(row).__name__}, not an object")
    statement = row.get("question_content")
    if not isinstance(statement, str) or not statement.strip():
        raise LCBRowError("missing statement", "question_content is empty or missing")
    qid = row.get("question_id")
    if qid is None or str(qid).strip() == "":
        raise LCBRowError("missing id", "question_id is empty or missing")
    public = _json_field(row, "public_test_cases", [])
    private = decode_private_tests(row.get("private_test_cases"))
    if not isinstance(public, list):
        raise LCBRowError("malformed public_test_cases", f"a {type(public).__name__}, not a list")
    tests = list(public) + list(private)
    if not tests:
        raise LCBRowError("no tests")
    types = set()
    for i, t in enumerate(tests):
        if not isinstance(t, dict) or "input" not in t or "output" not in t:
            raise LCBRowError("malformed test", f"test {i} is not an object with input and output")
        types.add(t.get("testtype", "stdin"))
    if len(types) > 1:
        raise LCBRowError("mixed test types", f"{sorted(map(str, types))}")
    meta = _json_field(row, "metadata", {})
    if not isinstance(meta, dict):
        raise LCBRowError("malformed metadata", f"a {type(meta).__name__}, not an object")
    gt: dict = {"tests": [{"input": t["input"], "output": t["output"], "testtype": t.get("testtype", "stdin")}
                          for t in tests], "setup_code": LCB_IMPORTS}
    if types == {"functional"}:
        fn = meta.get("func_name")
        if not isinstance(fn, str) or not fn:
            raise LCBRowError("missing fn_name", "functional tests without metadata.func_name")
        gt["fn_name"] = fn
    try:
        date = iso_day(row.get("contest_date"))
    except ValueError as e:
        raise LCBRowError("malformed contest_date", str(e)) from None
    platform = (str(row.get("platform") or "").strip().lower()) or None
    difficulty = (str(row.get("difficulty") or "").strip().lower()) or None
    extra = {"question_id": str(qid), "n_public_tests": len(public), "n_private_tests": len(private)}
    if row.get("contest_id") not in (None, ""):
        extra["contest_id"] = str(row["contest_id"])
    return Problem(id=f"lcb/{qid}", source=source, statement=statement, tests=gt,
                   title=str(row.get("question_title") or ""), starter_code=str(row.get("starter_code") or ""),
                   difficulty=difficulty, platform=platform, date=date, extra=extra)


def in_window(date: str | None, start: str | None, end: str | None) -> bool:
    """``start <= date < end`` on ISO days (either bound may be None); an unknown date is outside any window."""
    if start is None and end is None:
        return True
    if date is None:
        return False
    return (start is None or date >= start) and (end is None or date < end)


def window(release: str | None = None, start_date: str | None = None, end_date: str | None = None):
    """The ``[start, end)`` window: the release's, narrowed by explicit dates (which win where given)."""
    start = end = None
    if release is not None:
        if release not in RELEASE_WINDOWS:
            raise ValueError(f"unknown LiveCodeBench release {release!r}; known: {', '.join(RELEASE_WINDOWS)}")
        start, end = RELEASE_WINDOWS[release]
    if start_date is not None:
        start = iso_day(start_date)
    if end_date is not None:
        end = iso_day(end_date)
    return start, end


def read_lcb(path_or_hub_id, *, start_date: str | None = None, end_date: str | None = None,
             release: str | None = None, drops: list | None = None) -> Iterator[Problem]:
    """LiveCodeBench problems whose contest date is in ``[start_date, end_date)`` (ISO days; ``release`` gives
    the window of :data:`RELEASE_WINDOWS`, explicit dates override its ends), from a local JSONL/parquet file
    (or directory) or the hub (``livecodebench/code_generation_lite``; with ``release`` only that release's
    files are fetched). Rows that cannot be converted are skipped; pass ``drops`` (a list) to receive a
    :class:`~microcoder_ext.data.rows.Drop` for each."""
    start, end = window(release, start_date, end_date)
    files = RELEASE_FILES.get(release) if release else None
    for i, row in enumerate(load_rows(str(path_or_hub_id), hub_files=files)):
        try:
            p = problem_from_lcb_row(row)
        except LCBRowError as e:
            if drops is not None:
                rid = row.get("question_id") if isinstance(row, dict) else None
                drops.append(Drop("livecodebench", str(path_or_hub_id), f"lcb/{rid}" if rid else f"#{i}",
                                  e.reason, e.detail))
            continue
        if in_window(p.date, start, end):
            yield p
