"""The typed records the matrix data (matrices/SCHEMA.md) is validated into, and its vocabulary.

The vocabulary (statuses, vendors, methods, formats, keys) and ``MatrixDataError`` live in
``qcheck.matrix.vocab`` and are re-exported here, so every validator imports them from one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qcheck.matrix.vocab import (
    ARCH_KEYS,
    ATTENTION_KEYS,
    ATTENTION_KINDS,
    ATTENTION_RULE_KEYS,
    BACKEND_KEYS,
    BUILD_KEYS,
    ENGINE_FILE_KEYS,
    ENGINE_KEYS,
    FORMATS,
    GPU_KEYS,
    KINDS,
    KNOWN_ISSUE_EFFECTS,
    KNOWN_ISSUE_KEYS,
    KNOWN_ISSUE_STATES,
    KNOWN_ISSUE_VERIFIED,
    KV_CACHE_KEYS,
    KV_PAIR_KEYS,
    KV_PLACEHOLDERS,
    KV_RULE_KEYS,
    KV_SCALE_MISSING,
    KV_SCALE_PLACEHOLDERS,
    KV_SCALE_RULE_KEYS,
    LOADED_DTYPES,
    METHODS,
    MODIFIER_KEYS,
    PARALLEL_KEYS,
    PLACEHOLDERS,
    RULE_KEYS,
    SOURCE_KEYS,
    STATUSES,
    SUGGESTION_KEYS,
    SUGGESTION_PLACEHOLDERS,
    SUGGESTIONS_FILE_KEYS,
    VENDORS,
    MatrixDataError,
    SourceSpec,
    Where,
    check_keys,
    require_str,
    type_name,
)

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from qcheck.matrix.conditions import HardwareCondition, MatchCondition
    from qcheck.matrix.gpu_capacity import GpuCapacity
    from qcheck.matrix.memory_params import EngineMemory

__all__ = ["ARCH_KEYS", "ATTENTION_KEYS", "ATTENTION_KINDS", "ATTENTION_RULE_KEYS", "BACKEND_KEYS",
           "BUILD_KEYS", "ENGINE_FILE_KEYS", "ENGINE_KEYS", "FORMATS", "GPU_KEYS", "KINDS",
           "KNOWN_ISSUE_EFFECTS", "KNOWN_ISSUE_KEYS", "KNOWN_ISSUE_STATES", "KNOWN_ISSUE_VERIFIED",
           "KV_CACHE_KEYS", "KV_PAIR_KEYS", "KV_PLACEHOLDERS", "KV_RULE_KEYS", "KV_SCALE_MISSING",
           "KV_SCALE_PLACEHOLDERS", "KV_SCALE_RULE_KEYS", "LOADED_DTYPES", "METHODS", "MODIFIER_KEYS",
           "PARALLEL_KEYS", "PLACEHOLDERS", "RULE_KEYS", "SOURCE_KEYS", "STATUSES", "SUGGESTIONS_FILE_KEYS",
           "SUGGESTION_KEYS", "SUGGESTION_PLACEHOLDERS", "VENDORS", "MatrixDataError", "SourceSpec", "Where",
           "check_keys",
           "require_str", "type_name"]


@dataclass(frozen=True)
class Arch:
    """One GPU architecture of gpus.toml: vendor, compute capabilities, native number formats."""

    id: str
    vendor: str
    name: str
    aliases: tuple[str, ...]
    #: compute capabilities of the family, the default first ("9.0"); empty for non-NVIDIA
    ccs: tuple[str, ...]
    native_formats: frozenset[str]
    source: str
    #: position among the vendor's architectures, oldest first (drives "oldest arch that runs it")
    order: int
    #: a new architecture no engine data was read for: only rules naming it (arch/gpu) decide; vendor- or
    #: capability-wide rules may still say unsupported/unknown, never native or fallback
    explicit_rules: bool = False

    @property
    def cc(self) -> str | None:
        return self.ccs[0] if self.ccs else None


@dataclass(frozen=True)
class Gpu:
    """One GPU product of gpus.toml: the names it answers to, its architecture and memory."""

    id: str
    names: tuple[str, ...]
    arch: str
    cc: str | None
    memory_gib: float | None
    source: str
    #: what the driver reports, None when no figure was found (qcheck.matrix.gpu_capacity)
    capacity: GpuCapacity | None = None


@dataclass(frozen=True)
class Target:
    """One ``--gpu`` value resolved: the product (if one was named), its architecture and capability."""

    label: str
    arch: Arch
    cc: str | None
    gpu: str | None = None

    @property
    def vendor(self) -> str:
        return self.arch.vendor

    @property
    def sm(self) -> str | None:
        return "sm" + self.cc.replace(".", "") if self.cc else None


@dataclass(frozen=True)
class Backend:
    """One backend of an engine (cuda, rocm, vulkan ...): the vendors it runs on."""

    name: str
    vendors: tuple[str, ...]
    #: the vendors whose GPUs this backend judges when none is named (``default``: true = all its vendors); at
    #: most one backend of an engine is the default for a vendor (the loader's ``ambiguous-backend`` check)
    default_for: tuple[str, ...] = ()
    note: str | None = None


@dataclass
class Rule:
    """One ``[[rule]]`` or ``[[modifier]]`` of an engine file, validated and compiled."""

    id: str
    file: str
    index: int
    versions: SpecifierSet | None
    versions_text: str | None
    methods: frozenset[str] | None
    match: tuple[MatchCondition, ...]
    hardware: tuple[HardwareCondition, ...]
    backends: frozenset[str] | None
    status: str
    kernel: str | None
    requires: tuple[str, ...]
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]
    sources: tuple[SourceSpec, ...]
    priority: int = 0
    #: a [[modifier]]: adds requires/reasons/warnings to a decided verdict whose status is in ``when``
    modifier: bool = False
    when: frozenset[str] = frozenset()
    #: conditions held outside this record (a [[kv_rule]]'s K/V pair and knob conditions), counted as specificity
    extra_conditions: int = 0
    #: the dtype the engine holds the weights in after converting them at load (None: kept as stored)
    weights_loaded_as: str | None = None

    @property
    def specificity(self) -> int:
        return ((self.versions is not None) + (self.methods is not None) + len(self.match)
                + len(self.hardware) + (self.backends is not None) + self.extra_conditions)

    @property
    def label(self) -> str:
        kind = "modifier" if self.modifier else "rule"
        return f"{kind} '{self.id}' (#{self.index + 1})"


@dataclass(frozen=True)
class Build:
    """A ``[[build]]`` entry: the compute capabilities an engine's released package has kernels for."""

    versions: SpecifierSet | None
    versions_text: str | None
    #: capabilities with cubins ("7.5") and with PTX ("8.0"), as read from the package's fatbinary
    sass: tuple[str, ...]
    ptx: tuple[str, ...]
    #: what the user reads after "has no CUDA kernels for smXY (...)": how to get a build that has them
    reason: str
    sources: tuple[SourceSpec, ...]


