"""Generation behaviour (length, end-of-sequence, repetition, JSON validity) on models whose greedy output is set by
their weights (tests/support/forced_models.py): the reference answers ``[1]`` and stops; one candidate loops
``xyz`` and never stops, one runs on through 26 distinct letters, one answers ``[1,`` (broken JSON) and stops.
Each through transformers (simulated backend), llama.cpp in process and llama-cpp-python's HTTP server, with the
metric values computed by hand."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from qcheck.errors import InputError, UsageError
from qcheck.eval.gate import Thresholds
from qcheck.eval.generation import Behaviour, behaviour, repetition, summarise
from qcheck.eval.jsonmatch import check_output, json_equal, parse_output
from qcheck.eval.run import EvalConfig, run_eval
from qcheck.eval.tasks import load_tasks, parse_jsonl
from support.contract import validate

SCHEMA = {"type": "array", "items": {"type": "integer"}}
ITEMS = [
    {"id": "j1", "kind": "generate", "task": "json", "prompt": "Numbers as a JSON array:", "match": "json",
     "schema": SCHEMA, "max_new_tokens": 12},
    {"id": "j2", "kind": "generate", "task": "json", "prompt": "The list, as JSON:", "match": "json",
     "schema": SCHEMA, "max_new_tokens": 20},
    {"id": "c1", "kind": "generate", "task": "say", "prompt": "Say one:", "expected": "1", "match": "contains",
     "max_new_tokens": 8},
]
BUDGETS = [12, 20, 8]
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


# ---------------------------------------------------------------------------------------- the metrics by hand
def test_repetition_is_the_repeated_4gram_share_of_the_tail():
    assert repetition([1, 2, 3]) == 0.0  # no 4-gram at all
    assert repetition([1, 2, 3, 4, 5, 6]) == 0.0
    assert repetition([7] * 10) == pytest.approx(1 - 1 / 7)
    loop = [1, 2, 3] * 7  # a loop of period 3 over 21 tokens: 18 4-grams, 3 distinct
    assert repetition(loop) == pytest.approx(1 - 3 / 18)
    # only the tail counts: 300 distinct tokens, then a loop, measured over the last 256
    assert repetition(list(range(1000, 1300)) + [1, 2] * 20, tail=256) == pytest.approx(1 - (216 + 2) / 253)


def test_behaviour_counts_tokens_without_eos_and_knows_termination():
    b = behaviour([5, 6, 2], stop_ids=[2], text="ab")
    assert (b.tokens, b.terminated, b.repetition, b.json_valid) == (2, True, 0.0, None)
    assert behaviour([5, 6, 7], stop_ids=[2], text="abc").terminated is False
    assert behaviour([5, 6, 7], stop_ids=[], text="abc").terminated is None  # no end-of-sequence token: unknown


def test_summary_of_paired_behaviours():
    ref = Behaviour(tokens=4, terminated=True, repetition=0.0, json_valid=True)
    pairs = [(ref, Behaviour(tokens=8, terminated=False, repetition=0.5, json_valid=False)),
             (ref, Behaviour(tokens=4, terminated=True, repetition=0.0, json_valid=True)),
             (ref, Behaviour(tokens=2, terminated=True, repetition=0.1, json_valid=True)),
             (Behaviour(tokens=6, terminated=False, repetition=0.2), Behaviour(tokens=6, terminated=True,
                                                                              repetition=0.2))]
    m, iv = summarise(pairs, ["a", "b", "c", "d"], n_boot=200, seed=1)
    assert m["length_ratio"] == pytest.approx(20 / 18)
    assert m["generated_tokens_reference"] == 4.5 and m["generated_tokens"] == 5.0
    assert (m["termination_reference"], m["termination"]) == (0.75, 0.75)
    assert m["termination_drop"] == 0.0  # one lost, one gained: net zero, never -0.0
    assert math.copysign(1, m["termination_drop"]) == 1
    assert m["repetition_increase"] == pytest.approx((0.5 + 0.1) / 4)
    assert m["json_items"] == 3  # the fourth pair is not a json item
    assert (m["json_valid_reference"], m["json_valid"]) == (1.0, pytest.approx(2 / 3))
    assert m["json_validity_drop"] == pytest.approx(1 / 3)
    assert iv["length_ratio"]["method"] == "paired-bootstrap" and iv["termination_drop"]["method"] == "paired-normal"
    lo, hi = iv["json_validity_drop"]["low"], iv["json_validity_drop"]["high"]
    assert lo < 1 / 3 < hi
    empty, _ = summarise([], [], n_boot=200, seed=1)
    assert all(v is None for v in empty.values())


@pytest.mark.parametrize(("output", "valid"), [
    ('{"a": 1}', True), ('  [1, 2]\nText: the next example', True), ('"x"', True), ("3.5", True),
    ('{"a": 1}}', False), ('{"a": 1} and more', False), ('{"a": 1', False), ('{"a": 1,}', False),
    ('```json\n{"a": 1}\n```', False), ("", False), ("   \n", False), ("[" * 5000, False),
])
def test_json_output_rule(output, valid):
    assert parse_output(output)[0] is valid


def test_json_equality_and_schema_checks():
    assert json_equal({"a": 1, "b": [1.0]}, {"b": [1], "a": 1.0})
    assert not json_equal(True, 1) and not json_equal({"a": 1}, {"a": 1, "b": 2})
    schema = json.dumps({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}})
    assert check_output('{"n": 3}', schema, json.dumps({"n": 3})).correct
    wrong = check_output('{"n": 4}', schema, json.dumps({"n": 3}))
    assert wrong.valid and not wrong.correct
    bad = check_output('{"n": "3"}', schema, None)
    assert not bad.valid and bad.problem == "schema: n: '3' is not of type 'integer'"


@pytest.mark.parametrize(("fields", "message"), [
    ({"schema": {"$ref": "https://example.com/s.json"}}, "only references inside the item's schema"),
    ({"schema": {"$ref": "#/$defs/missing"}}, "does not resolve inside the schema"),
    ({"schema": {"type": "nonsense"}}, "not a valid JSON Schema at type"),
    ({"schema": {"$schema": "https://example.com/draft", "type": "integer"}}, "is not a JSON Schema draft"),
    ({"schema": 3}, "must be a JSON Schema"),
    ({"schema": {"type": "integer"}, "expected": "x"}, "expected: does not satisfy the item's own schema"),
])
def test_bad_json_items_name_the_line_and_field(fields, message):
    line = {"id": "x", "kind": "generate", "prompt": "p", "match": "json", **fields}
    with pytest.raises(InputError, match=message) as err:
        parse_jsonl(json.dumps(line).encode(), "t.jsonl", "t")
    assert str(err.value).startswith("t.jsonl:1: ")


def test_schema_only_with_json_match_and_expected_optional_only_there():
    with pytest.raises(InputError, match=r'schema: a JSON Schema is for match "json" items'):
        parse_jsonl(json.dumps({"id": "x", "kind": "generate", "prompt": "p", "expected": "e", "match": "exact",
                                "schema": {}}).encode(), "t.jsonl", "t")
    with pytest.raises(InputError, match="expected: missing"):
        parse_jsonl(json.dumps({"id": "x", "kind": "generate", "prompt": "p", "match": "regex"}).encode(), "t", "t")
    [item] = parse_jsonl(json.dumps({"id": "x", "kind": "generate", "prompt": "p", "match": "json",
                                     "expected": {"b": [1, 2], "a": None}}).encode(), "t.jsonl", "t")
    assert item.expected == '{"a":null,"b":[1,2]}' and item.is_correct('{"b": [1, 2.0], "a": null}')


def test_bundled_structured_output_set_loads_and_its_answers_are_correct():
    tasks = load_tasks(["structured_output"])
    assert len(tasks.items) >= 8 and all(i.match == "json" and i.schema for i in tasks.items)
    for item in tasks.items:  # every expected value satisfies its schema and is what a correct output must be
        assert item.expected is not None and item.is_correct(item.expected)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_thresholds_must_be_finite(value):
    with pytest.raises(UsageError, match="is not a finite number"):
        Thresholds.from_mapping({"max-length-ratio": value})


def test_generation_thresholds_are_policy_keys_and_validated(tmp_path, monkeypatch):
    from qcheck.policy import load_policy
    from support.gate_helpers import TEST_MATRIX, bf16_dir, q4_gguf

    monkeypatch.setenv("QCHECK_MATRICES", str(TEST_MATRIX))
    q4_gguf(tmp_path / "models" / "q4.gguf")
    bf16_dir(tmp_path / "ref")
    policy = tmp_path / "qcheck.toml"
    policy.write_text('models = ["models/q4.gguf"]\n[[targets]]\nengine = "tinycpp"\ngpu = ["cpu"]\n'
                      '[quality]\nreference = "ref"\nmax-termination-drop = 0.05\nmin-json-valid = 1.0\n'
                      "max-length-ratio = 1.5\nmin-length-ratio = 0.5\nmax-repetition-increase = 0.1\n"
                      "max-json-validity-drop = 0\nmin-coverage = 0.9\n")
    quality = load_policy(policy).quality
    assert quality is not None
    assert quality.thresholds.active() == {"max_termination_drop": 0.05, "min_json_valid": 1.0, "max_length_ratio": 1.5,
                                           "min_length_ratio": 0.5, "max_repetition_increase": 0.1,
                                           "max_json_validity_drop": 0.0, "min_coverage": 0.9}
    for bad, message in (("inf", "min-coverage=inf is not a finite number"), ("nan", "is not a finite number"),
                         ("1.5", "min-coverage=1.5 is outside [0.0, 1.0]")):
        policy.write_text(policy.read_text().rsplit("min-coverage", 1)[0] + f"min-coverage = {bad}\n")
        with pytest.raises(UsageError, match=re.escape(message)) as err:
            load_policy(policy)
        assert str(err.value).startswith(f"{policy}: quality.min-coverage: ")


# ---------------------------------------------------------------------------------------- real models
@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    from support.forced_models import fixed_output

    root = tmp_path_factory.mktemp("forced")
    return {"ref": fixed_output(root / "ref", "[1]"), "loop": fixed_output(root / "loop", "xyz", terminate=False),
            "runon": fixed_output(root / "runon", LETTERS, terminate=False),
            "broken": fixed_output(root / "broken", "[1,")}


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gen-tasks") / "gen.jsonl"
    path.write_text("\n".join(json.dumps(i) for i in ITEMS) + "\n")
    return path


def _loop_repetition() -> float:
    return sum(1 - 3 / (n - 3) for n in BUDGETS) / len(BUDGETS)


#: what each candidate must score against the "[1]" reference, computed by hand (3 generate items, 2 json)
EXPECTED = {
    "loop": {"length_ratio": 40 / 9, "termination_reference": 1.0, "termination": 0.0, "termination_drop": 1.0,
             "repetition_reference": 0.0, "repetition": _loop_repetition(), "repetition_increase": _loop_repetition(),
             "json_items": 2, "json_valid_reference": 1.0, "json_valid": 0.0, "json_validity_drop": 1.0,
             "accuracy_reference": 1.0, "accuracy": 0.0, "generated_tokens": 40 / 3, "generated_tokens_reference": 3.0},
    "runon": {"length_ratio": 40 / 9, "termination": 0.0, "termination_drop": 1.0, "repetition": 0.0,
              "repetition_increase": 0.0, "json_valid": 0.0, "json_validity_drop": 1.0, "accuracy": 0.0},
    "broken": {"length_ratio": 1.0, "termination": 1.0, "termination_drop": 0.0, "repetition": 0.0,
               "json_valid": 0.0, "json_validity_drop": 1.0, "accuracy": 1 / 3},
}
FAILING = {"loop": {"length_ratio", "termination_drop", "repetition_increase", "json_valid"},
           "runon": {"length_ratio", "termination_drop", "json_valid"}, "broken": {"json_valid"}}
GATE = ["--max-length-ratio", "2", "--max-termination-drop", "5%", "--max-repetition-increase", "0.1",
        "--min-json-valid", "1"]


def _check(metrics: dict, name: str) -> None:
    for key, value in EXPECTED[name].items():
        assert metrics[key] == pytest.approx(value, abs=1e-12), (name, key)


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    from qcheck.cli import main

    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_simulated_candidates_forced_to_loop_run_on_and_break_json(models, tasks, tmp_path, capsys):
    report = tmp_path / "r.html"
    base = ["eval", "-r", str(models["ref"]), "-t", str(tasks), "--cache-dir", str(tmp_path / "c"), "--bootstrap",
            "200", *(f"-c{n}={models[n]}" for n in ("loop", "runon", "broken")), *GATE]
    code, out, err = _cli([*base, "--json", "--report", str(report)], capsys)
    assert code == 1, err
    data = json.loads(out)
    validate(data, "eval")
    cands = {c["name"]: c for c in data["candidates"]}
    for name, cand in cands.items():
        _check(cand["metrics"], name)
        assert {f["metric"] for f in cand["gate"]["failures"]} == FAILING[name], name
        assert cand["coverage"]["items"] == cand["coverage"]["items_total"] == 3
    loop = cands["loop"]
    assert loop["simulation"]["activations"].startswith("not quantised by the format (unquantised weights:")
    assert loop["intervals"]["termination_drop"] == {"low": 1.0, "high": 1.0, "method": "paired-normal", "level": 0.95}
    [first, *_] = loop["generation_regressions"]
    assert first["lost"] == ["end-of-sequence", "valid JSON", "repetition"]
    assert first["candidate"] == {"tokens": 12, "terminated": False, "repetition": round(1 - 3 / 9, 6),
                                  "json_valid": False, "json_problem": "not JSON: Expecting value at character 0"}
    assert first["reference"] == {"tokens": 3, "terminated": True, "repetition": 0.0, "json_valid": True}
    assert first["candidate_output"] == "xyzxyzxyzxyz" and first["reference_output"] == "[1]"
    assert [g["lost"] for g in cands["broken"]["generation_regressions"]] == [["valid JSON"], ["valid JSON"]]
    assert cands["broken"]["generation_regressions"][0]["candidate"]["json_problem"].startswith("not JSON")
    assert "length_ratio" in loop["gate"]["failures"][0]["message"]
    html = report.read_text()
    assert "generated length ratio" in html and "JSON valid ref → cand" in html and "100.0% → 0.0%" in html
    assert "<td>j1</td><td>json</td><td>end-of-sequence, valid JSON, repetition</td><td>[1]</td>" in html
    assert "<td>3/3 items</td>" in html  # no token-scored items: no token count
    # the text report: the generation table and the failures
    code, text, _ = _cli(base, capsys)
    assert code == 1
    assert "generation (reference→candidate)" in text
    table = text.split("generation (reference→candidate)", 1)[1]
    row = next(line for line in table.splitlines() if line.startswith("loop "))
    cells = row.split()
    assert cells[:3] == ["loop", "3", "4.444"] and cells[5:] == ["100.0%→0.0%", "0.000→0.630", "100.0%→0.0%", "of",
                                                                 "2"], text
    assert "FAIL termination_drop 1 > max-termination-drop 0.05" in text
    assert "lost on j1 (end-of-sequence, valid JSON, repetition): reference '[1]' → candidate 'xyzxyzxyzxyz'" in text


def test_llamacpp_in_process_generates_the_same(models, tasks, tmp_path):
    pytest.importorskip("llama_cpp")
    from support.gguf_export import export_gguf

    ggufs = {n: export_gguf(models[n], tmp_path / f"{n}.gguf", "F32") for n in ("loop", "broken")}
    config = EvalConfig(reference=str(models["ref"]), tasks=[str(tasks)], cache_dir=str(tmp_path / "c"),
                        bootstrap=200, candidates=[f"{n}=llamacpp:{p}" for n, p in ggufs.items()])
    result = {c.name: c for c in run_eval(config).candidates}
    for name in ("loop", "broken"):
        assert result[name].backend == "llama.cpp"
        _check(result[name].metrics, name)


@pytest.mark.llamacpp
def test_llama_cpp_python_server_generates_the_same(models, tasks, tmp_path):
    """Over HTTP with text prompts: termination from the server's finish_reason ("length" for the loop, "stop" for
    the broken answer), lengths and repetition from the returned text."""
    pytest.importorskip("llama_cpp")
    from support.gguf_export import export_gguf
    from support.llamaserver import llama_server, server_available

    reason = server_available()
    if reason:
        pytest.skip(reason)
    for name in ("loop", "broken"):
        gguf = export_gguf(models[name], tmp_path / f"{name}.gguf", "F32")
        with llama_server(gguf, alias=name) as url:
            config = EvalConfig(reference=str(models["ref"]), tasks=[str(tasks)], cache_dir=str(tmp_path / "c"),
                                bootstrap=200, candidates=[f"{name}=endpoint:{url}#resume=0"])
            [cand] = run_eval(config).candidates
        assert cand.backend == "openai:llama-cpp-python"
        _check(cand.metrics, name)
