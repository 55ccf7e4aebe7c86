"""Read an engine command line as the engine's own parser reads it: which token is an option, which its value,
aliases, abbreviations, ``--flag=value``, ``--no-`` negations, and what the engine says when it refuses one.

One reader per tokenising convention (``FlagTable.syntax``): Python argparse (vLLM, SGLang, mlx-lm), llama.cpp's
``common_params_parse_ex``, click (trtllm-serve), Go cobra/pflag (Ollama) and commander.js (LM Studio's lms).
The messages quote the parsers' own wording (argparse "unrecognized arguments", llama.cpp "invalid argument",
click "No such option", pflag "unknown flag", commander "unknown option").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from qcheck.deploy.flags import FlagSpec, FlagTable
from qcheck.errors import InputError
from qcheck.report.sanitize import MASK, mask, secret_name

__all__ = ["MAX_TOKENS", "Occurrence", "Parsed", "Problem", "read_argv", "secret_option"]

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
#: words one command line may hold: a longer one is refused whole (never cut: a refused option past the cut would
#: pass unseen)
MAX_TOKENS = 4096
#: converters whose value is a number or a switch: never a secret, whatever the option is called
#: (``--max-num-batched-tokens``)
_NUMERIC_TYPES = frozenset({"int", "float", "bool", "human_readable_int", "human_readable_int_or_auto", "gpu_ratio",
                            "_parse_size"})


def secret_option(spec: FlagSpec) -> bool:
    """Whether ``spec``'s value is a secret: an option taking a value that is not a number, one of whose names, its
    destination or its environment variable says so (``--api-key``, ``-hft``/``--hf-token``, ``LLAMA_API_KEY``)."""
    if spec.kind != "value" or spec.type in _NUMERIC_TYPES:
        return False
    return any(secret_name(n) for n in (*spec.names, spec.dest, spec.env or ""))


@dataclass(frozen=True)
class Occurrence:
    """One option as written (secrets masked): the token, the option it names, its value (None for a switch;
    ``***`` for a secret), whether it is the negative spelling (``--no-x``, ``-nocb``), and where it was written."""

    written: str
    spec: FlagSpec
    value: str | None
    negative: bool = False
    where: str = "argv"


@dataclass(frozen=True)
class Problem:
    """A token the engine refuses while parsing, in its own words (secrets masked)."""

    flag: str
    value: str | None
    message: str
    unknown_flag: bool = False  # the engine has no such option (at the table's release)


@dataclass
class Parsed:
    occurrences: list[Occurrence] = field(default_factory=list)
    positionals: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    #: the tokens as they may be shown: every secret value ``***``, every URL's userinfo masked
    shown: list[str] = field(default_factory=list)
    #: the secret values as written (for masking any other text that could quote them)
    secrets: list[str] = field(default_factory=list)


def read_argv(table: FlagTable, tokens: list[str], program: str | None = None) -> Parsed:
    """Parse ``tokens`` (the arguments after the program and sub-command) with ``table``'s syntax; ``program``
    picks llama.cpp's per-tool options (``server``, ``cli``). More than ``MAX_TOKENS`` words is an InputError
    (judged whole or not at all)."""
    if len(tokens) > MAX_TOKENS:
        raise InputError(f"the engine command has {len(tokens)} words; qcheck reads at most {MAX_TOKENS} "
                         "(MAX_TOKENS in qcheck/deploy/argv.py) and refuses a longer one rather than judge part of it")
    reader = {"argparse": _Argparse, "llama.cpp": _LlamaCpp, "click": _Click, "cobra": _Cobra,
              "commander": _Commander}[table.syntax]
    return reader(table, list(tokens), program).run()


class _Reader:
    """Shared walk: subclasses say how a token names an option and how values are taken. Every token is shown
    as ``self.shown`` has it: a secret option's value (``--api-key X``, ``--api-key=X``, an abbreviation argparse
    resolves to it, a refused token whose name is a secret's) is ``***`` before any message quotes it."""

    unknown = "unrecognized arguments: {}"
    missing = "argument {}: expected one argument"
    equals = True  # --flag=value accepted

    def __init__(self, table: FlagTable, tokens: list[str], program: str | None):
        self.table, self.tokens, self.program = table, tokens, program
        self.out = Parsed(shown=[mask(t, keylike=False) for t in tokens])
        self.i = 0

    def run(self) -> Parsed:
        only_positionals = False
        while self.i < len(self.tokens):
            tok = self.tokens[self.i]
            self.i += 1
            if only_positionals or not self.is_option(tok):
                self.positional(self.i - 1)
                continue
            if tok == "--":
                only_positionals = True
                continue
            self.option(self.i - 1)
        if self.out.secrets:  # a secret value written again elsewhere (before or after its option) is masked there too
            self.out.shown = [self.scrub(t) for t in self.out.shown]
        return self.out

    # -- secrets -----------------------------------------------------------------------------------------
    def hide(self, at: int, inline: str | None = None) -> None:
        """Show token ``at`` with its value masked: the part after ``=`` (or the attached value) when ``inline``
        is given, else the whole token (a value of its own)."""
        if at >= len(self.tokens):
            return
        tok = self.tokens[at]
        if inline is None:
            self.out.shown[at] = MASK
            self.out.secrets.append(tok)
        elif inline:
            self.out.shown[at] = mask(tok[:len(tok) - len(inline)], keylike=False) + MASK
            self.out.secrets.append(inline)

    def names_secret(self, name: str) -> bool:
        """Whether a refused option name would be read as a secret one: it names one exactly, says so itself
        (``--hf_token``), or is a prefix of one (an abbreviation this parser does not resolve)."""
        name = self.normalise(name)
        spec = self.table.by_name.get(name)
        if spec is not None:
            return secret_option(spec)
        if secret_name(name):
            return True
        return len(name) >= 4 and name.startswith("--") and any(
            n.startswith(name) and secret_option(s) for n, s in self.table.by_name.items())

    def refused(self, at: int, name: str, inline: str | None, problem: str | None) -> None:
        """A token the engine refuses; when it names a secret option, its value (after ``=``, or the next word)
        is masked before the problem quotes it."""
        tok = self.tokens[at]
        base, eq, raw = tok.partition("=")
        secret = self.names_secret(base) or self.names_secret(name)
        message = problem or self.unknown.format(name)
        if secret and eq:
            self.hide(at, raw)
            message = message.replace(tok, self.out.shown[at]).replace("=" + raw, "=" + MASK) if raw else message
        elif secret and self.i < len(self.tokens) and (self.table.syntax == "llama.cpp"
                                                       or not self.is_option(self.tokens[self.i])):
            self.hide(self.i)
        shown = self.out.shown[at]
        value = MASK if secret and inline else (mask(inline, keylike=False) if inline else inline)
        self.out.problems.append(Problem(shown, value, self.scrub(message.replace(tok, shown)),
                                         unknown_flag=not message.startswith("ambiguous")))

    def scrub(self, text: str) -> str:
        """``text`` with every secret seen so far masked."""
        return mask(text, *self.out.secrets, keylike=False)

    # -- hooks -------------------------------------------------------------------------------------------
    def is_option(self, tok: str) -> bool:
        return tok.startswith("-") and tok != "-" and not _NEGATIVE_NUMBER.match(tok)

    def positional(self, at: int) -> None:
        self.out.positionals.append(self.tokens[at])

    def normalise(self, name: str) -> str:
        if self.table.underscores and name.startswith("--"):
            return name.replace("_", "-")
        return name

    def lookup(self, name: str) -> tuple[FlagSpec | None, str | None]:
        """The option a name selects, or (None, message) when the engine refuses it."""
        spec = self.table.by_name.get(name)
        if spec is not None and spec.accepted_by(self.program):
            return spec, None
        return None, self.unknown.format(name)

    def option(self, at: int) -> None:
        tok = self.tokens[at]
        name, inline = tok, None
        if self.equals and "=" in tok:
            name, inline = tok.split("=", 1)
        name = self.normalise(name)
        spec, problem = self.lookup(name)
        if spec is None:
            spec, inline, problem = self.attached(tok, problem)
        if spec is None:
            self.refused(at, name, inline, problem)
            return
        secret = secret_option(spec)
        if secret and inline is not None:
            self.hide(at, inline)
        written = self.out.shown[at]
        negative = name in spec.negative
        if spec.kind == "switch":
            self.switch(written, spec, negative, inline)
            return
        value = inline if inline is not None else self.take_value(spec)
        if value is None and spec.nargs not in ("?", "*"):
            self.out.problems.append(Problem(written, None, self.missing.format(spec.label)))
            return
        if secret and value is not None:
            if inline is None:
                for j in range(at + 1, self.i):
                    self.hide(j)
            value = MASK
        self.out.occurrences.append(Occurrence(written, spec, value, negative))

    def attached(self, tok: str, problem: str | None) -> tuple[FlagSpec | None, str | None, str | None]:
        """A short option with its value attached (``-c4096``), where the syntax allows it."""
        return None, None, problem

    def switch(self, written: str, spec: FlagSpec, negative: bool, inline: str | None) -> None:
        if inline is not None:
            self.out.problems.append(Problem(written, inline, self.scrub(
                f"argument {spec.label}: ignored explicit argument {inline!r}")))
            return
        self.out.occurrences.append(Occurrence(written, spec, None, negative))

    def take_value(self, spec: FlagSpec) -> str | None:
        """The value tokens after an option (argparse: not an option-looking token; several for ``+``/``*``)."""
        values = []
        while self.i < len(self.tokens) and not self.is_option(self.tokens[self.i]):
            values.append(self.tokens[self.i])
            self.i += 1
            if spec.nargs in ("1", "?"):
                break
        return " ".join(values) if values else None


