"""The ``json`` match kind of ``generate`` items: does the output parse as JSON, does the value satisfy the item's
JSON Schema, and (when the item gives ``expected``) is it that value?

Why strict: an agent or an extraction pipeline hands the model's text to a JSON parser, and JSON that almost
parses (a missing brace, a trailing comma, a second object on the same line) fails there every time. The rule:

- the output, after leading whitespace, must begin with one complete JSON value (``json.JSONDecoder.raw_decode``);
- what follows the value must be empty or begin with a line break (a base model continuing a few-shot pattern on
  the next line); anything else on the same line (``{"a": 1}}``, ``{"a": 1} and more``) makes the output invalid;
- no code fence is stripped: an output that starts with a Markdown fence is not JSON.

The schema is any JSON Schema (draft 4 to 2020-12, by its ``$schema``; 2020-12 when absent), checked with
``jsonschema`` when the task file is read. References must stay inside the item's schema (``#...``): a schema is
never allowed to make qcheck fetch anything. Its ``pattern`` and ``patternProperties`` are run by
``qcheck.eval.patterns`` (RE2, bounded work), never by Python's backtracking ``re``. ``expected`` is compared as a JSON value (object key order does not
matter; ``1`` equals ``1.0``, ``true`` is not ``1``).
"""

from __future__ import annotations

import functools
import json
import warnings
from dataclasses import dataclass
from typing import Any

from qcheck.errors import require

#: JSON Schema keywords that reference another schema by URI; only fragments of the item's own schema are allowed
REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
#: how deep a schema may nest (a deeper one is refused when the task file is read)
MAX_SCHEMA_DEPTH = 64

_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class JsonOutcome:
    """What a ``json`` item's check found in one output."""

    #: the output is JSON and satisfies the schema (if any)
    valid: bool
    #: valid, and equal to ``expected`` when the item gives one
    correct: bool
    #: why not valid, or why not correct (None when correct)
    problem: str | None = None


def parse_output(text: str) -> tuple[bool, Any, str | None]:
    """(parsed, value, problem): the JSON value the output begins with, by the rule in the module docstring."""
    start = len(text) - len(text.lstrip())
    if start == len(text):
        return False, None, "empty output"
    try:
        value, end = _DECODER.raw_decode(text, start)
    except json.JSONDecodeError as exc:
        return False, None, f"not JSON: {exc.msg} at character {exc.pos}"
    except RecursionError:
        return False, None, "not JSON: nested too deeply"
    rest = text[end:]
    head = rest.lstrip(" \t")
    if head and head[0] not in "\r\n":
        return False, None, f"text after the JSON value on the same line: {head[:20]!r}"
    return True, value, None


def json_equal(a: Any, b: Any) -> bool:
    """Equality of two parsed JSON values: numbers by value, booleans apart from numbers, objects by key set."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def canonical(value: Any) -> str:
    """A JSON text for ``value`` that is stable (sorted keys): how items keep their schema and expected value."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def check_schema(schema: Any) -> str | None:
    """Why ``schema`` cannot be used (one line), or None: it must be an object or a boolean, a valid schema of its
    draft, at most ``MAX_SCHEMA_DEPTH`` deep, with every reference a fragment of itself that resolves."""
    if not isinstance(schema, (dict, bool)):
        return "must be a JSON Schema (an object or true/false)"
    try:
        problem = _walk_refs(schema, schema, 0)
    except RecursionError:
        problem = f"nests deeper than {MAX_SCHEMA_DEPTH} levels"
    if problem:
        return problem
    from qcheck.eval.patterns import schema_pattern_problem

    problem = schema_pattern_problem(schema)
    if problem:
        return problem
    cls = _validator_class(schema)
    if cls is None:
        return f"$schema {str(schema.get('$schema'))[:80]!r} is not a JSON Schema draft jsonschema knows" \
            if isinstance(schema, dict) else None
    exceptions = require("jsonschema", "eval", "a JSON Schema in a json match item").exceptions
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        return f"not a valid JSON Schema{' at ' + where if where else ''}: {exc.message[:160]}"
    return None


