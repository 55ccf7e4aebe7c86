"""What each engine option means for the question qcheck answers, per engine, with the engine's own value
rules: which options set the model, the context, the parallel layout, the KV-cache types, an engine knob, and
how the engine converts (or refuses) their values.

An option missing here is listed as "not judged" (qcheck does not model what it changes); it is never dropped.
Each converter raises ``Refused`` with the message the engine gives for a value it rejects; the sources are
the flag tables' (``matrices/engine_flags/``) plus the lines named below.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MEANINGS", "Meaning", "Refused"]


class Refused(ValueError):
    """A value the engine rejects, with the engine's own message."""


@dataclass(frozen=True)
class Meaning:
    """What an option sets (``target``: a name ``qcheck.deploy.cmdline`` applies) and how its value converts."""

    target: str
    convert: Callable[[str | None, str], object]


# ------------------------------------------------------------------------------------------ converters
def _argparse_int(value: str | None, flag: str) -> object:
    try:
        return int(str(value))
    except ValueError:
        raise Refused(f"argument {flag}: invalid int value: {value!r}") from None


def _argparse_float(value: str | None, flag: str) -> object:
    try:
        return float(str(value))
    except ValueError:
        raise Refused(f"argument {flag}: invalid float value: {value!r}") from None


_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_int(value: str | None, flag: str) -> int:
    """vLLM's ``human_readable_int`` (vllm/utils/argparse_utils.py:30-74 at 0.34.0), also SGLang's: ``1k`` is
    1,000, ``1K`` is 1,024, ``25.6k`` is 25,600; decimals are refused with binary suffixes."""
    text = str(value).strip()
    m = _HUMAN.fullmatch(text)
    if m:
        number, suffix = m.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:
            raise Refused(f"argument {flag}: Decimals are not allowed with binary suffixes like {suffix}. Did you "
                          f"mean to use {number}{suffix.lower()} instead?")
        return int(number) * _BINARY[suffix]
    try:
        return int(text)
    except ValueError:
        raise Refused(f"argument {flag}: invalid human_readable_int value: {value!r}") from None


def _human_int_or_auto(value: str | None, flag: str) -> object:
    """vLLM ``--max-model-len``: ``-1`` or ``auto`` is the engine's choice (argparse_utils.py:77-94)."""
    if str(value).strip() in ("-1",) or str(value).strip().lower() == "auto":
        return None
    try:
        return human_int(value, flag)
    except Refused:
        raise Refused(f"argument {flag}: invalid human_readable_int_or_auto value: {value!r}") from None


def _stoi(value: str | None, flag: str) -> int:
    """llama.cpp's ``std::stoi``: leading blanks, a sign and digits; trailing text is ignored; no digits throws
    ("stoi", reported by common_params_parse_ex as 'error while handling argument')."""
    m = re.match(r"\s*([+-]?\d+)", str(value))
    if not m:
        raise Refused(f'error while handling argument "{flag}": stoi')
    return int(m.group(1))


def _llama_ctx(value: str | None, flag: str) -> object:
    n = _stoi(value, flag)
    return None if n == 0 else n  # 0: loaded from the model (common/arg.cpp:1639-1648)


_TRUTHY = ("on", "enabled", "true", "1")
_FALSEY = ("off", "disabled", "false", "0")


def _llama_onoff(name: str, auto: bool) -> Callable[[str | None, str], object]:
    """llama.cpp ``-fa on|off|auto`` (arg.cpp:1754-1768), ``--fit on|off`` (:2868-2880)."""

    def convert(value: str | None, flag: str) -> object:
        text = str(value)
        if text in _TRUTHY:
            return True
        if text in _FALSEY:
            return False
        if auto and text in ("auto", "-1"):
            return None
        raise Refused(f"error: unknown value for {name}: {text!r}")

    return convert


