"""The memory tests' one way to ask ``estimate_memory`` a question in the terms the tests think in: a config.json
or GGUF keys for the model's shape, an engine name, a GPU size.

The Inspection's ``shape`` record is filled from the config/GGUF keys/tensors the test gives (as the classifier
does from a real checkpoint), then the pipeline's own memory function is asked with a ``Deploy`` and a
``MemoryTarget``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qcheck.memory import MemoryEstimate, MemoryTarget, engine_memory_params, estimate_memory
from qcheck.model import Inspection
from qcheck.model_shape import shape_from
from qcheck.request import Deploy, EngineKnobs, KVCacheTypes, Parallel

_LOOKUP: Any = object()


def with_shape(ins: Inspection, *, config: Mapping[str, Any] | None = None,
               gguf_metadata: Mapping[str, Any] | None = None, tensors: Mapping[str, Any] | None = None) -> Inspection:
    """``ins`` with its shape record read from a config.json, GGUF keys and/or a tensor table (as classify does)."""
    ins.shape = shape_from(ins, config=config, gguf_metadata=gguf_metadata, tensors=tensors)
    return ins


def estimate(ins: Inspection, *, context: int | None = None, batch: int = 1, kv_cache_dtype: str | None = None,
             dequantized: bool = False, gpu_memory_gib: float | None = None, engine: str | None = None,
             engine_memory: Any = _LOOKUP, config: Mapping[str, Any] | None = None,
             gguf_metadata: Mapping[str, Any] | None = None, tensors: Mapping[str, Any] | None = None,
             device: str = "GPU", tp: int | None = None, knobs: EngineKnobs | None = None,
             version: str | None = None) -> MemoryEstimate:
    if config is not None or gguf_metadata is not None or tensors is not None:
        with_shape(ins, config=config, gguf_metadata=gguf_metadata, tensors=tensors)
    deploy = Deploy(context, batch, KVCacheTypes.parse(kv_cache_dtype), Parallel(tp=tp), knobs or EngineKnobs())
    params = engine_memory_params(engine) if engine_memory is _LOOKUP else engine_memory
    target = MemoryTarget(engine, params, device, gpu_memory_gib, "bfloat16" if dequantized else None, version)
    return estimate_memory(ins, deploy, target)
