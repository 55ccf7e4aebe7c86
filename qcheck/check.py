"""``qcheck check``: judge a checkpoint against engines x GPUs and decide the exit code.

The checkpoint is inspected (headers only) or read back from a saved ``qcheck inspect --json`` record,
the ``--engine``/``--gpu`` values are resolved against the matrix, and every combination gets a Verdict.
Exit codes (DESIGN.md): 0 all run, 1 any cannot run / unknown (unless allowed) / fallback when native
is required, 2 input not judged (raised as QcheckError before any result exists).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from qcheck.errors import InputError, UnsafeFileError, UsageError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.model import CHECK_SCHEMA, INSPECTION_SCHEMA, Inspection, Quantization, SourceFile, Verdict


@dataclass
class CheckResult:
    """The result of ``qcheck check``: the inspection and one verdict per (engine, GPU)."""

    inspection: Inspection
    verdicts: list[Verdict]
    require_native: bool = False
    allow_unknown: bool = False
    warnings: list[str] = field(default_factory=list)
    kind: str = "check"

    def fails(self, verdict: Verdict) -> bool:
        """Whether this verdict makes the run fail (exit 1) under the chosen policy."""
        return verdict_fails(verdict, require_native=self.require_native, allow_unknown=self.allow_unknown)

    @property
    def exit_code(self) -> int:
        return 1 if any(self.fails(v) for v in self.verdicts) else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": CHECK_SCHEMA,
            "inspection": self.inspection.to_json(),
            "verdicts": [v.to_json() for v in self.verdicts],
            "policy": {"require_native": self.require_native, "allow_unknown": self.allow_unknown},
            "warnings": list(self.warnings),
            "exit_code": self.exit_code,
        }


def verdict_fails(verdict: Verdict, *, require_native: bool = False, allow_unknown: bool = False) -> bool:
    """DESIGN exit-code rule for one verdict: unsupported fails; unknown fails unless allowed; fallback
    fails only when native is required."""
    if verdict.status == "unsupported":
        return True
    if verdict.status == "unknown":
        return not allow_unknown
    if verdict.status == "fallback":
        return require_native
    return False


def plan(engines: list[str] | tuple[str, ...], gpus: list[str] | tuple[str, ...], matrix: Any = None) -> tuple[list, list]:
    """Resolve ``--engine``/``--gpu`` values into requests and targets (usage errors before any file is read).

    No ``--engine`` with ``--gpu``: every engine that runs on the GPU's vendor. ``--engine`` without
    ``--gpu``: only providers (hosted, no GPU) can be judged; GPU engines need ``--gpu``.
    """
    from qcheck.matrix import load_matrix, parse_engine_spec

    matrix = matrix or load_matrix()
    if not engines and not gpus:
        raise UsageError("say what to check against: --engine E and/or --gpu G (e.g. --engine vllm --gpu h100); "
                         "with only --gpu every engine is checked")
    targets = [matrix.gpus.lookup(g) for g in gpus]
    # repeated values are judged once
    targets = list({(t.label, t.arch.id, t.cc): t for t in targets}.values())
    if engines:
        requests = [parse_engine_spec(e, matrix) for e in engines]
    else:
        from qcheck.matrix.resolve import EngineRequest

        requests = [EngineRequest(e) for e in matrix.engines.values() if e.needs_gpu]
    requests = list({r.label: r for r in requests}.values())
    missing = [r.engine.name for r in requests if r.engine.needs_gpu and not targets]
    if missing:
        raise UsageError(f"{', '.join(missing)} {'runs' if len(missing) == 1 else 'run'} on hardware you choose: "
                         "add --gpu (a product like h100 or rtx-4090, an architecture like hopper, sm90, or cpu)")
    return requests, targets


def run_check(inspection: Inspection, engines: list[str] | tuple[str, ...], gpus: list[str] | tuple[str, ...], *,
              require_native: bool = False, allow_unknown: bool = False, matrix: Any = None,
              annotate: Callable[[Inspection, Verdict], None] | None = None) -> CheckResult:
    """Judge an Inspection against the cross product of engines and GPUs.

    ``annotate(inspection, verdict)`` runs on every verdict afterwards: the hook for extra per-verdict
    fields such as the memory-fit estimate (``verdict.memory``; the GPU's memory is
    ``load_matrix().gpus.gpus[verdict.gpu].memory_gib``).
    """
    from qcheck.matrix import load_matrix, resolve

    matrix = matrix or load_matrix()
    requests, targets = plan(engines, gpus, matrix)
    # engines implied by --gpu alone: only those that run on the GPU's vendor at all
    verdicts = resolve(matrix, inspection, requests, targets, skip_foreign=not engines)
    if annotate is not None:
        for verdict in verdicts:
            annotate(inspection, verdict)
    return CheckResult(inspection, verdicts, require_native=require_native, allow_unknown=allow_unknown)


def check_path(target: str, engines: list[str] | tuple[str, ...], gpus: list[str] | tuple[str, ...], *,
               limits: Limits = DEFAULT_LIMITS, require_native: bool = False, allow_unknown: bool = False,
               matrix: Any = None, annotate: Callable[[Inspection, Verdict], None] | None = None) -> CheckResult:
    """``qcheck check TARGET``: validate the flags, inspect the checkpoint (or load a saved inspection), judge it."""
    from qcheck.matrix import load_matrix

    matrix = matrix or load_matrix()
    plan(engines, gpus, matrix)  # usage errors first, before reading anything
    inspection = inspect_target(target, limits)
    return run_check(inspection, engines, gpus, require_native=require_native, allow_unknown=allow_unknown,
                     matrix=matrix, annotate=annotate)


def inspect_target(target: str, limits: Limits = DEFAULT_LIMITS) -> Inspection:
    """The Inspection of a checkpoint (or of a saved inspection record); a pickle raises UnsafeFileError."""
    inspection = load_saved_inspection(target, limits)
    if inspection is None:
        from qcheck.inspect import inspect_path

        inspection = inspect_path(target, limits)
    if inspection.container == "pickle":
        # a pickle cannot be judged from headers and is never loaded: exit 2, as `qcheck inspect` does
        from qcheck.inspect import InspectResult

        raise UnsafeFileError(InspectResult(inspection).error_line())
    return inspection


# --- saved inspections: `qcheck inspect --json > x.json; qcheck check x.json --engine ...` ---------------

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
    except (OSError, ValueError, RecursionError):
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


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "list": (list,), "dict": (dict,),
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
    base = annotation.split("|")[0].strip()
    for name, types in (("list", (list,)), ("dict", (dict,)), ("bool", (bool,)), ("float", (int, float)),
                        ("int", (int,)), ("str", (str,)), ("Container", (str,))):
        if base.startswith(name):
            return types
    return ()
