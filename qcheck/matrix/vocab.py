"""The vocabulary of the matrix data (matrices/SCHEMA.md) and the error every validator raises.

Everything a data file may say is listed here once: statuses, vendors, methods, formats, keys. The
loader checks raw TOML against it and raises ``MatrixDataError`` naming file, rule, check and problem,
so whoever edits the data sees exactly what to fix. The typed records the data is validated into are in
``qcheck.matrix.schema`` (which re-exports all of this): a reader that validates one architecture file
(``qcheck inspect``) needs the words, not the records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

from qcheck import validate
from qcheck.errors import QcheckError
from qcheck.formats import REGISTRY

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
GPU_KEYS = {"id", "names", "arch", "compute_capability", "memory_gib", "capacity", "source", "note"}
ENGINE_FILE_KEYS = {"engine", "sources", "rule", "modifier", "suggestion", "build", "kv_cache", "kv_rule", "parallel",
                    "memory", "kv_scale_rule", "attention", "attention_rule"}
KV_CACHE_KEYS = {"flag", "accepts", "reads_checkpoint", "separate", "default", "shown_pairs", "quantised_v_requires",
                 "sources", "note"}
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
#: a [[kv_rule]] judges the (K, V) pair: ``dtypes`` (both in it), ``k_dtypes``/``v_dtypes``, ``pairs`` ("K-V"),
#: ``mixed`` (K differs from V), plus ``knobs`` (engine settings of the request, qcheck.request.EngineKnobs)
KV_PAIR_KEYS = ("dtypes", "k_dtypes", "v_dtypes", "pairs", "mixed")
KV_RULE_KEYS = (RULE_KEYS - {"methods", "match", "weights_loaded_as"}) | set(KV_PAIR_KEYS) | {"knobs"}
#: placeholders a [[kv_rule]] may use besides PLACEHOLDERS: the K and V cache types judged
KV_PLACEHOLDERS = (*PLACEHOLDERS, "k", "v")
#: ``[attention]`` and ``[[attention_rule]]``: the attention backend an engine picks for the model's attention type
ATTENTION_KEYS = {"flag", "sources", "note"}
ATTENTION_KINDS = ("standard", "mla")
ATTENTION_RULE_KEYS = (RULE_KEYS - {"methods", "match", "weights_loaded_as"}) | {"attention", "sinks", "sliding",
                                                                                  "kv_dtypes"}
#: ``known_issues.toml`` ``[[issue]]``: a tracker report that changes what a user gets (qcheck.matrix.known_issues)
KNOWN_ISSUE_KEYS = ({"id", "engine", "versions", "methods", "match", "hardware", "backend", "knobs", "effect", "title",
                     "message", "workaround", "links", "verified", "evidence", "verified_at", "tracker_state",
                     "claims", "note"} | set(KV_PAIR_KEYS))
KNOWN_ISSUE_EFFECTS = ("warning", "fallback", "unsupported")
KNOWN_ISSUE_VERIFIED = ("code", "maintainer")
KNOWN_ISSUE_STATES = ("open", "closed", "fixed")
#: a [[kv_scale_rule]]: what the engine does with a quantised cache whose scale tensors the checkpoint lacks
KV_SCALE_RULE_KEYS = {"id", "versions", "dtypes", "missing", "hardware", "backend", "message", "sources", "note"}
#: which scales a [[kv_scale_rule]] is about: K/V (the cache) or Q/softmax-probability (FP8 attention)
KV_SCALE_MISSING = ("kv", "qp")
#: placeholders of a [[kv_scale_rule]] message: the KV placeholders, the layers covered and an example layer
KV_SCALE_PLACEHOLDERS = (*KV_PLACEHOLDERS, "covered", "layers", "example")
SUGGESTIONS_FILE_KEYS = {"sources", "suggestion"}


@dataclass(frozen=True)
class SourceSpec:
    """Where a fact was read: a reference and the version it was read at (a record every data file's parser makes,
    so it sits with the vocabulary, below them all)."""

    name: str
    ref: str
    version: str
    note: str | None = None


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


#: a value's type in messages ("an integer", "a table"): the words every validator uses
type_name = validate.type_name
