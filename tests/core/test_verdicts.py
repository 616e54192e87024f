import pytest

from microcoder_ext.core import verdicts as V


def test_vocabulary_is_exactly_the_documented_one():
    assert set(V.ALL) == {
        "correct", "wrong_answer", "runtime_error", "timeout", "memory_limit", "compile_error", "no_answer",
        "sandbox_error",
    }
    assert V.INCORRECT == {"wrong_answer", "runtime_error", "timeout", "memory_limit", "compile_error"}
    assert V.NON_INCORRECT == {"correct", "no_answer", "sandbox_error"}
    assert len(V.ALL) == len(set(V.ALL))


@pytest.mark.parametrize("v", sorted(V.INCORRECT))
def test_incorrect_verdicts(v):
    assert V.is_incorrect(v) and not V.is_non_incorrect(v) and not V.is_correct(v)


@pytest.mark.parametrize("v", ["correct", "no_answer", "sandbox_error"])
def test_non_incorrect_verdicts(v):
    assert V.is_non_incorrect(v) and not V.is_incorrect(v)
    assert V.is_correct(v) == (v == "correct")


def test_enum_members_are_plain_strings():
    assert V.Verdict.CORRECT == "correct" and str(V.Verdict.TIMEOUT) == "timeout"
    assert V.validate(V.Verdict.NO_ANSWER) == "no_answer" and type(V.validate(V.Verdict.NO_ANSWER)) is str
    assert V.is_non_incorrect(V.Verdict.CORRECT)


@pytest.mark.parametrize("bad", ["incorrect", "Correct", "", None, 1, "time_limit", b"correct"])
def test_unknown_verdicts_raise_clearly(bad):
    with pytest.raises(V.UnknownVerdictError, match="unknown verdict"):
        V.is_non_incorrect(bad)


def test_validate_all_names_the_bad_index():
    with pytest.raises(V.UnknownVerdictError, match=r"verdicts\[2\]"):
        V.validate_all(["correct", "no_answer", "oops"])
