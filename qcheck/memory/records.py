"""The memory records: what one estimate says (JSON ``verdicts[].memory``), part by part.

Every byte count is a :class:`Part` that says what it is and where it comes from: ``header`` (read from the
checkpoint), ``formula`` (arithmetic on the model's shape with sourced parameters), ``source`` (an engine
constant read in its code), ``estimate`` (qcheck's stated guess, no engine constant exists), or ``measured``
(fitted to real loads).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

GIB = 1024**3
MIB = 1024**2
#: the parts held in host memory, apart from the device total (llama.cpp's token embeddings, layers kept on the CPU)
HOST_PARTS = ("weights in host memory", "KV cache in host memory")


@dataclass(frozen=True)
class Part:
    """One memory component on one device."""

    name: str
    bytes: int
    basis: str  # formula | source | estimate | measured
    how: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Reserve:
    """How much of a device's memory the engine lets itself fill, and why."""

    usable_bytes: int | None
    text: str  # for people: "24.0 GiB - llama.cpp's 1.0 GiB --fit margin"
    kv_scale: float = 1.0  # TensorRT-LLM gives the KV cache only a fraction of what is left
    #: the engine refuses to start on this device whatever the model (vLLM: utilization above free memory)
    refusal: str | None = None


@dataclass
class OffloadPlan:
    """llama.cpp's partial offload (JSON ``memory.offload``): ``-ngl`` layers on the GPU, or for MoE the
    ``--n-cpu-moe`` layers whose experts stay in RAM (the ``moe_*`` fields, only when such a plan fits)."""

    n_layers: int
    ngl: int
    gpu_bytes: int
    ram_bytes: int
    summary: str = ""
    n_cpu_moe: int | None = None
    moe_gpu_bytes: int | None = None
    moe_ram_bytes: int | None = None
    override_tensor: str | None = None  # the equivalent -ot pattern; None when no layer's experts move
    #: how this build counts -ngl: output-first (PR #18148 on), output-last (before), either (unknown build)
    rule: str = "output-first"
    #: whether -ngl puts the output layer on the GPU (None: depends on the build)
    output_on_gpu: bool | None = None
    #: the user set this split (-ngl, --n-cpu-moe): judged as asked, not searched for
    user_set: bool = False
    #: whether the plan's GPU part fits the usable memory
    fits: bool | None = None
    #: the plan's parts: weights and KV cache on the GPU (``gpu_bytes`` adds the engine's buffers) and the KV cache
    #: in RAM (``ram_bytes`` holds it beside the weights in RAM)
    gpu_weights_bytes: int = 0
    gpu_kv_bytes: int = 0
    ram_kv_bytes: int = 0
    #: weight bytes one decode step reads from the GPU and from RAM under this plan (MoE: the active experts'
    #: share), and the share of the KV cache in RAM: what the speed estimate reads (qcheck.speed)
    gpu_read_bytes: int = 0
    ram_read_bytes: int = 0
    ram_kv_share: float = 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.n_cpu_moe is None:  # no MoE plan: the moe_* keys are absent, not null
            for key in ("n_cpu_moe", "moe_gpu_bytes", "moe_ram_bytes", "override_tensor"):
                del data[key]
        return data


@dataclass
class SpeedEstimate:
    """The speed estimate of one verdict (computed by ``qcheck.speed``): the JSON ``verdicts[].memory.speed``: decode and prefill ceilings and what they were computed from."""

    label: str
    decode_tokens_per_s: float | None
    prefill_tokens_per_s: int | None
    bytes_per_step: int
    batch: int
    bandwidth_gbs: float
    compute_format: str
    compute_why: str
    tflops: float | None
    active_parameters: int | None
    formula: str
    source: str
    calibration: str  # how far measured speeds stayed below such ceilings (stated, not applied)
    summary: str = ""
    #: the engine's least time per decode step and per prefill step (ms), what bounds decode, where they come from
    floor_ms: float | None = None
    prefill_floor_ms: float | None = None
    decode_bound: str = "bandwidth"  # bandwidth | floor
    bandwidth_tokens_per_s: float | None = None  # the decode ceiling from bandwidth alone
    floor_basis: str | None = None
    floor_source: str | None = None
    #: of ``bytes_per_step``, what layers kept in RAM (-ngl, --n-cpu-moe, --fit) read at the host's bandwidth
    ram_bytes_per_step: int = 0
    host_bandwidth_gbs: float | None = None
    host_bandwidth_basis: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


