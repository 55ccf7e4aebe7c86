"""Task files for ``qcheck eval``: JSONL, one item per line, validated with ``file:line: field: problem`` errors.

Three kinds of item (see docs/eval.md):

- ``{"kind": "text", "id", "text"}``: a passage scored teacher-forced (KL divergence, perplexity).
- ``{"kind": "choice", "id", "context", "choices": [...], "answer": i}``: log-likelihood multiple choice
  as lm-evaluation-harness scores it (acc, acc_norm by characters, acc_bytes by UTF-8 bytes).
- ``{"kind": "generate", "id", "prompt", "expected", "match": "exact"|"contains"|"regex"|"json"}``: greedy
  decoding with a token budget; correct when the output matches, and compared with the reference's output.
  ``json`` items may give a JSON Schema (``schema``) and make ``expected`` (any JSON value) optional
  (``qcheck.eval.jsonmatch``).

Optional on every item: ``task`` (group name for per-task accuracy; default the file's stem) and
``doc`` (cluster id for the bootstrap, default the item id). ``choice`` items may set ``delimiter``
(default ``" "``, lm-eval's ``target_delimiter``); ``generate`` items ``max_new_tokens`` (default 32).
Unknown fields are errors, so a typo never silently drops a setting.

A line without ``kind`` may be a bare ``{"text": ...}`` or an lm-evaluation-harness shape (``--log_samples``
output, ARC/MMLU ``question``/``choices``, HellaSwag ``ctx``/``endings``); ``qcheck.eval.lmeval`` maps it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qcheck import validate
from qcheck.errors import InputError, UsageError
from qcheck.eval.jsonmatch import JsonOutcome, canonical, check_output, check_schema, schema_problem
from qcheck.eval.lmeval import SHAPES, from_foreign

KINDS = ("text", "choice", "generate")
MATCH_RULES = ("exact", "contains", "regex", "json")

#: bounds for hostile or accidental input
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_LINE_BYTES = 4 * 1024 * 1024
MAX_ITEMS = 100_000
MAX_CHOICES = 64
MAX_NEW_TOKENS = 4096
MAX_ID_CHARS = 200

_COMMON = {"id", "kind", "task", "doc"}
_FIELDS = {
    "text": _COMMON | {"text"},
    "choice": _COMMON | {"context", "choices", "answer", "delimiter"},
    "generate": _COMMON | {"prompt", "expected", "match", "max_new_tokens", "ignore_case", "schema"},
}


@dataclass(frozen=True)
class TaskItem:
    """One validated item; ``source`` is ``file:line`` for messages."""

    id: str
    kind: str
    task: str
    doc: str
    source: str
    text: str | None = None
    context: str | None = None
    choices: tuple[str, ...] = ()
    answer: int | None = None
    delimiter: str = " "
    prompt: str | None = None
    expected: str | None = None
    match: str = "exact"
    ignore_case: bool = False
    max_new_tokens: int = 32
    #: ``json`` items: the JSON Schema the output must satisfy, as canonical JSON text (None: any JSON);
    #: their ``expected`` is the canonical JSON text of the expected value (None: any valid value is correct)
    schema: str | None = None

    def is_correct(self, output: str) -> bool:
        """Whether a generated ``output`` satisfies this ``generate`` item's match rule."""
        assert self.kind == "generate"
        if self.match == "json":
            return self.json_check(output).correct
        assert self.expected is not None
        out, exp = output.strip(), self.expected
        if self.match == "regex":
            from qcheck.eval.patterns import PatternError, compile_pattern

            try:
                return compile_pattern(exp, self.ignore_case).search(out)
            except PatternError:  # an output longer than the bound for this pattern: not a match (docs/eval.md)
                return False
        if self.ignore_case:
            out, exp = out.casefold(), exp.casefold()
        if self.match == "exact":
            return out == exp.strip()
        return exp in out

    def json_check(self, output: str) -> JsonOutcome:
        """The ``json`` match of ``output``: parses, satisfies ``schema``, equals ``expected`` when given."""
        return check_output(output, self.schema, self.expected)


@dataclass
class TaskSet:
    """Items from one or more files, plus a content hash that keys the reference cache."""

    items: list[TaskItem]
    files: list[str]
    sha256: str
    counts: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        tasks: dict[str, int] = {}
        for item in self.items:
            tasks[item.task] = tasks.get(item.task, 0) + 1
        return {"files": self.files, "sha256": self.sha256, "items": len(self.items), "by_kind": self.counts,
                "by_task": tasks}


def bundled_dir() -> Path:
    from qcheck.data import data_dir

    return data_dir("evals")


def bundled_names() -> list[str]:
    """Names of the task sets shipped in ``evals/`` (file stems)."""
    try:
        return sorted(p.stem for p in bundled_dir().glob("*.jsonl"))
    except FileNotFoundError:
        return []


#: bundled sets run only when named (``--tasks long_context``): their items need ``--max-length`` in the thousands
OPT_IN = frozenset({"long_context"})


