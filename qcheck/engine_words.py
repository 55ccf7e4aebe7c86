"""Memory advice in the chosen engine's own words: Ollama's ``num_gpu`` and ``PARAMETER num_ctx``, LM Studio's
``lms load --gpu`` and ``--context-length``, not llama.cpp's ``-ngl`` for every engine built on it.

The offload plan and the engine's default context are computed once (``qcheck.memory``); this module only words
them, from data: ``[[engine_words]]`` in ``matrices/suggestions.toml`` (each entry with its sources). An engine
without an entry keeps the plan's own words (llama.cpp's flags, in which the plan is computed). Two things change:

- a plan that moves layers to RAM is said as the engine is told it (``offload``);
- a context above the one the engine runs when none is given (Ollama: by VRAM; LM Studio: 4096) is a requirement
  in the engine's words (``context``), naming that default: without it the deployment runs the shorter context.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qcheck.matrix.schema import SourceSpec, Where
    from qcheck.memory.records import MemoryEstimate
    from qcheck.model import Verdict

#: the keys of an ``[[engine_words]]`` entry, and the placeholders its texts may use
KEYS = {"engine", "offload", "context", "sources", "note"}
PLACEHOLDERS = ("ngl", "layers", "gpu_gib", "ram_gib", "ratio", "context", "default", "why")
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


@dataclass(frozen=True)
class EngineWords:
    """How one engine is told the settings the memory advice is about."""

    engine: str
    #: the GPU/RAM split of a model that does not fit ({ngl}, {layers}, {gpu_gib}, {ram_gib}, {ratio})
    offload: str | None
    #: the setting that gives the asked context when the engine's default is smaller ({context}, {default}, {why})
    context: str | None
    sources: tuple[SourceSpec, ...]


def parse_engine_words(raw: Any, engines: set[str], sources: dict[str, SourceSpec], where: Where
                       ) -> dict[str, EngineWords]:
    """``[[engine_words]]``, validated: a known engine once each, known keys and placeholders, named sources."""
    from qcheck.matrix.schema import check_keys

    if not isinstance(raw, list):
        where.fail("bad-type", "[[engine_words]] must be an array of tables")
    out: dict[str, EngineWords] = {}
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict):
            where.fail("bad-type", f"engine_words #{i + 1} must be a table")
        check_keys(entry, KEYS, {"engine", "sources"}, where)
        engine = entry["engine"]
        if engine not in engines or engine in out:
            where.fail("bad-value", f"engine_words #{i + 1}: engine {engine!r} is unknown or given twice")
        texts = {k: entry.get(k) for k in ("offload", "context")}
        for key, text in texts.items():
            if text is None:
                continue
            if not isinstance(text, str) or not text.strip():
                where.fail("bad-type", f"engine_words {engine!r}: {key} must be a non-empty string")
            bad = [p for p in _PLACEHOLDER.findall(text) if p not in PLACEHOLDERS]
            if bad:
                where.fail("bad-placeholder", f"engine_words {engine!r}: placeholder {{{bad[0]}}} is not one of "
                                              f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
        names = entry["sources"] if isinstance(entry["sources"], list) else [entry["sources"]]
        missing = [n for n in names if n not in sources]
        if missing or not names:
            where.fail("undefined-source", f"engine_words {engine!r}: sources {missing or names} are not in [sources]")
        out[engine] = EngineWords(engine, texts["offload"], texts["context"], tuple(sources[n] for n in names))
    return out


def apply_engine_words(verdict: Verdict, memory: MemoryEstimate, words: EngineWords | None) -> None:
    """Word ``memory``'s offload plan and the context requirement as ``verdict``'s engine is told them."""
    if words is None:
        return
    from qcheck.memory.records import GIB

    plan = memory.offload
    if words.offload and plan is not None and plan.ngl and not plan.user_set and plan.n_cpu_moe is None:
        plan.summary = words.offload.format(
            ngl=plan.ngl, layers=plan.n_layers + 1, gpu_gib=f"{plan.gpu_bytes / GIB:.1f}",
            ram_gib=f"{plan.ram_bytes / GIB:.1f}", ratio=f"{plan.ngl / (plan.n_layers + 1):.2f}")
    default = memory.default_context
    if words.context and default is not None and memory.context > default:
        why = (memory.default_context_why or "").split(": ", 1)[-1]
        verdict.requires.append(words.context.format(context=memory.context, default=default, why=why))
