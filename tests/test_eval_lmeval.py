"""lm-evaluation-harness shaped task lines (``--log_samples`` output, ARC/MMLU, HellaSwag, bare text) read as
qcheck items: the mapping, its errors (file:line: field: problem, exit 2) and a real run through the CLI."""

from __future__ import annotations

import dataclasses
import json

import pytest

from qcheck.errors import InputError
from qcheck.eval.tasks import load_tasks, parse_jsonl

# The same three questions in each shape a user may already have on disk.
NATIVE = [
    {"id": "n-planet", "kind": "choice", "task": "native", "context": "Question: Which planet is red?\nAnswer:",
     "choices": ["Mars", "Venus", "Jupiter"], "answer": 0},
    {"id": "n-sum", "kind": "choice", "task": "native", "context": "Question: What is 12 + 30?\nAnswer:",
     "choices": ["24", "42"], "answer": 1},
    {"id": "n-sky", "kind": "choice", "task": "native", "context": "Question: What colour is the sky?\nAnswer:",
     "choices": ["green", "blue", "red", "black"], "answer": 1},
]


def _sample(doc_id: int, item: dict, *, layout: str) -> dict:
    """A line as lm-eval's ``--log_samples`` writes it for a multiple_choice task (the continuation carries
    the target delimiter; ``resps``/``filtered_resps`` hold the other model's log-likelihoods)."""
    requests = [(item["context"], " " + choice) for choice in item["choices"]]
    if layout == "gen_args":  # lm-eval 0.4.x: {"gen_args_N": {"arg_0": context, "arg_1": continuation}}
        arguments: object = {f"gen_args_{i}": {"arg_0": c, "arg_1": t} for i, (c, t) in enumerate(requests)}
    else:  # older lm-eval: a list of [context, continuation]
        arguments = [list(r) for r in requests]
    return {"doc_id": doc_id, "doc": {"question": item["context"], "choices": item["choices"]},
            "target": item["answer"], "arguments": arguments,
            "resps": [[[str(-1.5 - i), "False"]] for i in range(len(requests))],
            "filtered_resps": [[str(-1.5 - i), "False"] for i in range(len(requests))],
            "filter": "none", "metrics": ["acc", "acc_norm"], "doc_hash": "d", "prompt_hash": "p",
            "target_hash": "t", "acc": 1.0, "acc_norm": 0.0}


def _question(item: dict) -> str:
    return item["context"].removeprefix("Question: ").removesuffix("\nAnswer:")


def _arc(i: int, item: dict) -> dict:
    labels = ["A", "B", "C", "D"][: len(item["choices"])] if i != 1 else ["1", "2"]  # ARC also uses 1-4 labels
    return {"id": f"Mercury_{i}", "question": _question(item), "answerKey": labels[item["answer"]],
            "choices": {"text": item["choices"], "label": labels}}


def _mmlu(item: dict) -> dict:
    return {"question": _question(item), "subject": "misc", "choices": item["choices"], "answer": item["answer"]}


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _comparable(item) -> tuple:
    return item.context, item.choices, item.answer, item.delimiter


@pytest.mark.parametrize("shape", ["gen_args", "list", "arc", "mmlu"])
def test_each_shape_maps_to_the_same_choice_items(tmp_path, shape):
    if shape in ("gen_args", "list"):
        lines = [_sample(i, item, layout=shape) for i, item in enumerate(NATIVE)]
    elif shape == "arc":
        lines = [_arc(i, item) for i, item in enumerate(NATIVE)]
    else:
        lines = [_mmlu(item) for item in NATIVE]
    items = load_tasks([str(_write(tmp_path / f"samples_{shape}.jsonl", lines))]).items
    native = parse_jsonl("\n".join(json.dumps(x) for x in NATIVE).encode(), "n.jsonl", "n")
    assert [_comparable(i) for i in items] == [_comparable(i) for i in native]
    assert all(i.kind == "choice" and i.task == f"samples_{shape}" for i in items)
    expected_ids = {"gen_args": "samples_gen_args:0", "list": "samples_list:0", "arc": "Mercury_0",
                    "mmlu": "samples_mmlu:1"}
    assert items[0].id == expected_ids[shape]


def test_hellaswag_and_bare_text_lines(tmp_path):
    hellaswag = {"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.",
                 "ctx_b": "he", "ctx": "A man is sitting on a roof. he", "source_id": "activitynet~v_-JhWjGDPHMY",
                 "split": "val", "split_type": "indomain", "label": "3",
                 "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.",
                             "is holding a rubik's cube.", "starts pulling up roofing on a roof. [title] Be careful."]}
    path = _write(tmp_path / "hellaswag.jsonl", [hellaswag, {"text": "A plain passage with no kind or id."},
                                                 {"id": "mine", "text": "Another one.", "task": "prose"}])
    hs, text, named = load_tasks([str(path)]).items
    assert hs.id == "hellaswag:24" and hs.answer == 3 and hs.delimiter == " "
    assert hs.context == "Roof shingle removal: A man is sitting on a roof. He"  # lm-eval's capitalised ctx_b
    assert hs.choices[3] == "starts pulling up roofing on a roof.. Be careful."  # lm-eval's preprocess
    assert (text.kind, text.id, text.text, text.task) == ("text", "hellaswag:2", "A plain passage with no kind or id.",
                                                          "hellaswag")
    assert (named.id, named.task) == ("mine", "prose")


