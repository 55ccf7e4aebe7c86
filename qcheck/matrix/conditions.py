"""Rule conditions: ``match`` (on the checkpoint's Inspection) and ``hardware`` (on the GPU).

Each condition is compiled once when the data is loaded (values checked, specifiers parsed) and then
tested many times; a test returns whether it holds, plus for GGUF type conditions the types that made
it hold, so a reason can name them (``{types}``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from qcheck.matrix.versions import parse_cc, parse_specifier
from qcheck.matrix.vocab import FORMATS, VENDORS, type_name

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet

    from qcheck.model import Inspection

Fail = Callable[[str, str], NoReturn]

NULL = "null"

#: match key -> (where the field lives, attribute, value kind)
MATCH_FIELDS: dict[str, tuple[str, str, str]] = {
    "container": ("inspection", "container", "str"),
    "dtype": ("inspection", "dtype", "str"),
    "model_type": ("inspection", "model_type", "str"),
    "architecture": ("inspection", "architecture", "str"),
    "moe": ("inspection", "moe", "bool"),
    "producer": ("quant", "producer", "str"),
    "config_method": ("quant", "config_method", "str"),
    "format": ("quant", "format", "str"),
    "weight_bits": ("quant", "weight_bits", "int"),
    "group_size": ("quant", "group_size", "int"),
    "weight_dtype": ("quant", "weight_dtype", "str"),
    "scale_dtype": ("quant", "scale_dtype", "str"),
    "activation_dtype": ("quant", "activation_dtype", "str"),
    "kv_cache_dtype": ("quant", "kv_cache_dtype", "str"),
    "activation_scheme": ("quant", "activation_scheme", "str"),
    "scale_granularity": ("quant", "scale_granularity", "str"),
    "zero_point": ("quant", "zero_point", "bool"),
    "act_order": ("quant", "act_order", "bool"),
    "gguf_file_type": ("quant", "gguf_file_type", "str"),
    "gguf_split": ("derived", "gguf_split", "bool"),
    "gguf_types_all_in": ("types", "all_in", "types"),
    "gguf_types_any_in": ("types", "any_in", "types"),
    "gguf_types_any_not_in": ("types", "any_not_in", "types"),
    # PEFT adapters (Inspection.adapter): a rule with none of these keys never matches an adapter
    "adapter": ("derived", "adapter", "bool"),
    "adapter_type": ("adapter", "type", "str"),
    "adapter_base_model": ("adapter", "base_model", "str"),
    "adapter_rank": ("adapter", "max_rank", "int"),
    "adapter_dora": ("adapter", "use_dora", "bool"),
    "adapter_rank_pattern": ("adapter", "rank_pattern", "bool"),
    "adapter_targets_all_in": ("targets", "all_in", "names"),
    "adapter_targets_any_not_in": ("targets", "any_not_in", "names"),
}
HARDWARE_KEYS = ("vendor", "arch", "gpu", "cc", "has", "lacks")

_COMPARISON = re.compile(r"^\s*(<=|>=|==|!=|<|>)\s*(-?\d+)\s*$")
_OPS: dict[str, Callable[[int, int], bool]] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
}


@dataclass(frozen=True)
class MatchCondition:
    """One key of a rule's ``match`` table, compiled."""

    key: str
    kind: str  # str | int | bool | types
    #: accepted values (lower-cased strings, ints, bools; None for "null"), or the type list
    values: tuple[Any, ...] = ()
    #: integer comparisons [(op, n)], all must hold
    comparisons: tuple[tuple[str, int], ...] = ()

    def test(self, inspection: Inspection) -> tuple[bool, list[str] | None]:
        """Whether the checkpoint satisfies this condition, and the GGUF types that made it hold."""
        where, attr, _ = MATCH_FIELDS[self.key]
        if where == "targets":
            return self._test_targets(inspection, attr)
        if where == "types":
            if inspection.container != "gguf":
                return False, None
            present = list(inspection.quantization.tensor_types or {})
            allowed = set(self.values)
            if attr == "all_in":
                return bool(present) and all(t.upper() in allowed for t in present), None
            if attr == "any_in":
                hits = [t for t in present if t.upper() in allowed]
            else:
                hits = [t for t in present if t.upper() not in allowed]
            return bool(hits), sorted(hits) if hits else None
        if where == "derived" and attr == "adapter":
            value: Any = inspection.adapter is not None
        elif where == "derived":
            value = (inspection.gguf_split_count or 1) > 1
        elif where == "adapter":
            if inspection.adapter is None:
                return False, None
            value = inspection.adapter.field_value(attr)
        elif where == "inspection":
            value = getattr(inspection, attr, None)
        else:
            value = getattr(inspection.quantization, attr, None)
        if self.comparisons:
            if not isinstance(value, int) or isinstance(value, bool):
                return False, None
            return all(_OPS[op](value, n) for op, n in self.comparisons), None
        if isinstance(value, str):
            value = value.lower()
        return value in self.values, None

    def _test_targets(self, inspection: Inspection, attr: str) -> tuple[bool, list[str] | None]:
        """An adapter's target modules against a list of module names (``{types}`` = the ones outside it)."""
        if inspection.adapter is None:
            return False, None
        raw = inspection.adapter.target_modules
        targets = [t.lower() for t in raw if isinstance(t, str)] if isinstance(raw, list) else []
        outside = sorted(t for t in targets if not any(t == a or t.endswith("." + a) for a in self.values))
        if attr == "all_in":
            return bool(targets) and not outside, None
        return bool(outside), outside or None