def _llama_ngl(value: str | None, flag: str) -> object:
    """``-ngl N|auto|all`` (arg.cpp:2789-2800): auto is the build's fitting default (None), all every layer."""
    if value == "auto":
        return None
    if value == "all":
        return 1 << 16
    n = _stoi(value, flag)
    return None if n == -1 else n


#: llama.cpp's cache types (common/arg.cpp:304-325 at b11312)
LLAMA_KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


def _llama_kv(value: str | None, flag: str) -> object:
    if value not in LLAMA_KV_TYPES:
        raise Refused(f'error while handling argument "{flag}": Unsupported cache type: {value}')
    return value


def _llama_load_mode(value: str | None, flag: str) -> object:
    """``-lm auto|none|mmap|mlock|mmap+mlock|dio`` (arg.cpp:2690-2708): without mmap the weights are read."""
    modes = {"auto": None, "mmap": False, "mmap+mlock": False, "none": True, "mlock": True, "dio": True}
    if value not in modes:
        raise Refused(f'error while handling argument "{flag}": invalid value')
    return modes[value]


def _switch_on(value: str | None, flag: str) -> object:
    return True


def _text(value: str | None, flag: str) -> object:
    return value


def _mlx_kv_bits(value: str | None, flag: str) -> object:
    """mlx_lm.server ``--kv-bits N`` quantises the cache to N bits (q4, q8 ... in qcheck's KV table)."""
    n = _argparse_int(value, flag)
    return f"q{n}"


def ollama_uint(value: str | None, flag: str) -> object:
    """Ollama ``envconfig.Uint``: a value that does not parse is logged and the default kept
    (envconfig/config.go:259-271)."""
    try:
        n = int(str(value).strip())
    except ValueError:
        return None
    return n if n > 0 else None


def ollama_bool(value: str | None, flag: str) -> object:
    """Ollama ``envconfig.BoolWithDefault`` (strconv.ParseBool; an invalid value keeps the default)."""
    text = str(value).strip().lower()
    if text in ("1", "t", "true"):
        return True
    if text in ("0", "f", "false"):
        return False
    return None


def _click_int(value: str | None, flag: str) -> object:
    """click's ``INT`` type (trtllm-serve's integer options)."""
    try:
        return int(str(value).strip())
    except ValueError:
        raise Refused(f"Invalid value for '{flag}': {value!r} is not a valid integer.") from None


def _commander_count(value: str | None, flag: str) -> object:
    """lms ``createRefinedNumberParser({integer: true, min: 1})`` (src/types/refinedNumber.ts)."""
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        raise Refused(f"error: option '{flag}' argument '{value}' is invalid. Not a number") from None
    if number != int(number) or number < 1:
        raise Refused(f"error: option '{flag}' argument '{value}' is invalid. Must be an integer of at least 1")
    return int(number)


def _meanings(pairs: dict[str, tuple[str, Callable[[str | None, str], object]]]) -> dict[str, Meaning]:
    return {dest: Meaning(target, conv) for dest, (target, conv) in pairs.items()}