@dataclass(frozen=True)
class KvCache:
    """``[kv_cache]``: the KV-cache dtypes an engine's flag accepts at all (qcheck.matrix.kvcache)."""

    flag: str
    accepts: tuple[str, ...]
    sources: tuple[SourceSpec, ...]
    #: whether the engine stores the KV cache in the dtype a checkpoint declares (kv_cache_scheme,
    #: kv_cache_quant_algo); false: only --kv-cache-dtype is judged
    reads_checkpoint: bool = True
    #: K and V are set apart (llama.cpp --cache-type-k/-v, ExLlamaV3 k_bits/v_bits); false: one setting for both
    separate: bool = False
    #: the type of a side the request leaves unset (llama.cpp: f16), required when ``separate``
    default: str | None = None
    #: mixed (K, V) pairs the docs page shows besides every accepted type for both
    shown_pairs: tuple[tuple[str, str], ...] = ()
    #: a condition every runnable pair with a quantised V cache adds (llama.cpp: flash attention on)
    quantised_v_requires: str | None = None


@dataclass(frozen=True)
class KvPair:
    """The (K, V) conditions of a ``[[kv_rule]]``; each given one must hold (None: not a condition)."""

    #: both K and V are in it (for one-setting engines: the dtype asked is)
    dtypes: frozenset[str] | None = None
    k: frozenset[str] | None = None
    v: frozenset[str] | None = None
    #: exactly one of these (K, V) pairs
    pairs: frozenset[tuple[str, str]] | None = None
    #: K and V differ (True) or are the same (False)
    mixed: bool | None = None

    def holds(self, k: str, v: str) -> bool:
        return ((self.dtypes is None or (k in self.dtypes and v in self.dtypes))
                and (self.k is None or k in self.k) and (self.v is None or v in self.v)
                and (self.pairs is None or (k, v) in self.pairs)
                and (self.mixed is None or self.mixed == (k != v)))

    @property
    def conditions(self) -> int:
        """Specificity: ``dtypes`` and ``pairs`` constrain both sides (2), ``k``/``v``/``mixed`` one each."""
        return (2 * ((self.dtypes is not None) + (self.pairs is not None))
                + sum(c is not None for c in (self.k, self.v, self.mixed)))

    @property
    def mentioned(self) -> frozenset[str]:
        """Every type the conditions name (what the docs grid and the data sweeps iterate over)."""
        out = set(self.dtypes or ()) | set(self.k or ()) | set(self.v or ())
        for k, v in self.pairs or ():
            out |= {k, v}
        return frozenset(out)