class _Arch(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def native_formats(self) -> frozenset[str]: ...


class _Target(Protocol):
    """What a hardware condition reads of a ``qcheck.matrix.schema.Target`` (named by its attributes: the schema's
    records hold compiled conditions, so this module does not import them back)."""

    @property
    def vendor(self) -> str: ...

    @property
    def arch(self) -> _Arch: ...

    @property
    def gpu(self) -> str | None: ...

    @property
    def cc(self) -> str | None: ...


@dataclass(frozen=True)
class HardwareCondition:
    """One key of a rule's ``hardware`` table, compiled."""

    key: str
    values: frozenset[str] = frozenset()
    spec: SpecifierSet | None = None

    def test(self, target: _Target) -> bool:
        if self.key == "vendor":
            return target.vendor in self.values
        if self.key == "arch":
            return target.arch.id in self.values
        if self.key == "gpu":
            return target.gpu in self.values
        if self.key == "cc":
            return target.cc is not None and self.spec is not None and self.spec.contains(
                parse_cc(target.cc), prereleases=True)
        if self.key == "has":
            return self.values <= target.arch.native_formats
        return not (self.values & target.arch.native_formats)  # lacks


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def compile_match(raw: Any, fail: Fail) -> tuple[MatchCondition, ...]:
    """Check and compile a rule's ``match`` table."""
    return tuple(_compile_one(key, MATCH_FIELDS[key][2], value, fail)
                 for key, value in _condition_table(raw, "match", MATCH_FIELDS, "unknown-match-key", fail))


def _condition_table(raw: Any, name: str, allowed: Iterable[str], check: str,
                     fail: Fail) -> Iterator[tuple[str, Any]]:
    """The (key, value) pairs of a ``match``/``hardware`` table, each key checked as it comes (a typo must
    not silently match everything)."""
    if not isinstance(raw, dict):
        fail("bad-type", f"'{name}' must be a table, not {type_name(raw)}")
    for key, value in raw.items():
        if key not in allowed:
            fail(check, f"unknown {name} key {key!r} (allowed: {', '.join(allowed)})")
        yield key, value


def _compile_one(key: str, kind: str, value: Any, fail: Fail) -> MatchCondition:
    if kind == "types":
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            fail("bad-match-value", f"match.{key} must be a non-empty list of GGUF type names")
        return MatchCondition(key, kind, tuple(sorted({v.upper() for v in value})))
    if kind == "names":
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            fail("bad-match-value", f"match.{key} must be a non-empty list of module names (q_proj, ...)")
        return MatchCondition(key, kind, tuple(sorted({v.lower() for v in value})))
    if kind == "int" and isinstance(value, str) and value != NULL:
        comparisons = []
        for part in value.split(","):
            m = _COMPARISON.match(part)
            if not m:
                fail("bad-match-value", f"match.{key} = {value!r}: expected an integer, a list of integers or "
                     "comparisons like '>=64' or '>=2,<=4'")
            comparisons.append((m.group(1), int(m.group(2))))
        return MatchCondition(key, kind, comparisons=tuple(comparisons))
    items = _as_list(value)
    if not items:
        fail("bad-match-value", f"match.{key} is an empty list")
    values: list[Any] = []
    for item in items:
        if item == NULL:
            values.append(None)
        elif kind == "str" and isinstance(item, str):
            values.append(item.lower())
        elif (kind == "int" and isinstance(item, int) and not isinstance(item, bool)) or (
                kind == "bool" and isinstance(item, bool)):
            values.append(item)
        else:
            want = {"str": "a string", "int": "an integer", "bool": "true or false"}[kind]
            fail("bad-match-value", f"match.{key} = {item!r}: expected {want} (or \"null\")")
    return MatchCondition(key, kind, tuple(values))


def compile_hardware(raw: Any, fail: Fail, arch_ids: AbstractSet[str],
                     gpu_ids: AbstractSet[str]) -> tuple[HardwareCondition, ...]:
    """Check and compile a rule's ``hardware`` table against the known vendors, archs and GPUs."""
    out = []
    for key, value in _condition_table(raw, "hardware", HARDWARE_KEYS, "unknown-hardware-key", fail):
        if key == "cc":
            if not isinstance(value, str):
                fail("bad-type", f"hardware.cc must be a specifier string like '>=8.9,<10.0', not {type_name(value)}")
            try:
                spec = parse_specifier(value)
            except ValueError as exc:
                fail("bad-version-spec", f"hardware.cc: {exc}")
            out.append(HardwareCondition("cc", spec=spec))
            continue
        items = _as_list(value)
        if not items or not all(isinstance(v, str) for v in items):
            fail("bad-type", f"hardware.{key} must be a string or a non-empty list of strings")
        known: Collection[str]
        check, known = {
            "vendor": ("unknown-vendor", VENDORS), "arch": ("unknown-arch", arch_ids),
            "gpu": ("unknown-gpu", gpu_ids), "has": ("unknown-format", FORMATS), "lacks": ("unknown-format", FORMATS),
        }[key]
        for item in items:
            if item not in known:
                fail(check, f"hardware.{key}: {item!r} is not known (known: {', '.join(sorted(known))})")
        out.append(HardwareCondition(key, values=frozenset(items)))
    return tuple(out)
