"""Typed records that move through the pipeline: Checkpoint -> Inspection -> Verdict.

Readers produce a ``Checkpoint`` (what the headers say, nothing interpreted); the classifier turns it
into an ``Inspection`` (what the checkpoint *is*); the matrix turns an Inspection into ``Verdict``s.
The ``to_json`` methods are the public contract in docs/design.md: add fields, never rename or drop them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import ItemsView, Iterator, Mapping, MutableMapping, Sequence, ValuesView
from dataclasses import asdict, dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # the memory records sit below the code that computes them; nothing here builds one
    from qcheck.memory.records import MemoryEstimate, Startup

Container = Literal["gguf", "safetensors", "pickle"]
Status = Literal["native", "fallback", "unsupported", "unknown"]
#: where a checkpoint was read from: a local file or directory, or a Hub repo (``qcheck.hub.target`` decides)
Origin = Literal["local", "hub"]

INSPECTION_SCHEMA = "qcheck.inspection/1"
CHECK_SCHEMA = "qcheck.check/1"


@dataclass(slots=True)  # one per tensor, up to max_tensors of them: no per-instance __dict__
class TensorInfo:
    """One tensor as the header describes it.

    ``dtype`` is the container's own name: a GGUF type name (``Q4_K``, ``F32``, ``unknown(77)``) or a
    safetensors dtype string (``F8_E4M3``, ``U8``, or an unknown string kept verbatim).
    ``shape`` is in row-major order, outermost first, for both containers (GGUF's ``ne`` reversed).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int | None = None  # bytes of data, when the dtype's size is known
    offset: int | None = None  # absolute file offset of the data
    file: str = ""  # the shard (file name relative to the model root) that holds it

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class TensorColumns:
    """The fields of many tensors as parallel lists (row i of each is tensor i), in the checkpoint's order."""

    names: Sequence[str]
    dtypes: Sequence[str]
    shapes: Sequence[tuple[int, ...]]
    nbytes: Sequence[int | None]
    offsets: Sequence[int | None]
    files: Sequence[str]


class TensorMap(MutableMapping[str, TensorInfo]):
    """name -> ``TensorInfo``, held as columns until records are asked for.

    A safetensors header of 10^5+ entries would cost as many records (~0.5 us and ~100 bytes each) that
    ``inspect`` never looks at one by one: the classifier reads ``columns`` (``qcheck.classify.table``). A
    lookup builds that one record and keeps it (the same object on the next lookup); iterating values or items
    builds them all at once, in order. A dict in every other way: the first write (set, delete) turns it into
    a plain dict of records, and ``columns`` is None from then on.
    """

    __slots__ = ("_columns", "_records", "_rows")

    def __init__(self, columns: TensorColumns):
        self._columns: TensorColumns | None = columns
        #: name -> row while records are built on demand; None once ``_records`` holds every tensor
        self._rows: dict[str, int] | None = dict(zip(columns.names, range(len(columns.names)), strict=True))
        self._records: dict[str, TensorInfo] = {}

    @property
    def columns(self) -> TensorColumns | None:
        """The columns, while they describe this mapping (until the first write)."""
        return self._columns

    def __getitem__(self, name: str) -> TensorInfo:
        record = self._records.get(name)
        if record is None:
            if self._rows is None:
                raise KeyError(name)
            i = self._rows[name]
            c = self._columns
            assert c is not None  # rows are kept only with their columns
            record = self._records[name] = TensorInfo(c.names[i], c.dtypes[i], c.shapes[i], c.nbytes[i],
                                                      c.offsets[i], c.files[i])
        return record

    def __contains__(self, name: object) -> bool:
        return name in (self._records if self._rows is None else self._rows)

    def __iter__(self) -> Iterator[str]:
        return iter(self._records if self._rows is None else self._rows)

    def __len__(self) -> int:
        return len(self._records if self._rows is None else self._rows)

    def _build_all(self) -> dict[str, TensorInfo]:
        if self._rows is not None:
            c = self._columns
            assert c is not None
            records = dict(zip(c.names, map(TensorInfo, c.names, c.dtypes, c.shapes, c.nbytes, c.offsets, c.files),
                               strict=True))
            records.update(self._records)  # records already handed out stay the same objects (order unchanged)
            self._records, self._rows = records, None
        return self._records

    def values(self) -> ValuesView[TensorInfo]:
        return self._build_all().values()

    def items(self) -> ItemsView[str, TensorInfo]:
        return self._build_all().items()

    def __setitem__(self, name: str, record: TensorInfo) -> None:
        self._build_all()[name] = record
        self._columns = None

    def __delitem__(self, name: str) -> None:
        del self._build_all()[name]
        self._columns = None

    def __repr__(self) -> str:
        return f"TensorMap({self._build_all()!r})"


def tensor_columns(tensors: Mapping[str, TensorInfo]) -> TensorColumns | None:
    """The columns of ``tensors`` when it is a ``TensorMap`` that still has them (no record built to find out)."""
    return tensors.columns if isinstance(tensors, TensorMap) else None


def join_tensors(parts: Sequence[Mapping[str, TensorInfo]]) -> MutableMapping[str, TensorInfo]:
    """The tensors of several shards (names disjoint, checked by the caller) as one mapping, in shard order:
    one ``TensorMap`` when every part has its columns, else a dict."""
    columns = [tensor_columns(p) for p in parts]
    if len(parts) == 1 and isinstance(parts[0], TensorMap):
        return parts[0]
    if parts and None not in columns:
        cols = [c for c in columns if c is not None]
        fields = ("names", "dtypes", "shapes", "nbytes", "offsets", "files")
        return TensorMap(TensorColumns(*(list(chain.from_iterable(getattr(c, f) for c in cols)) for f in fields)))
    joined: dict[str, TensorInfo] = {}
    for part in parts:
        joined.update(part)
    return joined


@dataclass
class SourceFile:
    name: str
    size_bytes: int | None
    kind: str  # "gguf", "safetensors", "index", "config", "pickle", "lfs-pointer", "other"


@dataclass
class Checkpoint:
    """Everything read from a checkpoint's headers and side files, uninterpreted."""

    path: str  # as the user gave it
    container: Container
    #: a dict, or a ``TensorMap`` (same behaviour, records built on demand) from the safetensors reader
    tensors: MutableMapping[str, TensorInfo] = field(default_factory=dict)
    #: GGUF key/value metadata (large arrays are summarised, see readers.gguf), or safetensors ``__metadata__``
    metadata: dict[str, Any] = field(default_factory=dict)
    #: parsed JSON side files keyed by file name: config.json, hf_quant_config.json, quantize_config.json, ...
    configs: dict[str, Any] = field(default_factory=dict)
    files: list[SourceFile] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: the Hub revision resolved to a commit, for remote checkpoints
    revision: str | None = None
    #: for pickles: the globals the pickle would import (found by walking opcodes, never executed)
    pickle_globals: list[str] = field(default_factory=list)
    #: read from a local path or from the Hub (set by ``qcheck.readers``; renderers read it, never guess)
    origin: Origin = "local"

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes or 0 for f in self.files if f.kind in ("gguf", "safetensors", "pickle"))

    def dtype_histogram(self) -> dict[str, int]:
        return dict(Counter(t.dtype for t in self.tensors.values()).most_common())


