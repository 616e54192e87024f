"""Rarely used modules (``child.ON_DEMAND_IMPORT``: mostly extension modules, each a few memory mappings that every
fork and exit of a test process would pay) are not in the worker: a job's launcher imports the ones its program
names before the program runs, and the program's own import works either way."""

import pytest

from microcoder_ext.core import verdicts as V
from microcoder_ext.reward.sandbox import child, worker

PROBE = "import sys\nprint(sorted(m for m in {names!r} if m in sys.modules))\n"


def test_on_demand_modules_are_not_preimported_by_the_worker():
    assert not set(child.ON_DEMAND_IMPORT) & set(worker.STDLIB_PREIMPORT)


def test_a_program_that_does_not_name_them_starts_without_them(run):
    hidden = [name[::-1] for name in child.ON_DEMAND_IMPORT]  # the program spells them backwards
    code = f"import sys\nprint(sorted(m[::-1] for m in {hidden!r} if m[::-1] in sys.modules))"
    assert not any(name in code for name in child.ON_DEMAND_IMPORT)
    r = run(code, {"inputs": ["\n"] * 2, "outputs": ["[]\n"] * 2})
    assert r.verdict == V.CORRECT, r.detail


def test_a_program_that_names_them_finds_them_imported_before_it_runs(run):
    names = list(child.ON_DEMAND_IMPORT)
    r = run(PROBE.format(names=names), {"inputs": ["\n"] * 2, "outputs": [f"{sorted(names)}\n"] * 2})
    assert r.verdict == V.CORRECT, r.detail


@pytest.mark.parametrize("program, out", [
    ("import hashlib\nprint(hashlib.sha256(input().encode()).hexdigest()[:8])", "2cf24dba\n"),
    ("from decimal import Decimal, getcontext\ngetcontext().prec = 30\nprint(Decimal(1) / Decimal(7))",
     "0.142857142857142857142857142857\n"),
    ("from fractions import Fraction\nprint(sum(Fraction(1, k) for k in range(1, 5)))", "25/12\n"),
    ("import statistics\nprint(statistics.median([3, 1, 2, 10]))", "2.5\n"),
    ("import cmath\nprint(abs(cmath.exp(1j * cmath.pi) + 1) < 1e-12)", "True\n"),
    ("import unicodedata\nprint(unicodedata.name(input()))", "LATIN SMALL LETTER H\n"),
])
def test_programs_that_use_them_are_judged_as_before(run, program, out):
    inputs = "hello\n" if "hashlib" in program else "h\n"
    r = run(program, {"inputs": [inputs] * 3, "outputs": [out] * 3})
    assert r.verdict == V.CORRECT, r.detail


def test_a_dynamic_import_of_one_works_in_every_test(run):
    r = run("m = __import__('dec' + 'imal')\nprint(m.Decimal('1.10') + m.Decimal('2.20'))",
            {"inputs": ["\n"] * 3, "outputs": ["3.30\n"] * 3})
    assert r.verdict == V.CORRECT, r.detail
