"""Gates derived from extracted code facts: the refusals an engine's code makes before it picks a kernel.

Shared by extract_vllm.py and extract_sglang.py (SGLang's quantisation code descends from vLLM's and refuses with the
same checks): a method its release does not register, a GPU below the minimum capability of the configuration (or of
the compressed-tensors scheme) a checkpoint resolves to, a method missing from a platform's supported list. Each
engine's ``Profile`` says which of its method names stand for which checkpoints (``match`` as in an engine rule), and
where its platform lists are; the derivation itself is the same.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from codefacts import Release, histories

#: the NVIDIA compute capabilities gpus.toml knows, in the engines' integer form (a gate below none says nothing)
CAPABILITIES = (60, 61, 70, 72, 75, 80, 86, 87, 89, 90, 100, 103, 110, 120, 121)
#: FP4 tensor cores (``cutlass_scaled_mm_supports_fp4`` in csrc: capability >= 100) exist from Blackwell on
FP4_CAPABILITY = 100


@dataclass
class Profile:
    """What an engine's method names mean for qcheck's checkpoints, and how its refusals read."""

    #: "vllm wheels": how a source names where the fact was read
    label: str
    #: method name -> {"methods", "match"} of the checkpoints the engine resolves to that name (registry and platform
    #: gates); names a plugin can register are left out
    checkpoints: dict[str, dict[str, Any]]
    #: method name -> the registered names its checkpoints resolve to, the override first: the configuration whose
    #: minimum capability refuses them below it (no override escapes there)
    config_gates: dict[str, tuple[str, ...]]
    #: compressed-tensors checkpoint kinds: the conditions of ``_get_scheme_from_parts`` that select them
    ct_schemes: dict[str, dict[str, Any]]
    #: fact key of a ``platform_quantization`` list -> (hardware of the rule, the engine's message with {name})
    platforms: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict)
    #: the registry fact (kind, key) whose absence of a name refuses it
    registry: tuple[str, str] = ("registry", "QUANTIZATION_METHODS")
    #: the config-gate message, with {name}, {cap}, {config}, {file}
    min_capability_text: str = ("The quantization method {name} is not supported for the current GPU. Minimum "
                                "capability: {cap}. Current capability: {{cc}} ({config}.get_min_capability() in "
                                "{file})")

def derive(profile: Profile, releases: Sequence[Release]) -> tuple[dict[str, dict[str, str]], list[dict[str, Any]]]:
    order = [r.version for r in releases]
    rules: list[dict[str, Any]] = []
    sources: dict[str, dict[str, str]] = {}
    by_fact = {(f["kind"], f["key"]): f for f in histories(releases)}

    def add(rule_id: str, verified: list[str], body: dict[str, Any], ref: str) -> None:
        source = rule_id.replace("-", "_").replace(".", "_")
        sources[source] = {"ref": ref, "version": _label(verified, order)}
        rules.append({"id": rule_id, "verified": _closed(verified, order), **body, "status": "unsupported",
                      "gate": True, "sources": [source]})

    registry = by_fact.get(profile.registry)
    if registry:
        for name, checkpoint in profile.checkpoints.items():
            for first, last, present, path in _runs(registry, order, lambda v, n=name: n in v):
                if not present and _ever(registry, name):
                    add(f"gen-unregistered-{name}-{order[first]}", order[first:last + 1],
                        {**checkpoint, "reasons": [_unregistered(name, path, profile.registry[1])]},
                        f"{profile.label}: {path} ({profile.registry[1]} has no {name!r})")
    _derive_configs(profile, by_fact, order, registry, add)
    _derive_platforms(profile, by_fact, order, add)
    _derive_ct_schemes(profile, by_fact, order, add)
    return sources, rules


def _unregistered(name: str, path: str, registry: str) -> str:
    if name.startswith("modelopt"):
        return (f"{{engine}} {{version}} has no {name} quantization configuration ({registry} in {path}): it does "
                "not load ModelOpt checkpoints of this kind")
    return (f"Unknown quantization method: {name}. {{engine}} {{version}} does not register it ({registry} in "
            f"{path})")


def _derive_configs(profile: Profile, by_fact: dict[tuple[str, str], dict[str, Any]], order: list[str],
                    registry: dict[str, Any] | None, add: Callable[..., None]) -> None:
    """A GPU below the minimum capability of the configuration a method's checkpoints resolve to: 'The quantization
    method X is not supported for the current GPU. Minimum capability: N. Current capability: M.' (vllm/config)."""
    for name, targets in profile.config_gates.items():
        per_version: dict[str, tuple[str, str, int, str]] = {}
        for version in order:
            listed = _value(registry, version, order) if registry else None
            target = next((t for t in targets if listed and t in listed), None)
            config = _value(by_fact.get(("method_config", target), {"history": []}), version, order) if target \
                else None
            fact = by_fact.get(("min_capability", str(config)))
            cap = _value(fact, version, order) if fact else None
            if target and isinstance(cap, int) and cap > min(CAPABILITIES):
                file = next(s["file"] for s in fact["history"]  # type: ignore[index]
                            if order.index(s["from"]) <= order.index(version) <= order.index(s["to"]))
                per_version[version] = (target, str(config), cap, file)
        for (target, config, cap, file), versions in _group(per_version, order):
            add(f"gen-min-capability-{name}-{versions[0]}", versions, {
                **profile.checkpoints[name], "hardware": {"vendor": "nvidia", "cc": f"<{_cc(cap)}"},
                "reasons": [profile.min_capability_text.format(name=target, cap=cap, config=config, file=file)]},
                f"{profile.label}: {file} ({config}.get_min_capability() returns {cap})")