@dataclass(frozen=True)
class KvRule:
    """A ``[[kv_rule]]``: a rule (versions, hardware, backend, outcome) about a (K, V) pair and engine knobs."""

    rule: Rule
    pair: KvPair
    #: (EngineKnobs field, value) that must all hold; None as a value: the knob is left unset
    knobs: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class KvScaleRule:
    """A ``[[kv_scale_rule]]``: with a cache in one of ``dtypes`` and ``missing`` scales absent from the checkpoint
    (on any attention layer), the engine runs with a default scale; ``rule.reasons`` holds the message (the engine's
    own log line), ``rule`` the versions, hardware, backend and sources."""

    rule: Rule
    dtypes: frozenset[str]
    missing: str


@dataclass(frozen=True)
class AttentionSpec:
    """``[attention]``: how the user picks an attention backend (shown in reasons) and where the order was read."""

    flag: str
    sources: tuple[SourceSpec, ...]


@dataclass(frozen=True)
class AttentionRule:
    """An ``[[attention_rule]]``: the backend the engine picks (``rule.kernel``) for a model attention ``kind``
    ("standard": MHA/GQA/MQA, "mla"), with or without learned sinks / sliding-window layers, and a KV-cache dtype
    (``auto``: unquantised), per version, GPU and backend; ``None`` conditions hold for any value."""

    rule: Rule
    kind: str
    sinks: bool | None = None
    sliding: bool | None = None
    kv_dtypes: frozenset[str] | None = None


@dataclass(frozen=True)
class KnownIssue:
    """A ``known_issues.toml`` entry: a report from the engine's tracker, verified against the released code or a
    maintainer's statement, that changes what a user gets (``effect``: a warning, or the status it forces) for the
    versions, checkpoints, GPUs, KV-cache pairs and knobs its conditions name (held in ``rule``)."""

    rule: Rule
    effect: str
    title: str
    message: str
    links: tuple[str, ...]
    verified: str
    evidence: str
    verified_at: str
    tracker_state: str
    workaround: str | None = None
    pair: KvPair | None = None
    knobs: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class ParallelSpec:
    """``[parallel]``: the layouts an engine has (tp, pp, ep) and the load-time checks it enforces."""

    layouts: tuple[str, ...]
    checks: tuple[str, ...]
    sources: tuple[SourceSpec, ...]
    #: how the engine spells each layout ("tp" -> "--split-mode tensor"), shown in the verdict
    flags: dict[str, str] = field(default_factory=dict)


