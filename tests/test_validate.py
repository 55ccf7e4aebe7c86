"""The one validation helper: path-tracking, one-line errors in the caller's own error class, through every
validator that uses it (policy, matrix data, task lines, saved inspections)."""

from __future__ import annotations

import json

import pytest

from qcheck import validate
from qcheck.check import inspection_from_json
from qcheck.errors import InputError, QcheckError, UsageError
from qcheck.eval.tasks import parse_jsonl
from qcheck.matrix.schema import MatrixDataError, Where, check_keys, require_str
from qcheck.policy import PolicyError, parse_policy


class Boom(UsageError):
    pass


ROOT = validate.At(lambda path, problem, allowed: Boom(f"f.toml: {path}: {problem}"
                                                      + (f" (allowed: {allowed})" if allowed else "")))


def _message(fn, *args, **kwargs) -> str:
    with pytest.raises(Boom) as info:
        fn(*args, **kwargs)
    text = str(info.value)
    assert "\n" not in text and info.value.exit_code == 2
    return text


def test_paths_name_keys_and_indices():
    at = ROOT.key("engines").key("vllm").key("rules").index(3).key("when").key("gpu")
    assert at.path == "engines.vllm.rules[3].when.gpu"
    assert _message(validate.strings, 7, at) == ("f.toml: engines.vllm.rules[3].when.gpu: must be a string or a list "
                                                 "of strings, not an integer")
    assert _message(validate.strings, ["a", ""], at, single=False) == (
        "f.toml: engines.vllm.rules[3].when.gpu[1]: must be a non-empty string, not ''")
    assert validate.strings("h100", at) == ["h100"] and validate.strings([" a "], at) == ["a"]


@pytest.mark.parametrize(("fn", "value", "kwargs", "expected"), [
    (validate.integer, True, {"minimum": 1, "maximum": 9}, "must be an integer from 1 to 9, not True"),
    (validate.integer, 0, {"minimum": 1}, "must be an integer of at least 1, not 0"),
    (validate.integer, 2.0, {}, "must be an integer, not 2.0"),
    (validate.boolean, "yes", {}, "must be true or false, not 'yes' (allowed: true, false)"),
    (validate.choice, "fuzzy", {"allowed": ("exact", "regex")}, "'fuzzy' is not allowed (allowed: exact, regex)"),
    (validate.string, "x" * 500, {"empty": False}, None),
    (validate.string, ["x"], {}, "must be a non-empty string, not a list"),
    (validate.table, [1], {}, "must be a table, not a list"),
])
def test_each_getter_says_what_it_wanted_and_what_it_got(fn, value, kwargs, expected):
    at = ROOT.key("k")
    if expected is None:
        assert fn(value, at, **kwargs) == value
        return
    assert _message(fn, value, at, **kwargs) == f"f.toml: k: {expected}"


def test_a_long_bad_value_is_cut():
    text = _message(validate.integer, "9" * 1000, ROOT.key("k"))
    assert len(text) < 120 and text.endswith("...")


def test_unknown_keys_name_the_near_miss_and_the_allowed_keys():
    allowed = ("require-native", "models", "targets")
    assert _message(validate.check_keys, {"require_native": 1}, allowed, ROOT) == (
        "f.toml: require_native: unknown key; did you mean 'require-native'? (allowed: require-native, models, "
        "targets)")
    assert _message(validate.check_keys, {"modles": 1}, allowed, ROOT.key("t")).startswith(
        "f.toml: t.modles: unknown key; did you mean 'models'?")
    assert _message(validate.check_keys, {}, allowed, ROOT, required=("models",)) == "f.toml: models: missing"


def test_every_validator_reports_through_it(tmp_path):
    with pytest.raises(PolicyError, match=r"^qcheck.toml: targets\[0\].gpu: must be a string or a list of strings, "
                                          r"not an integer$"):
        parse_policy({"models": ["org/name"], "targets": [{"engine": "vllm", "gpu": 3}]}, "qcheck.toml", tmp_path)
    where = Where("matrices/engines/x.toml", "rule 'r' (#2)")
    with pytest.raises(MatrixDataError, match=r"^matrix data error: matrices/engines/x.toml: rule 'r' \(#2\): "
                                              r"\[bad-type\] kernel: must be a non-empty string, not 4$"):
        require_str({"kernel": 4}, "kernel", where)
    with pytest.raises(MatrixDataError, match=r"\[unknown-key\] statuss: unknown key; did you mean 'status'\?"):
        check_keys({"statuss": "native"}, {"id", "status"}, set(), where)
    with pytest.raises(MatrixDataError, match=r"\[missing-key\] id: missing required key$"):
        check_keys({}, {"id"}, {"id"}, where)
    line = json.dumps({"id": "x", "kind": "generate", "prompt": "p", "expected": "e", "max_new_tokens": 0})
    with pytest.raises(InputError, match=r"^t.jsonl:1: max_new_tokens: must be an integer from 1 to 4096, not 0$"):
        parse_jsonl(line.encode(), "t.jsonl", "t")
    data = {"schema": "qcheck.inspection/1", "path": "x", "container": "gguf", "quantization": {"method": "gguf"},
            "files": [{"name": "a", "size_bytes": "big", "kind": "gguf"}]}
    with pytest.raises(InputError, match=r"^x.json: files\[0\].size_bytes: must be an integer, not a string$"):
        inspection_from_json(data, "x.json")
    assert issubclass(PolicyError, QcheckError) and issubclass(MatrixDataError, QcheckError)
