"""Read facts out of C/C++ source the way the compiler would, for the llama.cpp extractor (extract_llamacpp.py).

Not a C parser: a handful of shapes llama.cpp's backends use to say what they support, read exactly or not at all.

* ``Source``: a file's text with comments blanked (offsets and line numbers kept) and, per set of macros, its
  inactive ``#ifdef``/``#ifndef``/``#if defined()`` branches blanked too (``configure``);
* ``function_body``, ``case_body``, ``switch_at``: spans of a function, of one ``case LABEL:`` and of a
  ``switch`` statement;
* ``run``: follows the statements of a span for one input (a tensor type) the way the code would, through
  ``if``/``else``, nested blocks, ``switch`` statements over the type and ``return``/``break``, and says how it
  ends. Conditions are evaluated over *atoms*: a comparison of a known subject with a ``GGML_TYPE_*`` constant
  (``a->type == GGML_TYPE_Q4_0``), a name the caller fixes (``coopmat2`` -> False), or a shape/device test the
  caller declares as not holding in the common case. Any other atom stops the run with ``Shape`` naming it: an
  extractor that meets code it cannot read says so instead of guessing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


class Shape(Exception):
    """The code does not have the shape the reader expects (or uses a condition it cannot judge)."""


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)


def blank_comments(text: str) -> str:
    """Comments replaced by spaces (newlines kept); string and character literals left as they are."""
    def repl(m: re.Match[str]) -> str:
        s = m.group(0)
        if s.startswith(("\"", "'")):
            return s
        return re.sub(r"[^\n]", " ", s)
    return _COMMENT.sub(repl, text)


_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(ifdef|ifndef|if|elif|else|endif)\b([^\n]*)$", re.M)
_DEFINED = re.compile(r"^\s*(!?)\s*defined\s*\(?\s*(\w+)\s*\)?\s*$")


def _condition(kind: str, rest: str, macros: dict[str, bool]) -> bool | None:
    """The truth of an #if/#ifdef/#ifndef line over the decided macros, None when it names another condition."""
    rest = rest.strip()
    if kind in ("ifdef", "ifndef"):
        name = rest.split()[0] if rest else ""
        if name not in macros:
            return None
        return macros[name] if kind == "ifdef" else not macros[name]
    m = _DEFINED.match(rest)
    if m and m.group(2) in macros:
        return macros[m.group(2)] != bool(m.group(1))
    return None


def preprocess(text: str, macros: dict[str, bool]) -> str:
    """Blank the branches an ``#if`` over ``macros`` makes inactive (and every directive line); a conditional over
    any other condition keeps all of its branches (its directive lines are blanked)."""
    out = list(text)
    # stack of (decided: bool | None, this branch active, any branch taken)
    stack: list[tuple[bool | None, bool, bool]] = []
    pos = 0
    active = True

    def blank(a: int, b: int) -> None:
        for i in range(a, b):
            if out[i] != "\n":
                out[i] = " "

    for m in _DIRECTIVE.finditer(text):
        if not active:
            blank(pos, m.start())
        kind, rest = m.group(1), m.group(2)
        if kind in ("ifdef", "ifndef", "if"):
            value = _condition(kind, rest, macros)
            branch = True if value is None else value
            stack.append((value, branch, branch))
        elif kind in ("elif", "else") and stack:
            value, _, taken = stack[-1]
            if value is None:
                stack[-1] = (None, True, True)
            else:
                cond = True if kind == "else" else _condition("if", rest, macros)
                branch = not taken and (cond is None or cond)
                stack[-1] = (value, branch, taken or branch)
        elif kind == "endif" and stack:
            stack.pop()
        active = all(s[1] for s in stack)
        blank(m.start(), m.end())
        pos = m.end()
    if not active:
        blank(pos, len(text))
    return "".join(out)


@dataclass
class Source:
    """One file: its text, comments blanked, and its line numbers."""

    path: str
    text: str
    clean: str = field(init=False)

    def __post_init__(self) -> None:
        self.clean = blank_comments(self.text)

    def configured(self, macros: dict[str, bool]) -> str:
        """The comment-free text as compiled with ``macros`` decided."""
        return preprocess(self.clean, macros)

    def line(self, offset: int) -> int:
        return self.text.count("\n", 0, offset) + 1

    def lines(self, start: int, end: int) -> str:
        """``:N`` or ``:N-M`` for a span."""
        a, b = self.line(start), self.line(max(start, end - 1))
        return f":{a}" if a == b else f":{a}-{b}"


# --------------------------------------------------------------------------------------------------------------
# spans