@dataclass
class KvScales:
    """What a safetensors checkpoint's headers say about its KV-cache scales (issue #24).

    ``declared_by`` is the config key that declares a quantised KV cache (compressed-tensors ``kv_cache_scheme``,
    ModelOpt ``kv_cache_quant_algo``, Quark ``kv_cache_group``), ``static`` whether its scales are calibrated
    offline and shipped as tensors (``dynamic: false``; ModelOpt and Quark always) rather than computed at run time.
    The counts are attention layers of the language model and how many of them carry each scale tensor
    (``k_scale``/``v_scale``, the older single ``kv_scale``, ``k_cache.scale``, Quark ``k_proj.output_scale`` ...;
    ``q_scale`` and ``prob_scale`` for FP8 attention). Engines use a scale of 1.0 where one is missing."""

    declared_by: str | None = None
    static: bool | None = None
    attention_layers: int = 0
    k_scales: int = 0
    v_scales: int = 0
    q_scales: int = 0
    prob_scales: int = 0
    #: up to 8 attention layers (their tensor-name prefix, e.g. ``model.layers.3``) without a K or V scale
    missing: list[str] = field(default_factory=list)

    @property
    def kv_complete(self) -> bool:
        """Every attention layer has both a K and a V scale (and there is at least one)."""
        n = self.attention_layers or max(self.k_scales, self.v_scales)
        return n > 0 and self.k_scales >= n and self.v_scales >= n

    @property
    def qp_complete(self) -> bool:
        """Every attention layer has a Q and a softmax-probability scale (what FP8 attention quantises with)."""
        n = self.attention_layers or max(self.q_scales, self.prob_scales)
        return n > 0 and self.q_scales >= n and self.prob_scales >= n


