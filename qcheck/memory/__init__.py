"""Memory fit and speed ceilings per verdict, from the Inspection alone (docs/memory.md).

``estimate_memory(inspection, deploy, target)`` answers one (engine, device) question; ``apply_memory`` fills
``Verdict.memory`` for a pipeline's verdicts. The engine families live in ``families`` (one memory model per
family behind one interface), llama.cpp's offload plan in ``offload``, the records in ``records``.
"""

from qcheck.memory.estimate import (
    MAX_GPUS,
    MAX_LAYER_SPLIT,
    KVSizing,
    MemoryTarget,
    engine_memory_params,
    estimate_memory,
    kv_sizing,
)
from qcheck.memory.families import EngineFamily, family_for, llamacpp_compute_bytes
from qcheck.memory.records import GIB, MIB, MemoryEstimate, OffloadPlan, Part, Reserve
from qcheck.memory.verdicts import apply_memory, device_of

__all__ = ["GIB", "MAX_GPUS", "MAX_LAYER_SPLIT", "MIB", "EngineFamily", "KVSizing", "MemoryEstimate", "MemoryTarget",
           "OffloadPlan", "Part", "Reserve", "apply_memory", "device_of", "engine_memory_params", "estimate_memory",
           "family_for", "kv_sizing", "llamacpp_compute_bytes"]
