"""The question ``qcheck check`` answers, as one typed, immutable value.

Every front end (the CLI flags, a gate policy's target, the pre-commit hook, the which-quant-fits table, an
engine command line, a deployment manifest, the Python API) builds a :class:`CheckRequest` and hands it to
``qcheck.pipeline.run``; nothing else computes a verdict, a memory figure or a speed. Adding a dimension of the
question (a new engine knob, say) means adding a field here and reading it where it matters, not editing a
dozen signatures.

The values are checked when the request is built (a bad value is a ``UsageError``, exit 2, before any file is
read). Engine knobs keep the engines' own names (vLLM ``gpu_memory_utilization``, SGLang
``mem_fraction_static``, llama.cpp ``n_gpu_layers``); ``None`` means "the engine's default at that version".
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

from qcheck.errors import UsageError
from qcheck.kvtypes import normalise_kv
from qcheck.limits import DEFAULT_LIMITS, Limits

__all__ = ["CheckRequest", "CommandFinding", "Deploy", "EngineKnobs", "KVCacheTypes", "Origin", "Parallel",
           "SettingRead"]

_KV_NAME = re.compile(r"[a-z0-9][a-z0-9_.]*")
_KNOB_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class KVCacheTypes:
    """The KV cache's element types, K and V apart (llama.cpp ``-ctk``/``-ctv``); ``None`` is the default
    (what the checkpoint declares, else the engine's own default). Names are normalised (``q8_0``, ``fp8``)."""

    k: str | None = None
    v: str | None = None

    def __post_init__(self) -> None:
        for side in ("k", "v"):
            value = getattr(self, side)
            if value is None:
                continue
            if not isinstance(value, str) or not value.strip():
                raise UsageError(f"KV cache type for {side.upper()}: empty")
            norm: str | None = normalise_kv(value)
            if norm == "auto":
                norm = None
            elif len(value) > 64 or not _KV_NAME.fullmatch(norm or ""):
                raise UsageError(f"KV cache type {value[:64]!r}: not a type name (letters, digits, _ and .)")
            # a well-formed name no engine knows is not refused here: the engine's own refusal is the verdict
            object.__setattr__(self, side, norm)

    @classmethod
    def parse(cls, text: str | None, k: str | None = None, v: str | None = None) -> KVCacheTypes:
        """From ``--kv-cache-dtype T`` (both), ``T_K,T_V`` (K then V), and/or separate K and V values; a
        separate value overrides the side it names."""
        both_k = both_v = None
        if text is not None and text.strip():
            parts = [p.strip() for p in text.split(",")]
            if len(parts) == 1:
                both_k = both_v = parts[0]
            elif len(parts) == 2 and all(parts):
                both_k, both_v = parts
            else:
                raise UsageError(f"--kv-cache-dtype {text!r}: give one type, or K,V (e.g. q8_0,q4_0)")
        return cls(k if k is not None else both_k, v if v is not None else both_v)

    @property
    def given(self) -> bool:
        return self.k is not None or self.v is not None

    @property
    def same(self) -> bool:
        return self.k == self.v

    @property
    def label(self) -> str:
        """``q8_0`` when both sides agree, else ``K q8_0, V q4_0`` (``default`` for an unset side)."""
        if self.same:
            return self.k or "default"
        return f"K {self.k or 'default'}, V {self.v or 'default'}"

    def to_json(self) -> dict[str, Any]:
        return {"k": self.k, "v": self.v}


@dataclass(frozen=True)
class Parallel:
    """Tensor-, pipeline- and expert-parallel sizes (``None``: not asked; 1 is a valid explicit answer)."""

    tp: int | None = None
    pp: int | None = None
    ep: int | None = None

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep"):
            _check_int(getattr(self, name), f"--{name}", 1, 1 << 16)

    def sizes(self) -> dict[str, int]:
        """The sizes asked for, by name (``{"tp": 2}``)."""
        return {name: n for name, n in (("tp", self.tp), ("pp", self.pp), ("ep", self.ep)) if n is not None}

    def to_json(self) -> dict[str, Any]:
        return {"tp": self.tp, "pp": self.pp, "ep": self.ep}


@dataclass(frozen=True)
class EngineKnobs:
    """Engine settings that change memory or the kernel path, under the engines' own names. ``None``: the
    engine's default at the judged version (and GPU, where the engine picks by GPU)."""

    # vLLM
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enforce_eager: bool | None = None
    kv_cache_memory: int | None = None  # bytes (vLLM --kv-cache-memory-bytes)
    # SGLang
    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None
    # llama.cpp family
    n_gpu_layers: int | None = None  # -ngl; -1 or a count above the layers: all
    n_parallel: int | None = None  # -np
    n_ubatch: int | None = None  # -ub
    n_batch: int | None = None  # -b
    flash_attn: bool | None = None  # -fa on/off (None: auto)
    no_mmap: bool | None = None
    fit: bool | None = None  # --fit on/off (None: the build's default)
    n_cpu_moe: int | None = None
    #: vLLM ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` / SGLang ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1``: a context
    #: above the model's own maximum starts (with a warning) instead of being refused at start-up
    allow_long_context: bool | None = None
    # every engine that has them (vLLM/SGLang --dtype, --quantization): carried as the engine spells them
    dtype: str | None = None  # the activation/weight dtype asked for (vLLM --dtype half)
    quantization: str | None = None  # a quantisation method forced over the checkpoint's own (vLLM -q fp8)

    def __post_init__(self) -> None:
        for name in ("gpu_memory_utilization", "mem_fraction_static"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                      or not math.isfinite(value) or not 0 < value <= 1):
                raise UsageError(f"{name} must be a fraction in (0, 1], not {value!r}")
        _check_int(self.max_num_seqs, "max_num_seqs", 1, 1 << 20)
        _check_int(self.max_num_batched_tokens, "max_num_batched_tokens", 1, 1 << 24)
        _check_int(self.kv_cache_memory, "kv_cache_memory", 1, 1 << 50)
        _check_int(self.chunked_prefill_size, "chunked_prefill_size", -1, 1 << 24)
        _check_int(self.n_gpu_layers, "n_gpu_layers", -1, 1 << 16)
        _check_int(self.n_parallel, "n_parallel", 1, 1 << 16)
        _check_int(self.n_ubatch, "n_ubatch", 1, 1 << 20)
        _check_int(self.n_batch, "n_batch", 1, 1 << 24)
        _check_int(self.n_cpu_moe, "n_cpu_moe", 0, 1 << 16)
        for name in ("dtype", "quantization"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not _KNOB_WORD.fullmatch(value)):
                raise UsageError(f"{name} must be a method or dtype name (letters, digits, _ . -), not {value!r}")

    def given(self) -> dict[str, Any]:
        """The knobs set, by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}

    def to_json(self) -> dict[str, Any]:
        return self.given()


@dataclass(frozen=True)
class CommandFinding:
    """What an engine does with one setting of the deployment as written, before any model is read: it refuses
    it (``unsupported``: an unknown flag, a value its parser or config check rejects, worded as the engine words
    it) or qcheck cannot judge what it changes (``unknown``: e.g. a quantisation override). Built by
    ``qcheck.deploy`` from a command line or a manifest, judged by the ``command-line`` dimension."""

    engine: str  # the matrix's engine id
    status: str  # "unsupported" | "unknown"
    flag: str
    value: str | None
    message: str
    source: str  # where the engine's behaviour was read (file and line at a release)
    version: str  # the engine version that source was read at
    #: the flag itself is not one the engine has (at ``version``: another release may have it)
    unknown_flag: bool = False

    def __post_init__(self) -> None:
        if self.status not in ("unsupported", "unknown"):
            raise UsageError(f"command finding status must be unsupported or unknown, not {self.status!r}")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Deploy:
    """How the model is deployed, apart from which engine and GPU: what the matrix's dimensions and the
    memory estimate read."""

    context: int | None = None  # tokens per sequence; None: the engine's default (capped at the model's own)
    batch: int = 1  # concurrent sequences
    kv_cache: KVCacheTypes = field(default_factory=KVCacheTypes)
    parallel: Parallel = field(default_factory=Parallel)
    knobs: EngineKnobs = field(default_factory=EngineKnobs)
    #: what the engine refuses (or qcheck cannot judge) in the deployment as written (an engine command line)
    findings: tuple[CommandFinding, ...] = ()
    #: the GPUs the deployment gets on its node (a manifest's ``nvidia.com/gpu`` request, the GPUs ``--gpu auto``
    #: found); None: not stated. An engine that needs more (vLLM's world size) does not start.
    gpus_available: int | None = None

    def __post_init__(self) -> None:
        _check_int(self.context, "--context", 1, 1 << 30)
        _check_int(self.batch, "--batch", 1, 1 << 20)
        _check_int(self.gpus_available, "GPU count", 0, 1 << 16)
        if not isinstance(self.findings, tuple):
            object.__setattr__(self, "findings", tuple(self.findings))

    def replace_batch(self, batch: int = 1) -> Deploy:
        """This deployment with another batch (a front end compares what was set apart from the batch)."""
        return dataclasses.replace(self, batch=batch)

    @property
    def named(self) -> bool:
        """Whether any setting of the deployment was named (context, batch, KV types, a parallel size, a knob):
        then the question is about a deployment, and its start-up is part of the answer."""
        return (self.context is not None or self.batch > 1 or self.kv_cache.given or bool(self.parallel.sizes())
                or bool(self.knobs.given()) or bool(self.findings))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"context": self.context, "batch": self.batch, "kv_cache": self.kv_cache.to_json(),
               "parallel": self.parallel.to_json(), "knobs": self.knobs.to_json()}
        if self.findings:
            out["findings"] = [f.to_json() for f in self.findings]
        if self.gpus_available is not None:
            out["gpus_available"] = self.gpus_available
        return out


@dataclass(frozen=True)
class SettingRead:
    """One setting of a deployment as qcheck read it: a flag (or environment variable, Modelfile PARAMETER,
    manifest key) as written, its value, where it was written, and what qcheck judged it as (``None``: not
    judged, i.e. qcheck does not model what it changes; it is listed, never dropped)."""

    flag: str
    value: str | None
    where: str  # "argv", "env", "Modelfile:3", "deploy.yaml:12"
    judged_as: str | None = None  # "context", "tp", "kv_cache.k", "knobs.gpu_memory_utilization" ...

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Origin:
    """Where a request came from when it was not typed as qcheck flags: an engine command line or a deployment
    manifest. Reported beside the verdicts (JSON ``deployment``) so a reader sees what was judged and what not."""

    kind: str  # "command" | "manifest"
    engine: str  # the matrix's engine id
    program: str  # "vllm serve", "llama-server", "ollama run" ...
    command: str  # the command as judged, secrets masked
    flags_source: str  # where the engine's flags were read (release and file)
    settings: tuple[SettingRead, ...] = ()
    file: str | None = None
    line: int | None = None
    image: str | None = None  # a manifest's container image

    def __post_init__(self) -> None:
        if not isinstance(self.settings, tuple):
            object.__setattr__(self, "settings", tuple(self.settings))

    @property
    def not_judged(self) -> tuple[SettingRead, ...]:
        return tuple(s for s in self.settings if s.judged_as is None)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "engine": self.engine, "program": self.program, "command": self.command,
                "file": self.file, "line": self.line, "image": self.image, "flags_source": self.flags_source,
                "judged": [s.to_json() for s in self.settings if s.judged_as is not None],
                "not_judged": [s.to_json() for s in self.not_judged]}


@dataclass(frozen=True)
class CheckRequest:
    """One ``qcheck check`` question: a model target, the engines and GPUs to judge it on, how it is deployed,
    and the gate policy. Built by the front ends (``qcheck.front``), answered by ``qcheck.pipeline.run``."""

    target: str
    engines: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    deploy: Deploy = field(default_factory=Deploy)
    require_native: bool = False
    allow_unknown: bool = False
    #: a verdict that runs with default KV-cache scales of 1.0 (the checkpoint ships no k_scale/v_scale for a
    #: quantised cache) fails, as a fallback does under require_native (``--require-kv-scales``)
    require_kv_scales: bool = False
    #: estimate memory (and speed) per verdict; the front ends turn it on when a memory question is asked
    memory: bool = False
    #: per verdict, the concurrent sequences at 4k-128k context for each KV type the engine accepts on the GPU
    #: (``--capacity``, qcheck.memory.capacity; implies ``memory``)
    capacity: bool = False
    #: every model of a directory or repo (``--all``), not one
    all_models: bool = False
    #: per GPU id, the memory to judge against instead of the catalogue's (``--gpu auto``: what is free)
    gpu_memory_gib: tuple[tuple[str, float], ...] = ()
    #: said on every result (e.g. how ``--gpu auto`` found the GPUs)
    notes: tuple[str, ...] = ()
    limits: Limits = DEFAULT_LIMITS
    #: an engine command line or manifest the request was read from (None: typed as qcheck flags)
    origin: Origin | None = None
    #: judge the kernels only (``--kernels-only``, policy ``kernels-only``): what the engine does at start-up with
    #: the settings asked (a refusal, a lowered context, layers moved to the CPU) is reported, not part of the
    #: status; by default it is, whenever a memory question is asked
    kernels_only: bool = False
    #: the host's memory bandwidth in GB/s for layers llama.cpp keeps in RAM (``--host-bandwidth``); None: the
    #: platform's default (``qcheck.speed.HOST_BANDWIDTH_GBS``)
    host_bandwidth_gbs: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.target, str) or not self.target:
            raise UsageError("no model given: a .gguf or .safetensors file, a model directory or a Hub repo id")
        for name in ("engines", "gpus", "notes"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        if self.capacity and not self.memory:  # the capacity table is memory estimates: it asks a memory question
            object.__setattr__(self, "memory", True)
        for gpu, gib in self.gpu_memory_gib:
            if not isinstance(gib, (int, float)) or not math.isfinite(gib) or gib <= 0:
                raise UsageError(f"GPU memory for {gpu} must be a positive number of GiB, not {gib!r}")
        bw = self.host_bandwidth_gbs
        if bw is not None and (not isinstance(bw, (int, float)) or isinstance(bw, bool) or not math.isfinite(bw)
                               or not 0 < bw <= 100_000):
            raise UsageError(f"--host-bandwidth must be GB/s in (0, 100000], not {bw!r}")

    @property
    def judges_startup(self) -> bool:
        """Whether the engine's start-up with the settings asked decides the status (a memory question was asked
        and the user did not ask about kernels only)."""
        return self.memory and not self.kernels_only

    def replace(self, **changes: Any) -> CheckRequest:
        """A copy with some fields changed (the same question about another target, say)."""
        return dataclasses.replace(self, **changes)

    def memory_override(self, gpu_id: str | None) -> float | None:
        """The GiB to judge ``gpu_id`` against when the request overrides the catalogue, else None."""
        for gpu, gib in self.gpu_memory_gib:
            if gpu == gpu_id:
                return float(gib)
        return None

    def to_json(self) -> dict[str, Any]:
        """The request as the JSON outputs echo it (``request``): what was asked, after defaults are applied."""
        return {"target": self.target, "engines": list(self.engines), "gpus": list(self.gpus),
                **self.deploy.to_json(), "require_native": self.require_native, "allow_unknown": self.allow_unknown,
                "require_kv_scales": self.require_kv_scales, "kernels_only": self.kernels_only,
                "memory": self.memory, "all_models": self.all_models, "host_bandwidth_gbs": self.host_bandwidth_gbs}


def _check_int(value: Any, name: str, minimum: int, maximum: int) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise UsageError(f"{name} must be an integer from {minimum} to {maximum}, not {value!r}")
