"""Saved inspections read back: ``qcheck inspect --json > x.json; qcheck check x.json --engine ...``.

The inverse of ``Inspection.to_json`` for records a user hands back to qcheck. The file is untrusted
input like any checkpoint: its size is bounded, and every known field is type-checked against the
record's annotation so a wrong type fails with its JSON path instead of deep inside the matrix.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from qcheck import validate
from qcheck.errors import InputError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.model import (
    CHECK_SCHEMA,
    INSPECTION_SCHEMA,
    Adapter,
    AttentionLayout,
    Inspection,
    InspectionFinding,
    KvScales,
    ModelShape,
    Quantization,
    SourceFile,
)
from qcheck.typed import as_int

_CONTAINERS = ("gguf", "safetensors", "pickle")


def load_saved_inspection(path: str, limits: Limits = DEFAULT_LIMITS) -> Inspection | None:
    """An Inspection from a ``qcheck.inspection/1`` (or ``qcheck.check/1``) JSON file; None if ``path`` is not one."""
    if not path.lower().endswith(".json") or not os.path.isfile(path):
        return None
    try:
        size = os.path.getsize(path)
        if size > limits.max_json_bytes:
            return None
        with open(path, "rb") as fh:
            data = json.loads(fh.read(limits.max_json_bytes + 1))
    except (OSError, ValueError, RecursionError, MemoryError):
        return None
    if isinstance(data, dict) and data.get("schema") == CHECK_SCHEMA:
        data = data.get("inspection")
    if not isinstance(data, dict) or data.get("schema") != INSPECTION_SCHEMA:
        return None
    return inspection_from_json(data, path)


def inspection_from_json(data: dict[str, Any], path: str = "<json>") -> Inspection:
    """Rebuild an Inspection from its public JSON (unknown keys ignored, wrong types rejected by name)."""
    root = validate.At(lambda where, problem, allowed: InputError(
        problem + (f" (allowed: {allowed})" if allowed else ""), path=path, where=where or None))
    quant_at = root.key("quantization")
    quant_raw = data.get("quantization") or {}
    if not isinstance(quant_raw, dict):
        quant_at.fail(f"must be an object, not {_json_type(quant_raw)}")
    quant = Quantization(**_fields(Quantization, quant_raw, quant_at, skip={"kv_scales"}),
                         kv_scales=_kv_scales(quant_raw, quant_at))
    validate.string(quant.method, quant_at.key("method"), empty=True, strip=False)
    types = quant.tensor_types
    if not isinstance(types, dict) or not all(isinstance(k, str) and isinstance(v, int) for k, v in types.items()):
        quant_at.key("tensor_types").fail("must map type names to counts")
    values = _fields(Inspection, data, root, skip={"quantization", "files", "findings", "adapter", "shape"})
    validate.choice(values.get("container"), root.key("container"), _CONTAINERS)
    files = []
    for i, f in enumerate(data.get("files") or []):
        if not isinstance(f, dict):
            root.key("files").index(i).fail(f"must be an object, not {_json_type(f)}")
        files.append(SourceFile(**_fields(SourceFile, f, root.key("files").index(i))))
    findings = []
    raw_findings = [] if data.get("findings") is None else _list(data, "findings", root)
    for i, f in enumerate(raw_findings):
        at = root.key("findings").index(i)
        if not isinstance(f, dict):
            at.fail(f"must be an object, not {_json_type(f)}")
        findings.append(InspectionFinding(**{k: validate.string(f.get(k), at.key(k), empty=True, strip=False)
                                              for k in ("kind", "where", "message")}))
    values.setdefault("path", path)
    return Inspection(quantization=quant, files=files, findings=findings, adapter=_adapter(data, root),
                      shape=_shape(data.get("shape"), root.key("shape")), **values)


#: the largest count a saved shape may state (bytes up to 2^53, layers up to MAX_LAYERS)
_MAX_COUNT = 2**53


def _shape(raw: Any, at: validate.At) -> ModelShape | None:
    """The ``shape`` record of a saved inspection, every number bounded and every list's length capped (a record
    written by a hostile hand must not make memory planning allocate or loop without bound)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        at.fail(f"must be an object, not {_json_type(raw)}")
    values = _counts(ModelShape, raw, at, skip={"attention", "tied_output", "from_tensors", "rope_scaling"})
    rope = raw.get("rope_scaling")
    if rope is not None and (not isinstance(rope, str) or len(rope) > 32 or not rope.isascii()):
        at.key("rope_scaling").fail("must be null or a RoPE type name of at most 32 ASCII characters")
    values["rope_scaling"] = rope
    attention_raw = raw.get("attention")
    attention = AttentionLayout()
    if attention_raw is not None:
        if not isinstance(attention_raw, dict):
            at.key("attention").fail(f"must be an object, not {_json_type(attention_raw)}")
        lay = _counts(AttentionLayout, attention_raw, at.key("attention"), skip={"notes", "sinks"})
        sinks = attention_raw.get("sinks", False)
        if not isinstance(sinks, bool):
            at.key("attention").key("sinks").fail(f"must be true or false, not {_json_type(sinks)}")
        lay["sinks"] = sinks
        notes = attention_raw.get("notes") or []
        if not isinstance(notes, list) or len(notes) > 64 or not all(isinstance(n, str) for n in notes):
            at.key("attention").key("notes").fail("must be an array of at most 64 strings")
        attention = AttentionLayout(notes=[n[:500] for n in notes], **lay)
    for flag in ("tied_output", "from_tensors"):
        value = raw.get(flag, False)
        if not isinstance(value, bool):
            at.key(flag).fail(f"must be true or false, not {_json_type(value)}")
        values[flag] = value
    shape = ModelShape(attention=attention, **values)
    if len(shape.layer_bytes) != len(shape.expert_bytes) and shape.expert_bytes:
        at.key("expert_bytes").fail("must have one entry per layer, as layer_bytes has")
    return shape