@dataclass
class Quantization:
    method: str = "none"  # a canonical method from docs/design.md
    producer: str | None = None
    weight_bits: int | None = None
    bits_per_weight: float | None = None
    group_size: int | None = None
    block_size: list[int] | None = None
    weight_dtype: str | None = None
    scale_dtype: str | None = None
    activation_dtype: str | None = None
    kv_cache_dtype: str | None = None
    excluded: list[str] = field(default_factory=list)
    gguf_file_type: str | None = None
    tensor_types: dict[str, int] = field(default_factory=dict)
    #: how weight scales are laid out: "per-tensor", "per-channel", "group", "block" (2-D), "per-token" ...
    scale_granularity: str | None = None
    #: True when zero points are stored (asymmetric), False when symmetric, None when unknown/not applicable
    zero_point: bool | None = None
    #: GPTQ act-order (g_idx present and not trivial), None when not applicable
    act_order: bool | None = None
    #: the checkpoint's own format string where it has one (compressed-tensors "float-quantized", AWQ "gemm" ...)
    format: str | None = None
    #: the raw ``quant_method`` or ``quant_algo`` string as the config wrote it
    config_method: str | None = None
    #: how activations are quantised at run time: "dynamic per-token", "static per-tensor", "dynamic per-group 16" ...
    activation_scheme: str | None = None
    #: the KV-cache scales the headers declare and ship (safetensors only; None for GGUF and pickles)
    kv_scales: KvScales | None = None


@dataclass
class InspectionFinding:
    """Something wrong with the checkpoint itself that reports flag: ``kind`` is ``config-mismatch`` (its
    configs and tensors disagree) or ``unsafe-pickle``; ``where`` the config key, tensor or file; ``message``
    one line. Serialised as ``{"kind", "where", "message"}``."""

    kind: str
    where: str
    message: str


@dataclass
class Adapter:
    """A PEFT adapter (``adapter_config.json`` cross-checked against its tensors, see ``qcheck.classify.adapter``).

    ``max_rank`` is the largest rank of any module (``rank_pattern`` can raise single modules above ``rank``):
    what providers' rank limits apply to. Serialised with these keys, in this order.
    """

    type: str
    rank: int | None = None
    max_rank: int | None = None
    alpha: float | None = None
    target_modules: list[str] = field(default_factory=list)
    base_model: str | None = None
    modules_to_save: list[str] = field(default_factory=list)
    use_dora: bool = False
    rank_pattern: bool = False

    @property
    def label(self) -> str:
        """``LoRA`` for PEFT's lora, else the PEFT type upper-cased (``IA3``, ``LOHA``)."""
        return "LoRA" if self.type == "lora" else (self.type or "unknown").upper()

    def field_value(self, name: str) -> Any:
        """A field by its JSON name (the matrix's ``adapter_*`` match keys), None for a name it does not have."""
        return getattr(self, name, None) if name in _ADAPTER_FIELDS else None


@dataclass
class AttentionLayout:
    """How a model caches per token (JSON ``shape.attention``): which layers see the whole context, which a
    sliding window, which keep a constant-size state, and the cached elements per token per layer.

    Read from config.json (``layer_types``, ``sliding_window`` and its pattern, ``kv_lora_rank``) or the GGUF keys
    at inspection time, so a saved inspection answers memory questions exactly as the file does.
    """

    full_layers: int = 0
    window_layers: int = 0
    window: int | None = None
    kv_heads: int | None = None
    k_dim: int | None = None
    v_dim: int | None = None
    #: MLA: the compressed latent cached per token per layer (kv_lora_rank + the rotary part), no K/V split
    mla_dim: int | None = None
    kv_lora_rank: int | None = None
    rope_dim: int | None = None
    #: GGUF per-layer ``head_count_kv`` arrays (0 for layers without attention)
    per_layer_kv_heads: list[int] | None = None
    #: layers with a constant-size state instead of a growing cache (linear attention, state-space, recurrent)
    state_layers: int = 0
    notes: list[str] = field(default_factory=list)
    #: learned attention sinks (GPT-OSS ``self_attn.sinks``, GGUF ``attn_sinks``): a kernel must support them,
    #: which decides the attention backend an engine picks (qcheck.matrix.attention)
    sinks: bool = False

    def elements_per_token_layer(self) -> float | None:
        """Cached elements per token per full layer (K+V over all KV heads, or the MLA latent)."""
        if self.mla_dim:
            return float(self.mla_dim)
        if self.per_layer_kv_heads and self.k_dim and self.v_dim:
            return sum(self.per_layer_kv_heads) / len(self.per_layer_kv_heads) * (self.k_dim + self.v_dim)
        if self.kv_heads and self.k_dim and self.v_dim:
            return float(self.kv_heads * (self.k_dim + self.v_dim))
        return None

    def kv_elements(self) -> tuple[float, float] | None:
        """(K, V) elements per token per full layer, apart (an MLA latent is all K: one cache, one type)."""
        if self.mla_dim:
            return float(self.mla_dim), 0.0
        heads: float | None = None
        if self.per_layer_kv_heads and self.k_dim and self.v_dim:
            heads = sum(self.per_layer_kv_heads) / len(self.per_layer_kv_heads)
        elif self.kv_heads and self.k_dim and self.v_dim:
            heads = float(self.kv_heads)
        if heads is None or not self.k_dim or not self.v_dim:
            return None
        return heads * self.k_dim, heads * self.v_dim


