"""Task-file loading and validation: every problem is reported as file:line: field: problem (exit 2)."""

from __future__ import annotations

import json

import pytest

from qcheck.errors import InputError, UsageError
from qcheck.eval.tasks import bundled_names, load_tasks, parse_jsonl


def _write(tmp_path, lines, name="t.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


GOOD = [
    {"id": "a", "kind": "text", "text": "hello world"},
    {"id": "b", "kind": "choice", "context": "2+2=", "choices": ["4", "5"], "answer": 0},
    {"id": "c", "kind": "generate", "prompt": "Say hi:", "expected": "hi", "match": "contains"},
]


def test_good_file_loads_with_kinds_tasks_and_hash(tmp_path):
    path = _write(tmp_path, ["# comment", "", *GOOD])
    ts = load_tasks([str(path)])
    assert [i.id for i in ts.items] == ["a", "b", "c"]
    assert ts.counts == {"text": 1, "choice": 1, "generate": 1}
    assert {i.task for i in ts.items} == {"t"}  # default task name = file stem
    assert ts.items[1].delimiter == " " and ts.items[2].max_new_tokens == 32
    assert len(ts.sha256) == 64
    # the hash follows the content
    path.write_text(path.read_text() + json.dumps({"id": "d", "kind": "text", "text": "more"}) + "\n")
    assert load_tasks([str(path)]).sha256 != ts.sha256


@pytest.mark.parametrize("line, message", [
    ("{not json", "invalid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ({"id": "x", "txt": "t"}, "kind: missing"),
    ({"id": "x", "text": "t", "txt": "u"}, "txt: unknown field for a text item without kind"),
    ({"id": "x", "kind": "essay", "text": "t"}, "kind: 'essay' is not one of"),
    ({"id": "x", "kind": "text", "txt": "t"}, "txt: unknown field"),
    ({"kind": "text", "text": "t"}, "id: missing"),
    ({"id": "x", "kind": "text", "text": ""}, "text: must be a non-empty string, not ''"),
    ({"id": "x", "kind": "text", "text": 5}, "text: must be a non-empty string, not 5"),
    ({"id": "x", "kind": "choice", "context": "c", "choices": ["a"], "answer": 0}, "choices: needs 2 to"),
    ({"id": "x", "kind": "choice", "context": "c", "choices": ["a", "b"], "answer": 2}, "answer: index 2 is out of range"),
    ({"id": "x", "kind": "choice", "context": "c", "choices": ["a", "b"], "answer": True}, "answer: missing or not"),
    ({"id": "x", "kind": "choice", "context": "c", "choices": ["a", "a"], "answer": 0}, "choices: contains duplicates"),
    ({"id": "x", "kind": "choice", "context": "c", "choices": ["a", ""], "answer": 0}, "choices[1]: must be"),
    ({"id": "x", "kind": "generate", "prompt": "p", "expected": "e", "match": "fuzzy"},
     "match: 'fuzzy' is not allowed (allowed: exact, contains, regex, json)"),
    ({"id": "x", "kind": "generate", "prompt": "p", "expected": "(", "match": "regex"}, "expected: regular expression: not a pattern qcheck can run"),
    ({"id": "x", "kind": "generate", "prompt": "p", "expected": "e", "max_new_tokens": 0}, "max_new_tokens: must be"),
    ({"id": "x", "kind": "generate", "prompt": "p", "expected": "e", "max_new_tokens": 10**6}, "max_new_tokens"),
])
def test_bad_line_names_file_line_and_field(tmp_path, line, message):
    path = _write(tmp_path, [GOOD[0], line])
    with pytest.raises(InputError) as err:
        load_tasks([str(path)])
    text = str(err.value)
    assert text.startswith(f"{path}:2: ")
    assert message in text


def test_duplicate_ids_across_files_name_both_places(tmp_path):
    a = _write(tmp_path, [GOOD[0]], "a.jsonl")
    b = _write(tmp_path, [GOOD[1], {**GOOD[2], "id": "a"}], "b.jsonl")
    with pytest.raises(InputError, match=r"b\.jsonl:2: id: duplicate id 'a' \(first at .*a\.jsonl:1\)"):
        load_tasks([str(a), str(b)])


def test_non_utf8_and_empty_and_missing(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"id": "a", "kind": "text", "text": "\xff"}\n')
    with pytest.raises(InputError, match=r"bad\.jsonl:1: not UTF-8"):
        load_tasks([str(bad)])
    empty = _write(tmp_path, ["# nothing"], "empty.jsonl")
    with pytest.raises(InputError, match="no items"):
        load_tasks([str(empty)])
    with pytest.raises(UsageError, match="no such file, and not a bundled set"):
        load_tasks([str(tmp_path / "nope.jsonl")])


def test_match_rules():
    [exact, contains, regex] = parse_jsonl("\n".join(json.dumps(x) for x in [
        {"id": "e", "kind": "generate", "prompt": "p", "expected": "Paris", "match": "exact", "ignore_case": True},
        {"id": "c", "kind": "generate", "prompt": "p", "expected": "42", "match": "contains"},
        {"id": "r", "kind": "generate", "prompt": "p", "expected": r"^\s*4\d\b", "match": "regex"},
    ]).encode(), "mem", "m")
    assert exact.is_correct("  paris\n") and not exact.is_correct("Paris, France")
    assert contains.is_correct("The answer is 42.") and not contains.is_correct("4 2")
    assert regex.is_correct("47 apples") and not regex.is_correct("147")


def test_bundled_sets_are_valid_varied_and_default():
    names = bundled_names()
    assert {"prose", "code", "arithmetic", "json_extraction", "knowledge", "structured_output"} <= set(names)
    ts = load_tasks([])  # default: every bundled set
    assert ts.counts["text"] >= 15 and ts.counts["choice"] >= 25 and ts.counts["generate"] >= 15
    assert len(ts.items) <= 200  # small enough for a CPU run of a small model
    # several languages in the prose set
    texts = " ".join(i.text or "" for i in ts.items if i.kind == "text")
    for marker in ("Der Zug", "Au printemps", "今天", "Зимой"):
        assert marker in texts
    assert load_tasks(["arithmetic"]).items[0].task == "arithmetic"
