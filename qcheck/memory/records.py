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
class DecodePoint:
    """The decode ceiling with each sequence holding ``context`` tokens (JSON ``speed.decode_at[]``): a decode step
    reads the weights and every cached token of the sequence (a sliding-window layer at most its window)."""

    context: int
    decode_tokens_per_s: float | None
    #: bytes one step reads per GPU (weights and KV, what layers in RAM read included) and the KV part of them
    bytes_per_step: int
    kv_bytes_per_step: int
    #: why this context: "asked" (--context, an engine's -c), "short" (qcheck's short figure), "deployment" (the
    #: context the deployment serves when none was asked: the engine's default, capped or lowered)
    basis: str
    #: of ``bytes_per_step``, what layers kept in RAM read at the host's bandwidth
    ram_bytes_per_step: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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
    #: the number format this checkpoint's own kernels compute in (the format's tensor cores: fp8, fp4, int8),
    #: what a fallback gives up; None for formats without one
    native_format: str | None = None
    #: tokens each sequence holds for ``decode_tokens_per_s`` (the deployment's context: asked, else the engine's
    #: default) and why; ``decode_at`` gives the figure at each context stated (without --context: a short one too)
    context: int | None = None
    context_basis: str | None = None
    kv_bytes_per_step: int = 0
    decode_at: list[DecodePoint] = field(default_factory=list)
    #: GPUs one step runs on in parallel (tensor parallelism: each reads its share of the weights and KV heads at
    #: once), and what the estimate assumes about their all-reduces
    gpus: int = 1
    parallel_assumption: str | None = None
    #: the prompt the prefill figure is for, the least time it takes, and why there is no prefill figure
    prefill_prompt_tokens: int | None = None
    prefill_seconds: float | None = None
    prefill_note: str | None = None

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
    #: the change to the deployment that makes the engine start (e.g. reserve the GPUs TP x PP needs); said first
    #: among the verdict's suggestions, before other engines
    fix: str | None = None
    #: why it is reported, not judged: "--kernels-only", or "no deployment setting asked" (a plain question about a
    #: GPU product: the start-up at the engine's defaults); None when judged
    not_judged: str | None = None

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
class DeploymentOption:
    """One way to run the model on the GPUs named when the deployment asked does not fit them whole (JSON
    ``verdicts[].options[]``, built by ``qcheck.options``): the settings as the engine takes them, and the verdict,
    memory, start-up and speed of that deployment, each judged as the deployment asked is (the one pipeline)."""

    #: as-asked | gpu-layers | context | kv-cache | budget | quant | more-gpus
    kind: str
    #: for people: the engine's words ("-c 15360", "-ctk q8_0 -ctv q8_0"), a model file, "with 2 GPUs"
    label: str
    #: the settings as the engine takes them: command-line words, ``PARAMETER`` lines, ``NAME=value`` variables
    flags: list[str]
    #: the same settings as qcheck's request fields (``context``, ``kv_cache``, ``tp``, a knob, ``model``)
    settings: dict[str, Any]
    status: str
    #: the start-up outcome (starts, context-lowered, offloaded, does-not-start, unknown)
    startup: str | None
    fits: bool | None
    context: int | None
    #: GPUs used (the GPUs named, or more for ``more-gpus``), bytes on one of them and in RAM
    gpus: int = 1
    gpu_bytes: int | None = None
    ram_bytes: int = 0
    #: the layers left in RAM ("-ngl 24 of 33"), None when the whole model is on the GPU
    offload: str | None = None
    #: the largest context with these settings and the whole model on the GPUs (MemoryEstimate.max_context_asked_gpus)
    max_context: int | None = None
    decode_tokens_per_s: float | None = None
    prefill_tokens_per_s: int | None = None
    #: what this option is, what it changes and what it gives, one line
    summary: str = ""
    #: the checkpoint this option runs (another quant of the same model), when not the one asked about
    model: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeploymentOption:
        """The record from its JSON (the reports render from the JSON, as every format does)."""
        known: dict[str, Any] = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


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
    #: the largest context at this batch with the whole model on the GPUs asked for (one, or ``--tp``): no layer in
    #: RAM and no more GPUs than named (``max_context`` may be on more: ``max_context_gpus``); None: none fits
    max_context_asked_gpus: int | None = None
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
    #: the context the engine runs when none is given (Ollama by VRAM, LM Studio 4096), and why; None: the model's
    #: own (an asked context above it needs the engine's own setting: qcheck.engine_words)
    default_context: int | None = None
    default_context_why: str | None = None

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
        return text + self._max_context_text()

    def _max_context_text(self) -> str:
        """'; max context 131072 (the model's own) at batch 1', and when that needs more GPUs than named, what the
        GPUs named hold first: '; max context on one GPU 15360 (the whole model on it); 65536 with 2 GPUs ...'."""
        if self.max_context is None or not (self.fits or self.max_context_gpus > 1):
            return ""

        def ctx(n: int) -> str:
            return f"{n}" + (" (the model's own)" if self.model_context and n >= self.model_context else "")

        named = self.tp or 1
        if self.max_context_gpus <= named or (self.offload is not None and self.offload.user_set):
            at = f" on {self.max_context_gpus} GPUs" if self.max_context_gpus > 1 and not self.tp else ""
            return f"; max context {ctx(self.max_context)}{at} at batch {self.batch}"
        here = "one GPU" if named == 1 else f"the {named} GPUs"
        first = (f"max context on {here} {ctx(self.max_context_asked_gpus)} (the whole model on it)"
                 if self.max_context_asked_gpus else f"no context fits {here} with the whole model on it")
        return (f"; {first}; {ctx(self.max_context)} with {self.max_context_gpus} GPUs (more than named) at batch "
                f"{self.batch}")
