"""The engine settings a user can give qcheck, named as the engines name them: one table for the command line
(``qcheck check``/``hook``: ``--gpu-memory-utilization``, ``-ngl`` ...) and the gate policy's ``[memory]`` keys
(``gpu-memory-utilization``, ``n-gpu-layers`` ...), so every front end builds the same ``EngineKnobs``.

Values are parsed as the engines parse them: vLLM's human-readable integers (``8G`` = 8 x 2^30, ``8g`` = 8 x 10^9)
for ``--kv-cache-memory-bytes`` and ``--max-num-batched-tokens``, llama.cpp's ``on``/``off``/``auto`` for ``-fa`` and
``--fit``, ``all``/``auto`` or a count for ``-ngl``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from qcheck.errors import UsageError

__all__ = ["KNOBS", "Knob", "parse_knob", "unread"]

_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass(frozen=True)
class Knob:
    """One engine setting: the ``EngineKnobs`` field, the engine that reads it, its command-line spellings (the
    engine's own), the policy key, how its value is parsed, and one line of help."""

    field: str
    engine: str
    flags: tuple[str, ...]
    policy_key: str
    kind: str  # fraction | int | human-int | flag | on-off | ngl
    help: str
    metavar: str = "N"
    #: the memory models (an engine's ``[memory] formula``) whose figures it changes; an engine whose model is not
    #: listed reads nothing from it, and the setting is reported as not judged
    formulas: tuple[str, ...] = ()


KNOBS: tuple[Knob, ...] = (
    Knob("gpu_memory_utilization", "vLLM", ("--gpu-memory-utilization",), "gpu-memory-utilization", "fraction",
         "vLLM: share of the GPU for weights, activations and KV cache (default 0.92; 1.0 from 0.34)", "F",
         formulas=('vllm',)),
    Knob("max_num_seqs", "vLLM", ("--max-num-seqs",), "max-num-seqs", "int",
         "vLLM: sequences per step, the profile run's sampler rows (default by GPU memory: 256 or 1024)",
         formulas=('vllm',)),
    Knob("max_num_batched_tokens", "vLLM", ("--max-num-batched-tokens",), "max-num-batched-tokens", "human-int",
         "vLLM: tokens per step, the profile run's forward pass (default by GPU memory: 2048, 8192 or 16384)",
         formulas=('vllm',)),
    Knob("enforce_eager", "vLLM", ("--enforce-eager",), "enforce-eager", "flag",
         "vLLM: no CUDA graphs (their memory is not taken from the KV cache)", formulas=('vllm',)),
    Knob("kv_cache_memory", "vLLM", ("--kv-cache-memory-bytes", "--kv-cache-memory"), "kv-cache-memory", "human-int",
         "vLLM: a fixed KV cache size in bytes (8G = 8 GiB), skipping gpu_memory_utilization", "BYTES",
         formulas=('vllm',)),
    Knob("mem_fraction_static", "SGLang", ("--mem-fraction-static",), "mem-fraction-static", "fraction",
         "SGLang: share of the free GPU memory for weights and KV cache (default: its heuristic by GPU)", "F",
         formulas=('sglang',)),
    Knob("chunked_prefill_size", "SGLang", ("--chunked-prefill-size",), "chunked-prefill-size", "int",
         "SGLang: prefill chunk in tokens (-1: off; default by GPU memory)", formulas=('sglang',)),
    Knob("n_gpu_layers", "llama.cpp", ("-ngl", "--n-gpu-layers", "--gpu-layers"), "n-gpu-layers", "ngl",
         "llama.cpp: layers on the GPU, counted as the build counts them (all, auto, or N; default auto: --fit)",
         "N|all|auto", formulas=('llama.cpp',)),
    Knob("n_parallel", "llama.cpp", ("-np", "--parallel"), "parallel", "int",
         "llama.cpp: server slots; without it llama-server runs 4 slots on one KV pool, with it -c is split",
         formulas=('llama.cpp',)),
    Knob("n_ubatch", "llama.cpp", ("-ub", "--ubatch-size"), "ubatch-size", "int",
         "llama.cpp: physical batch, the compute buffer's tokens (default 512)", formulas=('llama.cpp',)),
    Knob("n_batch", "llama.cpp", ("--batch-size",), "batch-size", "int", "llama.cpp: logical batch (-b, default 2048)",
         formulas=('llama.cpp',)),
    Knob("flash_attn", "llama.cpp", ("-fa", "--flash-attn"), "flash-attn", "on-off",
         "llama.cpp: flash attention on, off or auto (default auto: on where the backend has it)", "on|off|auto",
         formulas=('llama.cpp',)),
    Knob("no_mmap", "llama.cpp", ("--no-mmap",), "no-mmap", "flag",
         "llama.cpp: read the weights into memory instead of mapping them (host RAM held, not page cache)",
         formulas=()),
    Knob("fit", "llama.cpp", ("--fit",), "fit", "on-off",
         "llama.cpp: fit context and layers to free memory (default on from b7698)", "on|off",
         formulas=('llama.cpp',)),
    Knob("n_cpu_moe", "llama.cpp", ("--n-cpu-moe", "-ncmoe"), "n-cpu-moe", "int",
         "llama.cpp: keep the expert tensors of the first N layers in RAM", formulas=('llama.cpp',)),
    Knob("allow_long_context", "vLLM, SGLang", ("--allow-long-context",), "allow-long-context", "flag",
         "vLLM VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, SGLang SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1: a context above "
         "the model's own maximum starts (with a warning) instead of being refused at start-up",
         formulas=('vllm', 'sglang')),
)


def _human_int(text: str) -> int:
    """vLLM's human_readable_int: '1k' = 1,000, '1K' = 1,024, '25.6k' = 25,600 (no decimals with K/M/G/T)."""
    m = _HUMAN.fullmatch(text)
    if m is None:
        return int(text)
    number, suffix = m.groups()
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    if "." in number:
        raise ValueError(f"decimals are not allowed with {suffix} (did you mean {number}{suffix.lower()}?)")
    return int(number) * _BINARY[suffix]


def _on_off(text: str, allow_auto: bool) -> bool | None:
    word = text.strip().lower()
    if word in ("on", "1", "true", "yes", "enabled"):
        return True
    if word in ("off", "0", "false", "no", "disabled"):
        return False
    if allow_auto and word == "auto":
        return None
    raise ValueError("on or off" + (" or auto" if allow_auto else ""))


def parse_knob(knob: Knob, value: Any) -> Any:
    """A value for ``knob`` from the command line or a policy (a string, a number or a bool), as the engine parses
    it; raises UsageError naming the setting."""
    name = knob.flags[0]
    try:
        if knob.kind == "flag":
            if not isinstance(value, bool):
                raise ValueError("true or false")
            return value
        if knob.kind == "on-off" and isinstance(value, bool):
            return value
        if isinstance(value, bool):
            raise ValueError("a value, not true/false")
        text = str(value).strip()
        if knob.kind == "fraction":
            number = float(text)
            if not math.isfinite(number) or not 0 < number <= 1:
                raise ValueError("a fraction in (0, 1]")
            return number
        if knob.kind == "on-off":
            return _on_off(text, allow_auto=knob.field == "flash_attn")
        if knob.kind == "ngl":
            if text.lower() == "auto":
                return None
            return -1 if text.lower() == "all" else int(text)
        if isinstance(value, float) and not value.is_integer():
            raise ValueError("a whole number")
        return _human_int(text) if knob.kind == "human-int" else int(text)
    except (ValueError, OverflowError) as exc:
        raise UsageError(f"{name} {str(value)[:64]!r}: {exc}") from None


def unread(given: dict[str, Any], formula: str | None) -> list[Knob]:
    """The settings in ``given`` (EngineKnobs fields set) that an engine with this memory model does not read: they
    change no figure, so they are reported as not judged."""
    return [k for k in KNOBS if k.field in given and formula not in k.formulas]
