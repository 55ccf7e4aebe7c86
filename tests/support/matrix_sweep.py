"""The matrix sweeps' engine: which rule ties the resolver would meet over many checkpoints x engines x versions
x backends x GPUs, without building the verdicts.

``resolve_one`` raises ``MatrixDataError`` (ambiguous-rules) only in ``decide``, after the hardware and backend
gates; building a verdict's texts, sources and modifiers costs as much again and cannot raise. So the sweeps
run the same gates and the same ``matching_rules`` + ``decide`` on the same combinations, with the rules that
cannot hold at a (version, backend, GPU) filtered out once instead of once per checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from qcheck.matrix.resolve import decide, matching_rules, pick_backend, select_version
from qcheck.matrix.rules import decide_read
from qcheck.matrix.schema import MatrixDataError, Target
from qcheck.matrix.versions import contains
from qcheck.model import Inspection


def rule_ties(matrix: Any, probes: Mapping[str, Sequence[Inspection]], targets: Iterable[Target], *,
              every_version: bool = True) -> tuple[set[str], int]:
    """(the ambiguous-rules errors met, the number of (probe, engine, version, backend, GPU) combinations
    decided) for ``probes`` (method -> inspections) on every engine and backend, at every version the data
    names (or the newest), on every target (or none, for providers)."""
    errors: set[str] = set()
    decided = 0
    targets = list(targets)
    for engine in matrix.engines.values():
        backend_names: list[str | None] = [None, *engine.backends] if engine.backends else [None]
        for version in engine.versions if every_version else [None]:
            _, at, _ = select_version(engine, version)
            for backend_name in backend_names:
                for target in targets if engine.needs_gpu else [None]:
                    if target is not None and target.vendor not in engine.hardware:
                        continue  # resolve_one answers "unsupported" before any rule
                    backend, problem = pick_backend(engine, backend_name, target)
                    if problem is not None:
                        continue
                    for method, inspections in probes.items():
                        rules = [r for r in engine.rules_for(method)
                                 if (r.versions is None or contains(r.versions, at))
                                 and (r.backends is None or (backend is not None and backend.name in r.backends))
                                 and (not r.hardware or (target is not None
                                                         and all(h.test(target) for h in r.hardware)))]
                        decided += len(inspections)
                        if not rules:
                            continue
                        for probe in inspections:
                            try:
                                decide_read(engine, matching_rules(engine, probe, at, target, backend, rules), at)
                            except MatrixDataError as exc:
                                errors.add(str(exc))
    return errors, decided


def kv_rule_ties(matrix: Any, probe: Inspection, targets: Iterable[Target]) -> tuple[set[str], int]:
    """(the ambiguous-rules errors met, the combinations decided) for the ``[[kv_rule]]`` entries: every (K, V)
    pair an engine's ``[kv_cache]`` accepts (K = V for an engine with one setting), under every setting of the
    knobs its rules test, at every version, backend and target, as qcheck.matrix.kvcache decides it. KV rules
    have no checkpoint conditions, so one probe stands for every checkpoint."""
    import itertools

    from qcheck.request import EngineKnobs

    errors: set[str] = set()
    decided = 0
    targets = list(targets)
    for engine in matrix.engines.values():
        if engine.kv_cache is None or not engine.kv_rules:
            continue
        accepts = engine.kv_cache.accepts
        pairs = list(itertools.product(accepts, accepts)) if engine.kv_cache.separate else [(d, d) for d in accepts]
        knob_values: dict[str, set[Any]] = {}
        for kv_rule in engine.kv_rules:
            for name, value in kv_rule.knobs:
                knob_values.setdefault(name, {None}).add(value)
        settings = [EngineKnobs(**dict(zip(knob_values, combo, strict=True)))
                    for combo in itertools.product(*knob_values.values())]
        backend_names: list[str | None] = [None, *engine.backends] if engine.backends else [None]
        for version in engine.versions:
            _, at, _ = select_version(engine, version)
            for backend_name in backend_names:
                for target in targets if engine.needs_gpu else [None]:
                    if target is not None and target.vendor not in engine.hardware:
                        continue
                    backend, problem = pick_backend(engine, backend_name, target)
                    if problem is not None:
                        continue
                    live = [r for r in engine.kv_rules if matching_rules(engine, probe, at, target, backend, [r.rule])]
                    for (k, v), knobs in itertools.product(pairs, settings):
                        rules = [r.rule for r in live if r.pair.holds(k, v)
                                 and all(getattr(knobs, n) == x for n, x in r.knobs)]
                        decided += 1
                        try:
                            decide(engine, [(r, []) for r in rules])
                        except MatrixDataError as exc:
                            errors.add(f"{k}-{v} {knobs.given()}: {exc}")
    return errors, decided


def build_overlaps(matrix: Any) -> list[str]:
    """Engine versions two ``[[build]]`` entries both describe: qcheck.matrix.builds takes the first, so the
    answer would depend on file order."""
    out = []
    for engine in matrix.engines.values():
        for version in engine.versions:
            _, at, _ = select_version(engine, version)
            covering = [i for i, b in enumerate(engine.builds) if b.versions is None or contains(b.versions, at)]
            if len(covering) > 1:
                out.append(f"{engine.id} {version}: [[build]] #{' and #'.join(str(i + 1) for i in covering)}")
    return out


def gpu_name_ties(gpus: Any) -> list[str]:
    """``--gpu`` values two entries of gpus.toml could answer: a compute capability listed by two architectures
    (the lookup takes the first), and a name or alias that reads as a compute capability of another architecture
    (the name wins, silently shadowing the capability). Duplicate names are refused by the loader already."""
    from qcheck.matrix.gpus import parse_cc_name

    out = []
    owners: dict[str, list[str]] = {}
    for arch in gpus.archs.values():
        for cc in arch.ccs:
            owners.setdefault(cc, []).append(arch.id)
    out += [f"compute capability {cc}: {', '.join(a)}" for cc, a in sorted(owners.items()) if len(a) > 1]
    entries = [(arch.id, arch.id, (arch.id, *arch.aliases)) for arch in gpus.archs.values()]
    entries += [(f"gpu '{g.id}'", g.arch, (g.id, *g.names)) for g in gpus.gpus.values()]
    for owner, arch_id, names in entries:
        for name in names:
            cc = parse_cc_name(name)
            if cc is not None and cc in owners and arch_id not in owners[cc]:
                out.append(f"{owner} answers to {name!r}, which reads as compute capability {cc} of "
                           f"{', '.join(owners[cc])}")
    return out


def transformers_name_pairs() -> list[dict[str, str]]:
    """(model_type, HF class) pairs a real checkpoint carries together: the installed transformers' causal-LM and
    image-text-to-text auto mappings, read as text (no import: seconds saved, nothing executed)."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        return []
    text = (Path(spec.origin).parent / "models" / "auto" / "modeling_auto.py").read_text(encoding="utf-8")
    pairs: list[dict[str, str]] = []
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id in (
                "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES") \
                and isinstance(node.value, ast.Call) and node.value.args and isinstance(node.value.args[0], ast.List):
            for item in node.value.args[0].elts:
                if isinstance(item, ast.Tuple) and all(isinstance(e, ast.Constant) for e in item.elts):
                    model_type, cls = (e.value for e in item.elts)  # type: ignore[attr-defined]
                    pairs.append({"model-type": model_type, "hf-class": cls})
    return pairs


