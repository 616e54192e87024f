"""One test per comparison rule; cases from the evaluator survey (code-reward notes, section 1: what existing evaluators get wrong)."""

import pytest

from microcoder_ext.reward.compare import big_int, compare_stdout, compare_values, parse_json_value


@pytest.mark.parametrize("exp,act,ok", [
    ("3\n", "3\n", True),                      # exact
    ("1 2\n3\n", "1 2   \n3\n", True),         # trailing spaces
    ("1\r\n2\r\n", "1\n2\n", True),            # CRLF in expected
    ("1\n2\n", "1\n2\n\n\n", True),            # trailing blank lines
    ("1 2 3\n", "1  2 3\n", True),             # double space between tokens
    ("0.5\n", "0.500000001\n", True),          # float 1e-9 off
    ("2.50\n", "2.5\n", True),                 # 2.50 vs 2.5
    ("0.5\n", "0.501\n", False),               # float 1e-3 off
    ("1000000.0\n", "1000000.5\n", True),      # relative error 5e-7
    ("50000000000000001\n", "50000000000000000\n", False),  # big integer off by one
    ("123456789012345678901234567890\n", "123456789012345678901234567890\n", True),
    ("7\n", "007\n", True),                    # integers compare by value
    ("10\n", "10.0\n", False),                 # integer expected: no float tolerance
    ("10\n", "1e1\n", False),
    ("YES\nNO\n", "NO\nYES\n", False),         # swapped YES/NO lines
    ("YES\n", "yes\n", True),                  # yes/no tokens case-insensitive
    ("Alice\n", "alice\n", False),             # other tokens case-sensitive
    ("1\n2\n3\n", "1\n", False),               # prints only 1 of 3 lines
    ("1\n", "1\n2\n", False),                  # extra output line
    ("1\n", "", False),                        # empty output
    ("", "", True),                            # expected empty and prints nothing
    ("1\n", "True\n", False),                  # prints True, expected 1
    ("abc\n", "abd\n", False),                 # wrong token of same length
    ("1.5\n", "nan\n", False),                 # prints nan
    ("nan\n", "nan\n", True),
    ("inf\n", "inf\n", True),
    ("1 2\n", "1\n2\n", True),                 # whitespace-token rule ignores line structure by default
    ("1 2\n", "1\t2\r\n", True),               # judge blanks: space, tab, CR, LF
    ("1 2\n", "1\u00a02\n", False),             # NBSP is not a separator (str.split() would say it is)
    ("1 2\n", "1\u30002\n", False),             # nor the ideographic space
    ("1 2\n", "1\x1f2\n", False),               # nor ASCII unit separator / vertical tab / form feed
    ("1 2\n", "1\x0b2\n", False),
    ("1\n", "1\u00a0\n", False),                # a trailing NBSP is part of the token
    ("1\n", "1\x0c\n", False),
    ("3.5\n", "\uff13.\uff15\n", False),         # fullwidth digits: float() accepts them, judges do not
    ("35\n", "\u0663\u0665\n", False),          # Arabic-Indic digits
])
def test_stdout_rules(exp, act, ok):
    assert compare_stdout(exp, act)[0] is ok


def test_non_ascii_blanks_in_the_option_paths():
    assert compare_stdout("1 2\n3\n", "1\u00a02\n3\n", line_sensitive=True)[0] is False
    assert compare_stdout("a b\nc\n", "c\na\u00a0b\n", unordered=True)[0] is False
    assert compare_stdout("a b\nc\n", "c\na\tb\n", unordered=True)[0] is True


def test_line_sensitive_and_unordered_and_case_options():
    assert compare_stdout("1 2\n", "1\n2\n", line_sensitive=True)[0] is False
    assert compare_stdout("1 2\n3\n", "1  2\n3\n", line_sensitive=True)[0] is True
    assert compare_stdout("a\nb\n", "b\na\n", unordered=True)[0] is True
    assert compare_stdout("a\nb\n", "b\na\n")[0] is False
    assert compare_stdout("Alice\n", "ALICE\n", case_sensitive=False)[0] is True
    assert compare_stdout("0.5\n", "0.51\n", float_tol=0.1)[0] is True


def test_stdout_reason_names_first_difference():
    ok, why = compare_stdout("1 2 3\n", "1 2 4\n")
    assert not ok and "token 3" in why


@pytest.mark.parametrize("exp,act,ok", [
    ([1, 2], [1, 2], True),
    ([1, 2], (1, 2), True),                    # tuple == list
    ([[1, 2]], [(1, 2)], True),                # recursively
    (0.3, 0.1 + 0.2, True),                    # float tolerance
    (0.3, 0.31, False),
    (2.0, 2, True),                            # either side float -> tolerance
    (1, True, False),                          # True != 1
    (True, 1, False),
    (False, 0, False),
    (True, True, True),
    (5 * 10**16 + 1, 5 * 10**16, False),       # big ints exact
    ("cba", "cba", True),
    ("cba", "abc", False),
    (None, None, True),
    (None, 0, False),
    (None, [], False),
    ({"1": 2}, {1: 2}, True),                  # numeric-string dict keys normalised
    ({"a": 1}, {"a": 1, "b": 2}, False),
    ([1, 2], [2, 1], False),                   # order matters by default
    ([3, 3], [3, 3], True),
    ("1", 1, False),
    ([1], 1, False),
])
def test_value_rules(exp, act, ok):
    assert compare_values(exp, act)[0] is ok


def test_unordered_values():
    assert compare_values([[1, 2], [3]], [[3], [1, 2]], unordered=True)[0] is True
    assert compare_values([1, 1, 2], [1, 2, 2], unordered=True)[0] is False
    assert compare_values([0.3, 1], [1, 0.1 + 0.2], unordered=True)[0] is True


def test_big_ints_beyond_the_int_str_limit():
    s = "9" * 5000
    assert big_int(s) == 10**5000 - 1
    assert parse_json_value("[" + s + "]") == [10**5000 - 1]
    assert compare_stdout(s + "\n", s + "\n")[0] and not compare_stdout(s + "\n", "9" * 4999 + "8\n")[0]


def test_million_digit_integers():
    n = 10**6
    nines, power = "9" * n, "1" + "0" * n  # 10**n - 1 and 10**n: off by one
    assert compare_stdout(nines + "\n", "00" + nines)[0]
    assert not compare_stdout(nines, power)[0]
    assert not compare_stdout(nines, nines[:-1] + "8")[0]
    assert compare_stdout("-" + nines, "-000" + nines)[0]
    big = 10**n - 1
    assert big_int(nines) == big and big_int("-" + nines) == -big
    assert big_int(power) == big + 1 and big_int(power) != big
    assert parse_json_value("[" + nines + "]") == [big]
    assert compare_values(parse_json_value(nines), big)[0]
    assert not compare_values(parse_json_value(power), big)[0]