def _counts(cls: type, raw: dict[str, Any], at: validate.At, skip: set[str]) -> dict[str, Any]:
    """The integer and integer-list fields of ``cls`` found in ``raw``: non-negative, bounded, lists at most
    MAX_LAYERS long."""
    from qcheck.model_shape import MAX_LAYERS

    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip or f.name not in raw or raw[f.name] is None:
            continue
        value = raw[f.name]
        if str(f.type).startswith("list"):
            if not isinstance(value, list) or len(value) > MAX_LAYERS or not all(_count(v) for v in value):
                at.key(f.name).fail(f"must be an array of at most {MAX_LAYERS} non-negative integers")
        elif not _count(value):
            at.key(f.name).fail(f"must be a non-negative integer below 2^53, not {_json_type(value)}")
        out[f.name] = value
    return out


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _MAX_COUNT


def _kv_scales(quant: dict[str, Any], at: validate.At) -> KvScales | None:
    """The KV-scale record of a saved inspection (absent in records written before issue 24: None)."""
    raw = quant.get("kv_scales")
    if raw is None:
        return None
    where = at.key("kv_scales")
    if not isinstance(raw, dict):
        where.fail(f"must be an object, not {_json_type(raw)}")
    values = _fields(KvScales, raw, where)
    for key in ("attention_layers", "k_scales", "v_scales", "q_scales", "prob_scales"):
        if key in values and (values[key] is None or values[key] < 0):
            where.key(key).fail("must be a count (an integer >= 0)")
    missing = values.get("missing")
    if missing is not None and not all(isinstance(m, str) for m in missing):
        where.key("missing").fail("must be an array of strings")
    return KvScales(**values)


def _adapter(data: dict[str, Any], root: validate.At) -> Adapter | None:
    """The adapter record of a saved inspection. Its fields are read leniently, like the adapter_config.json they
    came from: a value of the wrong type reads as absent (the matrix then has no rule that matches it)."""
    raw = data.get("adapter")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        root.key("adapter").fail(f"must be an object, not {_json_type(raw)}")

    def text(key: str) -> str | None:
        value = raw.get(key)
        return value if isinstance(value, str) and value else None

    def names(key: str) -> list[str]:
        value = raw.get(key)
        return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

    alpha = raw.get("alpha")
    return Adapter(type=text("type") or "unknown", rank=as_int(raw.get("rank"), minimum=0),
                   max_rank=as_int(raw.get("max_rank"), minimum=0),
                   alpha=alpha if isinstance(alpha, (int, float)) and not isinstance(alpha, bool) else None,
                   target_modules=names("target_modules"), base_model=text("base_model"),
                   modules_to_save=names("modules_to_save"), use_dora=raw.get("use_dora") is True,
                   rank_pattern=raw.get("rank_pattern") is True)


def _list(data: dict[str, Any], key: str, at: validate.At) -> list[Any]:
    value = data[key]
    if not isinstance(value, list):
        at.key(key).fail(f"must be an array, not {_json_type(value)}")
    return value


#: annotation name -> the JSON value types accepted for it (``Container`` is a Literal of strings)
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "list": (list,), "dict": (dict,),
    "Container": (str,),
}
_JSON_WORDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false",
               "list": "an array", "dict": "an object", "Container": "a string"}


def _json_type(value: Any) -> str:
    """A JSON value's type in JSON's words ("an object", "an array")."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return validate.type_name(value)


def _fields(cls: type, raw: dict[str, Any], at: validate.At,
            skip: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    """The dataclass fields of ``cls`` found in ``raw``, type-checked against their annotations."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip or f.name not in raw:
            continue
        value = raw[f.name]
        if value is not None:
            kind = _kind(str(f.type))
            wanted = _JSON_TYPES.get(kind, ())
            if wanted and (not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted)):
                at.key(f.name).fail(f"must be {_JSON_WORDS[kind]}, not {_json_type(value)}")
        out[f.name] = value
    return out


def _kind(annotation: str) -> str:
    """The JSON kind of a field from its annotation text (``int | None`` -> int); unknown kinds are unchecked."""
    return annotation.split("|")[0].strip().split("[")[0]
