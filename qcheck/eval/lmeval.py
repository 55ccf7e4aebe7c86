"""Task lines in lm-evaluation-harness shapes -> qcheck items, so users can reuse task files they already have.

A line without ``kind`` is recognised by its keys (documented in docs/eval.md, "Reusing lm-eval files"):

- ``{"text": ...}`` (optionally ``id``/``task``/``doc``): a ``text`` item.
- lm-eval ``--log_samples`` lines (``doc_id``, ``doc``, ``arguments``, ``target``): the loglikelihood requests
  are ``(context, continuation)`` pairs, as a list (older lm-eval) or ``{"gen_args_N": {"arg_0", "arg_1"}}``;
  the context is the first request's, the choices are the continuations, the gold is ``target``.
- ``question`` + ``choices`` (ARC ``{"text": [...], "label": [...]}`` or an MMLU list) + ``answerKey`` /
  ``answer`` / ``label`` (letter, choice label, or index): the prompt lm-eval's ARC and ``mmlu_continuation``
  tasks use, ``"Question: {question}\\nAnswer:"``, with the choice texts as continuations.
- HellaSwag ``ctx`` + ``endings`` + ``label``: lm-eval's hellaswag preprocessing of ``activity_label: ctx``
  and of each ending.
- ``context`` + ``choices`` + ``answer``: a qcheck ``choice`` item that omits ``kind``.

The result is a qcheck item (a dict) that ``qcheck.eval.tasks`` then validates like any other line. Fields of
these shapes that qcheck does not use (``resps``, ``metrics``, ``subject``...) are ignored; a value qcheck needs
but cannot read is an error naming its field (``doc.choices.label[2]``, ``answerKey``).
"""

from __future__ import annotations

import re
from typing import Any

from qcheck import validate

#: the shapes, for the error when a line has no ``kind`` and matches none
SHAPES = "text; doc_id+doc+arguments (lm-eval --log_samples); question+choices; ctx+endings; context+choices+answer"
_TEXT_KEYS = {"id", "task", "doc", "text"}
_NATIVE_CHOICE = {"id", "task", "doc", "context", "choices", "answer", "delimiter"}
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def from_foreign(obj: dict[str, Any], at: validate.At, task: str, lineno: int) -> dict[str, Any] | None:
    """The qcheck item for a line without ``kind``, or None when no known shape matches.

    Ids: the line's own (``id``; HellaSwag ``ind``; lm-eval ``doc_id`` as ``task:doc_id``), else ``task:line``.
    """
    item_id = f"{task}:{lineno}"
    keys = set(obj)
    if "text" in keys and keys <= _TEXT_KEYS:
        return {"id": item_id} | obj | {"kind": "text"}
    if {"context", "choices", "answer"} <= keys and keys <= _NATIVE_CHOICE:
        return {"id": item_id} | obj | {"kind": "choice"}
    if "arguments" in keys and isinstance(obj.get("doc"), dict):
        return _log_sample(obj, at, item_id)
    if {"ctx", "endings"} <= keys:
        return _hellaswag(obj, at, _own_id(obj, ("id",), _own_id(obj, ("ind",), "", f"{task}:") or item_id))
    if {"question", "choices"} <= keys:
        return _question(obj, at, _own_id(obj, ("id",), item_id))
    if "text" in keys:
        extra = sorted(keys - _TEXT_KEYS)[0]
        at.key(extra).fail(f"unknown field for a text item without kind (allowed: {', '.join(sorted(_TEXT_KEYS))})")
    return None


def _own_id(obj: dict[str, Any], keys: tuple[str, ...], default: str, prefix: str = "") -> str:
    for key in keys:
        value = obj.get(key)
        if (isinstance(value, str) and value.strip()) or (isinstance(value, int) and not isinstance(value, bool)):
            return f"{prefix}{value}"
    return default


def _choice(item_id: str, context: str, choices: list[str], answer: int, delimiter: str = " ") -> dict[str, Any]:
    return {"id": item_id, "kind": "choice", "context": context, "choices": choices, "answer": answer,
            "delimiter": delimiter}


def _strings(value: Any, at: validate.At) -> list[str]:
    if not isinstance(value, list):
        at.fail(f"must be a list of strings, not {validate.type_name(value)}")
    return [validate.string(v, at.index(i), strip=False) for i, v in enumerate(value)]


