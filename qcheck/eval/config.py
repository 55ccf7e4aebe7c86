"""What ``qcheck eval`` is asked (``EvalConfig``, ``CandidateSpec``) and its validation, before any model is read.

Why apart from the run: every front end (CLI, ``qcheck gate``, Python) builds one ``EvalConfig``; ``validate`` turns
it into a ``Plan`` (parsed candidates, the reference's source) or one ``UsageError`` / ``InputError`` line (exit 2),
so nothing heavy is imported and nothing is loaded for a run that cannot start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from qcheck.errors import InputError, UsageError
from qcheck.eval import stats
from qcheck.eval.gate import Thresholds
from qcheck.eval.runners import BACKENDS, DEFAULT_BACKEND
from qcheck.eval.runners.base import CandidateRunner
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.request import KVCacheTypes

if TYPE_CHECKING:
    from qcheck.eval.remote_reference import RemoteReference

#: dtypes ``--noise-floor`` can load the reference in
NOISE_FLOOR_DTYPES = ("float32", "bfloat16", "float16")
CHOICE_METRICS = ("acc", "acc_norm", "acc_bytes")


@dataclass
class CandidateSpec:
    """A candidate: ``target`` built by a named backend (default ``simulated``: a checkpoint path dequantised
    into the reference architecture), or a ready ``runner`` (engine backends built by the caller, tests)."""

    name: str
    path: str | None = None
    runner: CandidateRunner | None = None
    backend: str = DEFAULT_BACKEND
    #: the KV cache this candidate runs with; None: ``EvalConfig.kv_cache`` (``KVCacheTypes()``: the engine's default)
    kv_cache: KVCacheTypes | None = None

    @classmethod
    def parse(cls, text: str) -> CandidateSpec:
        """``PATH``, ``NAME=PATH``, ``BACKEND:TARGET`` or ``NAME=BACKEND:TARGET``.

        ``BACKEND`` is recognised only when it names a registered backend (``qcheck.eval.runners.BACKENDS``);
        a ``=`` or ``:`` inside an existing path is kept as part of the path.
        """
        name: str | None = None
        target = text
        if "=" in text and not os.path.exists(text):
            name, _, target = text.partition("=")
            name, target = name.strip(), target.strip()
            if not name or not target:
                raise UsageError(f"--candidate {text!r}: use PATH, NAME=PATH or NAME=BACKEND:TARGET")
        backend = DEFAULT_BACKEND
        head, sep, rest = target.partition(":")
        if sep and head in BACKENDS and not os.path.exists(target):
            backend, target = head, rest
        if name is None and target.startswith(("http://", "https://")):
            from qcheck.net import origin

            name = origin(target.split("#", 1)[0]).split("://", 1)[-1]  # host[:port], never a user or password
        if name is None:
            p = Path(target.rstrip("/"))
            name = (p.stem if p.suffix in (".gguf", ".safetensors") else p.name) or target
        return cls(name=name, path=target, backend=backend)


@dataclass
class EvalConfig:
    reference: str
    candidates: list[CandidateSpec | str]
    tasks: list[str] = field(default_factory=list)
    reference_dtype: str = "float32"
    device: str = "cpu"
    cache_dir: str | None = None
    use_cache: bool = True
    cache_topk: int | None = None
    max_length: int = 512
    #: sliding-window step for text items longer than ``max_length`` (default ``max_length // 2``)
    stride: int | None = None
    #: "sliding" (every token scored once) or "chunks" (llama-perplexity's non-overlapping windows)
    windows: str = "sliding"
    thresholds: Thresholds = field(default_factory=Thresholds)
    activation_quant: bool = False
    choice_metric: str = "acc"
    bootstrap: int = stats.DEFAULT_BOOTSTRAP
    seed: int = stats.DEFAULT_SEED
    max_items: int | None = None
    limits: Limits = DEFAULT_LIMITS
    progress: bool = False
    #: also score the reference itself in this dtype against the cached reference (``--noise-floor``); never gated
    noise_floor: str | None = None
    #: with an endpoint ``reference`` (http(s)://...): the local folder with its tokenizer and config.json
    reference_files: str | None = None
    #: ``--max-memory``: accelerate's per-device budget for ``device="auto"`` (``{0: "20GiB", "cpu": "64GiB"}``)
    max_memory: dict[str | int, str] | None = None
    #: simulated candidates: whose arithmetic around the weights (``--simulate-engine``: auto = llama.cpp for GGUF,
    #: vLLM for safetensors; "weights" = the dequantised weights alone)
    simulate_engine: str = "auto"
    #: the KV cache every candidate runs with (``--kv-cache-dtype``, ``--cache-type-k/-v``); unset: engine defaults
    kv_cache: KVCacheTypes = field(default_factory=KVCacheTypes)
    #: per candidate name, overriding ``kv_cache`` (``--kv-cache-dtype NAME=T``)
    kv_cache_by_candidate: dict[str, KVCacheTypes] = field(default_factory=dict)
    #: with a KV cache type: also measure the weights alone and the KV cache alone (``--kv-split``)
    kv_split: bool = True
    #: the id under which endpoint results of this run are kept (None: a new one); with ``resume`` the run to continue
    run_id: str | None = None
    #: continue run ``run_id`` (``--resume RUN``): reuse its endpoint results, if the servers are still the same
    resume: bool = False
    #: merge the PEFT adapter in the reference folder into the reference (``--reference-adapter``); by default an
    #: adapter there is left out and the report says so
    reference_adapter: bool = False


def default_noise_floor_dtype(reference_dtype: str) -> str:
    """bfloat16 beside a float32 (or float16) reference, float16 beside a bfloat16 one."""
    return "float16" if reference_dtype == "bfloat16" else "bfloat16"


@dataclass
class Plan:
    """A validated configuration: the parsed candidates and where the reference comes from."""

    specs: list[CandidateSpec]
    #: the endpoint serving the reference, or None for a local model directory
    remote: RemoteReference | None
    #: the local directory holding the reference's tokenizer and config.json (the model itself when local)
    ref_dir: str


def candidate_kv(spec: CandidateSpec, config: EvalConfig) -> KVCacheTypes:
    """The KV cache types ``spec`` runs with: its own, else the run's."""
    return spec.kv_cache if spec.kv_cache is not None else config.kv_cache


