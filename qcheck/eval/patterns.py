"""Regular expressions from task files (``match: regex`` items, JSON Schema ``pattern`` / ``patternProperties``),
matched in bounded time.

Why: Python's ``re`` backtracks, so one pattern such as ``^(a+)+$`` against ``"aaa...a!"`` runs for longer than the
universe; a task file is input, and reading one hung ``qcheck eval`` and ``qcheck gate``. Patterns are run by RE2
(``google-re2``), whose automata match in time linear in the text for a given pattern, with no timing involved: a
pattern either compiles and matches in bounded work, or is refused when the task file is read, on every machine
alike (a time limit would make a CI gate's answer depend on the machine's load). The bounds:

- RE2 syntax: Python's ``re`` without backreferences and look-around (RE2 refuses them; they are what makes
  matching exponential); ``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII as in ECMA-262, which JSON Schema patterns
  follow; ``\\z`` for Python's ``\\Z``.
- at most ``MAX_PATTERN_CHARS`` characters, compiling to at most ``MAX_PROGRAM`` RE2 instructions (a counted
  repetition such as ``[a-z]{1000}`` is a thousand of them);
- one match does at most ``MAX_STEPS`` units of work, counted as program size x characters matched (RE2's slowest
  path visits each instruction once per character: ~40 ns a unit measured, so ~1 s): a longer text is not matched
  (a generated output counts as not matching; an ``expected`` value in a task file is refused);
- reading a task set does at most ``READ_STEPS`` units in all (``reading()``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MAX_PATTERN_CHARS = 1000
MAX_PROGRAM = 1000
MAX_STEPS = 20_000_000
READ_STEPS = 1_000_000_000
#: RE2's memory budget for one compiled pattern (its default is 8 MiB)
MAX_MEM = 1 << 20


class PatternError(ValueError):
    """A pattern qcheck does not run, or a match over the bounds; the message says why (one line)."""


@dataclass(frozen=True)
class Pattern:
    """A compiled pattern and its RE2 program size."""

    text: str
    regex: Any
    program: int

    def search(self, text: str) -> bool:
        """Whether the pattern matches somewhere in ``text`` (``re.search``); ``PatternError`` over the bounds."""
        work = self.program * max(1, len(text))
        if work > MAX_STEPS:
            raise PatternError(f"a text of {len(text)} characters is too long to match against pattern "
                               f"{self.text[:60]!r} within qcheck's bound ({MAX_STEPS // self.program} characters "
                               "for this pattern)")
        budget = _READING.get()
        if budget is not None:
            budget.charge(work)
        return self.regex.search(text) is not None


@functools.lru_cache(maxsize=1024)
def compile_pattern(pattern: str, ignore_case: bool = False) -> Pattern:
    """``pattern`` compiled by RE2 within the bounds (module docstring); ``PatternError`` saying why not."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"the pattern is {len(pattern)} characters long, over {MAX_PATTERN_CHARS}")
    import re2  # google-re2, a dependency of qcheck (imported when a task file has a pattern)

    options = re2.Options()
    options.log_errors = False  # RE2 would print its parse errors on stderr itself
    options.max_mem = MAX_MEM
    options.case_sensitive = not ignore_case
    try:
        regex = re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        reason = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        hint = " (RE2 has no backreferences or look-around)" if "perl operator" in reason or "escape" in reason \
            else ""
        raise PatternError(f"not a pattern qcheck can run in bounded time: {reason}{hint}") from None
    except (TypeError, ValueError, UnicodeError) as exc:
        raise PatternError(f"not a pattern qcheck can run: {exc}") from None
    program = int(getattr(regex, "programsize", 0) or 0)
    if program > MAX_PROGRAM:
        raise PatternError(f"the pattern compiles to {program} RE2 instructions, over {MAX_PROGRAM} (counted "
                           "repetitions such as {1000} multiply them)")
    return Pattern(text=pattern, regex=regex, program=max(1, program))


class _Budget:
    """Work left for matching while one task set is read."""

    def __init__(self, steps: int):
        self.left = steps

    def charge(self, work: int) -> None:
        self.left -= work
        if self.left < 0:
            raise PatternError(f"matching the task files' patterns needs more than {READ_STEPS} units of work "
                               "(pattern size x text length, summed); shorten the patterns or the texts they check")


_READING: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("qcheck_pattern_budget", default=None)


