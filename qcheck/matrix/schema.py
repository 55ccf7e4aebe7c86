"""The vocabulary of the matrix data (matrices/SCHEMA.md) and the typed records it is validated into.

Everything a data file may say is listed here once: statuses, vendors, methods, formats, keys. The
loader checks raw TOML against it and raises ``MatrixDataError`` naming file, rule, check and problem,
so whoever edits the data sees exactly what to fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from qcheck import validate
from qcheck.errors import QcheckError
from qcheck.formats import REGISTRY

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from qcheck.matrix.conditions import HardwareCondition, MatchCondition
    from qcheck.matrix.memory_params import EngineMemory

STATUSES = ("native", "fallback", "unsupported", "unknown")
VENDORS = ("nvidia", "amd", "intel", "apple", "cpu", "tpu", "qualcomm")
KINDS = ("engine", "provider", "single-purpose")
#: canonical methods a rule may name: the format registry's (``qcheck.formats``), in its order
METHODS = REGISTRY.methods()
FORMATS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "fp6", "fp4", "int8", "int4")
PLACEHOLDERS = ("types", "engine", "version", "arch", "gpu", "cc", "method", "file_type", "backend", "path",
                "adapter_rank", "base_model")
SUGGESTION_PLACEHOLDERS = PLACEHOLDERS

ARCH_KEYS = {"id", "vendor", "name", "aliases", "compute_capability", "native_formats", "explicit_rules", "source",
             "note"}
GPU_KEYS = {"id", "names", "arch", "compute_capability", "memory_gib", "source", "note"}
ENGINE_FILE_KEYS = {"engine", "sources", "rule", "modifier", "suggestion", "build", "kv_cache", "kv_rule", "parallel",
                    "memory"}
KV_CACHE_KEYS = {"flag", "accepts", "reads_checkpoint", "sources", "note"}
PARALLEL_KEYS = {"layouts", "checks", "flags", "sources", "note"}
BUILD_KEYS = {"versions", "cuda_sass", "cuda_ptx", "reason", "sources", "note"}
ENGINE_KEYS = {"id", "name", "aliases", "kind", "version_scheme", "versions", "hardware", "hardware_sources",
               "backends", "note"}
BACKEND_KEYS = {"vendors", "default", "note"}
SOURCE_KEYS = {"ref", "version", "note"}
RULE_KEYS = {"id", "versions", "methods", "match", "hardware", "backend", "status", "kernel", "requires",
             "reasons", "warnings", "sources", "priority", "note", "weights_loaded_as"}
#: the dtypes a rule may say an engine holds weights in after converting them at load (``weights_loaded_as``)
LOADED_DTYPES = ("bfloat16", "float16", "float32")
MODIFIER_KEYS = {"id", "versions", "methods", "match", "hardware", "backend", "when", "requires", "reasons", "warnings",
                 "sources", "note"}
SUGGESTION_KEYS = {"id", "versions", "methods", "when", "hardware", "match", "backend", "text", "command", "sources", "note"}
KV_RULE_KEYS = (RULE_KEYS - {"methods", "match", "weights_loaded_as"}) | {"dtypes"}
SUGGESTIONS_FILE_KEYS = {"sources", "suggestion"}


class MatrixDataError(QcheckError):
    """A matrix data file breaks the schema: names the file, the rule, the check and the problem."""

    def __init__(self, file: str, check: str, problem: str, *, rule: str | None = None):
        self.file = file
        self.check = check
        self.problem = problem
        self.rule = rule
        where = f"{file}: {rule}: " if rule else f"{file}: "
        super().__init__(f"matrix data error: {where}[{check}] {problem}")


class Where:
    """Where a problem is (file, and the rule/entry inside it), so every check raises the same way."""

    def __init__(self, file: str, where: str | None = None) -> None:
        self.file = file
        self.where = where

    def fail(self, check: str, problem: str) -> NoReturn:
        raise MatrixDataError(self.file, check, problem, rule=self.where)

    def at(self, check: str) -> validate.At:
        """A ``qcheck.validate`` place inside this entry whose failures are MatrixDataErrors of ``check``."""
        return validate.At(lambda path, problem, allowed: MatrixDataError(
            self.file, check, (f"{path}: " if path else "") + problem + (f" (allowed: {allowed})" if allowed else ""),
            rule=self.where))


def check_keys(entry: dict[str, Any], allowed: set[str], required: set[str], ctx: Where) -> None:
    """Every key of a table is known and every required key is there (typos fail loudly, not silently)."""
    validate.check_keys(entry, sorted(allowed), ctx.at("unknown-key"))
    for key in sorted(required):
        if key not in entry:
            ctx.at("missing-key").key(key).fail("missing required key")


def require_str(entry: dict[str, Any], key: str, ctx: Where) -> str:
    """``entry[key]`` as a non-blank string."""
    return validate.string(entry.get(key), ctx.at("bad-type").key(key), strip=False)


@dataclass(frozen=True)
class Arch:
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
    id: str
    names: tuple[str, ...]
    arch: str
    cc: str | None
    memory_gib: float | None
    source: str


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
class SourceSpec:
    name: str
    ref: str
    version: str
    note: str | None = None


@dataclass(frozen=True)
class Backend:
    name: str
    vendors: tuple[str, ...]
    #: the vendors whose GPUs this backend judges when none is named (``default``: true = all its vendors); at
    #: most one backend of an engine is the default for a vendor (the loader's ``ambiguous-backend`` check)
    default_for: tuple[str, ...] = ()
    note: str | None = None


@dataclass
class Rule:
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
    #: the dtype the engine holds the weights in after converting them at load (None: kept as stored)
    weights_loaded_as: str | None = None

    @property
    def specificity(self) -> int:
        return ((self.versions is not None) + (self.methods is not None) + len(self.match)
                + len(self.hardware) + (self.backends is not None))

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
    #: ``[kv_cache]`` and ``[[kv_rule]]`` (each rule with the KV dtypes it is about)
    kv_cache: KvCache | None = None
    kv_rules: list[tuple[frozenset[str], Rule]] = field(default_factory=list)
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


#: a value's type in messages ("an integer", "a table"): the words every validator uses
type_name = validate.type_name