def validate(config: EvalConfig) -> Plan:
    """Check every setting, the candidates and the reference's files before anything is loaded."""
    _check_settings(config)
    specs = _candidate_specs(config.candidates)
    _assign_kv(specs, config)
    remote = _remote_reference(config)
    ref_dir = remote.files if remote is not None else config.reference
    from qcheck.eval.safe_load import check_reference, refuse_custom_code

    if remote is not None:
        refuse_custom_code(ref_dir, "reference", config.limits)
    else:
        check_reference(config.reference, config.limits)  # before transformers reads anything
    for s in specs:
        if s.runner is None and s.path and os.path.isdir(s.path):
            refuse_custom_code(s.path, f"candidate {s.name}", config.limits)
    return Plan(specs=specs, remote=remote, ref_dir=ref_dir)


def _check_settings(config: EvalConfig) -> None:
    if not config.candidates:
        raise UsageError("give at least one --candidate")
    if config.choice_metric not in CHOICE_METRICS:
        raise UsageError(f"unknown choice metric {config.choice_metric!r}")
    if config.cache_topk is not None and config.cache_topk < 1:
        raise UsageError("--cache-topk must be at least 1")
    if config.bootstrap < 100:
        raise UsageError("--bootstrap needs at least 100 replicates")
    if config.noise_floor is not None and config.noise_floor not in NOISE_FLOOR_DTYPES:
        raise UsageError(f"--noise-floor-dtype must be one of {', '.join(NOISE_FLOOR_DTYPES)}")
    if config.device == "cuda":
        from qcheck.eval.runners.reference import resolve_device

        resolve_device("cuda")  # before any work, even when the reference is cached: one line, exit 2
    if config.max_memory and config.device != "auto":
        raise UsageError("--max-memory places the model with accelerate's device_map: use --device auto")
    if config.noise_floor == config.reference_dtype:
        raise UsageError(f"--noise-floor-dtype {config.noise_floor} is the reference's own dtype: pick another "
                         "(the noise floor compares the reference with itself in a different precision)")