@dataclass
class SuggestionRule:
    """One ``[[suggestion]]``: a way out offered when a verdict is not native."""

    id: str
    file: str
    engine: str | None  # None: from suggestions.toml, applies to every engine
    methods: frozenset[str] | None
    versions: SpecifierSet | None
    when: frozenset[str]
    match: tuple[MatchCondition, ...]
    hardware: tuple[HardwareCondition, ...]
    backends: frozenset[str] | None
    text: str
    command: str | None
    sources: tuple[SourceSpec, ...]


@dataclass
class Engine:
    """One engine file, validated: versions, hardware, backends, rules, suggestions, KV cache, memory."""

    id: str
    name: str
    file: str
    aliases: tuple[str, ...]
    kind: str
    scheme: str
    #: versions as written, oldest first, and parsed
    versions: tuple[str, ...]
    parsed_versions: tuple[Version, ...]
    hardware: tuple[str, ...]
    hardware_sources: tuple[SourceSpec, ...]
    backends: dict[str, Backend]
    sources: dict[str, SourceSpec]
    rules: list[Rule] = field(default_factory=list)
    modifiers: list[Rule] = field(default_factory=list)
    suggestions: list[SuggestionRule] = field(default_factory=list)
    note: str | None = None
    #: the oldest version any fact was read at (oldest listed version or an older source version):
    #: a requested version below it is outside the data and resolves ``unknown``
    floor: Version | None = None
    #: ``[[build]]`` entries: the CUDA architectures of the released package per version range
    builds: list[Build] = field(default_factory=list)
    #: ``[kv_cache]`` and ``[[kv_rule]]`` (each rule with the (K, V) pair conditions it is about)
    kv_cache: KvCache | None = None
    kv_rules: list[KvRule] = field(default_factory=list)
    #: ``[[kv_scale_rule]]``: what the engine does where the checkpoint's KV (or Q/prob) scales are missing
    kv_scale_rules: list[KvScaleRule] = field(default_factory=list)
    #: ``[attention]`` and ``[[attention_rule]]`` (qcheck.matrix.attention)
    attention: AttentionSpec | None = None
    attention_rules: list[AttentionRule] = field(default_factory=list)
    #: the entries of ``known_issues.toml`` about this engine (qcheck.matrix.known_issues)
    known_issues: list[KnownIssue] = field(default_factory=list)
    #: ``[parallel]``: tensor/pipeline/expert parallel layouts and their checks (qcheck.matrix.parallel)
    parallel: ParallelSpec | None = None
    #: the [memory] table, None when the data has none
    memory: EngineMemory | None = None
    _by_method: dict[tuple[str, bool], list[Rule]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def newest(self) -> str:
        return self.versions[-1]

    @property
    def oldest(self) -> str:
        return self.versions[0]

    @property
    def needs_gpu(self) -> bool:
        return self.kind != "provider"

    def rules_for(self, method: str, modifiers: bool = False) -> list[Rule]:
        """The rules (or modifiers) that can match a method, in file order (indexed once per method)."""
        key = (method, modifiers)
        cached = self._by_method.get(key)
        if cached is None:
            pool = self.modifiers if modifiers else self.rules
            cached = self._by_method[key] = [r for r in pool if r.methods is None or method in r.methods]
        return cached

    def default_backend(self, vendor: str) -> Backend | None:
        for backend in self.backends.values():
            if vendor in backend.default_for:
                return backend
        return None