def resolve_task_paths(specs: list[str] | tuple[str, ...]) -> list[Path]:
    """Turn ``--tasks`` values into files: a path, or the name of a bundled set; none given = all bundled sets
    except the opt-in ones (``OPT_IN``)."""
    if not specs:
        paths = sorted(p for p in bundled_dir().glob("*.jsonl") if p.stem not in OPT_IN)
        if not paths:
            raise UsageError("no --tasks given and no bundled task sets are installed")
        return paths
    out: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if os.path.lexists(path) and not path.is_dir():
            out.append(path)  # read_task_file says what it is if not a regular file (a FIFO, a device, a loop)
            continue
        if path.is_dir():
            found = sorted(path.glob("*.jsonl"))
            if not found:
                raise UsageError(f"--tasks {spec}: the directory has no .jsonl files")
            out.extend(found)
            continue
        names = bundled_names()
        if spec in names:
            out.append(bundled_dir() / f"{spec}.jsonl")
            continue
        raise UsageError(f"--tasks {spec}: no such file, and not a bundled set (bundled: {', '.join(names) or 'none'})")
    return out


def load_tasks(specs: list[str] | tuple[str, ...] = ()) -> TaskSet:
    """Load and validate task files; the first problem found raises InputError ``file:line: field: problem``."""
    from qcheck.eval.patterns import reading

    paths = resolve_task_paths(specs)
    items: list[TaskItem] = []
    digest = hashlib.sha256()
    seen: dict[str, str] = {}
    with reading():  # the matching work of the files' patterns, bounded in all (qcheck.eval.patterns)
        for path in paths:
            data = read_task_file(path)
            digest.update(hashlib.sha256(data).digest())
            for item in parse_jsonl(data, str(path), default_task=path.stem):
                if item.id in seen:
                    raise InputError(f"id: duplicate id {item.id!r} (first at {seen[item.id]})", path=item.source)
                seen[item.id] = item.source
                items.append(item)
                if len(items) > MAX_ITEMS:
                    raise InputError(f"more than {MAX_ITEMS} items in the task set", path=item.source)
    if not items:
        raise InputError("the task files hold no items", path=", ".join(str(p) for p in paths))
    counts = {k: sum(1 for i in items if i.kind == k) for k in KINDS}
    return TaskSet(items=items, files=[str(p) for p in paths], sha256=digest.hexdigest(), counts=counts)