def _derive_platforms(profile: Profile, by_fact: dict[tuple[str, str], dict[str, Any]], order: list[str],
                      add: Callable[..., None]) -> None:
    """A method absent from a platform's (non-empty) supported list: 'X quantization is currently not supported in
    rocm.' (the conditional additions count as present)."""
    for stem, (hardware, message) in profile.platforms.items():
        fact = by_fact.get(("platform_quantization", stem))
        if fact is None:
            continue
        for name, checkpoint in profile.checkpoints.items():
            def absent(value: list[str], n: str = name) -> bool:
                return not any(entry == n or entry.endswith(f"+{n}") or f" {n}," in f" {entry}," for entry in value)
            for first, last, missing, path in _runs(fact, order, absent):
                if missing:
                    add(f"gen-{stem}-{name}-{order[first]}", order[first:last + 1], {
                        **checkpoint, "hardware": hardware, "reasons": [
                            f"{message.format(name=name)} ({path}: the platform's list has no {name!r})"]},
                        f"{profile.label}: {path} (supported quantization methods)")


def _derive_ct_schemes(profile: Profile, by_fact: dict[tuple[str, str], dict[str, Any]], order: list[str],
                       add: Callable[..., None]) -> None:
    """The compressed-tensors scheme ``_get_scheme_from_parts`` picks for a checkpoint kind, per capability, and its
    minimum: ``_check_scheme_supported`` refuses a GPU below it ('Quantization scheme is not supported for the
    current GPU. Min capability: N')."""
    fact = by_fact.get(("decisions", "ct_scheme"))
    if fact is None:
        return
    for kind, spec in profile.ct_schemes.items():
        per_version: dict[str, list[tuple[int, int, str, int]]] = {}
        for version in order:
            listed = _value(fact, version, order)
            if not listed:
                continue
            def minimum(scheme: str, v: str = version) -> int | None:
                got = _value(by_fact.get(("min_capability", scheme), {"history": []}), v, order)
                return got if isinstance(got, int) else None
            gates = []
            for low, high, scheme in _scheme_picks(listed, spec, minimum):
                cap = minimum(scheme)
                if cap is not None and cap > low:
                    gates.append((low, min(cap, high), scheme, cap))
            if gates:
                per_version[version] = gates
        for gates, versions in _group(per_version, order):
            for low, high, scheme, cap in gates:
                cc = f"<{_cc(high)}" if low <= min(CAPABILITIES) else f">={_cc(low)},<{_cc(high)}"
                suffix = f"-from-sm{low}" if low > min(CAPABILITIES) else ""
                add(f"gen-ct-{kind}-{versions[0]}{suffix}", versions, {
                    "methods": spec["methods"], "match": spec["match"], "hardware": {"vendor": "nvidia", "cc": cc},
                    "reasons": [f"compressed-tensors picks {scheme} here, whose minimum capability is {cap}: "
                                f"'Quantization scheme is not supported for the current GPU. Min capability: {cap}. "
                                "Current capability: {cc}.'"]},
                    f"{profile.label}: {fact['history'][0]['file']} (_get_scheme_from_parts: {kind} -> {scheme}); "
                    f"{scheme}.get_min_capability() = {cap}")