class _Argparse(_Reader):
    """Python argparse (``parse_args``): abbreviations of long options when ``allow_abbrev``; a single-dash
    option with its value attached (``-q fp8`` as ``-qfp8``)."""

    def lookup(self, name: str) -> tuple[FlagSpec | None, str | None]:
        spec = self.table.by_name.get(name)
        if spec is not None or not (self.table.allow_abbrev and name.startswith("--")):
            return spec, (None if spec else self.unknown.format(name))
        matches = sorted({n for n in self.table.by_name if n.startswith(name) and n.startswith("--")})
        specs = {id(self.table.by_name[n]) for n in matches}
        if len(specs) == 1:
            return self.table.by_name[matches[0]], None
        if len(matches) > 1:
            return None, f"ambiguous option: {name} could match {', '.join(matches[:8])}"
        return None, self.unknown.format(name)

    def attached(self, tok: str, problem: str | None) -> tuple[FlagSpec | None, str | None, str | None]:
        if not tok.startswith("--") and len(tok) > 2:
            spec = self.table.by_name.get(tok[:2])
            if spec is not None and spec.kind == "value":
                return spec, tok[2:], None
        return None, None, problem

    def positional(self, at: int) -> None:
        if len(self.out.positionals) >= len(self.table.positionals):
            shown = self.out.shown[at]
            self.out.problems.append(Problem(shown, None, self.unknown.format(shown)))
            return
        self.out.positionals.append(self.tokens[at])