def read_task_file(path: Path) -> bytes:
    """The bytes of one task file: a regular file (a FIFO never blocks the run, /dev/zero is refused, not read to
    the end) of at most ``MAX_FILE_BYTES``. The one reader of task files, for ``qcheck eval`` and ``qcheck gate``."""
    from qcheck.source import LocalFileSource

    with LocalFileSource(path) as src:
        size = src.size or 0
        if size > MAX_FILE_BYTES:
            raise InputError(f"task file is {size} bytes, over the {MAX_FILE_BYTES}-byte limit", path=str(path))
        data = src.read_at(0, MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:  # pragma: no cover - grew while read
        raise InputError(f"task file is over the {MAX_FILE_BYTES}-byte limit", path=str(path))
    return data


def parse_jsonl(data: bytes, name: str, default_task: str) -> list[TaskItem]:
    """Parse JSONL bytes into items; blank lines and lines starting with ``#`` or ``//`` are skipped."""
    items: list[TaskItem] = []
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        where = f"{name}:{lineno}"
        if len(raw) > MAX_LINE_BYTES:
            raise InputError(f"line is {len(raw)} bytes, over the {MAX_LINE_BYTES}-byte limit", path=where)
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 (byte {exc.start})", path=where) from None
        if not line or line.startswith(("#", "//")):
            continue
        items.append(_validate(_parse_line(line, where), where, default_task, lineno))
    return items


#: how deep a task line may nest (a JSON Schema item nests up to jsonmatch.MAX_SCHEMA_DEPTH, inside the line's object)
MAX_LINE_NESTING = 72


def _parse_line(line: str, where: str) -> Any:
    """One task line's JSON value, parsed as qcheck parses every untrusted JSON (``qcheck.readers.jsonfile``): bounded
    nesting, no duplicate keys, no lone surrogates in strings (they cannot be written out), numbers Python can hold."""
    from qcheck.readers.jsonfile import check_strings, parse_json

    data = line.encode("utf-8")
    value, end = parse_json(data, where="", path=where, max_depth=MAX_LINE_NESTING)
    if data[end:].strip():
        raise InputError(f"invalid JSON: extra data after the value at byte {end}", path=where)
    check_strings(value, where="", path=where)
    return value


def _fail(where: str, fld: str, problem: str) -> InputError:
    return InputError(f"{fld}: {problem}", path=where)


def _at(where: str) -> validate.At:
    """The root of one task line, for ``qcheck.validate``: errors read ``file:line: field: problem``."""
    return validate.At(lambda fld, problem, allowed: _fail(
        where, fld, problem + (f" (allowed: {allowed})" if allowed else "")))


def _string(obj: dict[str, Any], key: str, where: str, *, required: bool = True, allow_empty: bool = False,
            default: str | None = None) -> str | None:
    if key not in obj:
        if required:
            raise _fail(where, key, "missing")
        return default
    return validate.string(obj[key], _at(where).key(key), empty=allow_empty, strip=False)


def _validate(obj: Any, where: str, default_task: str, lineno: int = 0) -> TaskItem:
    if not isinstance(obj, dict):
        raise InputError(f"each line must be a JSON object, not {type(obj).__name__}", path=where)
    if "kind" not in obj:  # a bare text line or an lm-evaluation-harness shape (qcheck/eval/lmeval.py)
        named = obj.get("task")
        task = named if isinstance(named, str) and named.strip() else default_task
        converted = from_foreign(obj, _at(where), task, lineno)
        if converted is None:
            raise _fail(where, "kind", f"missing (one of {', '.join(KINDS)}), and the line is none of the "
                                       f"lm-eval shapes qcheck reads ({SHAPES})")
        obj = converted
    kind = obj.get("kind")
    if kind not in KINDS:
        raise _fail(where, "kind", f"{kind!r} is not one of {', '.join(KINDS)}")
    unknown = sorted(set(obj) - _FIELDS[kind])
    if unknown:
        raise _fail(where, unknown[0], f"unknown field for a {kind} item (allowed: {', '.join(sorted(_FIELDS[kind]))})")
    item_id = obj.get("id")
    if isinstance(item_id, int) and not isinstance(item_id, bool):
        item_id = str(item_id)
    if not isinstance(item_id, str) or not item_id.strip():
        raise _fail(where, "id", "missing or not a non-empty string")
    if len(item_id) > MAX_ID_CHARS or "\n" in item_id:
        raise _fail(where, "id", f"must be one line of at most {MAX_ID_CHARS} characters")
    task = _string(obj, "task", where, required=False, default=default_task) or default_task
    doc = _string(obj, "doc", where, required=False, default=item_id) or item_id
    common = {"id": item_id, "kind": kind, "task": task, "doc": doc, "source": where}

    if kind == "text":
        return TaskItem(text=_string(obj, "text", where), **common)

    if kind == "choice":
        context = _string(obj, "context", where, allow_empty=True)
        choices = obj.get("choices")
        if not isinstance(choices, list):
            raise _fail(where, "choices", "missing or not a list")
        if not 2 <= len(choices) <= MAX_CHOICES:
            raise _fail(where, "choices", f"needs 2 to {MAX_CHOICES} choices, got {len(choices)}")
        for i, choice in enumerate(choices):
            validate.string(choice, _at(where).key("choices").index(i))
        if len(set(choices)) != len(choices):
            raise _fail(where, "choices", "contains duplicates")
        answer = obj.get("answer")
        if not isinstance(answer, int) or isinstance(answer, bool):
            raise _fail(where, "answer", "missing or not an integer index into choices")
        if not 0 <= answer < len(choices):
            raise _fail(where, "answer", f"index {answer} is out of range for {len(choices)} choices")
        delimiter = _string(obj, "delimiter", where, required=False, allow_empty=True, default=" ")
        return TaskItem(context=context, choices=tuple(choices), answer=answer, delimiter=delimiter or "", **common)

    return _generate_item(obj, where, common)


def _generate_item(obj: dict[str, Any], where: str, common: dict[str, Any]) -> TaskItem:
    """A ``generate`` item's own fields (``common``: id, kind, task, doc, source)."""
    prompt = _string(obj, "prompt", where)
    match = validate.choice(obj.get("match", "exact"), _at(where).key("match"), MATCH_RULES)
    if match == "json":
        expected, schema = _json_fields(obj, where)
    else:
        if "schema" in obj:
            raise _fail(where, "schema", "a JSON Schema is for match \"json\" items")
        expected, schema = _string(obj, "expected", where), None
    ignore_case = validate.boolean(obj.get("ignore_case", False), _at(where).key("ignore_case"))
    if match == "regex":
        from qcheck.eval.patterns import PatternError, compile_pattern

        try:
            compile_pattern(expected or "", ignore_case)
        except PatternError as exc:
            raise _fail(where, "expected", f"regular expression: {exc}") from None
    max_new = validate.integer(obj.get("max_new_tokens", 32), _at(where).key("max_new_tokens"), minimum=1,
                               maximum=MAX_NEW_TOKENS)
    return TaskItem(prompt=prompt, expected=expected, match=match, ignore_case=ignore_case,
                    max_new_tokens=max_new, schema=schema, **common)


def _json_fields(obj: dict[str, Any], where: str) -> tuple[str | None, str | None]:
    """A ``json`` item's ``expected`` (any JSON value, optional) and ``schema`` (a JSON Schema, optional), as
    canonical JSON text; the expected value must itself satisfy the schema."""
    schema = None
    if "schema" in obj:
        problem = check_schema(obj["schema"])
        if problem:
            raise _fail(where, "schema", problem)
        schema = canonical(obj["schema"])
    expected = canonical(obj["expected"]) if "expected" in obj else None
    if expected is not None and schema is not None:
        problem = schema_problem(obj["expected"], schema)
        if problem:
            raise _fail(where, "expected", f"does not satisfy the item's own {problem}")
    return expected, schema