@dataclass
class ModelShape:
    """Dimensions and where the bytes are (JSON ``shape``): what memory, offload and speed need, read from the
    headers at inspection time (bytes as stored: packed when quantised).

    Weights are not one number for planning: llama.cpp keeps the token embeddings in host memory, offloads whole
    layers (``-ngl``) with the output layer counted as one more, and can leave MoE expert tensors on the CPU
    (``--n-cpu-moe``); bytes read per generated token depend on which experts are active. So the tensor table is
    summarised per layer, with the expert part apart.
    """

    hidden: int = 0
    vocab: int = 0
    n_head: int = 0
    n_ff: int = 0
    n_layers: int = 0
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0  # one expert's feed-forward width
    total_bytes: int = 0
    embed_bytes: int = 0
    output_bytes: int = 0
    tied_output: bool = False
    layer_bytes: list[int] = field(default_factory=list)  # per layer, experts included
    expert_bytes: list[int] = field(default_factory=list)  # per layer, the routed-expert tensors only
    other_bytes: int = 0  # norms and anything outside layers, embeddings, output and vision tower
    #: a vision (or audio) encoder and its projector: loaded beside the language model, not per token
    vision_bytes: int = 0
    #: True when the byte figures come from the tensor table (else the file size spread over the layers)
    from_tensors: bool = False
    attention: AttentionLayout = field(default_factory=AttentionLayout)
    #: the RoPE scaling config.json declares (its ``rope_type``, e.g. ``yarn``; ``scaled`` when it names none);
    #: None: none declared. Engines scale their context limit by its factor for some types (qcheck.memory.startup)
    rope_scaling: str | None = None

    @property
    def moe(self) -> bool:
        return self.n_expert > 1 and any(self.expert_bytes)

    def active_bytes_per_token(self) -> int:
        """Weight bytes one generated token reads: everything but the inactive experts and the vision tower
        (token embeddings are a row lookup, not read whole)."""
        body = sum(self.layer_bytes) + self.output_bytes + self.other_bytes
        if self.moe and self.n_expert_used:
            inactive = sum(self.expert_bytes) * (1 - min(self.n_expert_used, self.n_expert) / self.n_expert)
            body -= int(inactive)
        if self.tied_output:
            body += self.embed_bytes
        return max(body, 0)