_BRACKET = {"(": re.compile(r"[()]"), "{": re.compile(r"[{}]"), "[": re.compile(r"[\[\]]")}


def matching(text: str, open_at: int) -> int:
    """The offset just after the bracket closing the one at ``open_at`` ('(', '{' or '[')."""
    opener = text[open_at]
    depth = 0
    for m in _BRACKET[opener].finditer(text, open_at):
        depth += 1 if m.group(0) == opener else -1
        if depth == 0:
            return m.end()
    raise Shape(f"unbalanced {opener!r} at offset {open_at}")


_BODIES: dict[tuple[int, str], tuple[str, tuple[int, int] | None]] = {}


def function_body(text: str, name: str) -> tuple[int, int]:
    """(start, end) of the body (inside the braces) of the function definition ``name(...) ... {``."""
    key = (id(text), name)
    hit = _BODIES.get(key)
    if hit is None or hit[0] is not text:
        try:
            span: tuple[int, int] | None = _function_body(text, name)
        except Shape:
            span = None
        hit = _BODIES[key] = (text, span)
    if hit[1] is None:
        raise Shape(f"no definition of {name}()")
    return hit[1]


def _function_body(text: str, name: str) -> tuple[int, int]:
    for m in re.finditer(rf"\b{re.escape(name)}\s*\(", text):
        close = matching(text, m.end() - 1)
        rest = re.match(r"[\s\w:&*]*(?:->[\s\w:<>*&]+)?\{", text[close:])
        if rest:
            brace = close + rest.end() - 1
            return brace + 1, matching(text, brace) - 1
    raise Shape(f"no definition of {name}()")


_BRACKETS = re.compile(r"[{}()]")


def _depths(text: str, start: int, end: int) -> list[int]:
    """The bracket depth at each offset of [start, end), relative to start."""
    out = [0] * (end - start)
    depth, last = 0, start
    for m in _BRACKETS.finditer(text, start, end):
        i = m.start()
        out[last - start:i - start] = [depth] * (i - last)
        if m.group(0) in "{(":
            depth += 1
            out[i - start] = depth
        else:
            out[i - start] = depth
            depth -= 1
        last = i + 1
    out[last - start:] = [depth] * (end - last)
    return out


_LABEL = re.compile(r"\b(?:case\s+([\w:]+)\s*:(?!:)|default\s*:)")


_LABELS: dict[tuple[int, int, int], tuple[str, list[tuple[str, int, int]]]] = {}


def labels(text: str, start: int, end: int) -> list[tuple[str, int, int]]:
    """(label, label start, label end) of the ``case``/``default`` labels at the top level of a switch body
    (remembered per text and span: a run visits the same large switch once per type)."""
    key = (id(text), start, end)
    hit = _LABELS.get(key)
    if hit is not None and hit[0] is text:
        return hit[1]
    found = _labels(text, start, end)
    _LABELS[key] = (text, found)
    return found


def _labels(text: str, start: int, end: int) -> list[tuple[str, int, int]]:
    depths = _depths(text, start, end)
    out = []
    for m in _LABEL.finditer(text, start, end):
        if depths[m.start() - start] == 0:
            out.append((m.group(1) or "default", m.start(), m.end()))
    return out


def case_body(text: str, start: int, end: int, label: str) -> tuple[int, int]:
    """The statements following ``case LABEL:`` (through the labels that fall into it) up to the next label that
    starts other statements, searched anywhere in [start, end)."""
    m = re.search(rf"\bcase\s+{re.escape(label)}\s*:", text[start:end])
    if not m:
        raise Shape(f"no 'case {label}:'")
    at = start + m.end()
    depth = 0
    i = at
    while i < end:
        c = text[i]
        if c in "{(":
            depth += 1
        elif c in "})":
            if depth == 0:
                return at, i
            depth -= 1
        elif depth == 0:
            lm = _LABEL.match(text, i)
            if lm and text[at:i].strip():
                return at, i
            if lm:
                i = lm.end()
                at = i
                continue
        i += 1
    return at, end


def switch_at(text: str, at: int) -> tuple[str, int, int]:
    """For ``switch (X) {`` at ``at``: (X, body start, body end)."""
    m = re.compile(r"switch\s*\(").match(text, at)
    if not m:
        raise Shape(f"no switch at offset {at}")
    close = matching(text, m.end() - 1)
    subject = " ".join(text[m.end():close - 1].split())
    brace = text.index("{", close)
    if text[close:brace].strip():
        raise Shape(f"switch ({subject}) is not followed by a block")
    return subject, brace + 1, matching(text, brace) - 1


# --------------------------------------------------------------------------------------------------------------
# conditions