class _LlamaCpp(_Reader):
    """llama.cpp ``common_params_parse_ex``: exact names only (``--a_b`` is ``--a-b``), no ``--flag=value``, a
    value is always the next token, and a token that is not an option is an invalid argument."""

    unknown = "error: invalid argument: {}"
    missing = "expected value for argument"
    equals = False

    def is_option(self, tok: str) -> bool:
        return True  # every token must be an option or an option's value

    def take_value(self, spec: FlagSpec) -> str | None:
        if self.i >= len(self.tokens):
            return None
        self.i += 1
        return self.tokens[self.i - 1]


class _Click(_Reader):
    """click: exact names, ``--opt=value``, a value is the next token."""

    unknown = "No such option: {}"
    missing = "Option '{}' requires an argument."

    def take_value(self, spec: FlagSpec) -> str | None:
        if self.i >= len(self.tokens):
            return None
        self.i += 1
        return self.tokens[self.i - 1]

    def positional(self, at: int) -> None:
        if len(self.out.positionals) >= len(self.table.positionals):
            shown = self.out.shown[at]
            self.out.problems.append(Problem(shown, None, f"Got unexpected extra argument ({shown})"))
            return
        self.out.positionals.append(self.tokens[at])


class _Cobra(_Reader):
    """Go cobra/pflag (Ollama): ``--flag=value`` or ``--flag value``; a bool flag takes a value only as
    ``--flag=false``; ``-fVALUE`` for shorthands; positionals anywhere."""

    unknown = "unknown flag: {}"
    missing = "flag needs an argument: {}"

    def lookup(self, name: str) -> tuple[FlagSpec | None, str | None]:
        spec = self.table.by_name.get(name)
        if spec is not None:
            return spec, None
        if not name.startswith("--") and len(name) >= 2:
            return None, f"unknown shorthand flag: {name[1]!r} in {name}"
        return None, self.unknown.format(name)

    def attached(self, tok: str, problem: str | None) -> tuple[FlagSpec | None, str | None, str | None]:
        if not tok.startswith("--") and len(tok) > 2:
            spec = self.table.by_name.get(tok[:2])
            if spec is not None and spec.kind == "value":
                return spec, tok[2:], None
        return None, None, problem

    def switch(self, written: str, spec: FlagSpec, negative: bool, inline: str | None) -> None:
        if inline is not None and inline.lower() not in ("true", "false", "1", "0", "t", "f"):
            self.out.problems.append(Problem(written, inline, self.scrub(
                f'invalid argument "{inline}" for "{written.split("=")[0]}" flag: strconv.ParseBool: parsing '
                f"{inline!r}: invalid syntax")))
            return
        off = inline is not None and inline.lower() in ("false", "0", "f")
        self.out.occurrences.append(Occurrence(written, spec, inline, negative or off))

    def take_value(self, spec: FlagSpec) -> str | None:
        if spec.nargs == "?" or self.i >= len(self.tokens):
            return None  # pflag's NoOptDefVal: a value only with =
        self.i += 1
        return self.tokens[self.i - 1]


class _Commander(_Cobra):
    """commander.js (lms): ``--opt=value``, ``--opt value``, ``-cVALUE``; a value is the next token."""

    unknown = "error: unknown option '{}'"
    missing = "error: option '{}' argument missing"

    def lookup(self, name: str) -> tuple[FlagSpec | None, str | None]:
        spec = self.table.by_name.get(name)
        return (spec, None) if spec is not None else (None, self.unknown.format(name))

    def positional(self, at: int) -> None:
        if len(self.out.positionals) >= len(self.table.positionals):
            self.out.problems.append(Problem(self.out.shown[at], None, f"error: too many arguments. Expected "
                                                                       f"{len(self.table.positionals)} argument but "
                                                                       "got more."))
            return
        self.out.positionals.append(self.tokens[at])
