"""Suggestions for a verdict that is not native: the nearest combinations that run the checkpoint.

In order of how little the user has to change: a newer version of the same engine, another engine on
the same GPU, the oldest architecture on which this engine runs it natively, then the conversion
commands from the data's ``[[suggestion]]`` tables. At most four, in the user's terms (flags to pass).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from qcheck.matrix.resolve import EngineRequest, resolve_one, select_version
from qcheck.matrix.rules import fill, matching_rules, placeholders
from qcheck.matrix.schema import Target
from qcheck.matrix.versions import parse_version

if TYPE_CHECKING:
    from qcheck.matrix.loader import Matrix
    from qcheck.model import Inspection, Verdict
    from qcheck.request import Deploy

MAX_SUGGESTIONS = 4


def suggest(matrix: Matrix, inspection: Inspection, verdict: Verdict, request: EngineRequest,
            target: Target | None, limit: int = MAX_SUGGESTIONS, types: list[str] | None = None,
            deploy: Deploy | None = None) -> list[str]:
    """Up to ``limit`` short suggestions for a non-native verdict (``types``: the GGUF tensor types the
    deciding rule named, for ``{types}`` in suggestion texts; ``deploy``: how it is deployed, judged
    for every alternative too)."""
    if verdict.status == "native":
        return []
    upgrade = _newer_version(matrix, inspection, request, target, deploy)
    engines = _other_engines(matrix, inspection, verdict, request, target, deploy)
    arch = _other_arch(matrix, inspection, request, target, deploy)
    own = data_suggestions(matrix, inspection, verdict, request, target, types or [], general=False)
    general = data_suggestions(matrix, inspection, verdict, request, target, types or [], own=False)
    picked: list[str] = []
    # what the user can do on the engine they asked about comes first; another engine only after it
    for group in (upgrade[:1], own[:1], arch[:1], engines[:1], general[:1], engines[1:2], own[1:], general[1:]):
        for text in group:
            if text not in picked and len(picked) < limit:
                picked.append(text)
    return picked


def _requires(v: Verdict) -> str:
    return f" (requires: {'; '.join(v.requires)})" if v.requires else ""


def _newer_version(matrix: Matrix, inspection: Inspection, request: EngineRequest, target: Target | None,
                   deploy: Deploy | None = None) -> list[str]:
    engine = request.engine
    if request.version is None or parse_version(request.version, engine.scheme) >= engine.parsed_versions[-1]:
        return []
    v = resolve_one(matrix, inspection, EngineRequest(engine, None, request.backend), target, deploy)
    if v.status != "native":
        return []
    kernel = f" ({v.kernel})" if v.kernel else ""
    return [f"{engine.name} {engine.newest} runs it natively{kernel}: --engine {engine.id}=={engine.newest}"
            f"{_requires(v)}"]


def _other_engines(matrix: Matrix, inspection: Inspection, verdict: Verdict, request: EngineRequest,
                   target: Target | None, deploy: Deploy | None = None) -> list[str]:
    where = f" on {target.label}" if target else ""
    natives: list[tuple[tuple[int, int, str], str]] = []
    runners: list[tuple[tuple[int, int, str], str]] = []
    for engine in matrix.engines.values():
        if engine.id == request.engine.id or engine.needs_gpu != (target is not None):
            continue
        if engine.kind == "single-purpose":
            # colibri, audio.cpp, DeepInfer run a few model families each; the header cannot tell whether
            # this checkpoint is one of them, so they are never offered as the way out.
            continue
        v = resolve_one(matrix, inspection, EngineRequest(engine), target, deploy)
        rank = (len(v.requires), engine.kind != "engine", engine.id)
        if v.status == "native":
            kernel = f" ({v.kernel})" if v.kernel else ""
            natives.append((rank, f"{engine.name} {v.engine_version} runs it natively{where}{kernel}: "
                                  f"--engine {engine.id}{_requires(v)}"))
        elif v.status == "fallback":
            runners.append((rank, f"{engine.name} {v.engine_version} runs it{where} through a fallback "
                                  f"({v.kernel}): --engine {engine.id}{_requires(v)}"))
    out = [text for _, text in sorted(natives)]
    if not out and verdict.status in ("unsupported", "unknown"):
        out = [text for _, text in sorted(runners)]
    return out


def _other_arch(matrix: Matrix, inspection: Inspection, request: EngineRequest, target: Target | None,
                deploy: Deploy | None = None) -> list[str]:
    """The oldest architecture (same vendor first) on which this engine runs the checkpoint natively."""
    if target is None:
        return []
    engine = request.engine
    vendors = [target.vendor] + [v for v in engine.hardware if v != target.vendor]
    for vendor in vendors:
        for arch in matrix.gpus.archs_of(vendor):
            if arch.id == target.arch.id:
                continue
            v = resolve_one(matrix, inspection, request, Target(label=arch.id, arch=arch, cc=arch.cc), deploy)
            if v.status == "native":
                gpu = matrix.gpus.smallest_gpu(arch.id)
                example = f" (e.g. {gpu.id})" if gpu else ""
                return [f"{engine.name} runs it natively on {arch.id}{example}: --gpu {arch.id}{_requires(v)}"]
    return []


def data_suggestions(matrix: Matrix, inspection: Inspection, verdict: Verdict, request: EngineRequest,
                     target: Target | None, verdict_types: Sequence[str] = (), *, own: bool = True,
                     general: bool = True) -> list[str]:
    """The data's ``[[suggestion]]`` entries that apply: the engine's own first (``own``), then suggestions.toml
    (``general``)."""
    engine = request.engine
    rules = [r for r in (*(engine.suggestions if own else ()), *(matrix.suggestions if general else ()))
             if verdict.status in r.when]
    at = select_version(engine, request.version)[1]
    backend = engine.backends.get(verdict.backend) if verdict.backend else None
    out = []
    for rule, hit in matching_rules(engine, inspection, at, target, backend, rules):
        types = list(dict.fromkeys([*verdict_types, *hit]))
        version = verdict.engine_version or ""
        values = placeholders(inspection, engine, version, target, verdict.backend, types)
        text = fill(rule.text, values)
        if rule.command:
            text = f"{text}: {fill(rule.command, values)}"
        out.append(text)
    return out
