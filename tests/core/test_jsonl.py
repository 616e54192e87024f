"""``microcoder_ext.jsonl.iter_objects``: the JSONL reader of the CLIs (probe, eval, plot, train)."""

import gzip

import pytest

from microcoder_ext.jsonl import iter_objects


class Bad(ValueError):
    pass


def test_objects_with_their_line_and_gzip(tmp_path):
    text = '{"a": 1}\n\n   \n{"b": [2]}\n'
    plain = tmp_path / "x.jsonl"
    plain.write_text(text)
    packed = tmp_path / "x.jsonl.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    for path in (plain, packed):
        assert list(iter_objects(path, Bad)) == [(f"{path}:1", {"a": 1}), (f"{path}:4", {"b": [2]})]


@pytest.mark.parametrize("content, message", [
    ('{"a": 1}\n{oops\n', r"x\.jsonl:2: not JSON \("),
    ('[1, 2]\n', r"x\.jsonl:1: expected a JSON object, got list"),
    (b'\xff\xfe{"a": 1}\n', r"cannot read .*x\.jsonl: "),
])
def test_bad_lines_and_files_name_the_place(tmp_path, content, message):
    path = tmp_path / "x.jsonl"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(Bad, match=message):
        list(iter_objects(path, Bad))
    with pytest.raises(Bad, match=r"cannot read .*missing\.jsonl"):
        list(iter_objects(tmp_path / "missing.jsonl", Bad))


def test_errors_of_the_caller_are_not_rewritten(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n')
    with pytest.raises(KeyError):
        for _, rec in iter_objects(path, Bad):
            rec["missing"]