def _walk_refs(node: Any, resource: Any, depth: int) -> str | None:
    """Every reference in the schema must be a fragment (``#``, ``#/json/pointer`` or ``#anchor``) of the schema
    resource it sits in (the nearest enclosing object with ``$id``, else the whole schema)."""
    if depth > MAX_SCHEMA_DEPTH:
        return f"nests deeper than {MAX_SCHEMA_DEPTH} levels"
    if isinstance(node, list):
        for child in node:
            problem = _walk_refs(child, resource, depth + 1)
            if problem:
                return problem
        return None
    if not isinstance(node, dict):
        return None
    if depth and isinstance(node.get("$id"), str):
        resource = node
    for key in REF_KEYWORDS:
        ref = node.get(key)
        if key in node and not isinstance(ref, str):
            return f"{key} must be a string"
        if isinstance(ref, str):
            if not ref.startswith("#"):
                return (f"{key} {ref[:80]!r}: only references inside the item's schema ('#/$defs/...') are "
                        "allowed; qcheck never fetches a schema")
            if not _resolves(ref[1:], resource):
                return f"{key} {ref[:80]!r} does not resolve inside the schema"
    for child in node.values():
        problem = _walk_refs(child, resource, depth + 1)
        if problem:
            return problem
    return None


def _resolves(fragment: str, resource: Any) -> bool:
    """Whether a JSON pointer (``/a/b``) or a plain-name anchor resolves in ``resource``."""
    from urllib.parse import unquote

    fragment = unquote(fragment)
    if not fragment:
        return True
    if not fragment.startswith("/"):
        return _has_anchor(resource, fragment, 0)
    node = resource
    for raw in fragment[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isascii() and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def _has_anchor(node: Any, name: str, depth: int) -> bool:
    if depth > MAX_SCHEMA_DEPTH:
        return False
    if isinstance(node, dict):
        if node.get("$anchor") == name or node.get("$dynamicAnchor") == name or node.get("$id") == "#" + name:
            return True
        return any(_has_anchor(v, name, depth + 1) for v in node.values())
    if isinstance(node, list):
        return any(_has_anchor(v, name, depth + 1) for v in node)
    return False


def _validator_class(schema: Any) -> Any:
    """The jsonschema validator class of the schema's draft (2020-12 when it names none); None for an unknown one."""
    jsonschema = require("jsonschema", "eval", "a JSON Schema in a json match item")
    default = jsonschema.Draft202012Validator
    if not isinstance(schema, dict) or "$schema" not in schema:
        return default
    with warnings.catch_warnings():  # jsonschema warns about an unknown $schema before falling back
        warnings.simplefilter("ignore")
        cls = jsonschema.validators.validator_for(schema, default=None)
    return cls


@functools.lru_cache(maxsize=256)
def _validator(schema_text: str) -> Any:
    """The schema's validator, with every regular expression run by ``qcheck.eval.patterns`` (bounded)."""
    from qcheck.eval.patterns import bounded_validator

    schema = json.loads(schema_text)
    return bounded_validator(_validator_class(schema))(schema)


def schema_problem(value: Any, schema_text: str) -> str | None:
    """Why ``value`` does not satisfy the schema (its first error, one line), or None."""
    try:
        error = next(iter(_validator(schema_text).iter_errors(value)), None)
    except RecursionError:
        return "the value nests too deeply to validate"
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"schema: {where + ': ' if where else ''}{error.message[:160]}"


def check_output(text: str, schema_text: str | None, expected_text: str | None) -> JsonOutcome:
    """The ``json`` match of one output: parsed, schema-valid, and equal to ``expected`` when given."""
    parsed, value, problem = parse_output(text)
    if not parsed:
        return JsonOutcome(valid=False, correct=False, problem=problem)
    if schema_text is not None:
        problem = schema_problem(value, schema_text)
        if problem:
            return JsonOutcome(valid=False, correct=False, problem=problem)
    if expected_text is not None and not json_equal(value, json.loads(expected_text)):
        return JsonOutcome(valid=True, correct=False, problem="valid JSON, but not the expected value")
    return JsonOutcome(valid=True, correct=True)