def test_native_items_keep_their_strictness():
    item = parse_jsonl(json.dumps({"id": "a", "context": "c", "choices": ["x", "y"], "answer": 1}).encode(), "f", "f")
    assert dataclasses.astuple(item[0])[:2] == ("a", "choice")
    with pytest.raises(InputError) as err:  # a typo in a kind-less native choice line is not silently dropped
        parse_jsonl(json.dumps({"id": "a", "context": "c", "choices": ["x", "y"], "answer": 1,
                                "delimter": ""}).encode(), "f", "f")
    assert "kind: missing" in str(err.value)


BAD = [
    ({"doc_id": 0, "doc": {}, "target": 5, "arguments": [["c", " a"], ["c", " b"]]},
     "target: index 5 is out of range for 2 choices"),
    ({"doc_id": 0, "doc": {}, "target": 0,
      "arguments": {"gen_args_0": {"arg_0": "Q:", "arg_1": {"until": ["\n"], "do_sample": False}}}},
     "arguments.gen_args_0: is a generate_until request; only multiple-choice (loglikelihood) samples can be imported"),
    ({"doc_id": 0, "doc": {}, "target": 0,
      "arguments": {"gen_args_0": {"arg_0": "c", "arg_1": " a"}, "gen_args_1": {"arg_0": "c", "arg_1": 7}}},
     "arguments.gen_args_1.arg_1: must be a non-empty string, not 7"),
    ({"doc_id": 0, "doc": {}, "target": 0, "arguments": [["c", " a"], ["d", " b"]]},
     "arguments: the requests have different contexts; only one-context multiple choice can be imported"),
    ({"doc_id": 0, "doc": {}, "arguments": [["c", " a"], ["c", " b"]]}, "target: missing (the gold choice)"),
    ({"question": "q", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "E"},
     "answerKey: 'E' is not one of the choices (labels A, B)"),
    ({"question": "q", "choices": {"text": ["a", "b"], "label": ["A"]}, "answerKey": "A"},
     "choices.label: has 1 labels for 2 choices"),
    ({"question": "q", "choices": ["a", "b"]}, "answerKey: missing (give answerKey, answer or label)"),
    ({"question": "q", "choices": ["a", None], "answer": 0}, "choices[1]: must be a non-empty string, not None"),
    ({"ctx": "c", "endings": ["a", "b"], "label": "x"}, "label: 'x' is not one of the choices"),
    ({"ctx": "c", "endings": ["a", "[header]"], "label": 0},
     "endings[1]: is empty after lm-eval's hellaswag preprocessing"),
    ({"prompt": "p"}, "kind: missing (one of text, choice, generate), and the line is none of the lm-eval shapes"),
]


@pytest.mark.parametrize("line, message", BAD)
def test_bad_foreign_lines_name_file_line_and_field(tmp_path, line, message):
    path = _write(tmp_path / "x.jsonl", [{"text": "fine"}, line])
    with pytest.raises(InputError) as err:
        load_tasks([str(path)])
    assert str(err.value).startswith(f"{path}:2: {message}")
    assert "\n" not in str(err.value)


# -------------------------------------------------------------------------------------------- the CLI
@pytest.mark.slow
def test_cli_runs_lmeval_files_beside_native_items(tmp_path, capsys):
    from qcheck.cli import main
    from support.eval_helpers import tiny_gguf, tiny_reference

    native = _write(tmp_path / "native.jsonl", NATIVE)
    samples = _write(tmp_path / "samples_quiz_2024-06-01T00-00-00.jsonl",
                     [_sample(i, item, layout="gen_args") for i, item in enumerate(NATIVE)])
    arc = _write(tmp_path / "arc.jsonl", [_arc(i, item) for i, item in enumerate(NATIVE)])
    args = ["eval", "-r", str(tiny_reference()), "-c", f"q8={tiny_gguf('Q8_0')}", "--no-cache", "--bootstrap",
            "100", "--json"]
    with pytest.raises(SystemExit) as exc:
        main([*args, "-t", str(native), "-t", str(samples), "-t", str(arc)])
    out = capsys.readouterr()
    assert exc.value.code == 0, out.err
    data = json.loads(out.out)
    assert data["tasks"]["items"] == 9 and data["tasks"]["by_kind"] == {"text": 0, "choice": 9, "generate": 0}
    per_task = data["candidates"][0]["per_task"]
    assert set(per_task) == {"native", samples.stem, "arc"}
    # the same questions in three shapes: the reference gets the same number right in each
    assert len({(t["n"], t["reference"]) for t in per_task.values()}) == 1

    bad = _write(tmp_path / "bad.jsonl", [BAD[1][0]])
    with pytest.raises(SystemExit) as exc:
        main([*args, "-t", str(bad)])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err == f"qcheck: error: {bad}:1: {BAD[1][1]}\n"
