"""Shared records of the classifier: one quantised linear layer as the header shows it.

Every family scanner turns groups of tensors (``weight`` + ``weight_scale``, ``qweight`` + ``qzeros``
+ ``scales`` ...) into ``QLinear`` records with numbers recomputed from packed shapes; the family's
config reader then fills what only a config can say. Parameter counts and bits/weight come from
these records, so they are computed the same way for every method.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qcheck.model import InspectionFinding, TensorInfo

if TYPE_CHECKING:
    from qcheck.classify.table import TensorTable


@dataclass
class QLinear:
    """One quantised weight (a linear layer, or a fused stack of expert weights)."""

    name: str  # module prefix, e.g. "model.layers.0.self_attn.q_proj"
    method: str  # canonical method of this weight
    layout: str  # producer layout, e.g. "gptq", "awq-gemm", "nvfp4-modelopt", "fp8-block"
    tensors: list[str]  # every tensor holding this weight: packed values, scales, zeros, indices
    logical: int | None  # logical (unpacked) weight elements; None when shapes cannot tell
    bits: float | None = None  # nominal bits per element recomputed from shapes
    group_size: int | None = None  # elements per scale along the input dim; -1 per-channel
    block_size: list[int] | None = None  # 2-D block scales, e.g. [128, 128]
    granularity: str | None = None  # "per-tensor", "per-channel", "group", "block"
    weight_dtype: str | None = None
    scale_dtype: str | None = None
    zero_point: bool | None = None
    input_scale: bool = False  # a stored activation scale (static activation quantisation)
    producer: str | None = None  # what the layout alone proves about the producer
    #: one scale row spans the whole input: per-channel, or a group as large as this layer's input
    whole_row: bool = False


@dataclass
class Hints:
    """Config values a scanner needs where shapes are ambiguous (bits for MLX, group for packed ints)."""

    bits: int | None = None
    group_size: int | None = None
    #: per-module overrides (MLX ``quantization`` entries, GPTQModel ``dynamic``): prefix -> (bits, group)
    overrides: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)
    #: the safetensors ``__metadata__`` (torchao names its tensor subclasses there)
    metadata: dict[str, Any] = field(default_factory=dict)
    #: the tensors as columns with indexes (``scan_all`` sets it): scanners visit only the names it selects
    table: TensorTable | None = None

    def for_module(self, prefix: str) -> tuple[int | None, int | None]:
        """(bits, group) for one module; values no real config has (0-bit, group 0) come back as None."""
        bits, group = self.bits, self.group_size
        if prefix in self.overrides:
            obits, ogroup = self.overrides[prefix]
            bits = obits if obits is not None else bits
            group = ogroup if ogroup is not None else group
        if bits is not None and not 1 <= bits <= 32:
            bits = None
        if group is not None and not (group > 0 or group == -1):
            group = None
        return bits, group


def row_group(in_dim: int | None, scale_rows: int, hint: int | None) -> tuple[int | None, bool]:
    """Group size from ``in_dim / scale_rows``; one scale row is ambiguous (per-channel, or a group as
    wide as the input): the config's group decides, else the caller decides across layers."""
    if scale_rows == 1:
        if hint is not None and hint > 0 and in_dim is not None and hint >= in_dim:
            return hint, False
        if hint == -1:
            return -1, False
        return None, True
    return (exact_div(in_dim, scale_rows) if in_dim else None), False


def prod(values: tuple[int, ...] | list[int]) -> int:
    """Element count of a shape (1 for a scalar)."""
    n = 1
    for v in values:
        n *= v
    return n


def bits_per_weight(nbytes: int, elements: int) -> float | None:
    """Stored bits per logical weight element (scales and zero points included), to 4 decimals (unrounded where that
    would give 0); None without bytes or elements. The one formula for every container (GGUF and safetensors)."""
    if not elements or not nbytes:
        return None
    bpw = nbytes * 8 / elements
    return round(bpw, 4) or bpw


def exact_div(a: int, b: int) -> int | None:
    """a / b when it divides exactly and b > 0, else None (shapes that do not fit a layout)."""
    if b <= 0 or a % b:
        return None
    return a // b


@functools.lru_cache(maxsize=4096)
def block_from(dim: int, count: int) -> int | None:
    """The block edge that splits ``dim`` into ``count`` ceil-blocks (128 preferred, as producers use)."""
    if count <= 0 or dim <= 0:
        return None
    for b in (128, 64, 256, 32, 16, 512, 1024):
        if -(-dim // b) == count:
            return b
    b = -(-dim // count)
    return b if -(-dim // b) == count else None


def sibling(tensors: Mapping[str, TensorInfo], prefix: str, *suffixes: str) -> TensorInfo | None:
    """The first of ``prefix.<suffix>`` that exists (a membership test first: a lookup that misses is an exception
    inside ``Mapping.get``, which costs far more, 10^5 times over)."""
    for s in suffixes:
        name = f"{prefix}.{s}" if prefix else s
        if name in tensors:
            return tensors[name]
    return None


@dataclass
class Draft:
    """The classification being built: the family config readers fill it, the orchestrator finishes it."""

    tensors: Mapping[str, TensorInfo]
    metadata: dict
    qlinears: list[QLinear]
    warnings: list[str] = field(default_factory=list)
    findings: list[InspectionFinding] = field(default_factory=list)
    #: what the config says, for cross-checking against the tensors
    expected_method: str | None = None
    expected_bits: float | None = None
    expected_group: int | None = None
    expected_block: list[int] | None = None
    config_where: str | None = None
    #: fields only a config can fill (copied onto the Quantization at the end)
    producer: str | None = None
    activation_dtype: str | None = None
    activation_scheme: str | None = None
    kv_cache_dtype: str | None = None
    #: the config key declaring a quantised KV cache, and whether its scales are static (shipped as tensors)
    kv_cache_declared: str | None = None
    kv_cache_static: bool | None = None
    excluded: list[str] = field(default_factory=list)
    format: str | None = None
    config_method: str | None = None
    zero_point: bool | None = None
    act_order: bool | None = None
    scale_granularity: str | None = None
    weight_dtype: str | None = None
    #: method names of other schemes the config itself declares (mixed precision)
    declared_methods: list[str] = field(default_factory=list)

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def mismatch(self, where: str, message: str) -> None:
        """A config that disagrees with the tensors (or with another config): a finding plus a warning."""
        self.findings.append(InspectionFinding("config-mismatch", where, message))
        self.warn(f"{where}: {message}")

    def of_method(self, method: str) -> list[QLinear]:
        return [q for q in self.qlinears if q.method == method]