@contextlib.contextmanager
def reading(steps: int = READ_STEPS) -> Iterator[None]:
    """Bound the total matching work done inside the block (reading one task set)."""
    token = _READING.set(_Budget(steps))
    try:
        yield
    finally:
        _READING.reset(token)


# ------------------------------------------------------------------------------------------ JSON Schema keywords
def _pattern(validator: Any, patrn: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """JSON Schema ``pattern`` (jsonschema's, with the bounded matcher)."""
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "string"):
        return
    try:
        if not compile_pattern(patrn).search(instance):
            yield ValidationError(f"{instance[:80]!r} does not match {patrn[:80]!r}")
    except PatternError as exc:
        yield ValidationError(str(exc))


def _matching(patterns: Any, key: str) -> tuple[list[str], str | None]:
    """The ``patternProperties`` patterns ``key`` matches, and why a match could not be done (None)."""
    hits = []
    for pattern in patterns:
        try:
            if compile_pattern(pattern).search(key):
                hits.append(pattern)
        except PatternError as exc:
            return hits, str(exc)
    return hits, None


def _pattern_properties(validator: Any, properties: Any, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    for key, value in instance.items():
        hits, problem = _matching(properties, key)
        if problem:
            yield ValidationError(problem)
        for pattern in hits:
            yield from validator.descend(value, properties[pattern], path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    known = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extras = []
    for key in instance:
        if key in known:
            continue
        hits, problem = _matching(patterns, key)
        if problem:
            yield ValidationError(problem)
        elif not hits:
            extras.append(key)
    if validator.is_type(additional, "object"):
        for key in extras:
            yield from validator.descend(instance[key], additional, path=key)
    elif not additional and extras:
        shown = ", ".join(repr(k) for k in sorted(extras)[:5])
        yield ValidationError(f"Additional properties are not allowed ({shown} unexpected)")


#: the JSON Schema keywords whose jsonschema implementation runs Python's ``re``, and their bounded replacements
KEYWORDS = {"pattern": _pattern, "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties}
#: a keyword whose jsonschema implementation matches ``patternProperties`` with Python's ``re`` internally
UNBOUNDED_WITH_PATTERNS = "unevaluatedProperties"


def bounded_validator(cls: Any) -> Any:
    """The jsonschema validator class ``cls`` with every regular expression run by ``compile_pattern``."""
    return _bounded(cls)


@functools.lru_cache(maxsize=16)
def _bounded(cls: Any) -> Any:
    import jsonschema

    keywords = {k: v for k, v in KEYWORDS.items() if k in cls.VALIDATORS}
    return jsonschema.validators.extend(cls, keywords)


#: parts of a schema that hold data, not schemas (a "pattern" key inside them is a value)
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})


def schema_pattern_problem(schema: Any) -> str | None:
    """Why a schema's patterns cannot be run (the first one, one line), or None: every ``pattern`` and
    ``patternProperties`` key compiles within the bounds, and ``unevaluatedProperties`` is not used in a schema with
    ``patternProperties`` (jsonschema matches those with Python's ``re`` inside it, through every subschema)."""
    texts: list[str] = []
    keywords: set[str] = set()
    _collect(schema, texts, keywords, 0)
    if UNBOUNDED_WITH_PATTERNS in keywords and "patternProperties" in keywords:
        return "unevaluatedProperties in a schema with patternProperties is not supported (its patterns would run " \
               "unbounded)"
    for text in texts:
        try:
            compile_pattern(text)
        except PatternError as exc:
            return f"pattern {text[:60]!r}: {exc}"
    return None


def _collect(node: Any, texts: list[str], keywords: set[str], depth: int) -> None:
    """Every pattern at a schema position of ``node`` (not inside const/enum/default/examples data)."""
    if depth > 64:
        return  # the depth itself is refused by the caller
    if isinstance(node, list):
        for child in node:
            _collect(child, texts, keywords, depth + 1)
        return
    if not isinstance(node, dict):
        return
    keywords.update(k for k in (UNBOUNDED_WITH_PATTERNS, "patternProperties") if k in node)
    if isinstance(node.get("pattern"), str):
        texts.append(node["pattern"])
    if isinstance(node.get("patternProperties"), dict):
        texts.extend(k for k in node["patternProperties"] if isinstance(k, str))
    for key, value in node.items():
        if key not in _DATA_KEYWORDS:
            _collect(value, texts, keywords, depth + 1)
