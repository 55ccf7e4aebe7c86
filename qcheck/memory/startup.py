"""What the engine does at start-up with the settings asked: it starts, starts serving a shorter context, starts
with layers in RAM, refuses to start, or qcheck cannot tell.

A verdict answers "will it run"; a deployment's settings (a context, a batch, KV types, engine knobs, an engine
command line, a manifest) add "will it start with these". The answer comes from the memory estimate's figures
(``MemoryEstimate``: fit, KV pool, concurrency, offload plan, the engine's refusal) and from each engine's own
start-up checks, read in its code at the versions below. Where no check was read, or the fit is unknown (an
architecture without a product's memory, an engine without memory data), the answer is ``unknown``: never "it
starts" by default.

When the request judges the start-up (``CheckRequest.judges_startup``: a memory question without
``--kernels-only``), the outcome is the verdict's ``start-up`` dimension: ``does-not-start`` is ``unsupported``
(exit 1), ``unknown`` is ``unknown``, layers moved to the CPU are a ``fallback``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qcheck.memory.records import GIB, MemoryEstimate, Startup

if TYPE_CHECKING:
    from qcheck.matrix.loader import Matrix
    from qcheck.model import Inspection, Judgement, Verdict
    from qcheck.request import CheckRequest, Deploy

__all__ = ["DIMENSION", "RULES", "StartupRule", "apply_startup", "judge_startup"]

DIMENSION = "start-up"


@dataclass(frozen=True)
class StartupRule:
    """One engine start-up behaviour, where it was read and at which versions it holds."""

    engine: str  # the matrix's engine id
    versions: str  # a specifier in the engine's version scheme
    source: str
    read_at: str


#: the engines' start-up checks qcheck applies, by name; each read in the engine's code at ``read_at``
RULES: dict[str, StartupRule] = {
    "vllm-kv": StartupRule(
        "vllm", ">=0.9.0,<=0.34.0",
        "vllm 0.9.0 wheel: vllm/v1/core/kv_cache_utils.py:515-560 and 0.11.0 wheel: :678-723 "
        "check_enough_kv_cache_memory; vllm 0.34.0 wheel: vllm/v1/core/kv_cache_planning.py:99-132 and :1565-1664 "
        "get_kv_cache_configs ('No available memory for the cache blocks'; 'To serve at least one request with the "
        "model's max seq len ... KV cache is needed, which is larger than the available KV cache memory'); "
        "vllm/v1/core/kv_cache_utils.py:1082-1174 (Maximum concurrency)", "0.9.0, 0.11.0, 0.34.0"),
    "vllm-utilization": StartupRule(
        "vllm", ">=0.11.0,<=0.34.0",
        "vllm 0.11.0 wheel: vllm/v1/worker/gpu_worker.py:183-195; vllm 0.34.0 wheel: vllm/v1/worker/utils.py:783-797 "
        "('Free memory on device ... on startup is less than desired GPU memory utilization')", "0.11.0, 0.34.0"),
    "vllm-max-len": StartupRule(
        "vllm", ">=0.9.0,<=0.34.0",
        "vllm 0.9.0 wheel: vllm/config.py:3252-3280; 0.11.0 wheel: vllm/config/model.py:1880-1911; 0.34.0 wheel: "
        "vllm/config/model.py:2701-2729 _get_and_verify_max_len ('User-specified max_model_len (N) is greater than "
        "the derived max_model_len ... To allow overriding this maximum, set the env var "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1')", "0.9.0, 0.11.0, 0.34.0"),
    "vllm-world-size": StartupRule(
        "vllm", ">=0.13.0,<=0.34.0",
        "vllm 0.13.0 wheel: vllm/config/parallel.py:559-570 and 0.34.0 wheel: :1159-1170 ('World size (N) is larger "
        "than the number of available GPUs (M) in this node', without --distributed-executor-backend ray or "
        "--nnodes; https://github.com/vllm-project/vllm/pull/30140)", "0.13.0, 0.34.0"),
    "vllm-world-size-ray": StartupRule(
        "vllm", ">=0.11.0,<0.13.0",
        "vllm 0.11.0 wheel: vllm/config/parallel.py:447-464 (world size above the node's GPUs: the Ray backend, "
        "which needs a Ray cluster holding the GPUs; without Ray installed: 'Unable to load Ray')", "0.11.0"),
    "sglang-kv": StartupRule(
        "sglang", "==0.5.23",
        "sglang 0.5.23 wheel: sglang/srt/mem_cache/kv_cache_configurator.py:3043-3058 ('Loaded weights leave no GPU "
        "memory for the KV cache'), sglang/srt/model_executor/pool_configurator.py:94-99 ('Not enough memory'), "
        "sglang/srt/managers/tp_worker.py:550-572 (a pool below --context-length: a warning, requests capped at the "
        "pool)", "0.5.23"),
    "sglang-max-len": StartupRule(
        "sglang", "==0.5.23",
        "sglang 0.5.23 wheel: sglang/srt/configs/model_config.py:1291-1316 _derive_context_length ('To allow "
        "overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1')", "0.5.23"),
    "llama.cpp-fit": StartupRule(
        "llama.cpp", ">=b7698",
        "llama-cpp-python 0.3.36 sdist (llama.cpp b11312): common/fit.cpp:393-464 (--fit: the context lowered when "
        "-c is not given, then layers moved to the CPU; 'n_gpu_layers already set by user ..., abort', after which "
        "the load fails if the split does not fit)", "b11312"),
    "ollama-layout": StartupRule(
        "ollama", ">=0.33.0rc2,<=0.33.0rc2",
        "ollama/ollama@5dbb81b7: llm/server.go createLayout/buildLayout/verifyLayout (layers assigned to the GPUs by "
        "free memory, the rest run on the CPU)", "0.33.0rc2"),
}


def _rule(name: str, engine: str, version: str | None, scheme: str) -> StartupRule | None:
    """The rule when it covers this engine version (None: another engine, or a version it was not read at)."""
    rule = RULES[name]
    if rule.engine != engine or not version:
        return None
    from qcheck.matrix.versions import contains, parse_specifier, parse_version

    try:
        at = parse_version(version, scheme)
        if at.is_prerelease and scheme == "pep440" and "rc" not in rule.versions:
            at = parse_version(at.base_version, scheme)
        return rule if contains(parse_specifier(rule.versions, scheme), at) else None
    except ValueError:
        return None


def _gib(n: float | int | None) -> str:
    return "?" if n is None else f"{n / GIB:.2f}"


@dataclass(frozen=True)
class _Question:
    """What one start-up judgement reads."""

    engine: str
    version: str | None
    scheme: str
    formula: str | None
    inspection: Inspection
    deploy: Deploy
    memory: MemoryEstimate

    def rule(self, name: str) -> StartupRule | None:
        return _rule(name, self.engine, self.version, self.scheme)


def _said(outcome: str, message: str, rule: StartupRule | None, q: _Question, *, context: int | None = None,
          concurrency: float | None = None) -> Startup:
    return Startup(outcome, message, context if context is not None else q.memory.context,
                   concurrency if concurrency is not None else q.memory.max_concurrency,
                   rule.source if rule is not None else None, rule.read_at if rule is not None else None)


# ------------------------------------------------------------------------------------------ before memory
def _world_size(q: _Question) -> Startup | None:
    """vLLM on one node needs TP x PP GPUs."""
    gpus, p = q.deploy.gpus_available, q.deploy.parallel
    world = (p.tp or 1) * (p.pp or 1)
    if gpus is None or world <= gpus:
        return None
    rule = q.rule("vllm-world-size")
    if rule is not None:
        return _said("does-not-start", f"vLLM refuses to start: World size ({world}) is larger than the number of "
                     f"available GPUs ({gpus}) in this node (give the container {world} GPUs, or lower "
                     "--tensor-parallel-size x --pipeline-parallel-size)", rule, q)
    rule = q.rule("vllm-world-size-ray")
    if rule is not None:
        return _said("unknown", f"world size {world} is above the node's {gpus} GPUs: vLLM {q.version} turns to its "
                     "Ray backend, which starts only on a Ray cluster holding the GPUs", rule, q)
    if q.engine == "vllm":
        return _said("unknown", f"world size {world} is above the node's {gpus} GPUs: what vLLM {q.version} does "
                     "then was not read", None, q)
    return None


def _context_limit(q: _Question) -> Startup | None:
    """vLLM and SGLang refuse a context above the model's own maximum unless an environment variable allows it."""
    asked, limit = q.deploy.context, q.inspection.context_length
    if asked is None or limit is None or asked <= limit or q.deploy.knobs.allow_long_context:
        return None
    names = {"vllm": ("vllm-max-len", "vLLM", "max_model_len", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"),
             "sglang": ("sglang-max-len", "SGLang", "context_length", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")}
    if q.engine not in names:
        return None
    name, engine, key, env = names[q.engine]
    rule = q.rule(name)
    if rule is None:
        return _said("unknown", f"context {asked} is above the model's own maximum {limit}: whether {engine} "
                     f"{q.version} starts with it was not read", None, q)
    scaling = q.inspection.shape.rope_scaling if q.inspection.shape is not None else None
    if scaling is not None:
        return _said("unknown", f"context {asked} is above the model's max_position_embeddings {limit}, and the model "
                     f"declares RoPE scaling ({scaling}): {engine} raises its limit by the scaling factor for some "
                     "types, which qcheck does not model", rule, q)
    return _said("does-not-start", f"{engine} refuses to start: User-specified {key} ({asked}) is greater than the "
                 f"derived {key} ({limit}); set {env} to override it (positions beyond {limit} may give wrong "
                 "output)", rule, q)


# ------------------------------------------------------------------------------------------ memory
def _unknown_fit(q: _Question) -> Startup:
    m = q.memory
    if m.device == "RAM":
        why = (f"it needs {_gib(m.total_bytes)} GiB of RAM, and qcheck does not know the host's memory "
               "(--kernels-only judges the kernels alone)")
    elif m.gpu_memory_bytes is None:
        why = "no GPU product was named, so there is no memory to compare with (e.g. h100, rtx-4090)"
    elif not m.overhead_known:
        why = f"{m.engine or 'this engine'} has no memory data in the matrix"
    elif m.kv_cache_bytes is None:
        why = "the KV cache's size is unknown"
    else:
        why = "the fit is unknown"
    return _said("unknown", f"qcheck cannot tell whether it starts: {why}", None, q)


def _concurrency_text(q: _Question, concurrency: float | None) -> str:
    if concurrency is None:
        return ""
    at_once = math.floor(concurrency)
    short = f" (--batch {q.deploy.batch} asked: the rest wait)" if q.deploy.batch > at_once else ""
    return f"; at most {at_once:,} request{'s' if at_once != 1 else ''} of {q.memory.context} tokens at once{short}"


def _vllm(q: _Question) -> Startup | None:
    m = q.memory
    if m.refusal:
        return _said("does-not-start", m.refusal, q.rule("vllm-utilization"), q)
    rule = q.rule("vllm-kv")
    if rule is None:
        return None
    pool, concurrency = m.kv_available_bytes, m.max_concurrency
    if pool is None or concurrency is None:
        return _unknown_fit(q)
    more = f"; {m.gpus_needed} GPUs would (--tensor-parallel-size {m.gpus_needed})" if m.gpus_needed and \
        m.gpus_needed > 1 and not m.tp else ""
    if pool <= 0:
        return _said("does-not-start", "vLLM refuses to start: No available memory for the cache blocks (weights "
                     f"and activations take {_gib((m.usable_bytes or 0) - pool)} GiB of {_gib(m.usable_bytes)} GiB "
                     f"usable){more}", rule, q, concurrency=0.0)
    if concurrency < 1:
        need = pool / concurrency if concurrency > 0 else None
        fits = ""
        lay = q.inspection.shape.attention if q.inspection.shape is not None else None
        if m.kv_available_tokens and lay is not None and not lay.window_layers:
            fits = f"; about {m.kv_available_tokens:,} tokens fit"
        return _said("does-not-start", f"vLLM refuses to start: To serve at least one request with the model's max "
                     f"seq len ({m.context}), {_gib(need)} GiB KV cache is needed, which is larger than the available "
                     f"KV cache memory ({_gib(pool)} GiB){fits}{more}", rule, q)
    return _said("starts", f"vLLM starts: KV pool {_gib(pool)} GiB" + (f", {m.kv_available_tokens:,} tokens" if
                 m.kv_available_tokens else "") + _concurrency_text(q, concurrency), rule, q)


def _sglang(q: _Question) -> Startup | None:
    m = q.memory
    rule = q.rule("sglang-kv")
    if rule is None:
        return None
    pool, tokens = m.kv_available_bytes, m.kv_available_tokens
    if pool is None or tokens is None:
        return _unknown_fit(q)
    if pool <= 0 or tokens <= 1:
        return _said("does-not-start", "SGLang refuses to start: Loaded weights leave no GPU memory for the KV cache "
                     "(raise --mem-fraction-static, or use more GPUs)", rule, q, concurrency=0.0)
    if tokens < m.context:
        return _said("context-lowered", f"SGLang starts with a KV pool of {tokens:,} tokens, fewer than the context "
                     f"{m.context}: requests are capped at {tokens - 1} tokens", rule, q, context=tokens - 1)
    return _said("starts", f"SGLang starts: KV pool {tokens:,} tokens" + _concurrency_text(q, m.max_concurrency),
                 rule, q)


def _llamacpp(q: _Question) -> Startup | None:
    m = q.memory
    plan = m.offload
    fit_rule = q.rule("llama.cpp-fit")
    if m.device == "RAM":
        return _unknown_fit(q)
    if plan is not None and plan.user_set:
        if not plan.fits:
            return _said("does-not-start", f"{_engine_name(q)} fails to load it: {plan.summary}", fit_rule, q)
        if plan.ngl < plan.n_layers + 1 or plan.n_cpu_moe:
            return _said("offloaded", f"starts with part of the model in RAM as asked: {plan.summary}", fit_rule, q)
        return None
    if m.fits is True:
        if m.context_lowered_from is not None:
            return _said("context-lowered", f"llama.cpp --fit lowers the context from {m.context_lowered_from} to "
                         f"{m.context} to fit the free memory (give -c to keep a context; it then moves layers to "
                         "the CPU instead)", fit_rule, q)
        return None
    if m.fits is None:
        return _unknown_fit(q)
    places_itself = (m.fit_active and fit_rule is not None) or q.rule("ollama-layout") is not None
    if plan is None or not places_itself:
        return _said("unknown", f"it does not fit the GPU ({_gib(m.total_bytes)} GiB needed, {_gib(m.usable_bytes)} "
                     "usable), and without --fit the layers placed depend on the build's -ngl default: give -ngl",
                     None, q)
    if plan.ngl <= 0:
        return _said("unknown", f"not even one layer fits the GPU beside the buffers ({plan.summary})", None, q)
    rule = fit_rule if m.fit_active else q.rule("ollama-layout")
    who = "llama.cpp --fit" if m.fit_active else f"{_engine_name(q)}'s scheduler"
    return _said("offloaded", f"{who} moves layers to the CPU: {plan.summary}", rule, q)


def _fits_text(m: MemoryEstimate) -> str:
    need = m.per_gpu_bytes if m.per_gpu_bytes is not None else m.total_bytes
    return f"starts: it fits ({_gib(need)} GiB needed, {_gib(m.usable_bytes)} GiB usable" + \
        (f", context {m.context}" if m.context else "") + ")"


def _engine_name(q: _Question) -> str:
    return {"llama.cpp": "llama.cpp", "ollama": "Ollama", "lm-studio": "LM Studio"}.get(q.engine, q.engine)


def _memory(q: _Question) -> Startup:
    m = q.memory
    family = {"vllm": _vllm, "sglang": _sglang, "llama.cpp": _llamacpp}.get(q.formula or "")
    said = family(q) if family is not None else None
    if said is not None:
        return said
    if m.fits is True:
        return _said("starts", _fits_text(m), None, q)
    if m.fits is None:
        return _unknown_fit(q)
    return _said("unknown", f"it does not fit ({_gib(m.total_bytes)} GiB needed, {_gib(m.usable_bytes)} usable): what "
                 f"{q.engine} {q.version or ''} does at start-up then was not read".replace("  ", " "), None, q)


def judge_startup(verdict: Verdict, inspection: Inspection, deploy: Deploy, matrix: Matrix) -> Startup | None:
    """What the verdict's engine does at start-up with ``deploy`` on its GPU (None: no memory estimate, e.g. a
    hosted provider)."""
    memory = verdict.memory
    if memory is None:
        return None
    from qcheck.errors import UsageError

    try:
        scheme = matrix.engine(verdict.engine).scheme
    except UsageError:
        scheme = "pep440"
    q = _Question(verdict.engine, verdict.engine_version, scheme, _formula(matrix, verdict.engine), inspection, deploy,
                  memory)
    return _world_size(q) or _context_limit(q) or _memory(q)


def _formula(matrix: Matrix, engine: str) -> str | None:
    from qcheck.errors import UsageError

    try:
        memory = matrix.engine(engine).memory
    except UsageError:
        return None
    return memory.formula if memory is not None else None


def _unread_knobs(verdict: Verdict, deploy: Deploy, matrix: Matrix) -> None:
    """An engine setting this engine does not read changes nothing here: said, as "not judged"."""
    from qcheck.knobs import unread

    given = deploy.knobs.given()
    skipped = unread(given, _formula(matrix, verdict.engine))
    if skipped:
        shown = "; ".join(f"{k.flags[0]}{'' if given[k.field] is True else ' ' + str(given[k.field])}" for k in skipped)
        verdict.warnings.append(f"not judged: {shown} (a setting {verdict.engine}'s memory model does not read: it "
                                "changes no figure here)")


def _judgement(startup: Startup) -> Judgement:
    from qcheck.model import Judgement, Source

    sources = [Source(startup.source, startup.version)] if startup.source else []
    return Judgement(DIMENSION, startup.status, [startup.message], sources)  # type: ignore[arg-type]


def apply_startup(verdicts: Iterable[Verdict], inspection: Inspection, request: CheckRequest, matrix: Matrix) -> None:
    """Fill ``Verdict.startup`` for every verdict with a memory estimate; when the request judges the start-up, fold
    it into the status as the ``start-up`` dimension."""
    from qcheck.matrix.dimensions import fold

    for verdict in verdicts:
        _unread_knobs(verdict, request.deploy, matrix)
        startup = judge_startup(verdict, inspection, request.deploy, matrix)
        if startup is None:
            continue
        startup.judged = request.judges_startup
        verdict.startup = startup
        if startup.judged:
            fold(verdict, _judgement(startup))
