from microcoder_ext.reward import extract_code


def test_last_complete_python_block_wins():
    r = "first\n```python\nprint(1)\n```\ntext\n```py\nprint(2)\n```\n"
    assert extract_code(r) == "print(2)\n"


def test_bare_fence_and_other_languages():
    assert extract_code("```\nprint(3)\n```") == "print(3)\n"
    assert extract_code("```cpp\nint main(){}\n```\n```python\nx=1\n```\n```text\nout\n```") == "x=1\n"


def test_truncated_block_is_no_answer():
    assert extract_code("```python\nprint(1)\n```\nnow better:\n```python\nprint(2") == "print(1)\n"
    assert extract_code("```python\nprint(2)") is None
    assert extract_code("no code at all") is None
    assert extract_code("print(1)") is None  # bare code is not a fenced block
    assert extract_code(None) is None


def test_nested_tagged_fence_inside_bare_block_is_content():
    r = "````\n```python\nx\n```\n````"
    assert extract_code(r).startswith("```python")


def test_empty_block_is_no_answer():
    assert extract_code("```python\n\n```") is None
