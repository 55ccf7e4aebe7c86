"""How an engine spells a deployment setting: the flag of its command line (``-c``, ``--max-model-len``), else its
Modelfile ``PARAMETER`` or the environment variable it reads, so the options qcheck suggests are in the engine's own
words.

Read from data, never written per engine: the flag tables (``matrices/engine_flags/*.toml``, each with the engine it
belongs to), what each option sets (``qcheck.deploy.meanings.MEANINGS``: ``ctx_size`` -> ``context``), the
Modelfile parameters Ollama judges (``qcheck.deploy.modelfile.JUDGED``) and the engine's ``[kv_cache] flag`` when it
is an environment variable (Ollama's ``OLLAMA_KV_CACHE_TYPE``). The first name a table lists is the spelling given
(llama.cpp ``-c``, vLLM ``--max-model-len``, SGLang ``--context-length``). Only the flag names are kept, and their
parse is memoised like the matrix's (``qcheck.datacache``), so spelling costs no TOML parse after the first run.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["Spelled", "spell"]

_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


@dataclass(frozen=True)
class Spelled:
    """A setting as the engine reads it: the words to pass (``["-c", "4096"]``), and where they go: ``argv`` (the
    command line), ``Modelfile`` (a ``PARAMETER`` line) or ``env`` (an environment variable)."""

    words: tuple[str, ...]
    where: str

    @property
    def text(self) -> str:
        return " ".join(self.words)


def _flag_names(data: bytes) -> dict[str, Any]:
    """The parts of a flag table spelling needs: the engine, and each option's names, ``dest`` and kind."""

    from qcheck.toml_compat import tomllib

    raw = tomllib.loads(data.decode("utf-8"))
    flags = []
    for entry in raw.get("flags") or []:
        names = [str(n) for n in entry.get("names") or []]
        if names:
            dest = str(entry.get("dest") or names[0].lstrip("-").replace("-", "_"))
            flags.append({"names": names, "dest": dest, "kind": str(entry.get("kind") or "value")})
    return {"engine": str((raw.get("engine") or {}).get("id") or ""), "flags": flags}


@functools.cache
def _tables() -> tuple[tuple[str, str, tuple[tuple[tuple[str, ...], str, str], ...]], ...]:
    """Every flag table as (table name, engine id, ((names, dest, kind), ...)), in name order."""
    from qcheck.data import data_dir
    from qcheck.datacache import cached_parse

    out = []
    for path in sorted((data_dir("matrices") / "engine_flags").glob("*.toml")):
        try:
            parsed = cached_parse("flag-names", path.read_bytes(), _flag_names)
        except (OSError, UnicodeDecodeError, ValueError):
            continue  # an unreadable table spells nothing; qcheck.deploy.flags reports it where it is used
        flags = tuple((tuple(f["names"]), f["dest"], f["kind"]) for f in parsed.get("flags") or [])
        out.append((path.stem, str(parsed.get("engine") or ""), flags))
    return tuple(out)


def _from_tables(engine: str, target: str, value: object) -> Spelled | None:
    from qcheck.deploy.meanings import MEANINGS

    for table, owner, flags in _tables():
        meanings = MEANINGS.get(table)
        if owner != engine or not meanings:
            continue
        by_dest = {dest: (names, kind) for names, dest, kind in flags}
        for dest, meaning in meanings.items():  # the meanings' order: vLLM's positional MODEL before --model
            if meaning.target != target or dest not in by_dest:
                continue
            names, kind = by_dest[dest]
            if kind == "switch":
                return Spelled((names[0],), "argv") if value is True else None
            if not _reads_back(meaning.convert, str(value), names[0], value):
                continue  # the engine would read the value as something else (mlx --kv-bits takes bits)
            return Spelled((str(value),) if kind == "positional" else (names[0], str(value)), "argv")
    return None


def _reads_back(convert: Any, text: str, flag: str, value: object) -> bool:
    """Whether the engine's own conversion of ``text`` gives ``value`` back (qcheck.deploy.meanings)."""
    from qcheck.deploy.meanings import Refused

    try:
        return bool(convert(text, flag) == value)
    except Refused:
        return False


def _from_modelfile(engine: str, target: str, value: object) -> Spelled | None:
    from qcheck.deploy.modelfile import JUDGED

    if not any(owner == engine and table.endswith("-create") for table, owner, _ in _tables()):
        return None  # only an engine whose models are made from a Modelfile (Ollama) reads its PARAMETERs
    for parameter, meaning in JUDGED.items():
        if meaning == target:
            return Spelled(("PARAMETER", parameter, str(value)), "Modelfile")
    return None


def _kv_env(engine: str, value: object) -> Spelled | None:
    """The engine's ``[kv_cache] flag`` when it is an environment variable (``OLLAMA_KV_CACHE_TYPE=q8_0``)."""
    from qcheck.errors import UsageError
    from qcheck.matrix import load_matrix

    try:
        kv = load_matrix().engine(engine).kv_cache
    except UsageError:
        return None
    flag = kv.flag if kv is not None else None
    return Spelled((f"{flag}={value}",), "env") if flag and _ENV_NAME.fullmatch(flag) else None


def spell(engine: str, target: str, value: object) -> Spelled | None:
    """How ``engine`` (a matrix engine id) takes a setting: ``target`` is what ``qcheck.deploy.meanings`` calls it
    (``context``, ``tp``, ``model``, ``kv``, ``kv.k``, ``kv.v``, ``knobs.n_gpu_layers``,
    ``knobs.gpu_memory_utilization`` ...). None: no flag, parameter or variable of the engine sets it."""
    found = _from_tables(engine, target, value) or _from_modelfile(engine, target, value)
    if found is None and target in ("kv", "kv.k"):
        found = _kv_env(engine, value)
    return found


def spell_kv(engine: str, k: str, v: str) -> list[Spelled] | None:
    """The KV cache types as the engine takes them: one setting for both (vLLM ``--kv-cache-dtype``), or K and V apart
    (llama.cpp ``-ctk``/``-ctv``); None when the engine has no way to say it (or cannot say K and V apart)."""
    both = spell(engine, "kv", k) if k == v else None
    if both is not None:
        return [both]
    k_flag, v_flag = spell(engine, "kv.k", k), spell(engine, "kv.v", v)
    if k_flag is None or v_flag is None or k_flag.words[0] == v_flag.words[0]:
        return None
    return [k_flag, v_flag]
