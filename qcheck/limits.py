"""Resource bounds for reading untrusted headers.

Defaults are far above any real checkpoint (a 128k-vocab Llama-3 GGUF header is ~10 MB, the largest
public safetensors headers are a few MB, the largest models have ~100k tensors) and far below what
would hurt the machine. Every count, length and offset read from a file is checked against these
before it is used. Override per run with ``--limit NAME=VALUE`` or ``QCHECK_LIMIT_<NAME>``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from qcheck.errors import UsageError


@dataclass(frozen=True)
class Limits:
    """The bounds every reader checks a count, length or size against (docs/limits.md)."""

    #: bytes of header (GGUF KV + tensor infos, or safetensors JSON) read from one file
    max_header_bytes: int = 256 * 1024 * 1024
    #: safetensors JSON header length (the reference reader allows 100 MB)
    max_safetensors_header: int = 100_000_000
    #: tensors in one file / in one model (the largest real model, a per-expert NVFP4 MoE, has ~280k; at this
    #: bound one header costs ~250 MB (GGUF) to ~450 MB (safetensors) of memory: docs/limits.md)
    max_tensors: int = 400_000
    #: metadata keys in one GGUF file; entries of a safetensors ``__metadata__`` map
    max_kv: int = 65_536
    #: bytes of one string (key or value)
    max_string_bytes: int = 16 * 1024 * 1024
    #: elements in one metadata array (a 256k vocab has 256k tokens; merges up to ~1M)
    max_array_elements: int = 16_000_000
    #: dimensions of one tensor (ggml allows 4)
    max_dims: int = 8
    #: nesting depth of arrays-of-arrays (GGUF) and JSON (side files)
    max_nesting: int = 8
    #: size of one JSON side file (config.json, index, quant configs); a 400k-entry index is ~35 MB
    max_json_bytes: int = 40 * 1024 * 1024
    #: shards in one model
    max_shards: int = 10_000
    #: elements of one tensor (2**50 elements is ~1 PB in 8 bits)
    max_tensor_elements: int = 2**50
    #: nesting depth of JSON side files and safetensors headers (real configs reach ~8: compressed-tensors
    #: transform_config -> config_groups -> ... -> targets)
    max_json_nesting: int = 32
    #: bytes of one pickle stream scanned (data.pkl of a torch zip, or a legacy/raw pickle); never unpickled
    max_pickle_bytes: int = 64 * 1024 * 1024

    def replace(self, **changes: int) -> Limits:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, overrides: dict[str, str] | None = None) -> Limits:
        """Defaults, then ``QCHECK_LIMIT_*`` environment variables, then explicit overrides."""
        values: dict[str, int] = {}
        names = {f.name for f in dataclasses.fields(cls)}
        for name in names:
            env = os.environ.get(f"QCHECK_LIMIT_{name.upper()}")
            if env is not None:
                values[name] = _parse_int(name, env)
        for name, raw in (overrides or {}).items():
            key = name.strip().lower().replace("-", "_")
            if key not in names:
                raise UsageError(f"unknown limit {name!r}; known: {', '.join(sorted(names))}")
            values[key] = _parse_int(key, raw)
        return cls(**values)


def _parse_int(name: str, raw: str) -> int:
    try:
        value = int(raw.replace("_", ""), 0)
    except ValueError:
        raise UsageError(f"limit {name} must be a whole number, not {raw!r}") from None
    if value <= 0:
        raise UsageError(f"limit {name} must be positive, not {value}")
    return value


DEFAULT_LIMITS = Limits()