@dataclass
class Inspection:
    """What a checkpoint is: the public ``qcheck.inspection/1`` record."""

    path: str
    container: Container
    architecture: str | None = None
    parameters: int | None = None
    size_bytes: int | None = None
    quantization: Quantization = field(default_factory=Quantization)
    warnings: list[str] = field(default_factory=list)
    # --- beyond the minimum contract ---
    model_type: str | None = None  # config.json model_type or GGUF general.architecture
    name: str | None = None
    context_length: int | None = None
    dtype: str | None = None  # dtype of unquantised parts (bfloat16, float16, float32)
    num_layers: int | None = None
    hidden_size: int | None = None
    num_attention_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    #: the dense MLP width (config ``intermediate_size``): per-rank slices under tensor parallelism
    intermediate_size: int | None = None
    vocab_size: int | None = None
    moe: bool = False
    num_experts: int | None = None
    num_experts_used: int | None = None
    tensor_count: int = 0
    files: list[SourceFile] = field(default_factory=list)
    #: number of files a split GGUF set has (1 for a single file); vLLM's GGUF path needs them merged
    gguf_split_count: int | None = None
    revision: str | None = None
    #: findings about the file itself (config/tensor mismatches, unsafe pickles, LFS pointers)
    findings: list[InspectionFinding] = field(default_factory=list)
    pickle_globals: list[str] = field(default_factory=list)
    #: per tensor type: {"type", "tensors", "elements", "bytes"} (bytes null when the type's size is unknown)
    type_stats: list[dict[str, Any]] = field(default_factory=list)
    #: a PEFT adapter (adapter_config.json); None for a full model (see qcheck.classify.adapter)
    adapter: Adapter | None = None
    #: dimensions, per-layer bytes and attention layout: everything memory needs (None for a pickle, and in
    #: inspections saved before qcheck recorded it)
    shape: ModelShape | None = None

    @property
    def origin(self) -> Origin:
        """Read from the Hub or from a local path. The JSON records it as ``revision``: the commit a Hub
        checkpoint was read at, always set for the Hub and never for a local path."""
        return "hub" if self.revision is not None else "local"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data = {"schema": INSPECTION_SCHEMA, **data}
        return data


_ADAPTER_FIELDS = frozenset(f for f in Adapter.__dataclass_fields__)


@dataclass
class Source:
    """Where a matrix rule was read: a repo path or doc URL, and the engine version read."""

    ref: str
    version: str | None = None
    note: str | None = None


@dataclass
class Risk:
    """Something the engine does at run time that costs accuracy or speed while the verdict's status holds
    (JSON ``verdicts[].risks[]``): default KV-cache scales of 1.0 (``kind`` "kv-scales"), a reported issue of the
    engine's tracker (``kind`` "known-issue"). A policy can make a kind fail the run (``require_kv_scales``)."""

    id: str
    kind: str
    message: str


@dataclass
class Judgement:
    """One dimension's partial verdict on a deployment (JSON ``verdicts[].dimensions[]``): the architecture, the
    weight format on the GPU, the KV cache, the parallel layout ... (see qcheck.matrix.dimensions)."""

    dimension: str  # "weights", "architecture", "kv-cache", "parallelism" ...
    status: Status
    reasons: list[str] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)
    #: said whatever the status (e.g. where an installed engine disagrees with the shipped data)
    warnings: list[str] = field(default_factory=list)
    #: run-time risks this dimension found (also said in ``warnings``)
    risks: list[Risk] = field(default_factory=list)
    #: the id of the matrix rule that decided this dimension, where one rule does (a ``kv_rule``, an
    #: ``attention_rule``); None for a refusal from the engine's own value list or a judgement of several entries
    rule_id: str | None = None


@dataclass
class Verdict:
    engine: str
    engine_version: str | None
    gpu: str | None
    arch: str | None
    compute_capability: str | None
    status: Status
    kernel: str | None = None
    requires: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: the memory-fit estimate (with its speed ceiling), filled by qcheck.memory.apply_memory when asked for
    memory: MemoryEstimate | None = None
    #: the id of the matrix rule that decided, for debugging and SARIF rule ids
    rule_id: str | None = None
    #: the compute backend the engine uses for this GPU (llama.cpp/Ollama/LM Studio: cuda, rocm, metal, vulkan ...)
    backend: str | None = None
    #: each dimension's partial verdict (weights, architecture, KV cache, parallelism ...), the weight format
    #: first; the status above is the worst of them (see qcheck.matrix.dimensions)
    dimensions: list[Judgement] = field(default_factory=list)
    #: run-time risks of every dimension (default KV scales, known issues): what a strict policy may refuse
    risks: list[Risk] = field(default_factory=list)
    #: the dtype the engine holds the weights in after converting them at load (a dequantising fallback), as the
    #: deciding rule states it; None: kept as stored. Memory reads this, never the reason text.
    weights_loaded_as: str | None = None
    #: what the engine does at start-up with the settings asked (qcheck.memory.startup), when memory was asked;
    #: unless ``judged`` is off (--kernels-only) it is the ``start-up`` dimension too
    startup: Startup | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.memory is not None:  # its own JSON: GiB figures and summary lines besides the fields
            data["memory"] = self.memory.to_json()
        if self.startup is not None:
            data["startup"] = self.startup.to_json()
        return data
