"""Memory fit: will weights + KV cache + the engine's own buffers fit on a device, and if not, how then?

Per device, for ``n`` devices (tensor parallelism or a layer split, as the engine places models):

    weights on the device + KV on the device + engine overhead(context, batch)  <=  usable(device)

* weights: the packed bytes of the checkpoint's tensors (``Inspection.shape``), or ``parameters x bytes(dtype)``
  when the verdict says the engine converts them at load (``Verdict.weights_loaded_as``). llama.cpp keeps the
  token embeddings in host memory.
* KV = sum over attention layers of (cells x bytes per cell): a full-attention layer caches ``context`` tokens
  per sequence, a sliding-window layer ``min(context, window)``; a cell holds ``k_dim x kv_heads`` elements of
  the K type and ``v_dim x kv_heads`` of the V type (GQA/MQA through ``kv_heads``), or for MLA the compressed
  latent ``kv_lora_rank + qk_rope_head_dim``. Under tensor parallelism each GPU holds ``ceil(kv_heads / tp)``
  heads; an MLA latent is replicated on every GPU.
* engine overhead and usable share: per engine family (``qcheck.memory.families``) from the engine's
  ``[memory]`` table. An engine without memory data gets "overhead unknown", not another engine's numbers.

From the same terms: the largest context that fits at the batch, the largest batch at the context, the device
count, and for llama.cpp-family engines the offload plan (``-ngl``, ``--n-cpu-moe``) when one GPU is not enough.
Everything is read from the Inspection (its ``shape`` record), never from the raw checkpoint, so a saved
inspection answers exactly as the file does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from qcheck.errors import UsageError
from qcheck.kvtypes import KV_DTYPE_BYTES
from qcheck.matrix.memory_params import EngineMemory
from qcheck.matrix.schema import Engine, ParallelSpec
from qcheck.memory.base import search_max
from qcheck.memory.device import DeviceMemory, plain_device
from qcheck.memory.families import EngineFamily, family_for
from qcheck.memory.records import GIB, MemoryEstimate, OffloadPlan, Part, Reserve
from qcheck.model import AttentionLayout, Inspection, ModelShape
from qcheck.model_shape import shape_of
from qcheck.request import Deploy

MAX_GPUS = 64
#: layer-split engines spread a model over at most this many devices
MAX_LAYER_SPLIT = 16
#: bytes per element of the dtypes an engine may hold dequantised weights in
LOADED_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
_LOADED_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}

FORMULA = ("per device: weights (/tp) + KV (x ceil(kv_heads/tp)/kv_heads; MLA whole) + the engine's "
           "overhead(context, batch) <= usable; KV = batch x (full_layers x context + window_layers x "
           "min(context, window)) x per-layer bytes per token; overhead and usable from the engine's [memory] "
           "data (docs/memory.md)")
#: the overhead parts that are activations or compute buffers (the rest are fixed: runtime, graphs, reserved)
ACTIVATION_PARTS = ("compute buffer", "activations", "activation peak")
IGNORED = ("KV cache paging granularity and allocator fragmentation",
           "recurrent / linear-attention state (constant in context)",
           "vision encoders' activations and speculative-decoding drafts")


@dataclass(frozen=True)
class MemoryTarget:
    """Where one estimate is judged: the engine, its version and its ``[memory]`` parameters, the device kind
    (``GPU``, ``RAM`` for ``--gpu cpu``, ``unified`` for Apple, GB10, Strix Halo), its memory (``device_memory``
    from the catalogue, or a plain size ``gpu_gib``), and the dtype the engine holds the weights in when it
    converts them at load (the verdict's ``weights_loaded_as``)."""

    engine: str | None = None
    params: EngineMemory | None = None
    device: str = "GPU"
    gpu_gib: float | None = None
    weights_loaded_as: str | None = None
    #: the engine version judged (the verdict's); selects the ``[[memory.versions]]`` values
    engine_version: str | None = None
    #: the device's memory as the driver reports it (qcheck.memory.device); None: ``gpu_gib`` as given
    device_memory: DeviceMemory | None = None

    def __post_init__(self) -> None:
        if self.gpu_gib is not None and not self.gpu_gib > 0:
            raise UsageError(f"GPU memory must be positive, not {self.gpu_gib}")
        if self.weights_loaded_as is not None and self.weights_loaded_as not in LOADED_DTYPE_BYTES:
            raise ValueError(f"weights_loaded_as {self.weights_loaded_as!r}")

    def memory(self) -> DeviceMemory:
        """The device's memory: the catalogue's driver figures when given, else ``gpu_gib`` as it is."""
        return self.device_memory if self.device_memory is not None else plain_device(self.device, self.gpu_gib)

    def params_at(self) -> EngineMemory | None:
        """The ``[memory]`` parameters at the judged version."""
        if self.params is None or not self.engine_version:
            return self.params
        from qcheck.matrix.versions import parse_version

        data = _engine_data(self.engine)
        scheme = data.scheme if data is not None else ("build" if self.engine_version.startswith("b") else "pep440")
        try:
            at = parse_version(self.engine_version, scheme)
        except ValueError:
            return self.params
        if at.is_prerelease:
            at = parse_version(at.base_version)
        return self.params.at(at, self.engine_version)

    @classmethod
    def for_engine(cls, engine: str | None, *, device: str = "GPU", gpu_gib: float | None = None,
                   weights_loaded_as: str | None = None) -> MemoryTarget:
        """The target with the engine's ``[memory]`` parameters looked up in the shipped matrix."""
        return cls(engine, engine_memory_params(engine), device, gpu_gib, weights_loaded_as)


def _engine_data(engine: str | None) -> Engine | None:
    """The engine's data in the shipped matrix (None: no engine, or one the matrix does not know)."""
    if not engine:
        return None
    from qcheck.matrix.loader import load_matrix

    try:
        return load_matrix().engine(engine)
    except UsageError:
        return None


def engine_memory_params(engine: str | None) -> EngineMemory | None:
    """The engine's ``[memory]`` table from the matrix (None: unknown engine or no memory data)."""
    data = _engine_data(engine)
    return data.memory if data is not None else None


# ------------------------------------------------------------------------------------------ KV cache
@dataclass(frozen=True)
class KVSizing:
    """The KV cache's bytes per cell: the K and V types apart, resolved from the request, the checkpoint or the
    engine's default; ``per_layer`` is None when the layout or a type's size is unknown."""

    k: str
    v: str
    why: str
    per_layer: float | None  # bytes per cached token per full layer

    @property
    def label(self) -> str:
        return self.k if self.k == self.v else f"{self.k},{self.v}"


def _kv_side(ins: Inspection, asked: str | None, llamacpp: bool) -> tuple[str, str]:
    if asked is not None:
        return asked, "asked for"
    declared = ins.quantization.kv_cache_dtype
    if declared and declared.lower().replace("-", "_") in KV_DTYPE_BYTES:
        return declared.lower(), "declared by the checkpoint"
    if ins.container == "gguf" or llamacpp:
        return "f16", "llama.cpp's default --cache-type-k/-v f16"
    if ins.dtype and ins.dtype.lower() in KV_DTYPE_BYTES:
        return ins.dtype.lower(), "the model's dtype (engines' kv-cache-dtype 'auto')"
    return "bfloat16", "assumed bfloat16 (the model's dtype is not known)"


def kv_sizing(ins: Inspection, lay: AttentionLayout, deploy: Deploy, llamacpp: bool) -> KVSizing:
    k, why_k = _kv_side(ins, deploy.kv_cache.k, llamacpp)
    v, why_v = _kv_side(ins, deploy.kv_cache.v, llamacpp)
    why = why_k if why_k == why_v else f"K {why_k}, V {why_v}"
    kb, vb = KV_DTYPE_BYTES.get(k), KV_DTYPE_BYTES.get(v)
    elements = lay.kv_elements()
    per_layer: float | None = None
    if elements is not None and kb is not None and vb is not None:
        if k == v:
            total = lay.elements_per_token_layer()
            per_layer = total * kb if total is not None else None
        else:
            per_layer = elements[0] * kb + elements[1] * vb
    return KVSizing(k, v, why, per_layer)


# ------------------------------------------------------------------------------------------ weights
def _weights(ins: Inspection, shape: ModelShape, loaded_as: str | None) -> tuple[int, str, list[str]]:
    size = int(ins.size_bytes or 0)
    if loaded_as is None:
        return (shape.total_bytes if shape.from_tensors else size), "packed", []
    per = LOADED_DTYPE_BYTES[loaded_as]
    basis = f"dequantized-{_LOADED_SHORT[loaded_as]}"
    if ins.parameters:
        return int(ins.parameters) * per, basis, [
            f"the engine converts the weights at load: held as {loaded_as}, {per} bytes x parameters"]
    bpw = ins.quantization.bits_per_weight
    if bpw and bpw > 0:
        return int(size * per * 8 / bpw), basis, [
            f"the engine converts the weights at load to {loaded_as}: parameters unknown, size x {per * 8} / "
            f"{bpw:g} bits per weight"]
    return size, "file size", ["the engine converts the weights at load, but neither parameters nor bits per "
                               "weight are known: packed size used"]


# ------------------------------------------------------------------------------------------ the estimate
@dataclass
class _Estimator:
    """The terms of one estimate, and need(context, batch, devices) from them."""

    inspection: Inspection
    shape: ModelShape
    deploy: Deploy
    target: MemoryTarget
    family: EngineFamily | None
    kv: KVSizing
    weights: int  # all weight bytes, as the engine holds them
    basis: str  # packed | dequantized-bf16 | ... | file size
    host: int  # weight bytes kept in host memory (llama.cpp token embeddings)
    scale: float  # weights as held / weights as stored
    kv_scale: float = 1.0
    assumptions: list[str] = field(default_factory=list)
    #: the context before --fit lowered it (None: not lowered)
    lowered_from: int | None = None

    @property
    def dev_weights(self) -> int:
        return self.weights - self.host

    @property
    def lay(self) -> AttentionLayout:
        return self.shape.attention

    @property
    def placement(self) -> str:
        return self.family.placement if self.family is not None else "tensor"

    def kv_at(self, ctx: int, batch: int) -> int:
        if self.kv.per_layer is None:
            return 0
        if self.family is not None:
            cells = self.family.cells(ctx, batch)
            full, window = cells.full, cells.window
        else:
            full = ctx * batch
            window = min(ctx, self.lay.window or ctx) * batch if self.lay.window_layers else 0
        return math.ceil((self.lay.full_layers * full + self.lay.window_layers * window) * self.kv.per_layer)

    def overhead(self, ctx: int, batch: int, n: int = 1) -> list[Part]:
        return self.family.overhead(ctx, batch, n) if self.family is not None else []

    def kv_device(self, ctx: int, batch: int, n: int = 1) -> int:
        """The KV bytes one device holds at (context, batch, n devices)."""
        return _per_gpu(0, self.kv_at(ctx, batch), self.lay, n, self.placement)

    def on_device(self, kv: int, n: int = 1) -> int:
        """Weights and KV bytes on one of n devices: the family's tensor-parallel split of the weights as held
        (kernel layouts, tensors every rank keeps whole) when it has one, else the stored bytes over n."""
        held = None
        if n > 1 and self.family is not None and self.placement == "tensor" and not self.host:
            held = self.family.weights_on(n) if self.target.weights_loaded_as is None else None
        if held is None:
            return _per_gpu(self.dev_weights, kv, self.lay, n, self.placement)
        return held + _per_gpu(0, kv, self.lay, n, self.placement)

    def need(self, ctx: int, batch: int, n: int = 1) -> int:
        kv = math.ceil(self.kv_at(ctx, batch) * self.kv_scale)
        limit = self.family.kv_limit() if self.family is not None else None
        if limit is not None:  # a pool the user fixed is allocated whatever the context
            return self.on_device(0, n) + limit + sum(p.bytes for p in self.overhead(ctx, batch, n))
        return self.on_device(kv, n) + sum(p.bytes for p in self.overhead(ctx, batch, n))

    def fits(self, ctx: int, batch: int, n: int, usable: int) -> bool:
        """Whether (context, batch) fits n devices: the need within the usable memory, and the context's KV within
        a pool the user fixed."""
        limit = self.family.kv_limit() if self.family is not None else None
        if limit is not None and self.kv_device(ctx, batch, n) > limit:
            return False
        return self.need(ctx, batch, n) <= usable


def _per_gpu(weights: int, kv: int, lay: AttentionLayout, n: int, parallel: str) -> int:
    if n == 1:
        return weights + kv
    if parallel == "layer-split":
        return math.ceil((weights + kv) / n)
    if lay.mla_dim:
        kv_share = kv  # the latent is replicated on every rank
    elif lay.kv_heads:
        kv_share = math.ceil(kv * math.ceil(lay.kv_heads / n) / lay.kv_heads)
    else:
        kv_share = math.ceil(kv / n)
    return math.ceil(weights / n) + kv_share


def _context(ins: Inspection, family: EngineFamily | None, deploy: Deploy) -> tuple[int, list[str]]:
    """The context judged: the one asked for, else the engine's default capped at the model's own maximum."""
    notes: list[str] = []
    model_ctx = ins.context_length
    if deploy.context:
        if model_ctx and deploy.context > model_ctx:
            notes.append(f"context {deploy.context} is beyond the model's own maximum {model_ctx}")
        return deploy.context, notes
    default = family.default_context() if family is not None else None
    if default is None:
        if model_ctx:
            return model_ctx, [f"context {model_ctx} = the model's own maximum"]
        return 4096, ["context 4096 assumed (the model's maximum is unknown)"]
    ctx, why = default
    if model_ctx and ctx > model_ctx:
        ctx = model_ctx  # engines cap their default at the model's trained context
        why += f", capped at the model's own {ctx}"
    return ctx, [why]


def estimate_memory(inspection: Inspection, deploy: Deploy | None = None,
                    target: MemoryTarget | None = None) -> MemoryEstimate:
    """Weights + KV cache + the engine's overhead against one device, the device count if one is not enough,
    the largest context and batch that fit, and the llama.cpp offload plan; from the Inspection alone.

    ``deploy`` gives the context, batch, K/V cache types, ``--tp`` and the engine knobs; ``target`` the engine,
    the device and how the engine holds the weights.
    """
    deploy = deploy or Deploy()
    target = target or MemoryTarget()
    shape = shape_of(inspection)
    mem = target.params_at()
    tp = deploy.parallel.tp or 1
    family = family_for(mem, shape, target.memory(), deploy.knobs, tp, inspection) if mem is not None else None
    ctx, notes = _context(inspection, family, deploy)
    est = _estimator(inspection, shape, deploy, target, family, notes)
    if family is not None:
        est.assumptions.extend(family.notes())
        fitted = _fit_context(est, ctx, deploy)
        est.lowered_from, ctx = (ctx if fitted < ctx else None), fitted
    return _finish(est, ctx, deploy.batch)


def _fit_context(est: _Estimator, ctx: int, deploy: Deploy) -> int:
    """llama.cpp's ``--fit`` (no ``-c`` given): the context lowered to what fits the free memory less the margin,
    rounded down to 256 cells per stream, not below ``fit_min_ctx`` (common/fit.cpp; llama.cpp interpolates
    linearly, which lands within a few hundred tokens of this)."""
    family = est.family
    if family is None or deploy.context is not None or not family.fits_context_itself() or est.kv.per_layer is None:
        return ctx
    usable = family.reserve().usable_bytes
    floor = int(family.mem.get("fit_min_ctx", 4096))
    if usable is None or ctx <= floor or est.fits(ctx, deploy.batch, 1, usable):
        return ctx
    step = 256
    best = search_max(lambda c: est.fits(c * step, deploy.batch, 1, usable), 1, ctx // step)
    fitted = max(floor, (best or 0) * step)
    est.assumptions.append(f"--fit: context lowered from {ctx} to {fitted} to fit the free memory less the margin "
                           f"(llama.cpp does this when -c is not given, down to {floor})"
                           + ("; even that does not fit, so layers move to the CPU" if best is None or best * step
                              < floor else ""))
    return fitted


def _estimator(inspection: Inspection, shape: ModelShape, deploy: Deploy, target: MemoryTarget,
               family: EngineFamily | None, notes: list[str]) -> _Estimator:
    llamacpp = family is not None and family.formula == "llama.cpp"
    notes = [*notes, *shape.attention.notes]
    weights, basis, wnotes = _weights(inspection, shape, target.weights_loaded_as)
    held = family.weights_on(1) if family is not None and target.weights_loaded_as is None else None
    if family is not None and held is not None and held != weights:
        weights = held
        wnotes.append(f"weights as {target.engine} holds them: {family.weights_how(1)}")
    notes += wnotes
    scale = weights / shape.total_bytes if shape.total_bytes else 1.0
    kv = kv_sizing(inspection, shape.attention, deploy, llamacpp)
    notes.append(f"KV cache dtype {kv.label} ({kv.why})")
    host = family.host_weight_bytes(scale) if family is not None else 0
    return _Estimator(inspection, shape, deploy, target, family, kv, weights, basis, host, scale, assumptions=notes)


def _host_notes(est: _Estimator) -> list[str]:
    notes = []
    if est.host:
        notes.append("llama.cpp keeps the token embeddings (token_embd) in host memory: "
                     f"{est.host / GIB:.2f} GiB not on the GPU")
    if est.family is None:
        notes.append(f"{est.target.engine or 'no engine'}: no memory parameters in the matrix, so the engine's own "
                     "buffers and reservations are unknown (weights + KV only)")
    if not est.shape.hidden or not est.shape.vocab:
        notes.append("activation buffers partly unknown (hidden size or vocabulary missing)")
    return notes


def _finish(est: _Estimator, ctx: int, batch: int) -> MemoryEstimate:
    """The estimate's record at (context, batch): parts, total, fit, device count, max context/batch, offload."""
    ins, target, family = est.inspection, est.target, est.family
    kv_bytes: int | None = None
    per_token: float | None = None
    lay = est.lay
    if est.kv.per_layer is None or (lay.full_layers + lay.window_layers) == 0:
        est.assumptions.append(_kv_unknown_note(est))
    else:
        kv_bytes = est.kv_at(ctx, batch)
        per_token = (lay.full_layers + lay.window_layers) * est.kv.per_layer
        if family is not None:
            est.assumptions.extend(family.kv_notes(ctx))
    est.assumptions.extend(_host_notes(est))
    device = target.memory()
    # the memory the engine starts from: the device's total, or what was measured free (--gpu auto); the total and
    # its source stay in `capacity`
    start = device.total_bytes
    if device.free_bytes is not None:
        start = min(device.free_bytes, start) if start is not None else device.free_bytes
    gpu_bytes = start if device.kind != "RAM" else None
    if family is not None:
        reserve = family.reserve()
    elif device.free_bytes is not None and gpu_bytes is not None:  # no engine data: what is free, as measured
        reserve = Reserve(gpu_bytes, f"{device.free_bytes / GIB:.1f} GiB free (measured)")
    else:
        reserve = Reserve(gpu_bytes, "")
    est.kv_scale = reserve.kv_scale
    over = est.overhead(ctx, batch)
    parts = _parts(est, kv_bytes, per_token, batch, over)
    activation = sum(p.bytes for p in over if p.name in ACTIVATION_PARTS)
    fixed = sum(p.bytes for p in over) - activation
    total = est.need(ctx, batch) if kv_bytes is not None else est.dev_weights + activation + fixed
    fit = _fit(est, ctx, batch, total, reserve, kv_bytes)
    host = est.host
    if fit.offload is not None and fit.offload.user_set:  # the split the user set is the deployment: its figures
        total, host = fit.offload.gpu_bytes, fit.offload.ram_bytes
        parts = _plan_parts(est, fit.offload, over)
        _user_split_limits(est, fit, ctx, batch, reserve.usable_bytes)
    pool = _kv_pool(est, ctx, batch, reserve, fit, per_token)
    concurrency = _concurrency(est, ctx, fit, pool[0])
    active_bytes, active_params = _active(est)
    mem = target.params
    return MemoryEstimate(
        weights_bytes=est.weights, weights_basis=est.basis, kv_cache_bytes=kv_bytes,
        kv_cache_dtype=est.kv.label, kv_bytes_per_token=per_token, context=ctx, batch=batch,
        activation_bytes=activation, fixed_bytes=fixed, total_bytes=total, gpu_memory_bytes=gpu_bytes,
        usable_bytes=reserve.usable_bytes, fits=fit.fits, gpus_needed=fit.needed, parallelism=est.placement,
        per_gpu_bytes=fit.per_gpu, max_gpus=fit.max_gpus, formula=FORMULA,
        overhead_source=mem.source_text() if mem is not None else "none: the engine has no [memory] data",
        assumptions=est.assumptions, ignored=list(IGNORED), parts=parts, overhead_known=family is not None,
        engine=target.engine, device=target.device, host_bytes=host,
        reserve=reserve.text, max_context=fit.max_ctx, max_batch=fit.max_batch, max_context_gpus=fit.max_ctx_gpus,
        model_context=ins.context_length, offload=fit.offload, tp=fit.n_dev if fit.n_dev > 1 else None,
        active_weight_bytes=active_bytes, active_parameters=active_params, kv_cache_type_k=est.kv.k,
        kv_cache_type_v=est.kv.v, weights_loaded_as=target.weights_loaded_as, engine_version=target.engine_version,
        kv_available_bytes=pool[0], kv_available_tokens=pool[1], max_concurrency=concurrency, refusal=reserve.refusal,
        capacity=device.text or None, capacity_basis=device.basis if device.kind != "RAM" else None,
        context_lowered_from=est.lowered_from, fit_active=_fit_active(family),
        weights_device_bytes=est.on_device(0, fit.n_dev))


def _fit_active(family: EngineFamily | None) -> bool | None:
    """Whether llama.cpp's --fit places the model by itself (None: an engine without --fit)."""
    active = getattr(family, "fit_active", None)
    if active is None:
        return None
    return bool(active()) and not family.user_layers()  # type: ignore[union-attr]


def _kv_pool(est: _Estimator, ctx: int, batch: int, reserve: Reserve, fit: _Fit, per_token: float | None
             ) -> tuple[int | None, int | None]:
    """The KV pool an engine that sizes one from what is left allocates per GPU (what vLLM logs as "Available KV
    cache memory"), and the tokens it holds; None for the other engines."""
    family, usable = est.family, reserve.usable_bytes
    if family is None or not family.sizes_kv_pool or usable is None:
        return None, None
    n = fit.n_dev if fit.n_dev > 1 else 1
    limit = family.kv_limit()
    if limit is not None:
        pool = limit
    else:
        used = est.on_device(0, n) + sum(p.bytes for p in est.overhead(ctx, batch, n))
        pool = int((usable - used) / est.kv_scale)
    tokens = None
    if per_token:
        share = _per_gpu(0, 1 << 30, est.lay, n, est.placement) / (1 << 30)
        tokens = max(0, int(pool / (per_token * share))) if pool > 0 else 0
    return pool, tokens


def _concurrency(est: _Estimator, ctx: int, fit: _Fit, pool: int | None) -> float | None:
    """How many requests of ``ctx`` tokens the KV pool holds at once, per GPU at the plan's device count (vLLM's
    "Maximum concurrency for N tokens per request", kv_cache_utils.py at 0.11.0 and 0.34.0); None without a pool
    or a KV size."""
    if pool is None or est.kv.per_layer is None:
        return None
    one = est.kv_device(ctx, 1, fit.n_dev if fit.n_dev > 1 else 1)
    if one <= 0:
        return None
    return round(max(pool, 0) / one, 2)


def _plan_parts(est: _Estimator, plan: OffloadPlan, over: list[Part]) -> list[Part]:
    """The parts of a split the user set (-ngl, --n-cpu-moe): on the GPU its layers' weights and KV cache and the
    engine's buffers (they add up to ``total_bytes``), then what stays in RAM."""
    split = (f"--n-cpu-moe {plan.n_cpu_moe}" if plan.n_cpu_moe else f"-ngl {plan.ngl} of {plan.n_layers + 1}")
    ram_weights = plan.ram_bytes - plan.ram_kv_bytes
    return [Part("weights", plan.gpu_weights_bytes, "header", f"{split}: the tensors of the layers on the GPU"),
            Part("KV cache", plan.gpu_kv_bytes, "formula", f"{split}: the KV cache of the layers on the GPU "
                 f"({est.kv.label})"),
            *over,
            Part("weights in host memory", ram_weights, "header",
                 f"{split}: the layers on the CPU" + (" and the token embeddings" if est.host else "")),
            Part("KV cache in host memory", plan.ram_kv_bytes, "formula", f"{split}: the KV cache of the layers on "
                 "the CPU")]


def _user_split_limits(est: _Estimator, fit: _Fit, ctx: int, batch: int, usable: int | None) -> None:
    """Under a split the user set, the largest context and batch are those its GPU part fits (not the whole model's);
    no GPU count applies (llama.cpp places layers, not tensor-parallel ranks)."""
    family, plan = est.family, fit.offload
    user = getattr(family, "user_plan", None)
    if user is None or plan is None or usable is None or est.kv.per_layer is None:
        return
    fit.per_gpu, fit.needed, fit.max_ctx_gpus = plan.gpu_bytes, None, 1

    def fits(c: int, b: int) -> bool:
        got = user(est.scale, est.kv_at(c, b), est.overhead(c, b), usable)
        return bool(got is not None and got.fits)

    fit.max_ctx = search_max(lambda c: fits(c, batch), 1, max(est.inspection.context_length or (1 << 20), 1))
    fit.max_batch = search_max(lambda b: fits(ctx, b), 1, 4096)


def _kv_unknown_note(est: _Estimator) -> str:
    from qcheck.kvtypes import KV_DTYPE_BYTES as SIZES

    unknown = [t for t in dict.fromkeys((est.kv.k, est.kv.v)) if t not in SIZES]
    if unknown:
        return f"KV cache not estimated: qcheck does not know the size of the KV cache type {', '.join(unknown)}"
    return "KV cache not estimated: the layer count or head layout is unknown"


def _parts(est: _Estimator, kv_bytes: int | None, per_token: float | None, batch: int, over: list[Part]
           ) -> list[Part]:
    host = est.host
    parts = [Part("weights", est.dev_weights, "header", f"{est.basis} tensor bytes from the headers"
                  + (" (token embeddings in host memory excluded)" if host else ""))]
    if host:
        parts.append(Part("weights in host memory", host, "header", "token_embd stays in RAM (llama.cpp input layer)"))
    kv_how = f"batch {batch} x cached tokens x {per_token or 0:g} B per token ({est.kv.label})"
    limit = est.family.kv_limit() if est.family is not None else None
    if limit is not None and kv_bytes is not None:  # the pool the user fixed is what the device holds (need())
        parts.append(Part("KV cache", limit, "source", f"--kv-cache-memory-bytes: the pool allocated whatever the "
                          f"context; this context and batch use {kv_bytes / GIB:.2f} GiB of it ({kv_how})"))
    else:
        parts.append(Part("KV cache", kv_bytes or 0, "formula", kv_how))
        if kv_bytes and est.kv_scale != 1.0:  # TensorRT-LLM gives the KV cache a fraction of what is left
            parts.append(Part("KV headroom", math.ceil(kv_bytes * est.kv_scale) - kv_bytes, "source",
                              f"the free memory the KV cache is not given (the engine's KV share is "
                              f"{1 / est.kv_scale:g} of it)"))
    parts.extend(over)
    return parts


@dataclass
class _Fit:
    fits: bool | None = None
    needed: int | None = None
    per_gpu: int | None = None
    max_gpus: int = MAX_GPUS
    max_ctx: int | None = None
    max_batch: int | None = None
    max_ctx_gpus: int = 1
    offload: OffloadPlan | None = None
    n_dev: int = 1


def _fit(est: _Estimator, ctx: int, batch: int, total: int, reserve: Reserve, kv_bytes: int | None) -> _Fit:
    """Whether it fits the device, on how many devices it would, the largest context and batch, the offload."""
    tp = est.deploy.parallel.tp
    usable = reserve.usable_bytes
    fit = _Fit(n_dev=tp if tp and tp > 1 and est.target.device == "GPU" else 1)
    if usable is None:
        return fit
    # without the engine's overhead or the KV cache's size the need is a lower bound: it can say "does not fit",
    # never "fits"
    known = est.family is not None and kv_bytes is not None
    fit.fits = (False if total > usable else None) if not known else est.fits(ctx, batch, 1, usable)
    if fit.n_dev > 1 and known:
        fit.per_gpu = est.need(ctx, batch, fit.n_dev)
        fit.fits = est.fits(ctx, batch, fit.n_dev, usable)
        est.assumptions.append(f"--tp {fit.n_dev}: {fit.per_gpu / GIB:.1f} GiB per GPU ({est.placement})")
        how = est.family.weights_how(fit.n_dev) if est.family is not None and est.placement == "tensor" else ""
        if how:
            est.assumptions.append(f"weights per GPU at --tp {fit.n_dev}: {how}")
    candidates = _device_counts(est)
    fit.max_gpus = candidates[-1]
    if est.target.device == "GPU" and known:
        _devices_needed(est, fit, ctx, batch, usable, candidates)
    if known and kv_bytes is not None:
        top = est.inspection.context_length or (1 << 20)
        # at the GPU count the plan uses: the chosen --tp, else the count needed when one GPU is not enough
        at = fit.n_dev if fit.n_dev > 1 or fit.fits or not fit.needed else fit.needed
        fit.max_ctx_gpus = at
        fit.max_ctx = search_max(lambda c: est.fits(c, batch, at, usable), 1, max(top, 1))
        fit.max_batch = search_max(lambda b: est.fits(ctx, b, at, usable), 1, 4096)
    _offload(est, fit, ctx, batch, usable, known)
    if reserve.refusal:
        fit.fits = False
        est.assumptions.append(reserve.refusal)
    return fit


def _offload(est: _Estimator, fit: _Fit, ctx: int, batch: int, usable: int, known: bool) -> None:
    """The llama.cpp-family split: the one the user set (-ngl, --n-cpu-moe), judged as asked, else the plan when
    one GPU is not enough."""
    family = est.family
    if family is None or fit.n_dev != 1:
        return
    kv, over = est.kv_at(ctx, batch), est.overhead(ctx, batch)
    user = getattr(family, "user_plan", None)
    plan = user(est.scale, kv, over, usable) if user is not None else None
    if plan is not None:
        fit.offload = plan
        fit.fits = plan.fits if known else fit.fits
        return
    if fit.fits is False:
        fit.offload = family.offload(est.scale, kv, over, usable)


def _device_counts(est: _Estimator) -> list[int]:
    """The device counts the engine could spread this model over: powers of two up to one GPU per KV head that
    the engine can load (heads, KV heads, FP8 blocks and groups must divide), or 1..16 for a layer split."""
    if est.placement != "tensor":
        return list(range(1, MAX_LAYER_SPLIT + 1))
    limit = MAX_GPUS
    lay, ins = est.lay, est.inspection
    if not lay.mla_dim and lay.kv_heads:
        limit = min(limit, lay.kv_heads)
    elif ins.num_attention_heads:
        limit = min(limit, ins.num_attention_heads)
    candidates = [1 << i for i in range(max(1, limit).bit_length()) if 1 << i <= max(1, limit)]
    from qcheck.matrix.parallel import tp_problems

    spec = _engine_parallel(est.target.engine)
    refused = {n: tp_problems(ins, n, spec) for n in candidates}
    if any(refused.values()):
        candidates = [n for n in candidates if not refused[n]] or [1]
        bad = ", ".join(f"--tp {n} ({problems[0]})" for n, problems in refused.items() if problems)
        est.assumptions.append(f"GPU counts the engine refuses for this checkpoint were skipped: {bad}")
    return candidates


def _devices_needed(est: _Estimator, fit: _Fit, ctx: int, batch: int, usable: int, candidates: list[int]) -> None:
    for n in candidates:
        if est.fits(ctx, batch, n, usable):
            fit.needed = n
            fit.per_gpu = est.need(ctx, batch, n) if fit.n_dev == 1 else fit.per_gpu
            return
    how = ("power-of-two tensor parallelism, at most one GPU per KV head" if est.placement == "tensor"
           else "layer split")
    est.assumptions.append(f"does not fit on {fit.max_gpus} GPUs ({how}); pipeline parallelism across nodes or "
                           "a smaller quantisation is needed")


def _engine_parallel(engine: str | None) -> ParallelSpec | None:
    """The engine's ``[parallel]`` data (None: unknown engine or none): which GPU counts it can load."""
    data = _engine_data(engine)
    return data.parallel if data is not None else None


def _active(est: _Estimator) -> tuple[int, int | None]:
    """Weight bytes one decode step reads (MoE: the active experts' share) and the parameters they hold."""
    shape, ins = est.shape, est.inspection
    if shape.from_tensors:
        active_bytes = int(shape.active_bytes_per_token() * est.scale)
    else:
        active_bytes = est.weights
        if shape.moe or ins.moe:
            est.assumptions.append("MoE without a tensor table: the speed estimate reads all experts (a lower bound)")
    active_params = None
    if ins.parameters:
        share = shape.active_bytes_per_token() / shape.total_bytes if shape.from_tensors and shape.total_bytes else 1.0
        active_params = int(ins.parameters * min(1.0, share))
    return active_bytes, active_params
