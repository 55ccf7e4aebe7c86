"""Runners turn token ids into log-probs and greedy generations; see ``qcheck.eval.runners.base``.

Candidate backends are looked up by name in ``BACKENDS`` (``--candidate NAME=BACKEND:TARGET``; a bare
path uses ``simulated``). A backend is a function ``build(name: str, target: str, context: RunnerContext)
-> BuiltRunner``, imported lazily from its "module:function" string, so adding an engine (llama.cpp,
an OpenAI-compatible endpoint) is one entry here plus its module.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from qcheck.errors import UsageError
from qcheck.eval.runners.base import CandidateRunner, VocabInfo
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.request import KVCacheTypes

#: backend name -> "module:function" building a runner
BACKENDS: dict[str, str] = {
    "simulated": "qcheck.eval.runners.simulated:build",
    "llamacpp": "qcheck.eval.runners.llamacpp:build",
    "endpoint": "qcheck.eval.runners.endpoint:build",
}
DEFAULT_BACKEND = "simulated"


@dataclass
class RunnerContext:
    """What a backend may need to build a candidate comparable with the reference."""

    reference_path: str
    reference_config: Any
    reference_vocab: VocabInfo
    tokenizer: Any
    dtype: str = "float32"
    device: str = "cpu"
    activation_quant: bool = False
    limits: Limits = DEFAULT_LIMITS
    #: tokens per item (--max-length): engine backends size their context from it
    max_length: int = 512
    #: simulated candidates: whose arithmetic around the weights (``--simulate-engine``)
    simulate_engine: str = "weights"
    #: the KV cache types this candidate runs with (None: the engine's default)
    kv_cache: KVCacheTypes | None = None
    #: endpoint backends: where this run keeps their results (``qcheck.eval.runners.http.RunState``; None: nowhere)
    endpoint_run: Any = None


@dataclass
class BuiltRunner:
    """A ready runner plus what the report should say about it."""

    runner: CandidateRunner
    notes: list[str] = field(default_factory=list)
    #: the candidate's quantisation as inspected (method, producer, bits, gguf_file_type, activation_dtype)
    quantization: dict[str, Any] | None = None
    #: what was done about activation quantisation (simulated candidates)
    activations: str | None = None
    #: simulated candidates: the engine emulation (``qcheck.eval.emulation.EmulationRecord``), None otherwise
    simulation: Any = None
    #: the KV cache the candidate ran with, as the backend knows it (``{"k", "v", "source", ...}``), None if unknown
    kv_cache: dict[str, Any] | None = None


def quantization_json(inspection: Any) -> dict[str, Any]:
    """``BuiltRunner.quantization`` from a ``qcheck.model.Inspection``: what the report says about the format."""
    q = inspection.quantization
    return {"method": q.method, "producer": q.producer, "weight_bits": q.weight_bits,
            "bits_per_weight": q.bits_per_weight, "gguf_file_type": q.gguf_file_type,
            "activation_dtype": q.activation_dtype}


def build_runner(backend: str, name: str, target: str, context: RunnerContext) -> BuiltRunner:
    """Build the candidate ``name`` from ``target`` with ``backend``."""
    spec = BACKENDS.get(backend)
    if spec is None:
        raise UsageError(f"unknown candidate backend {backend!r}; known: {', '.join(sorted(BACKENDS))}")
    module, _, func = spec.partition(":")
    return getattr(importlib.import_module(module), func)(name, target, context)