def _scheme_picks(listed: list[str], spec: dict[str, Any], minimum: Any) -> list[tuple[int, int, str]]:
    """(lowest capability, capability it stops at, scheme) for the decisions that select this checkpoint kind, first
    wins: a capability check among the conditions splits the range (``cutlass_fp4_supported()``: FP4 tensor cores;
    ``_check_scheme_supported(N)`` or ``(X.get_min_capability())``: N or X's minimum at this release)."""
    out: list[tuple[int, int, str]] = []
    for line in listed:
        conditions, _, result = line.rpartition(" -> ")
        if not any(p in conditions for p in spec["any"]) or not all(p in conditions for p in spec["all"]) \
                or any(p in conditions for p in spec["none"]) or result.startswith("raise"):
            continue
        low, high = 0, 10_000
        if "cutlass_fp4_supported()" in conditions:
            negated = "not (cutlass_fp4_supported()" in conditions
            low, high = (0, FP4_CAPABILITY) if negated else (FP4_CAPABILITY, 10_000)
        check = re.search(r"(not \()?self\._check_scheme_supported\((\d+|\w+\.get_min_capability\(\))", conditions)
        if check:
            text = check.group(2)
            bound = int(text) if text.isdigit() else minimum(text.split(".")[0])
            if bound is None:
                continue
            low, high = (0, bound) if check.group(1) else (bound, 10_000)
        if not any(o[0] <= low and high <= o[1] for o in out):
            out.append((low, high, result))
    return out


def _group(per_version: dict[str, Any], order: list[str]) -> list[tuple[Any, list[str]]]:
    """Consecutive releases read with the same value, as (value, releases)."""
    out: list[tuple[Any, list[str]]] = []
    for version in order:
        value = per_version.get(version)
        if value is None:
            continue
        if out and out[-1][0] == value and order.index(out[-1][1][-1]) == order.index(version) - 1:
            out[-1][1].append(version)
        else:
            out.append((value, [version]))
    return out


def _value(fact: dict[str, Any], version: str, order: list[str]) -> Any:
    for step in fact["history"]:
        if order.index(step["from"]) <= order.index(version) <= order.index(step["to"]):
            return step["value"]
    return None


def _ever(fact: dict[str, Any], name: str) -> bool:
    return any(name in step["value"] for step in fact["history"])


def _runs(fact: dict[str, Any], order: list[str], test: Any) -> list[tuple[int, int, bool, str]]:
    """(first, last, test result, file) over consecutive releases where the fact is present and the test agrees."""
    out: list[tuple[int, int, bool, str]] = []
    for i, version in enumerate(order):
        value = _value(fact, version, order)
        if value is None:
            continue
        step = next(s for s in fact["history"] if order.index(s["from"]) <= i <= order.index(s["to"]))
        result = bool(test(value))
        if out and out[-1][2] == result and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i, result, out[-1][3])
        else:
            out.append((i, i, result, step["file"]))
    return out


def _span(step: dict[str, Any], order: list[str]) -> list[str]:
    return order[order.index(step["from"]):order.index(step["to"]) + 1]


def _label(verified: list[str], order: list[str]) -> str:
    if len(verified) > 1 and order.index(verified[-1]) - order.index(verified[0]) == len(verified) - 1:
        return f"{verified[0]}-{verified[-1]} (every release read between)"
    return ", ".join(verified)


def _closed(verified: list[str], order: list[str]) -> list[str]:
    """The releases a gate was read at, as closed ranges over consecutive releases read (every minor release between
    two releases read was read: matrices/SCHEMA.md §2.3'')."""
    out: list[str] = []
    run: list[str] = []
    for version in verified:
        if run and order.index(version) != order.index(run[-1]) + 1:
            out.append(run[0] if len(run) == 1 else f">={run[0]},<={run[-1]}")
            run = []
        run.append(version)
    if run:
        out.append(run[0] if len(run) == 1 else f">={run[0]},<={run[-1]}")
    return out


def _cc(capability: int) -> str:
    return f"{capability // 10}.{capability % 10}"