@dataclass
class Env:
    """What a run knows: the subjects standing for the type under test (and their value), other subjects with a
    fixed type, names with a fixed truth, and which unknown atoms count as not holding."""

    subjects: dict[str, str]                    # "a->type" -> "GGML_TYPE_Q4_0", "op->op" -> "GGML_OP_MUL_MAT"
    names: dict[str, bool] = field(default_factory=dict)
    not_holding: Callable[[str], bool] = lambda atom: False
    functions: dict[str, Callable[[str], bool | None]] = field(default_factory=dict)  # f(type) for f(subject)


def _split_top(expr: str, op: str) -> list[str]:
    if op not in expr:
        return [expr]
    parts, depth, last, i = [], 0, 0, 0
    while i < len(expr):
        c = expr[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and expr.startswith(op, i):
            parts.append(expr[last:i])
            i += len(op)
            last = i
            continue
        i += 1
    parts.append(expr[last:])
    return parts


def _strip_parens(expr: str) -> str:
    expr = expr.strip()
    while expr.startswith("(") and matching(expr, 0) == len(expr):
        expr = expr[1:-1].strip()
    return expr


def _top_comparison(expr: str) -> tuple[str, str, str] | None:
    """(left, '==' or '!=', right) for a comparison at the top level of ``expr``."""
    depth = 0
    for i, c in enumerate(expr):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and expr.startswith(("==", "!="), i):
            return _strip_parens(expr[:i]), expr[i:i + 2], _strip_parens(expr[i + 2:])
    return None


def _is_condition(expr: str) -> bool:
    return _top_comparison(expr) is not None


def evaluate(expr: str, env: Env) -> bool | None:
    """The truth of a C condition over ``env`` (see the module docstring): True, False, or None for a condition on
    shapes or devices ``env.not_holding`` names (unknown: a guard behind it is not taken, an expression returned
    with it counts as holding). Raises Shape on any other atom."""
    expr = _strip_parens(" ".join(expr.split()))
    ors = _split_top(expr, "||")
    if len(ors) > 1:
        values = [evaluate(p, env) for p in ors]
        return True if True in values else (None if None in values else False)
    ands = _split_top(expr, "&&")
    if len(ands) > 1:
        values = [evaluate(p, env) for p in ands]
        return False if False in values else (None if None in values else True)
    if expr.startswith("!") and not expr.startswith("!="):
        inner = evaluate(expr[1:], env)
        return None if inner is None else not inner
    if expr in ("true", "false"):
        return expr == "true"
    if expr in env.names:
        return env.names[expr]
    call = re.match(r"^(\w+)\s*\((.+)\)$", expr)
    if call and call.group(1) in env.functions and call.group(2).strip() in env.subjects:
        return env.functions[call.group(1)](env.subjects[call.group(2).strip()])
    cmp = _top_comparison(expr)
    if cmp:
        left, op, right = cmp
        for subj, const in ((left, right), (right, left)):
            if subj in env.subjects and re.fullmatch(r"GGML_[A-Z0-9_]+|\d+", const):
                return (env.subjects[subj] == const) == (op == "==")
        if left in env.subjects and right in env.subjects:
            return (env.subjects[left] == env.subjects[right]) == (op == "==")
        if _is_condition(left) and _is_condition(right):  # (a == X) != (b == X)
            a, b = evaluate(left, env), evaluate(right, env)
            return None if a is None or b is None else (a == b) == (op == "==")
    if env.not_holding(expr):
        return None
    raise Shape(f"cannot judge the condition {expr!r}")


def holds(expr: str, env: Env) -> bool:
    """A returned condition: True unless it is false in the common case (unknown shape tests count as holding)."""
    return evaluate(expr, env) is not False


# --------------------------------------------------------------------------------------------------------------
# statements

@dataclass
class Outcome:
    """How a run ended: ``return`` with the expression's text, ``break`` out of the switch, or the span's end."""

    kind: str  # "return" | "break" | "abort" (GGML_ABORT, GGML_ASSERT(false)) | "end"
    value: str = ""
    at: int = 0


def _skip_ws(text: str, i: int, end: int) -> int:
    while i < end and text[i].isspace():
        i += 1
    return i


def _statement_end(text: str, i: int, end: int) -> int:
    """The end of a simple statement starting at i (after its ';'), skipping bracketed parts (lambdas ...)."""
    while i < end:
        c = text[i]
        if c in "({[":
            i = matching(text, i)
            continue
        if c == ";":
            return i + 1
        i += 1
    return end


def run(text: str, start: int, end: int, env: Env, *, in_switch: bool = False) -> Outcome:
    """Follow the statements of [start, end) for ``env``: the first ``return`` or ``break`` reached, else 'end'."""
    i = start
    while True:
        i = _skip_ws(text, i, end)
        if i >= end:
            return Outcome("end", at=end)
        lm = _LABEL.match(text, i)
        if lm:  # falling through another label
            i = lm.end()
            continue
        if text[i] == "{":
            close = matching(text, i)
            out = run(text, i + 1, close - 1, env, in_switch=in_switch)
            if out.kind != "end":
                return out
            i = close
            continue
        if text[i] == ";":
            i += 1
            continue
        word = re.match(r"[A-Za-z_]\w*", text[i:end])
        kw = word.group(0) if word else ""
        if kw == "return":
            stop = _statement_end(text, i, end)
            return Outcome("return", " ".join(text[i + 6:stop - 1].split()), i)
        if kw == "break":
            return Outcome("break", at=i)
        if kw == "if":
            out, i = _run_if(text, i, end, env, in_switch)
            if out is not None:
                return out
            continue
        if kw == "switch":
            subject, body_start, body_end = switch_at(text, i)
            out = _run_switch(text, subject, body_start, body_end, env)
            if out.kind in ("return", "abort"):
                return out
            i = body_end + 1
            continue
        if kw in ("for", "while"):  # a loop over operands or devices: taken as not deciding the common case
            i = _branch_end(text, matching(text, text.index("(", i)), end)
            continue
        if kw == "do":
            raise Shape(f"a do-loop at offset {i}")
        if kw == "GGML_ABORT" or (kw == "GGML_ASSERT" and re.match(r"GGML_ASSERT\s*\(\s*false", text[i:end])):
            return Outcome("abort", " ".join(text[i:_statement_end(text, i, end)].split()), i)
        i = _statement_end(text, i, end)


def _branch_end(text: str, i: int, end: int) -> int:
    i = _skip_ws(text, i, end)
    if text[i] == "{":
        return matching(text, i)
    if text.startswith("if", i):
        cond_open = text.index("(", i)
        j = _branch_end(text, matching(text, cond_open), end)
        k = _skip_ws(text, j, end)
        if text.startswith("else", k):
            return _branch_end(text, k + 4, end)
        return j
    return _statement_end(text, i, end)


def _run_if(text: str, i: int, end: int, env: Env, in_switch: bool) -> tuple[Outcome | None, int]:
    cond_open = text.index("(", i)
    cond_close = matching(text, cond_open)
    taken = evaluate(text[cond_open + 1:cond_close - 1], env) is True
    then_end = _branch_end(text, cond_close, end)
    k = _skip_ws(text, then_end, end)
    has_else = text.startswith("else", k) and not re.match(r"else\w", text[k:k + 5])
    else_end = _branch_end(text, k + 4, end) if has_else else then_end
    if taken:
        out = run(text, cond_close, then_end, env, in_switch=in_switch)
    elif has_else:
        out = run(text, k + 4, else_end, env, in_switch=in_switch)
    else:
        out = Outcome("end")
    return (out if out.kind != "end" else None), else_end


def _run_switch(text: str, subject: str, body_start: int, body_end: int, env: Env) -> Outcome:
    if subject not in env.subjects:
        raise Shape(f"a switch over {subject!r}, not a subject of this run")
    value = env.subjects[subject]
    found = labels(text, body_start, body_end)
    target = next((b for name, _, b in found if name == value), None)
    if target is None:
        target = next((b for name, _, b in found if name == "default"), None)
    if target is None:
        return Outcome("break", at=body_end)
    out = run(text, target, body_end, env, in_switch=True)
    return Outcome("break", at=out.at) if out.kind == "end" else out


def outcomes(text: str, start: int, end: int, types: Iterable[str], make_env: Callable[[str], Env]
             ) -> dict[str, Outcome]:
    """``run`` for every type: type -> how the span ends for it."""
    return {t: run(text, start, end, make_env(t)) for t in types}


def enum_members(text: str, enum_name: str) -> list[tuple[str, int, int]]:
    """(name, value, offset) of ``enum NAME { A = 0, B, ... }`` members written with explicit values (commented-out
    members are not members: pass comment-free text)."""
    m = re.search(rf"\benum\s+{re.escape(enum_name)}\s*\{{", text)
    if not m:
        raise Shape(f"no enum {enum_name}")
    body_end = matching(text, m.end() - 1)
    out = []
    for member in re.finditer(r"\b([A-Z][A-Z0-9_]*)\s*=\s*(\d+)\s*,", text[m.end():body_end]):
        out.append((member.group(1), int(member.group(2)), m.end() + member.start()))
    return out
