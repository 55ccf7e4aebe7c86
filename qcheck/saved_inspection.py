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

from qcheck.errors import InputError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.model import CHECK_SCHEMA, INSPECTION_SCHEMA, Inspection, Quantization, SourceFile

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
    quant_raw = data.get("quantization") or {}
    if not isinstance(quant_raw, dict):
        raise InputError("'quantization' must be an object", path=path, where="quantization")
    quant = Quantization(**_fields(Quantization, quant_raw, path, "quantization."))
    if not isinstance(quant.method, str):
        raise InputError("quantization.method must be a string", path=path, where="quantization.method")
    types = quant.tensor_types
    if not isinstance(types, dict) or not all(isinstance(k, str) and isinstance(v, int) for k, v in types.items()):
        raise InputError("tensor_types must map type names to counts", path=path, where="quantization.tensor_types")
    values = _fields(Inspection, data, path, "", skip={"quantization", "files"})
    if values.get("container") not in _CONTAINERS:
        raise InputError(f"container must be one of {', '.join(_CONTAINERS)}", path=path, where="container")
    files = []
    for i, f in enumerate(data.get("files") or []):
        if not isinstance(f, dict):
            raise InputError("files entries must be objects", path=path, where=f"files[{i}]")
        files.append(SourceFile(**_fields(SourceFile, f, path, f"files[{i}].")))
    values.setdefault("path", path)
    return Inspection(quantization=quant, files=files, **values)


#: annotation name -> the JSON value types accepted for it (``Container`` is a Literal of strings)
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "list": (list,), "dict": (dict,),
    "Container": (str,),
}


def _fields(cls: type, raw: dict[str, Any], path: str, prefix: str,
            skip: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    """The dataclass fields of ``cls`` found in ``raw``, type-checked against their annotations."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip or f.name not in raw:
            continue
        value = raw[f.name]
        if value is not None:
            wanted = _expected(str(f.type))
            if wanted and not any(isinstance(value, t) for t in wanted):
                raise InputError(f"{prefix}{f.name} has the wrong type ({type(value).__name__})", path=path,
                                 where=f"{prefix}{f.name}")
            if isinstance(value, bool) and bool not in wanted and wanted:
                raise InputError(f"{prefix}{f.name} must not be a boolean", path=path, where=f"{prefix}{f.name}")
        out[f.name] = value
    return out


def _expected(annotation: str) -> tuple[type, ...]:
    """The JSON types a field accepts, from its annotation text (``int | None`` -> int); () = unchecked."""
    return _JSON_TYPES.get(annotation.split("|")[0].strip().split("[")[0], ())
