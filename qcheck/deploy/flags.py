"""The options each engine's own command-line parser accepts, as data (``matrices/engine_flags/*.toml``).

The vLLM, SGLang, llama.cpp and mlx-lm tables are generated from the released packages by
``matrices/tools/extract_engine_flags.py`` (the engine's own parser, built by its own code where it imports);
the TensorRT-LLM (``trtllm-serve``), Ollama (``ollama run`` / ``ollama create``) and LM Studio (``lms load``)
tables are written from their sources, which the file names. A table says how the engine tokenises its
command line (``syntax``), which options take a value, their aliases, ``--no-`` negations, choices and
environment variables, so a command line is read exactly as the engine reads it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from qcheck.errors import QcheckError
from qcheck.toml_compat import tomllib

#: how an engine tokenises its command line: Python argparse, llama.cpp's common_params_parse_ex, click, Go
#: cobra/pflag (Ollama), commander.js (LM Studio's lms)
SYNTAXES = ("argparse", "llama.cpp", "click", "cobra", "commander")
KINDS = ("value", "switch", "positional")

__all__ = ["FlagSpec", "FlagTable", "flag_table"]


@dataclass(frozen=True)
class FlagSpec:
    """One option of an engine's parser."""

    names: tuple[str, ...]
    dest: str
    kind: str  # "value" (takes one or more values) | "switch" (none) | "positional"
    nargs: str = "1"  # argparse's nargs: "0", "1", "?", "+", "*"
    type: str | None = None  # the parser's converter: int, float, human_readable_int, str, bool ...
    choices: tuple[str, ...] | None = None
    negative: tuple[str, ...] = ()  # names that turn a switch off (--no-enable-prefix-caching, -nocb)
    env: str | None = None  # the environment variable the engine reads for it (LLAMA_ARG_CTX_SIZE)
    examples: tuple[str, ...] | None = None  # llama.cpp: the programs that accept it (None: every program)
    excludes: tuple[str, ...] | None = None  # llama.cpp: programs that do not
    const_false: bool = False  # argparse store_false

    def accepted_by(self, program: str | None) -> bool:
        """llama.cpp only: whether ``program`` (server, cli ...) has this option (common_params_parser_init)."""
        if program is None:
            return True
        if self.excludes and program in self.excludes:
            return False
        return self.examples is None or program in self.examples or "common" in self.examples

    @property
    def label(self) -> str:
        return "/".join(self.names)


@dataclass(frozen=True)
class FlagTable:
    """Every option of one engine program, read at one release."""

    engine: str  # the matrix's engine id
    version: str  # the release the table was read at
    syntax: str
    source: str
    allow_abbrev: bool
    underscores: bool  # --a_b is read as --a-b (vLLM's FlexibleArgumentParser, llama.cpp)
    flags: tuple[FlagSpec, ...]
    #: methods ``--quantization`` may name where the engine checks them after parsing (vLLM's ModelConfig)
    quantization_methods: tuple[str, ...] | None = None

    @functools.cached_property
    def by_name(self) -> dict[str, FlagSpec]:
        out: dict[str, FlagSpec] = {}
        for spec in self.flags:
            for name in (*spec.names, *spec.negative):
                out.setdefault(name, spec)
        return out

    @functools.cached_property
    def by_env(self) -> dict[str, FlagSpec]:
        return {spec.env: spec for spec in self.flags if spec.env}

    @property
    def positionals(self) -> tuple[FlagSpec, ...]:
        return tuple(spec for spec in self.flags if spec.kind == "positional")


class FlagTableError(QcheckError):
    """A shipped flag table that does not validate (a packaging defect, reported as one line)."""


def _strings(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise FlagTableError(f"{where}: expected a list of strings")
    return tuple(value)


def _spec(raw: object, where: str) -> FlagSpec:
    if not isinstance(raw, dict):
        raise FlagTableError(f"{where}: not a table")
    known = {"names", "negative", "dest", "kind", "nargs", "type", "choices", "env", "examples", "excludes",
             "const_false", "value_hint"}
    extra = set(raw) - known
    if extra:
        raise FlagTableError(f"{where}: unknown keys {sorted(extra)}")
    names = _strings(raw.get("names"), f"{where}.names")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise FlagTableError(f"{where}.kind: {kind!r} is not one of {KINDS}")
    nargs = str(raw.get("nargs", "0" if kind == "switch" else "1"))
    if nargs not in ("0", "1", "2", "?", "+", "*"):
        raise FlagTableError(f"{where}.nargs: {nargs!r}")
    choices = raw.get("choices")
    opt = {k: raw.get(k) for k in ("examples", "excludes")}
    return FlagSpec(
        names=names, dest=str(raw.get("dest") or names[0].lstrip("-").replace("-", "_")), kind=kind, nargs=nargs,
        type=str(raw["type"]) if raw.get("type") is not None else None,
        choices=_strings(choices, f"{where}.choices") if choices is not None else None,
        negative=_strings(raw.get("negative", []), f"{where}.negative") if raw.get("negative") else (),
        env=str(raw["env"]) if raw.get("env") else None,
        examples=_strings(opt["examples"], f"{where}.examples") if opt["examples"] else None,
        excludes=_strings(opt["excludes"], f"{where}.excludes") if opt["excludes"] else None,
        const_false=bool(raw.get("const_false", False)))


def table_names() -> list[str]:
    """The names of the shipped flag tables (``matrices/engine_flags/*.toml``), sorted."""
    from qcheck.data import data_dir

    return sorted(p.stem for p in (data_dir("matrices") / "engine_flags").glob("*.toml"))


@functools.cache
def flag_table(name: str) -> FlagTable:
    """The table ``matrices/engine_flags/<name>.toml`` (``vllm``, ``sglang``, ``llama.cpp``, ``mlx``,
    ``trtllm-serve``, ``ollama-run``, ``ollama-create``, ``lms-load``), validated."""
    from qcheck.data import data_dir

    path = data_dir("matrices") / "engine_flags" / f"{name}.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise FlagTableError(f"engine flag table {path}: {exc}") from None
    head = data.get("engine")
    if not isinstance(head, dict):
        raise FlagTableError(f"{path}: no [engine] table")
    syntax = head.get("syntax")
    if syntax not in SYNTAXES:
        raise FlagTableError(f"{path}: engine.syntax {syntax!r} is not one of {SYNTAXES}")
    for key in ("id", "version", "source"):
        if not isinstance(head.get(key), str) or not head[key]:
            raise FlagTableError(f"{path}: engine.{key} missing")
    flags = tuple(_spec(raw, f"{path.name}: flags[{i}]") for i, raw in enumerate(data.get("flags") or []))
    if not flags:
        raise FlagTableError(f"{path}: no [[flags]]")
    return FlagTable(engine=head["id"], version=head["version"], syntax=syntax, source=head["source"],
                     allow_abbrev=bool(head.get("allow_abbrev", False)), underscores=bool(head.get("underscores")),
                     flags=flags,
                     quantization_methods=_strings(head["quantization_methods"], f"{path}: quantization_methods")
                     if "quantization_methods" in head else None)