def _assign_kv(specs: list[CandidateSpec], config: EvalConfig) -> None:
    from dataclasses import replace

    from qcheck.eval.emulation import SIMULATE_ENGINES

    if config.simulate_engine not in SIMULATE_ENGINES:
        raise UsageError(f"--simulate-engine {config.simulate_engine!r}: use one of {', '.join(SIMULATE_ENGINES)}")
    names = {s.name: i for i, s in enumerate(specs)}
    for name, kv in config.kv_cache_by_candidate.items():
        if name not in names:
            raise UsageError(f"KV cache type for {name!r}: no candidate has that name (candidates: "
                             f"{', '.join(names)})")
        i = names[name]  # a side the candidate leaves unset is the run's
        specs[i] = replace(specs[i], kv_cache=KVCacheTypes(kv.k or config.kv_cache.k, kv.v or config.kv_cache.v))
    for spec in specs:
        _check_kv_types(spec, candidate_kv(spec, config), config.simulate_engine)


def _check_kv_types(spec: CandidateSpec, kv: KVCacheTypes, simulate_engine: str) -> None:
    """A KV cache type the candidate's engine does not have is refused before anything is loaded."""
    if not kv.given or spec.runner is not None:
        return
    from qcheck.eval.emulation import engine_for
    from qcheck.eval.emulation.kv import canonical_kv_type

    path = Path(spec.path or "")
    if spec.backend == "llamacpp":
        engine = "llama.cpp"
    elif spec.backend == DEFAULT_BACKEND:
        engine = engine_for(simulate_engine, path.suffix == ".gguf" or (path.is_dir() and any(path.glob("*.gguf"))))
        if engine == "weights":
            raise UsageError(f"candidate {spec.name}: a KV cache type is emulated as an engine stores it; choose the "
                             "engine with --simulate-engine auto|llama.cpp|vllm|sglang, not weights")
    else:
        return  # an endpoint's cache is the server's own: recorded as declared
    for side in (kv.k, kv.v):
        if side is not None:
            try:
                canonical_kv_type(engine, side)
            except UsageError as exc:
                raise UsageError(f"candidate {spec.name}: {exc}") from None


def _candidate_specs(candidates: list[CandidateSpec | str]) -> list[CandidateSpec]:
    specs = [CandidateSpec.parse(c) if isinstance(c, str) else c for c in candidates]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise UsageError(f"candidate names must be unique: {', '.join(names)}")
    for s in specs:
        if s.runner is None and s.backend == DEFAULT_BACKEND and (not s.path or not os.path.exists(s.path)):
            raise InputError("no such file or directory", path=s.path or s.name)
    return specs


def _remote_reference(config: EvalConfig) -> RemoteReference | None:
    from qcheck.eval.remote_reference import RemoteReference, is_endpoint

    remote = RemoteReference.parse(config.reference, config.reference_files) if is_endpoint(config.reference) \
        else None
    if remote is None and config.reference_files:
        raise UsageError("--reference-files is for an endpoint --reference (http(s)://...); a local reference "
                         "directory has its own files")
    if remote is not None and config.reference_adapter:
        raise UsageError("--reference-adapter merges an adapter in a local reference folder; an endpoint serves its "
                         "own model")
    if remote is not None and config.noise_floor:
        raise UsageError("--noise-floor loads the reference's weights in another dtype: it needs a local reference "
                         "directory, not an endpoint")
    return remote


def parse_kv_flags(both: tuple[str, ...] | list[str], k: tuple[str, ...] | list[str] = (),
                   v: tuple[str, ...] | list[str] = ()) -> tuple[KVCacheTypes, dict[str, KVCacheTypes]]:
    """``--kv-cache-dtype [NAME=]T|K,V``, ``--cache-type-k [NAME=]T``, ``--cache-type-v [NAME=]T`` (each repeatable)
    as the run's KV cache types and per-candidate ones (a value with ``NAME=`` applies to that candidate only)."""
    values: dict[str | None, dict[str, str | None]] = {}
    for flag, texts in (("both", both), ("k", k), ("v", v)):
        for text in texts:
            name, sep, value = text.partition("=")
            target = name.strip() if sep else None
            if sep and not target:
                raise UsageError(f"KV cache type {text!r}: use T, K,V or NAME=T")
            entry = values.setdefault(target, {"both": None, "k": None, "v": None})
            if entry[flag] is not None:
                where = f" for {target}" if target else ""
                raise UsageError(f"two {'--kv-cache-dtype' if flag == 'both' else '--cache-type-' + flag} values{where}")
            entry[flag] = (value if sep else text).strip()
    parsed = {target: KVCacheTypes.parse(e["both"], e["k"], e["v"]) for target, e in values.items()}
    return parsed.pop(None, KVCacheTypes()), {str(n): kv for n, kv in parsed.items()}
