"""Inspection x engine x version x GPU -> Verdict: a generic matcher over the matrix rules.

No engine, GPU or format knowledge lives here; it is all in ``matrices/``. The steps are those of
matrices/SCHEMA.md §5: pick the version, gate on the engine's hardware vendors, pick the backend,
collect the rules that hold, let the most specific one decide.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qcheck.errors import UsageError
from qcheck.matrix.deployment import EngineRequest
from qcheck.matrix.rules import (
    decide,
    dedupe,
    fill,
    matching_rules,
    pick_backend,
    placeholders,
)
from qcheck.matrix.schema import Engine, Rule, SourceSpec, Target
from qcheck.matrix.versions import parse_version
from qcheck.model import Source, Verdict
from qcheck.request import Deploy

if TYPE_CHECKING:
    from packaging.version import Version

    from qcheck.matrix.loader import Matrix
    from qcheck.model import Inspection


def parse_engine_spec(text: str, matrix: Matrix) -> EngineRequest:
    """Parse an ``--engine`` value; unknown names, backends and malformed versions are usage errors.

    ``NAME=installed`` reads the engine installed in this Python (its version and model registry, without
    importing it): see qcheck.matrix.installed.
    """
    raw = text.strip()
    if "==" not in raw and raw.lower().endswith("=installed"):
        return _installed_spec(text, raw[: -len("=installed")], matrix)
    name, sep, version = raw.partition("==")
    if sep and not version.strip():
        raise UsageError(f"--engine {text!r}: missing version after '=='")
    if "=" in version or (not sep and "=" in name):
        raise UsageError(f"--engine {text!r}: write name==version (e.g. vllm==0.20.0)")
    name, _, backend = name.partition(":")
    engine = matrix.engine(name)
    backend_name = backend.strip().lower() or None
    if backend_name is not None and backend_name not in engine.backends:
        if not engine.backends:
            raise UsageError(f"--engine {text!r}: {engine.name} has no selectable backends")
        raise UsageError(f"--engine {text!r}: {engine.name} has no backend {backend_name!r} "
                         f"(known: {', '.join(engine.backends)})")
    version_text = version.strip() or None
    if version_text is not None:
        try:
            parse_version(version_text, engine.scheme)
        except ValueError as exc:
            raise UsageError(f"--engine {text!r}: {exc}") from None
    return EngineRequest(engine, version_text, backend_name)


def _installed_spec(text: str, name: str, matrix: Matrix) -> EngineRequest:
    from qcheck.matrix.architectures import load_architectures
    from qcheck.matrix.installed import find_installed

    base = parse_engine_spec(name, matrix)
    known: frozenset[str] = frozenset()
    if base.engine.id == "llama.cpp":
        data = load_architectures(matrix.root, "llama.cpp")
        known = frozenset(n for lst in (data.lists if data else []) if lst.names == "gguf-arch" for n in lst.arch)
    installed = find_installed(base.engine.id, known_gguf_names=known)
    version = installed.engine_version
    if version is not None:
        try:
            parse_version(version, base.engine.scheme)
        except ValueError as exc:
            raise UsageError(f"--engine {text!r}: installed version: {exc}") from None
    return EngineRequest(base.engine, version, base.backend, installed)


def select_version(engine: Engine, requested: str | None) -> tuple[str, Version, list[str]]:
    """(version to report, version to evaluate rules at, warnings) for a requested engine version."""
    if requested is None:
        return engine.newest, engine.parsed_versions[-1], []
    wanted = parse_version(requested, engine.scheme)
    notes: list[str] = []
    if wanted.is_prerelease and wanted not in engine.parsed_versions:
        # PEP 440 puts 0.24.0rc1 outside both "<0.24.0" and ">=0.24.0"; a release candidate carries the
        # release's code, so it is judged by the rules of its release
        base = parse_version(wanted.base_version)
        notes.append(f"{engine.name} {requested} is judged by the rules for {wanted.base_version}")
        wanted = base
    newest = engine.parsed_versions[-1]
    if wanted > newest:
        return requested, newest, [
            f"rules verified up to {engine.name} {engine.newest}; {requested} is newer, unverified", *notes]
    # below the data floor the verdict is unknown (see outside_data), not a guess from later rules
    return requested, wanted, notes


def outside_data(engine: Engine, at: Version) -> str | None:
    """Why ``at`` is outside what the matrix knows about ``engine`` (older than any version a fact was read
    at), or None. Rules read at later versions say nothing about what an older release could run."""
    floor = engine.floor
    if floor is None or at >= floor:
        return None
    shown = engine.oldest if parse_version(engine.oldest, engine.scheme) == floor else _show(floor, engine.scheme)
    return (f"{engine.name} {_show(at, engine.scheme)} is older than any version the matrix data was read at "
            f"(oldest: {shown}): no rule says what it supports")


def bounded_above(rule: Rule) -> bool:
    """A rule whose version range has an upper end (``<0.29.0``, ``==b6000``): written about older releases."""
    return rule.versions is not None and any(spec.operator in ("<", "<=", "==", "===", "~=") for spec in rule.versions)


def _show(version: Version, scheme: str) -> str:
    return f"b{version}" if scheme == "build" else str(version)


def _sources(specs: tuple[SourceSpec, ...] | list[SourceSpec]) -> list[Source]:
    out: list[Source] = []
    seen = set()
    for s in specs:
        key = (s.ref, s.version)
        if key not in seen:
            seen.add(key)
            out.append(Source(ref=s.ref, version=s.version, note=s.note))
    return out


def resolve_one(matrix: Matrix, inspection: Inspection, request: EngineRequest, target: Target | None,
                deploy: Deploy | None = None, *, dimensions: bool = True) -> Verdict:
    """The verdict for one (engine, GPU) combination, without suggestions (``dimensions=False``: no architecture
    dimension, for the format tables' synthetic probes, which stand for no model in particular)."""
    return resolve_with_types(matrix, inspection, request, target, deploy, dimensions=dimensions)[0]


def resolve_with_types(matrix: Matrix, inspection: Inspection, request: EngineRequest,
                       target: Target | None, deploy: Deploy | None = None, *,
                       dimensions: bool = True) -> tuple[Verdict, list[str]]:
    """The verdict over every dimension (qcheck.matrix.dimensions), plus the GGUF tensor types named by the
    weight-format rules that decided it (for ``{types}``)."""
    from qcheck.matrix.dimensions import Deployment, combine, judge_dimensions, without_architecture

    verdict, types = _resolve_weights(matrix, inspection, request, target)
    version, at, _ = select_version(request.engine, request.version)
    deployment = Deployment(matrix, inspection, request, target if request.engine.needs_gpu else None, version, at,
                            deploy or Deploy())
    # a synthetic probe of the format tables stands for no model in particular: no architecture to judge
    combine(verdict, judge_dimensions(deployment, None if dimensions else without_architecture()))
    return verdict, types


def _resolve_weights(matrix: Matrix, inspection: Inspection, request: EngineRequest,
                     target: Target | None) -> tuple[Verdict, list[str]]:
    """The weight-format verdict from the matrix rules, plus the GGUF tensor types named by the deciding rules."""
    engine = request.engine
    if not engine.needs_gpu:
        target = None
    elif target is None:
        raise UsageError(f"{engine.name} runs on a GPU or CPU you choose: give --gpu (e.g. --gpu h100, --gpu cpu)")
    version, at, warnings = select_version(engine, request.version)
    method = inspection.quantization.method
    verdict = Verdict(
        engine=engine.id, engine_version=version,
        gpu=target.gpu if target else None, arch=target.arch.id if target else None,
        compute_capability=target.cc if target else None, status="unknown", warnings=list(warnings),
    )
    too_old = outside_data(engine, at)
    if target is not None and target.vendor not in engine.hardware:
        verdict.status = "unsupported"
        verdict.reasons = [f"{engine.name} does not run on {target.vendor} hardware "
                           f"(it runs on: {', '.join(engine.hardware)})"]
        verdict.sources = _sources(engine.hardware_sources)
        verdict.rule_id = "engine-hardware"
        return verdict, []
    backend, problem = pick_backend(engine, request.backend, target)
    if problem is not None:
        verdict.status = "unsupported"
        verdict.reasons = [problem]
        verdict.sources = _sources(engine.hardware_sources)
        verdict.rule_id = "engine-backend"
        return verdict, []
    verdict.backend = backend.name if backend else None
    candidates = matching_rules(engine, inspection, at, target, backend)
    if too_old is not None:
        # below the data only a rule written about older releases speaks, and only to say "not yet"
        # ("mxfp4 arrived in 0.29.0"): that a later release runs something says nothing about this one
        candidates = [(r, t) for r, t in candidates if bounded_above(r)]
        older = decide(engine, candidates)
        if not older or older[0][0].status in ("native", "fallback"):
            verdict.reasons = [too_old]
            verdict.sources = _sources(engine.hardware_sources or tuple(engine.sources.values())[:1])
            verdict.rule_id = "engine-version"
            return verdict, []
    winners = decide(engine, candidates)
    where = f"{target.arch.id}" if target else "the provider"
    if not winners:
        if inspection.adapter is not None:
            kind = inspection.adapter.label
            verdict.reasons = [f"no sourced rule for {engine.name} {version} x {kind} adapters on {where}: no "
                               "adapter rule in the matrix covers this combination (rules for full models never "
                               "judge an adapter)"]
        elif target is not None and target.arch.explicit_rules:
            verdict.reasons = [f"no sourced rule for {engine.name} {version} x {method} on {where}: {target.arch.name} "
                               "is a new architecture nobody has read this engine's code for, and rules written "
                               "for other capabilities do not cover it"]
            verdict.sources = [Source(ref=f"matrices/gpus.toml: [[arch]] {target.arch.id}", version="none read",
                                      note=target.arch.source)]
            verdict.rule_id = "new-architecture"
        else:
            verdict.reasons = [f"no sourced rule for {engine.name} {version} x {method} on {where}"]
        return verdict, []
    rule = winners[0][0]
    modifiers = [(m, t) for m, t in matching_rules(engine, inspection, at, target, backend,
                                                   engine.rules_for(method, modifiers=True))
                 if rule.status in m.when]
    winners = winners + modifiers
    types = dedupe([t for _, ts in winners for t in ts])
    values = placeholders(inspection, engine, version, target, verdict.backend, types)
    verdict.status = rule.status  # type: ignore[assignment]
    verdict.kernel = fill(rule.kernel, values) if rule.kernel else None
    verdict.weights_loaded_as = rule.weights_loaded_as
    verdict.requires = dedupe([fill(x, values) for r, _ in winners for x in r.requires])
    verdict.reasons = dedupe([fill(x, values) for r, _ in winners for x in r.reasons])
    verdict.warnings += dedupe([fill(x, values) for r, _ in winners for x in r.warnings])
    verdict.sources = _sources([s for r, _ in winners for s in r.sources])
    verdict.rule_id = "+".join(dict.fromkeys(r.id for r, _ in winners))
    return verdict, types