def arch_list_disagreements(matrix: Any, pairs: Iterable[Mapping[str, str]]) -> list[str]:
    """Where an engine's architecture data has two ``load`` lists for one container keyed on different names
    (transformers: the HF class and the model_type), the names a checkpoint carries together (``pairs``) on which
    the two lists disagree at a release read: one has the name there, the other does not. qcheck.matrix.architectures
    asks the first list of the file that has its name, so the verdict would follow file order."""
    from qcheck.matrix.architectures import load_architectures

    out = []
    pairs = list(pairs)
    for engine in matrix.engines:
        data = load_architectures(matrix.root, engine)
        if data is None:
            continue
        for container in ("safetensors", "gguf"):
            load = [lst for lst in data.lists if container in lst.containers and lst.role == "load"]
            for i, a in enumerate(load):
                for b in load[i + 1:]:
                    if a.names == b.names:
                        continue
                    for names in pairs:
                        ea, eb = a.arch.get(names.get(a.names, "")), b.arch.get(names.get(b.names, ""))
                        if ea is None or eb is None:
                            continue  # only one list knows the checkpoint: it decides, whatever the order
                        for version in sorted(set(a.versions_read) & set(b.versions_read), key=a.versions_read.index):
                            if _listed(a, ea, version) != _listed(b, eb, version):
                                out.append(f"{engine} {version}: {a.id} {'has' if _listed(a, ea, version) else 'lacks'} "
                                           f"{names[a.names]}, {b.id} {'has' if _listed(b, eb, version) else 'lacks'} "
                                           f"{names[b.names]}")
    return out


def _listed(lst: Any, entry: Any, version: str) -> bool:
    at = lst.versions_read.index(version)
    first = lst.versions_read.index(entry.first)
    return first <= at and (entry.last is None or at <= lst.versions_read.index(entry.last))