#: a start-up outcome -> the status of the ``start-up`` dimension it gives: layers moved to the CPU are a slower
#: substitute path (docs/design.md: CPU offload is a fallback)
STARTUP_STATUS = {"starts": "native", "context-lowered": "native", "offloaded": "fallback",
                  "does-not-start": "unsupported", "unknown": "unknown"}


@dataclass
class Startup:
    """What the engine does at start-up with the settings asked (JSON ``verdicts[].startup``): it ``starts``, starts
    serving a shorter context than asked (``context-lowered``: llama.cpp ``--fit``, SGLang's pool cap), starts with
    layers in RAM (``offloaded``), refuses (``does-not-start``), or qcheck cannot tell (``unknown``). ``judged`` is
    False under ``--kernels-only``: then it is reported beside a status it did not set."""

    outcome: str
    message: str
    #: the context the engine serves per request (lowered when it lowers it)
    context: int | None = None
    #: requests of that context the KV pool holds at once (vLLM's "Maximum concurrency"); None: not a pool engine
    max_concurrency: float | None = None
    source: str | None = None
    #: the engine version the source was read at
    version: str | None = None
    judged: bool = True

    def __post_init__(self) -> None:
        if self.outcome not in STARTUP_STATUS:
            raise ValueError(f"start-up outcome {self.outcome!r}")

    @property
    def status(self) -> str:
        return STARTUP_STATUS[self.outcome]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status}


@dataclass
class CapacityCell:
    """One context of one KV type."""

    context: int
    #: whole sequences of this context held at once; None: beyond the model's context, or the estimate cannot
    #: say (no device size, no KV size)
    sequences: int | None
    #: on how many GPUs (tensor parallel or layer split) the count holds
    gpus: int = 1
    #: ``sequences`` reached the search bound: at least that many
    at_least: bool = False
    #: the engine's own figure (vLLM: "Maximum concurrency for N tokens per request")
    engine_concurrency: float | None = None
    #: the KV pool's tokens per GPU (vLLM's "GPU KV cache size")
    kv_pool_tokens: int | None = None


@dataclass
class CapacityRow:
    """One KV-cache type the engine accepts on this GPU, and its cells."""

    kv_cache_dtype: str  # the type as the estimate names it (the model's own for the default)
    asked: str  # what was asked: "auto" (the default) or the --kv-cache-dtype value
    status: str  # the verdict with this KV type: native | fallback | unknown
    cells: list[CapacityCell] = field(default_factory=list)
    #: other accepted types with the same verdict and the same figures (fp8_e4m3 beside fp8, float16 beside
    #: bfloat16)
    same_as: list[str] = field(default_factory=list)


@dataclass
class CapacityTable:
    """``Verdict.memory.concurrency``: rows per KV type, and the types left out with why."""

    rows: list[CapacityRow]
    left_out: list[str] = field(default_factory=list)
    #: what the counts mean for this engine (scheduler limits, the figure it prints)
    note: str = ""


