"""Reading YAML and JSON documents safely: UTF-8, unique keys, bounded nesting and aliases."""

from __future__ import annotations

from pathlib import Path

import pytest

from cbsim.common import documents
from cbsim.common.documents import parse_json, parse_yaml, read_text_file
from cbsim.common.errors import CbsimError
from cbsim.common.limits import MAX_NESTING, MAX_YAML_NODES
from cbsim.run.loading import load_scenario, parse_override


def yaml_error(text: str) -> str:
    with pytest.raises(CbsimError) as info:
        parse_yaml(text, "f.yaml")
    assert info.value.source == "f.yaml"
    return info.value.message


def test_plain_documents_load_as_safe_load_would():
    assert parse_yaml("a: 1\nb: [x, 2.5, true]\n", None) == {"a": 1, "b": ["x", 2.5, True]}
    assert parse_yaml("", None) is None


def test_a_duplicate_key_names_both_lines():
    message = yaml_error("name: a\nseed: 1\nname: b\n")
    assert message.startswith("line 3, column 1: duplicate key 'name' (first at line 1)")


def test_a_duplicate_nested_key_is_an_error():
    assert "duplicate key 'tp'" in yaml_error("cluster:\n  tp: 1\n  gpu: h200\n  tp: 2\n")


def test_merge_keys_may_be_overridden():
    text = "base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  x: 3\n"
    assert parse_yaml(text, None)["use"] == {"x": 3, "y": 2}


def test_shared_aliases_within_the_bound_are_fine():
    text = "a: &a [1, 2, 3]\nb: *a\nc: [*a, *a]\n"
    assert parse_yaml(text, None)["c"] == [[1, 2, 3], [1, 2, 3]]


def test_an_alias_bomb_is_refused_before_it_expands():
    lines = ["a0: &a0 [" + ", ".join(["lol"] * 10) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    message = yaml_error("\n".join(lines) + "\n")
    assert f"more than {MAX_YAML_NODES:,} values through its aliases" in message


def test_a_recursive_alias_is_refused():
    assert "contains it" in yaml_error("a: &a [1, *a]\n")


@pytest.mark.parametrize("style", ["flow", "block"])
def test_nesting_is_bounded(style: str):
    def nested(depth: int) -> str:
        if style == "flow":
            return "a: " + "[" * depth + "]" * depth + "\n"
        return "".join("  " * i + "a:\n" for i in range(depth)) + "  " * depth + "1\n"

    parse_yaml(nested(MAX_NESTING - 2), None)
    assert "nested more than" in yaml_error(nested(MAX_NESTING + 1))
    assert "nested more than" in yaml_error(nested(20_000) if style == "flow" else nested(3000))


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: [1\n", "invalid YAML at line 2, column 1"),
        ("name: 2023-13-45\n", "month must be in 1..12"),
        ("a: b\x00c\n", "is not allowed in YAML text"),
        ("a: !!python/object/apply:os.system [true]\n", "invalid YAML"),
    ],
)
def test_invalid_yaml_is_one_clear_error(text: str, fragment: str):
    assert fragment in yaml_error(text)


def test_a_file_that_is_not_utf8_names_the_byte_and_where(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"name: ok\nseed: 1 # caf\xe9\n")
    with pytest.raises(CbsimError) as info:
        read_text_file(path)
    assert info.value.source == str(path)
    assert info.value.message.startswith("not UTF-8 text: byte 0xe9 at line 2, column 14")


def test_scenario_files_use_the_safe_reader(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text("name: a\nworkload: {num_requests: 3}\nname: b\n", encoding="utf-8")
    with pytest.raises(CbsimError, match="duplicate key 'name'") as info:
        load_scenario(path)
    assert info.value.source == str(path)


def test_overrides_use_the_safe_reader_but_keep_plain_text():
    assert parse_override("name=a: b: c") == ("name", "a: b: c")  # not YAML: the text itself
    with pytest.raises(CbsimError, match="duplicate key"):
        parse_override("cluster={tp: 1, tp: 2}")


def test_json_nesting_is_bounded():
    assert parse_json("[[1]]", None) == [[1]]
    for depth in (MAX_NESTING + 1, 100_000):
        with pytest.raises(CbsimError, match="nested more than"):
            parse_json("[" * depth + "]" * depth, "f.json")
    with pytest.raises(CbsimError, match="invalid JSON at line 1 column 2"):
        parse_json("{x", "f.json")


def test_a_large_document_without_aliases_is_not_taken_for_a_bomb(monkeypatch):
    """More values written out than the bound (a rate curve of 50,000 points is 150,001 values,
    bounded by the curve's own point limit): read; the same bound met through aliases: refused."""
    monkeypatch.setattr(documents, "MAX_YAML_NODES", 1000)
    text = "a: [" + ", ".join(["1"] * 1001) + "]\n"
    assert len(parse_yaml(text, None)["a"]) == 1001
    shared = "a: &a [" + ", ".join(["1"] * 100) + "]\nb: [" + ", ".join(["*a"] * 11) + "]\n"
    assert "through its aliases" in yaml_error(shared)