#: per flag table, option ``dest`` -> what it sets. Targets: model, revision, hf_repo, hf_file, context, tp, pp,
#: dp, ep, ep_enabled, kv, kv.k, kv.v, knobs.<EngineKnobs field>
MEANINGS: dict[str, dict[str, Meaning]] = {
    # vllm/engine/arg_utils.py at 0.34.0: --dtype :984, --revision :993, --max-model-len :998, --quantization
    # :999, --enforce-eager :1007, -pp :1186, -tp :1224, -dp :1256, --enable-expert-parallel :1320,
    # --gpu-memory-utilization :1404, --kv-cache-memory-bytes :1410, --kv-cache-dtype :1416,
    # --max-num-batched-tokens :1759, --max-num-seqs :1773
    "vllm": _meanings({
        "model_tag": ("model", _text), "model": ("model", _text), "revision": ("revision", _text),
        "max_model_len": ("context", _human_int_or_auto),
        "tensor_parallel_size": ("tp", _argparse_int), "pipeline_parallel_size": ("pp", _argparse_int),
        "data_parallel_size": ("dp", _argparse_int), "enable_expert_parallel": ("ep_enabled", _switch_on),
        "kv_cache_dtype": ("kv", _text), "quantization": ("knobs.quantization", _text),
        "dtype": ("knobs.dtype", _text),
        "gpu_memory_utilization": ("knobs.gpu_memory_utilization", _argparse_float),
        "max_num_seqs": ("knobs.max_num_seqs", _argparse_int),
        "max_num_batched_tokens": ("knobs.max_num_batched_tokens", human_int),
        "enforce_eager": ("knobs.enforce_eager", _switch_on),
        "kv_cache_memory_bytes": ("knobs.kv_cache_memory", human_int),
    }),
    # sglang 0.5.23: sglang/srt/arg_groups/fields/{model,parallel,memory,schedule}.py
    "sglang": _meanings({
        "model_path": ("model", _text), "revision": ("revision", _text),
        "context_length": ("context", human_int),
        "tp_size": ("tp", _argparse_int), "pp_size": ("pp", _argparse_int), "ep_size": ("ep", _argparse_int),
        "kv_cache_dtype": ("kv", _text), "quantization": ("knobs.quantization", _text),
        "dtype": ("knobs.dtype", _text),
        "mem_fraction_static": ("knobs.mem_fraction_static", _argparse_float),
        "chunked_prefill_size": ("knobs.chunked_prefill_size", _argparse_int),
    }),
    # llama.cpp b11312 common/arg.cpp: -c :1639, -b :1669, -ub :1676, -fa :1754, -ctk/-ctv :2437-2460, -np :2544,
    # -cmoe :2760, -ncmoe :2767, -ngl :2789, -fit :2868, -lm :2690, -m :3035, -hf :3060, -hff :3070
    "llama.cpp": _meanings({
        "model": ("model", _text), "hf_repo": ("hf_repo", _text), "hf_file": ("hf_file", _text),
        "ctx_size": ("context", _llama_ctx),
        "cache_type_k": ("kv.k", _llama_kv), "cache_type_v": ("kv.v", _llama_kv),
        "flash_attn": ("knobs.flash_attn", _llama_onoff("--flash-attn", auto=True)),
        "fit": ("knobs.fit", _llama_onoff("--fit", auto=False)),
        "n_gpu_layers": ("knobs.n_gpu_layers", _llama_ngl),
        "parallel": ("knobs.n_parallel", _stoi), "ubatch_size": ("knobs.n_ubatch", _stoi),
        "batch_size": ("knobs.n_batch", _stoi), "n_cpu_moe": ("knobs.n_cpu_moe", _stoi),
        "cpu_moe": ("knobs.n_cpu_moe", lambda v, f: 1 << 16), "load_mode": ("knobs.no_mmap", _llama_load_mode),
    }),
    # mlx-lm 0.32.2 mlx_lm/server.py main(): --model, --kv-bits
    "mlx": _meanings({"model": ("model", _text), "kv_bits": ("kv", _mlx_kv_bits)}),
    # trtllm-serve (tensorrt_llm/commands/serve.py): MODEL, --max_seq_len, --tp_size, --pp_size, --ep_size
    "trtllm-serve": _meanings({
        "model": ("model", _text), "revision": ("revision", _text), "max_seq_len": ("context", _click_int),
        "tensor_parallel_size": ("tp", _click_int), "pipeline_parallel_size": ("pp", _click_int),
        "moe_expert_parallel_size": ("ep", _click_int),
    }),
    "ollama-run": _meanings({"model": ("model", _text)}),
    "ollama-create": _meanings({"model": ("model_name", _text), "file": ("modelfile", _text)}),
    # lms load (src/subcommands/load.ts): [path], -c/--context-length (integer >= 1)
    "lms-load": _meanings({"path": ("model", _text), "context_length": ("context", _commander_count)}),
}