@dataclass
class MemoryEstimate:
    """The memory-fit verdict, as the JSON ``Verdict.memory`` carries it (bytes, plus GiB for people)."""

    weights_bytes: int
    weights_basis: str  # "packed" | "dequantized-bf16" | "file size"
    kv_cache_bytes: int | None
    kv_cache_dtype: str
    kv_bytes_per_token: float | None
    context: int
    batch: int
    activation_bytes: int  # compute / activation buffers
    fixed_bytes: int  # output buffer, runtime, CUDA graphs, reserved
    total_bytes: int  # on one device (tp = 1), host-resident weights excluded
    gpu_memory_bytes: int | None
    usable_bytes: int | None
    fits: bool | None
    gpus_needed: int | None
    parallelism: str  # "tensor" | "layer-split"
    per_gpu_bytes: int | None  # at gpus_needed
    max_gpus: int
    formula: str
    overhead_source: str
    assumptions: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    #: where each number comes from: name, bytes, basis (header|formula|source|estimate|measured), how
    parts: list[Part] = field(default_factory=list)
    overhead_known: bool = True
    engine: str | None = None
    device: str = "GPU"  # GPU | RAM | unified
    host_bytes: int = 0  # weights the engine keeps in host memory (llama.cpp token embeddings)
    reserve: str = ""  # how usable_bytes was derived
    max_context: int | None = None  # largest context that fits at this batch, on max_context_gpus devices
    max_batch: int | None = None  # largest batch that fits at this context, on max_context_gpus devices
    #: the device count max_context / max_batch are judged at: 1, the --tp size, or gpus_needed when one GPU is
    #: not enough (tensor parallelism splits the KV heads, a layer split the layers)
    max_context_gpus: int = 1
    model_context: int | None = None
    offload: OffloadPlan | None = None
    #: weight bytes one decode step reads (MoE: the active experts' share) and the parameters they hold
    active_weight_bytes: int | None = None
    active_parameters: int | None = None
    tp: int | None = None  # the GPU count the user chose (--tp); fit and max context are per GPU at it
    #: filled by apply_memory: why there is no fit (an architecture, not a product), and the speed ceiling
    note: str | None = None
    speed: SpeedEstimate | None = None
    #: the K and V cache types apart (``kv_cache_dtype`` is their one name when they agree, else "K,V")
    kv_cache_type_k: str | None = None
    kv_cache_type_v: str | None = None
    #: the dtype the engine holds the weights in after loading, when it converts them (None: as stored)
    weights_loaded_as: str | None = None
    #: the engine version the parameters were taken at (its [[memory.versions]] entries applied)
    engine_version: str | None = None
    #: the KV pool the engine sizes from what is left, per GPU (vLLM's "Available KV cache memory", SGLang's
    #: pool, TensorRT-LLM's free_gpu_memory_fraction share); None for engines that allocate the context's KV
    kv_available_bytes: int | None = None
    #: tokens that pool holds (vLLM's "GPU KV cache size: N tokens")
    kv_available_tokens: int | None = None
    #: requests of ``context`` tokens the pool holds at once, per GPU (vLLM's "Maximum concurrency for N tokens
    #: per request: X"); None for engines that allocate the context's KV up front
    max_concurrency: float | None = None
    #: why the engine refuses to start on this device whatever the model (vLLM: utilization above free memory)
    refusal: str | None = None
    #: the context before llama.cpp's --fit lowered it to ``context`` (None: not lowered)
    context_lowered_from: int | None = None
    #: llama.cpp's --fit runs (on in this build or asked for, no -ngl given): it lowers the context and moves layers
    #: to the CPU by itself; None for engines without --fit
    fit_active: bool | None = None
    #: the device memory used and where it comes from: "79.19 GiB as the driver reports a h100 (...)"
    capacity: str | None = None
    capacity_basis: str | None = None  # driver | estimate | measured | datasheet | given | none
    #: weight bytes on one GPU as the engine holds them at the GPU count judged (``tp``, else one): kernel layouts
    #: and tensors every tensor-parallel rank keeps whole included (vLLM's "Model loading took")
    weights_device_bytes: int | None = None
    #: ``--capacity``: concurrent sequences per context for each KV type the engine accepts (qcheck.memory.capacity)
    concurrency: CapacityTable | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON ``verdicts[].memory``: the fields, each byte count in GiB too, the summary line, then the note
        and the speed record (with its summary line) when there are any."""
        data = asdict(self)
        del data["note"], data["speed"]
        if self.concurrency is None:  # asked for with --capacity only
            del data["concurrency"]
        if self.offload is not None:
            data["offload"] = self.offload.to_json()
        for key in ("weights_bytes", "kv_cache_bytes", "total_bytes", "gpu_memory_bytes", "usable_bytes",
                    "per_gpu_bytes", "kv_available_bytes"):
            value = data[key]
            data[key.replace("_bytes", "_gib")] = None if value is None else round(value / GIB, 2)
        data["summary"] = self.summary()
        if self.note is not None:
            data["note"] = self.note
        if self.speed is not None:
            data["speed"] = self.speed.to_json()
            data["speed_summary"] = self.speed.summary
        return data

    def summary(self) -> str:
        """One line for people, e.g. 'needs 6.2 GiB on one GPU (weights 4.4 + KV 1.0 + compute 0.3 GiB);
        fits in 23.0 GiB usable (24.0 GiB - llama.cpp's 1.0 GiB --fit margin); max context 131072'."""
        def g(b: int | None) -> str:
            return "?" if b is None else f"{b / GIB:.1f}"

        where = {"RAM": "in RAM", "unified": "in unified memory"}.get(self.device, "on one GPU")
        plan = self.offload
        if plan is not None and plan.user_set:
            where = "on the GPU with " + (f"--n-cpu-moe {plan.n_cpu_moe}" if plan.n_cpu_moe else
                                          f"-ngl {plan.ngl} of {plan.n_layers + 1}")
        # the parts on the device, as the total adds them (token embeddings and layers kept in RAM are apart)
        on_device = {p.name: p.bytes for p in self.parts if p.name not in HOST_PARTS}
        weights = on_device.get("weights", self.weights_bytes)
        kv = on_device.get("KV cache", self.kv_cache_bytes) if self.kv_cache_bytes is not None else None
        terms = [f"weights {g(weights)}", f"KV {g(kv)}"]
        if self.overhead_known:
            extra = [p for p in self.parts if p.name not in ("weights", "KV cache", *HOST_PARTS)]
            terms += [f"{p.name} {g(p.bytes)}" for p in extra if p.bytes >= 0.05 * GIB]
            if not any(p.bytes >= 0.05 * GIB for p in extra):
                terms.append(f"buffers {g(self.activation_bytes + self.fixed_bytes)}")
        text = f"needs {g(self.total_bytes)} GiB {where} ({' + '.join(terms)} GiB)"
        if not self.overhead_known:
            text += f" + overhead unknown ({self.engine or 'this engine'} has no memory data)"
        if self.host_bytes >= 0.05 * GIB and self.device != "RAM":
            text += f", {g(self.host_bytes)} GiB more in RAM"
        if self.gpu_memory_bytes is None:
            return text
        if self.reserve:
            usable = f"{g(self.usable_bytes)} GiB usable ({self.reserve})"
        else:
            usable = f"{g(self.gpu_memory_bytes)} GiB"
        if self.tp and self.per_gpu_bytes is not None:
            text += f"; with --tp {self.tp}: {g(self.per_gpu_bytes)} GiB per GPU"
        if self.fits:
            text += f"; fits in {usable}"
        elif self.fits is None:
            text += f"; {usable}: fit unknown"
        elif self.tp:
            text += f"; does not fit {usable} at --tp {self.tp}" + \
                (f"; {self.gpus_needed} GPUs would" if self.gpus_needed else "")
        elif self.offload:
            text += f"; does not fit {usable}: {self.offload.summary}"
        elif self.gpus_needed:
            how = "tensor parallelism" if self.parallelism == "tensor" else "a layer split"
            text += f"; does not fit {usable}, needs {self.gpus_needed} with {how} ({g(self.per_gpu_bytes)} GiB each)"
        else:
            text += f"; does not fit {usable}, not even on {self.max_gpus}"
        if self.max_context is not None and (self.fits or self.max_context_gpus > 1):
            full = self.model_context and self.max_context >= self.model_context
            at = f" on {self.max_context_gpus} GPUs" if self.max_context_gpus > 1 and not self.tp else ""
            text += f"; max context {self.max_context}" + (" (the model's own)" if full else "") + at + \
                f" at batch {self.batch}"
        return text