def _gold(value: Any, at: validate.At, choices: list[str], labels: list[str] | None = None) -> int:
    """An answer given as an index (int or digit string), a choice label (``"B"``), or the gold choice's text."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        at.fail(f"must be an index, a letter or a choice label, not {validate.shown(value)}")
    if isinstance(value, str):
        text = value.strip()
        if labels is not None and text in labels:
            return labels.index(text)
        if text.isascii() and text.isdigit():
            value = int(text)
        elif len(text) == 1 and text.upper() in _LETTERS[: len(choices)] and labels is None:
            value = _LETTERS.index(text.upper())
        elif text in [c.strip() for c in choices]:
            return [c.strip() for c in choices].index(text)
        else:
            allowed = f"labels {', '.join(labels)}" if labels else "an index, a letter or a choice's text"
            at.fail(f"{validate.shown(value)} is not one of the choices ({allowed})")
    if not 0 <= value < len(choices):
        at.fail(f"index {value} is out of range for {len(choices)} choices")
    return value


def _requests(arguments: Any, at: validate.At) -> list[tuple[str, str]]:
    """lm-eval's loglikelihood requests, from either serialisation of ``arguments``."""
    pairs: list[tuple[Any, Any, validate.At, validate.At, validate.At]] = []
    if isinstance(arguments, dict):
        for key in sorted(arguments, key=_gen_args_order):
            value = arguments[key]
            if not isinstance(value, dict):
                at.key(key).fail(f"must be a table of arg_0, arg_1, not {validate.type_name(value)}")
            pairs.append((value.get("arg_0"), value.get("arg_1"), at.key(key), at.key(key).key("arg_0"),
                          at.key(key).key("arg_1")))
    elif isinstance(arguments, list):
        for i, value in enumerate(arguments):
            if not isinstance(value, list):
                at.index(i).fail(f"must be a [context, continuation] list, not {validate.type_name(value)}")
            pairs.append((value[0] if value else None, value[1] if len(value) > 1 else None, at.index(i),
                          at.index(i).index(0), at.index(i).index(1)))
    else:
        at.fail(f"must be a list or a table of requests, not {validate.type_name(arguments)}")
    out: list[tuple[str, str]] = []
    for context, continuation, where, context_at, continuation_at in pairs:
        if isinstance(continuation, dict):
            where.fail("is a generate_until request; only multiple-choice (loglikelihood) samples can be imported")
        if continuation is None:
            where.fail("has no continuation; only multiple-choice (loglikelihood) samples can be imported")
        out.append((validate.string(context, context_at, empty=True, strip=False),
                    validate.string(continuation, continuation_at, strip=False)))
    if len(out) < 2:
        at.fail(f"needs at least 2 loglikelihood requests (one per choice), got {len(out)}")
    contexts = {c for c, _ in out}
    if len(contexts) != 1:
        at.fail("the requests have different contexts; only one-context multiple choice can be imported")
    return out


def _gen_args_order(key: str) -> tuple[int, str]:
    match = re.fullmatch(r"gen_args_(\d+)", key)
    return (int(match.group(1)) if match else 1 << 30, key)


def _log_sample(obj: dict[str, Any], at: validate.At, item_id: str) -> dict[str, Any]:
    requests = _requests(obj["arguments"], at.key("arguments"))
    context = requests[0][0]
    continuations = [c for _, c in requests]
    delimiter = ""
    if all(c[:1] == " " and c[1:].strip() for c in continuations):  # lm-eval's target_delimiter, split back off
        delimiter, continuations = " ", [c[1:] for c in continuations]
    if "target" not in obj:
        at.key("target").fail("missing (the gold choice)")
    answer = _gold(obj["target"], at.key("target"), continuations)
    doc_id = obj.get("doc_id")
    if isinstance(doc_id, int) and not isinstance(doc_id, bool):
        item_id = f"{item_id.rsplit(':', 1)[0]}:{doc_id}"
    return _choice(item_id, context, continuations, answer, delimiter)


def _question(obj: dict[str, Any], at: validate.At, item_id: str) -> dict[str, Any]:
    question = validate.string(obj["question"], at.key("question"))
    raw = obj["choices"]
    labels: list[str] | None = None
    if isinstance(raw, dict):  # ARC: {"text": [...], "label": ["A", "B", ...]}
        choices = _strings(raw.get("text"), at.key("choices").key("text"))
        if "label" in raw:
            labels = [s.strip() for s in _strings(raw["label"], at.key("choices").key("label"))]
            if len(labels) != len(choices):
                at.key("choices").key("label").fail(f"has {len(labels)} labels for {len(choices)} choices")
    else:
        choices = _strings(raw, at.key("choices"))
    for key in ("answerKey", "answer", "label", "gold"):
        if key in obj:
            answer = _gold(obj[key], at.key(key), choices, labels)
            break
    else:
        at.key("answerKey").fail("missing (give answerKey, answer or label)")
    return _choice(item_id, f"Question: {question}\nAnswer:", choices, answer)


def _hellaswag_text(text: str) -> str:
    """lm-eval's hellaswag ``preprocess``: WikiHow artefacts out, double spaces collapsed."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def _hellaswag(obj: dict[str, Any], at: validate.At, item_id: str) -> dict[str, Any]:
    ctx = validate.string(obj["ctx"], at.key("ctx"), strip=False)
    if isinstance(obj.get("ctx_a"), str) and isinstance(obj.get("ctx_b"), str):  # lm-eval rebuilds ctx this way
        ctx = f"{obj['ctx_a']} {obj['ctx_b'].capitalize()}"
    activity = obj.get("activity_label")
    if activity is not None:
        ctx = f"{validate.string(activity, at.key('activity_label'), strip=False)}: {ctx}"
    endings = [_hellaswag_text(e) for e in _strings(obj["endings"], at.key("endings"))]
    for i, ending in enumerate(endings):
        if not ending.strip():
            at.key("endings").index(i).fail("is empty after lm-eval's hellaswag preprocessing")
    if "label" not in obj:
        at.key("label").fail("missing (the index of the gold ending)")
    return _choice(item_id, _hellaswag_text(ctx), endings, _gold(obj["label"], at.key("label"), endings))

