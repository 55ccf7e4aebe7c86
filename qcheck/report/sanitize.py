"""One sanitiser for every string a file controls, applied where output leaves qcheck.

Tensor names, config values, GGUF metadata and file names are chosen by whoever made the checkpoint.
On their way to a terminal, a CI log, a PR comment or a report they must not be able to:

- add lines or rewrite the line they are on (newline, CR, backspace), drive the terminal (ANSI CSI /
  OSC escapes start with ESC, a control character), or reorder what a reader sees (bidi overrides and
  other invisible format characters, category Cf, plus line/paragraph separators);
- become a GitHub Actions workflow command (``::error ...``, ``::stop-commands::``, the legacy
  ``##[...]`` form): the runner acts on any log line that starts with one, after leading whitespace;
- in Markdown: link, mention, render math or HTML (see ``qcheck.report.markdown.cell``).

``visible`` makes every non-printable character a visible escape (``\\n``, ``\\x1b``, ``\\u202e``), so
content can never contain a line break; ``guard`` then neutralises a workflow command at the start of
any line of rendered text. ``sanitized`` applies ``visible`` to every string of a result before a
renderer sees it, so renderers cannot forget it. JSON output keeps its values exact: only the
characters are escaped (``json_text``).

Secrets are masked here too, by one function (``mask``) every message and report passes through: the values a
caller knows are secret (an API key read from an option, an environment variable whose name says it is one:
``secret_name``), every URL's userinfo (``scheme://***@host``), ``Bearer`` values and strings shaped like
provider keys (``hf_``, ``sk-`` ...). ``render`` masks every report's URL userinfo and bearer values, in every
format.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any, TypeVar

T = TypeVar("T")

#: a name that says its value is a secret (an environment variable, an engine option): KEY, TOKEN (not TOKENIZER),
#: SECRET, PASSWORD/PASSWD, CREDENTIAL anywhere in it, in any case
_SECRET_NAME = re.compile(r"(?i)key|token(?!ize)|secret|passw(?:or)?d|credential")
#: ``scheme://userinfo@``: everything up to the last ``@`` before the path (a raw ``@`` in a password included;
#: never across a quote or bracket, so masking rendered JSON or XML keeps it well formed)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s?#\"'<>]*@")
_BEARER = re.compile(r"(?i)(bearer\s+)[^\s\"',;]+")
_KEYLIKE = re.compile(r"\b(hf_[A-Za-z0-9]{8,}|api_org_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_\-]{8,}|gsk_[A-Za-z0-9]{8,})\b")
#: the text that stands for a secret
MASK = "***"
#: a known secret shorter than this is masked where it is written, not searched for in other text (``--api-key 1``
#: must not turn every ``1`` of a message into ``***``)
MIN_SEARCHED_SECRET = 4


def secret_name(name: str) -> bool:
    """Whether ``name`` (an environment variable, an option such as ``--hf-token``) holds a secret by its name."""
    return bool(_SECRET_NAME.search(name))


def mask(text: str, *secrets: str | None, keylike: bool = True) -> str:
    """``text`` with every secret masked: the given ``secrets`` (at least ``MIN_SEARCHED_SECRET`` characters),
    every URL's userinfo, ``Bearer`` values and (``keylike``) strings shaped like provider keys."""
    for secret in sorted((s for s in secrets if s and len(s) >= MIN_SEARCHED_SECRET), key=len, reverse=True):
        text = text.replace(secret, MASK)
    if "@" in text and "://" in text:
        text = _USERINFO.sub(r"\1" + MASK + "@", text)
    if "earer" in text or "EARER" in text:
        text = _BEARER.sub(r"\1" + MASK, text)
    return _KEYLIKE.sub(MASK, text) if keylike else text


#: a log line the Actions runner would treat as a command: ``::name ...::`` or the legacy ``##[name]``
_COMMAND_START = re.compile(r"^(\s*)(::|##\[)", re.MULTILINE)


def _escape_char(ch: str) -> str:
    code = ord(ch)
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch)
    if named:
        return named
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(text: str) -> str:
    """``text`` with every non-printable character (controls, newlines, ESC, bidi and other format
    characters, separators other than the space, lone surrogates) written as a visible escape."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape_char(ch) for ch in text)


def guard(text: str) -> str:
    """Rendered text in which no line starts a workflow command (``::`` / ``##[`` become ``%3A:`` / ``%23#[``)."""
    if "::" not in text and "##[" not in text:
        return text
    return _COMMAND_START.sub(lambda m: m.group(1) + ("%3A:" if m.group(2) == "::" else "%23#["), text)


def safe_line(text: str) -> str:
    """One line of output built from file-controlled parts: visible, and never a workflow command."""
    return guard(visible(text))


def sanitized(obj: T) -> T:
    """A copy of ``obj`` (a result: dataclasses, dicts, lists, tuples) with ``visible`` applied to every
    string, dictionary keys included. Objects without a string inside are shared, not copied."""
    memo: dict[int, Any] = {}
    return _walk(obj, memo)  # type: ignore[no-any-return]


def _walk(obj: Any, memo: dict[int, Any]) -> Any:
    if isinstance(obj, str):
        return visible(obj)
    if obj is None or isinstance(obj, (int, float, bool, bytes)):
        return obj
    key = id(obj)
    if key in memo:
        return memo[key]
    memo[key] = obj  # a cycle resolves to the original
    out: Any = obj
    if isinstance(obj, dict):
        items = [(_walk(k, memo), _walk(v, memo)) for k, v in obj.items()]
        if any(k is not k0 or v is not v0 for (k, v), (k0, v0) in zip(items, obj.items(), strict=True)):
            out = type(obj)(items) if type(obj) is dict else dict(items)
    elif isinstance(obj, (list, tuple)):
        new = [_walk(x, memo) for x in obj]
        if any(a is not b for a, b in zip(new, obj, strict=True)):
            out = new if isinstance(obj, list) else (type(obj)(*new) if hasattr(obj, "_fields") else tuple(new))
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changed = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name, None)
            new_value = _walk(value, memo)
            if new_value is not value:
                changed[f.name] = new_value
        if changed:
            out = copy.copy(obj)
            for name, value in changed.items():
                object.__setattr__(out, name, value)
    memo[key] = out
    return out


def json_text(text: str) -> str:
    """Serialised JSON with every remaining non-printable character (bidi overrides, format characters,
    separators: only possible inside strings) written as a ``\\uXXXX`` escape: the same values, inert."""
    lines = text.split("\n")
    if all(line.isprintable() for line in lines):
        return text

    def esc(ch: str) -> str:
        code = ord(ch)
        if code > 0xFFFF:
            code -= 0x10000
            return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
        return f"\\u{code:04x}"

    return "\n".join(line if line.isprintable() else "".join(ch if ch.isprintable() else esc(ch) for ch in line)
                     for line in lines)
