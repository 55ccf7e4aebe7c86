"""The architecture dimension: does this engine, at this version, load this model architecture?

Data: ``matrices/architectures/<engine>.toml``, generated from the engines' released packages by
``matrices/tools/extract_architectures.py`` (see matrices/SCHEMA.md §architectures). Each file holds lists of
names (HF ``architectures[0]`` classes, config ``model_type`` values, or GGUF ``general.architecture`` values),
each with the first release read that has the name and, if a later release dropped it, the last one.

Only the judged engine's file is read (a check of one engine costs one small TOML parse). An engine without a
file is ``unknown`` for every architecture, never native; a version between two releases read, before the
first or after the last release read, is ``unknown`` unless the data decides it either way.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qcheck.matrix.versions import SCHEMES, parse_version
from qcheck.matrix.vocab import METHODS, MatrixDataError, Where, check_keys
from qcheck.model import Judgement, Source

if TYPE_CHECKING:
    from packaging.version import Version

    from qcheck.matrix.deployment import Deployment, MatrixFiles
    from qcheck.model import Inspection

__all__ = ["ArchData", "ArchList", "ArchName", "architecture_names", "judge_architecture", "load_architectures",
           "not_a_language_model"]

DIMENSION = "architecture"
NAME_KINDS = ("hf-class", "model-type", "gguf-arch")
KINDS = ("text", "multimodal", "embedding", "encoder-decoder", "speculative", "reward", "classifier", "other")
ROLES = ("load", "convert")
CONTAINERS = ("gguf", "safetensors")
FILE_KEYS = {"architectures", "list"}
HEAD_KEYS = {"engine", "version_scheme", "versions_read", "generated_by", "read", "versions_of", "note", "derive",
             "source", "source_read"}
DERIVE_KEYS = {"containers", "from", "source", "versions", "note", "absent"}
LIST_KEYS = {"id", "names", "containers", "source", "note", "versions_read", "arch", "role", "unlisted", "fallback",
             "methods", "exhaustive"}
FALLBACK_KEYS = {"via", "marker", "reason"}
#: the file-name stem of ``matrices/architectures/`` for an engine id (ids are file names already)
DIR = "architectures"


@dataclass(frozen=True)
class ArchName:
    """One name of a list: the first release read that has it, the last one (None: still there), its kind."""

    first: str
    last: str | None
    kind: str


@dataclass
class ArchList:
    """One list of names of an engine, read from one place in its source at ``versions_read``."""

    id: str
    names: str  # one of NAME_KINDS
    containers: tuple[str, ...]
    source: str
    role: str  # "load": the engine loads these; "convert": it converts them first (llama.cpp's converter)
    versions_read: tuple[str, ...]
    parsed: tuple[Version, ...]
    arch: dict[str, ArchName]
    note: str | None = None
    #: what the engine does with a name it does not list, when that is not a refusal (ExLlamaV2 loads it as
    #: LlamaForCausalLM with a warning): such names are unknown, with this text as the reason
    unlisted: str | None = None
    #: a generic loader for names the list lacks, present from the release that lists ``marker`` (vLLM's
    #: Transformers backend, TransformersForCausalLM): {"via": engine, "marker": name, "reason": text}
    fallback: dict[str, str] | None = None
    #: lower-cased name -> name, for case-insensitive lookups of user input (``qcheck matrix --arch``)
    folded: dict[str, str] = field(default_factory=dict)
    #: the weight methods whose checkpoints this list judges (None: every one); Ollama's importer converts
    #: FP16/BF16/FP32, FP8 and GPT-OSS MXFP4 safetensors, not e.g. MLX ones (those go to its MLX runner)
    methods: tuple[str, ...] | None = None
    #: False for a list that names what a vendor documents (TensorRT-LLM's supported-models page), not all the
    #: engine loads: a name absent at a release read is unknown there, never unsupported
    exhaustive: bool = True


@dataclass(frozen=True)
class Derive:
    """Checkpoints in ``containers`` load through another engine's list (``from``): Ollama and LM Studio run GGUF
    with llama.cpp, vLLM reads a GGUF's config through transformers' GGUF loader. ``versions`` maps this engine's
    versions to the other engine's (None: judge at the other engine's newest release read)."""

    containers: tuple[str, ...]
    engine: str
    source: str
    versions: dict[str, str] | None
    note: str | None = None
    #: what a name the other engine does not load means here: "unsupported" (that loader is the only way in) or
    #: "unknown" (it is one gate of several, e.g. vLLM's GGUF plugin may parse configs itself)
    absent: str = "unsupported"


@dataclass
class ArchData:
    """One engine's architecture file, validated."""

    engine: str
    file: str
    scheme: str
    versions_read: tuple[str, ...]
    read: dict[str, str]
    generated_by: str
    lists: list[ArchList]
    #: the package whose releases ``versions_read`` are, when not the engine's own versions (mlx: mlx-lm)
    versions_of: str | None = None
    note: str | None = None
    derive: Derive | None = None
    #: for a file without lists: where its ``note`` was read, and when
    source: str | None = None
    source_read: str | None = None


_CACHE: dict[tuple[Path, str], ArchData | None] = {}


def load_architectures(root: Path, engine: str) -> ArchData | None:
    """The engine's architecture data under ``root/architectures/`` (None when there is no file), cached."""
    key = (root, engine)
    if key not in _CACHE:
        path = root / DIR / f"{engine}.toml"
        _CACHE[key] = _load(root, path, engine) if path.is_file() else None
    return _CACHE[key]


def all_architecture_files(root: Path) -> list[str]:
    """The engine ids that have an architecture file (for ``qcheck matrix --arch`` and ``--validate``)."""
    folder = root / DIR
    return sorted(p.stem for p in folder.glob("*.toml")) if folder.is_dir() else []


def _load(root: Path, path: Path, engine: str) -> ArchData:
    from qcheck.matrix.files import display, read_toml

    return validate(read_toml(root, path), display(root, path), engine)


def clear_cache() -> None:
    """Forget loaded architecture files (tests that rewrite a matrix directory in place)."""
    _CACHE.clear()


def _strings(value: Any, ctx: Where, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        ctx.fail("type", f"{what} must be a list of non-empty strings")
    return tuple(value)


def validate(raw: dict[str, Any], display: str, engine: str) -> ArchData:
    """Check a parsed architecture file against the schema; raises MatrixDataError naming what to fix."""
    top = Where(display)
    check_keys(raw, FILE_KEYS, {"architectures"}, top)
    head = raw["architectures"]
    if not isinstance(head, dict):
        top.fail("type", "[architectures] must be a table")
    ctx = Where(display, "[architectures]")
    check_keys(head, HEAD_KEYS, {"engine", "version_scheme", "versions_read", "generated_by"}, ctx)
    if head["engine"] != engine:
        ctx.fail("engine-id", f"engine = {head['engine']!r} but the file is named for {engine!r}")
    scheme = head["version_scheme"]
    if scheme not in SCHEMES:
        ctx.fail("version-scheme", f"version_scheme {scheme!r} is not one of {', '.join(SCHEMES)}")
    versions = _strings(head["versions_read"], ctx, "versions_read")
    parsed = _parse_versions(versions, scheme, ctx)
    read = head.get("read", {})
    if not isinstance(read, dict) or set(read) != set(versions):
        ctx.fail("read", "read must say, for every version in versions_read, which package file it came from")
    derive = _validate_derive(head.get("derive"), Where(display, "[architectures.derive]"))
    lists_raw = raw.get("list", [])
    if not isinstance(lists_raw, list) or (not lists_raw and derive is None and not head.get("note")):
        top.fail("type", "[[list]] must be one or more tables (or [architectures.derive] must say where from, or "
                         "note why there is no list)")
    lists = [_validate_list(entry, display, scheme, parsed) for entry in lists_raw]
    ids = [lst.id for lst in lists]
    if len(set(ids)) != len(ids):
        top.fail("duplicate-id", f"list ids repeat: {ids}")
    return ArchData(engine=engine, file=display, scheme=scheme, versions_read=versions, read=dict(read),
                    generated_by=str(head["generated_by"]), lists=lists,
                    versions_of=head.get("versions_of"), note=head.get("note"), derive=derive,
                    source=head.get("source"), source_read=head.get("source_read"))


def _validate_derive(raw: Any, ctx: Where) -> Derive | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        ctx.fail("type", "must be a table { containers, from, source, versions? }")
    check_keys(raw, DERIVE_KEYS, {"containers", "from", "source"}, ctx)
    containers = _strings(raw["containers"], ctx, "containers")
    if not set(containers) <= set(CONTAINERS):
        ctx.fail("containers", f"containers must be among {', '.join(CONTAINERS)}")
    versions = raw.get("versions")
    if versions is not None and (not isinstance(versions, dict)
                                 or not all(isinstance(k, str) and isinstance(v, str) for k, v in versions.items())):
        ctx.fail("type", "versions must map this engine's versions to the other engine's")
    absent = raw.get("absent", "unsupported")
    if absent not in ("unsupported", "unknown"):
        ctx.fail("absent", f"absent {absent!r} must be unsupported or unknown")
    return Derive(containers, str(raw["from"]), str(raw["source"]), dict(versions) if versions is not None else None,
                  raw.get("note"), absent)


def _parse_versions(versions: tuple[str, ...], scheme: str, ctx: Where) -> tuple[Version, ...]:
    try:
        parsed = tuple(parse_version(v, scheme) for v in versions)
    except ValueError as exc:
        ctx.fail("version", str(exc))
    if list(parsed) != sorted(parsed) or len(set(parsed)) != len(parsed):
        ctx.fail("version-order", "versions_read must be distinct and oldest first")
    return parsed


def _validate_list(entry: Any, display: str, scheme: str, all_parsed: tuple[Version, ...]) -> ArchList:
    if not isinstance(entry, dict):
        Where(display).fail("type", "each [[list]] must be a table")
    ctx = Where(display, f"list '{entry.get('id', '?')}'")
    check_keys(entry, LIST_KEYS, {"id", "names", "containers", "source", "versions_read", "arch"}, ctx)
    if entry["names"] not in NAME_KINDS:
        ctx.fail("names", f"names {entry['names']!r} is not one of {', '.join(NAME_KINDS)}")
    containers = _strings(entry["containers"], ctx, "containers")
    for c in containers:
        if c not in CONTAINERS:
            ctx.fail("containers", f"container {c!r} is not one of {', '.join(CONTAINERS)}")
    role = entry.get("role", "load")
    if role not in ROLES:
        ctx.fail("role", f"role {role!r} is not one of {', '.join(ROLES)}")
    versions = _strings(entry["versions_read"], ctx, "versions_read")
    parsed = _parse_versions(versions, scheme, ctx)
    if not set(parsed) <= set(all_parsed):
        ctx.fail("versions-read", "a list's versions_read must be among [architectures] versions_read")
    arch_raw = entry["arch"]
    if not isinstance(arch_raw, str):
        ctx.fail("type", "arch must be a multi-line string: one 'NAME FIRST LAST KIND' a line")
    arch = _parse_rows(arch_raw, versions, display, entry["id"])
    folded = {name.lower(): name for name in arch}
    methods = None
    if "methods" in entry:
        methods = _strings(entry["methods"], ctx, "methods")
        bad = [m for m in methods if m not in METHODS]
        if bad:
            ctx.fail("methods", f"methods {bad} are not canonical methods ({', '.join(sorted(METHODS))})")
    exhaustive = entry.get("exhaustive", True)
    if not isinstance(exhaustive, bool):
        ctx.fail("type", "exhaustive must be true or false")
    return ArchList(id=entry["id"], names=entry["names"], containers=containers, source=entry["source"],
                    role=role, versions_read=versions, parsed=parsed, arch=arch, note=entry.get("note"),
                    unlisted=entry.get("unlisted"), fallback=_validate_fallback(entry.get("fallback"), ctx, arch),
                    folded=folded, methods=methods, exhaustive=exhaustive)


def _validate_fallback(raw: Any, ctx: Where, arch: dict[str, ArchName]) -> dict[str, str] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        ctx.fail("type", "fallback must be a table { via, marker, reason }")
    check_keys(raw, FALLBACK_KEYS, FALLBACK_KEYS, ctx)
    if not all(isinstance(v, str) and v for v in raw.values()):
        ctx.fail("type", "fallback values must be non-empty strings")
    if raw["marker"] not in arch:
        ctx.fail("fallback", f"marker {raw['marker']!r} is not a name of this list")
    return dict(raw)


def _parse_rows(text: str, versions: tuple[str, ...], display: str, list_id: str) -> dict[str, ArchName]:
    """``NAME FIRST LAST KIND`` rows (LAST ``-`` while the name is still there). A string, not a TOML table per
    name: tomllib parses a thousand inline tables slowly, and ``qcheck check`` reads this on every run."""
    arch: dict[str, ArchName] = {}
    index = {v: i for i, v in enumerate(versions)}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        where = Where(display, f"list '{list_id}' arch line {number}")
        if len(fields) != 4:
            where.fail("row", f"{line.strip()!r} is not 'NAME FIRST LAST KIND'")
        name, first, last, kind = fields
        if first not in index:
            where.fail("version", f"{name}: first {first!r} is not a version this list read")
        if last != "-" and last not in index:
            where.fail("version", f"{name}: last {last!r} is not a version this list read")
        if kind not in KINDS:
            where.fail("kind", f"{name}: kind {kind!r} is not one of {', '.join(KINDS)}")
        if last != "-" and index[last] < index[first]:
            where.fail("version-order", f"{name}: last is older than first")
        if name in arch:
            where.fail("duplicate-name", f"{name} is listed twice")
        arch[name] = ArchName(first, None if last == "-" else last, kind)
    return arch


# --------------------------------------------------------------------------------------------------------------
# what the checkpoint is called, per naming

def architecture_names(inspection: Inspection) -> dict[str, str]:
    """The checkpoint's names per naming: ``gguf-arch`` (GGUF ``general.architecture``), ``hf-class``
    (config.json ``architectures[0]``), ``model-type`` (config.json ``model_type``)."""
    if inspection.container == "gguf":
        return {"gguf-arch": inspection.architecture} if inspection.architecture else {}
    out = {}
    if inspection.architecture:
        out["hf-class"] = inspection.architecture
    if inspection.model_type:
        out["model-type"] = inspection.model_type
    return out


_VISION_SUFFIXES = ("VisionModel", "VisionTransformer", "VisionEncoder", "ImageProcessor")
_VISION_TYPES = ("clip_vision_model", "siglip_vision_model", "siglip2_vision_model", "clip", "siglip")


def not_a_language_model(inspection: Inspection) -> str | None:
    """Why this checkpoint is not a language model to judge on its own (a GGUF mmproj, a vision tower), or None."""
    base = Path(inspection.path).name.lower()
    if inspection.container == "gguf" and (inspection.architecture == "clip" or "mmproj" in base):
        return ("a multimodal projector (mmproj) GGUF is not a language model: it is loaded beside its language "
                "model (llama-server -m MODEL.gguf --mmproj THIS.gguf); judge the language model's GGUF")
    arch = inspection.architecture or ""
    if inspection.container != "gguf" and (arch.endswith(_VISION_SUFFIXES) or inspection.model_type in _VISION_TYPES):
        return (f"{arch or inspection.model_type} is a vision encoder, not a language model: engines load it as "
                "part of a multimodal model, not on its own")
    return None


def default_root() -> Path:
    """The matrix directory ``load_matrix()`` uses (``$QCHECK_MATRICES`` or the shipped ``matrices/``)."""
    import os

    env = os.environ.get("QCHECK_MATRICES")
    if env:
        return Path(env).resolve()
    from qcheck.data import data_dir

    return data_dir("matrices").resolve()


def note_unknown_gguf_architecture(insp: Inspection) -> None:
    """Warn when a GGUF's ``general.architecture`` is a name llama.cpp has not defined in any build read: llama.cpp
    (and Ollama and LM Studio, which run GGUF with it) refuse it with "unknown model architecture"."""
    name = insp.architecture
    if not name:
        return
    try:
        data = load_architectures(default_root(), "llama.cpp")
    except (FileNotFoundError, MatrixDataError):
        return  # no data (or broken data, reported by check/matrix --validate): nothing to say here
    lists = [lst for lst in (data.lists if data else []) if lst.names == "gguf-arch" and lst.role == "load"]
    if not lists or any(name in lst.arch for lst in lists):
        return
    read = f"{lists[0].versions_read[0]} .. {lists[0].versions_read[-1]}"
    insp.warnings.append(f"general.architecture {name!r} is not an architecture llama.cpp has defined in any build "
                         f"read ({read}): llama.cpp, and the engines that run GGUF with it, refuse it as an unknown "
                         "model architecture")


# --------------------------------------------------------------------------------------------------------------
# the judgement

def judge_architecture(d: Deployment) -> Judgement | None:
    """The architecture dimension of one deployment (None: nothing to judge, e.g. an adapter or no name)."""
    insp = d.inspection
    if insp.adapter is not None:
        return None  # an adapter carries no model: the provider's adapter rules judge it
    names = architecture_names(insp)
    if not names:
        if insp.container == "safetensors" and not any(f.kind == "config" and f.name.endswith("config.json")
                                                       and not f.name.endswith("adapter_config.json")
                                                       for f in insp.files):
            return Judgement(DIMENSION, "unknown", [  # never a silent "runs" for weights an engine cannot load alone
                f"no config.json: whether {d.request.engine.name} loads this checkpoint is not known (it reads the "
                "architecture from config.json; vLLM 0.34.0 refuses a directory without it or params.json)"])
        return None
    engine = d.request.engine
    special = not_a_language_model(insp)
    if special is not None:
        return Judgement(DIMENSION, "unknown", [special])
    data = load_architectures(d.matrix.root, engine.id)
    shown = names.get("gguf-arch") or names.get("hf-class") or names.get("model-type") or ""
    if data is None and d.request.installed is not None:
        return _judge_installed(d, names, None, None)
    if data is None:
        return Judgement(DIMENSION, "unknown", [
            f"qcheck has no architecture data for {engine.name}: whether it loads {shown} is not known"])
    method = insp.quantization.method
    lists = [lst for lst in data.lists if insp.container in lst.containers and lst.names in names
             and (lst.methods is None or method in lst.methods)]
    load = [lst for lst in lists if lst.role == "load"]
    derive = data.derive
    if derive is not None and insp.container in derive.containers and (
            not load or (derive.versions and d.version in derive.versions)):
        # the other engine decides, unless a list still read at this version loads the name (Ollama's own engine)
        at = _requested(d.version, data.scheme, d.at)
        current = [lst for lst in load if names[lst.names] in lst.arch and lst.parsed[-1] >= at]
        own = next((j for j in (_judge_in_list(d, data, lst, names[lst.names]) for lst in current)
                    if j.status == "native"), None)
        return own if own is not None else _judge_derived(d, derive, names, shown)
    if not load:
        if insp.container == "safetensors" and any(lst.role == "convert" for lst in lists):
            return None  # llama.cpp-like: loads GGUF only; the weight-format rules say so
        what = "GGUF files" if insp.container == "gguf" else f"{insp.container} checkpoints"
        if not data.lists and data.derive is None and data.note:
            return Judgement(DIMENSION, "unknown", [f"{data.note}: whether {engine.name} takes {shown} is not known"],
                             [Source(ref=data.source, version=data.source_read)] if data.source else [])
        return Judgement(DIMENSION, "unknown", [
            f"qcheck has no data on which architectures {engine.name} loads from {what}: whether it loads "
            f"{shown} is not known"])
    lst, judgement = _best(d, data, load, names)
    inst = d.request.installed
    if inst is not None and inst.registry(lst.names) is None:
        # the installed engine carries no such list qcheck can read (vLLM's GGUF mapping): the shipped data judges
        judgement.warnings.append(f"installed {inst.package} {inst.version}: qcheck reads no {lst.id} list from it; "
                                  f"judged from the shipped data")
        return judgement
    if inst is not None:
        return _judge_installed(d, names, judgement, lst)
    return judgement


def _judge_derived(d: Deployment, derive: Derive, names: dict[str, str], shown: str) -> Judgement:
    """Judge through the engine this one hands the checkpoint to (see Derive)."""
    engine = d.request.engine
    other = load_architectures(d.matrix.root, derive.engine)
    lists = [lst for lst in (other.lists if other else []) if d.inspection.container in lst.containers
             and lst.names in names and lst.role == "load"]
    if other is None or not lists:
        return Judgement(DIMENSION, "unknown", [f"{engine.name} loads these through {derive.engine}, for which "
                                                f"qcheck has no architecture data: whether it loads {shown} is not known"])
    lst = _preferred(lists, names)
    files = "GGUF" if d.inspection.container == "gguf" else d.inspection.container
    via = f"{engine.name} {d.version} loads {files} files through {derive.engine}"
    version: str | None
    if derive.versions is None:
        version = lst.versions_read[-1]
        via += f" (judged at {derive.engine} {version}, the newest release read)"
    else:
        version = derive.versions.get(d.version)
        if version is None:
            why = (f"{derive.note}: whether it loads {shown} is not known" if not derive.versions and derive.note
                   else f"which {derive.engine} version it bundles is not recorded (known: "
                        f"{', '.join(derive.versions) or 'none'})")
            return Judgement(DIMENSION, "unknown", [
                f"{engine.name} {d.version} loads these through {derive.engine}, but {why}"],
                [Source(ref=derive.source)])
        via += f" {version}"
    judgement = _judge_in_list(d, other, lst, names[lst.names], version=version, label=derive.engine,
                               engine_id=derive.engine)
    judgement.reasons = [f"{via}: {judgement.reasons[0]}", *judgement.reasons[1:]]
    if judgement.status == "unsupported" and derive.absent == "unknown":
        judgement.status = "unknown"
        judgement.reasons.append(f"{derive.engine} is one way {engine.name} reads these files, not known to be the "
                                 "only one")
    judgement.suggestions = []  # versions of the other engine are not --engine values of this one
    judgement.sources.append(Source(ref=derive.source, version=d.version))
    return judgement


def _judge_installed(d: Deployment, names: dict[str, str], shipped: Judgement | None,
                     lst: ArchList | None) -> Judgement:
    """``NAME=installed``: the installed registry decides; where the shipped data disagrees, say so."""
    inst = d.request.installed
    assert inst is not None
    namings = [lst.names] if lst is not None else [n for n in ("gguf-arch", "hf-class", "model-type") if n in names]
    naming = next((n for n in namings if inst.registry(n) is not None), None)
    where = f"installed {inst.package} {inst.version} ({inst.location})"
    if naming is None:
        return Judgement(DIMENSION, "unknown", [f"{where} has no registry qcheck can read for "
                                                f"{d.inspection.container} checkpoints"])
    registry = inst.registry(naming) or frozenset()
    name = names[naming]
    present = name in registry
    reasons = [f"{where} {'registers' if present else 'does not register'} {name}"]
    warnings: list[str] = []
    if shipped is not None and shipped.status in ("native", "unsupported") and \
            (shipped.status == "native") != present:
        warnings.append(f"the shipped data disagrees: {shipped.reasons[0]}")
    elif shipped is not None and shipped.status == "unknown":
        warnings.append(f"the shipped data cannot say: {shipped.reasons[0]}")
    if lst is not None:
        shipped_names = {n for n, e in lst.arch.items() if e.last is None}
        extra, missing = sorted(registry - shipped_names), sorted(shipped_names - registry)
        if extra or missing:
            warnings.append(f"{inst.package} {inst.version} vs the shipped data (read up to {lst.versions_read[-1]}): "
                            f"{len(extra)} names only installed{_some(extra)}, {len(missing)} only in the data"
                            f"{_some(missing)}")
    sources = [Source(ref=f"{inst.location} ({inst.package} registry, read as text)", version=inst.version)]
    return Judgement(DIMENSION, "native" if present else "unsupported", reasons, sources, warnings=warnings)


def _some(names: list[str], limit: int = 5) -> str:
    return f" ({', '.join(names[:limit])}{' ...' if len(names) > limit else ''})" if names else ""


def _best(d: Deployment, data: ArchData, load: list[ArchList], names: dict[str, str]) -> tuple[ArchList, Judgement]:
    """The list that decides and its judgement: of the lists holding the name, one that loads it at this version
    (Ollama's own engine or its vendored llama.cpp), else the first of them (file order), else the first list.
    Only lists of the first holding list's naming compete: lists of another naming are a different question
    (transformers resolves the model_type before any class, so its model_type list, first in the file, decides
    whenever it knows the name; tests/test_matrix_data.py checks no other engine's lists disagree)."""
    holding = [lst for lst in load if names[lst.names] in lst.arch]
    holding = [lst for lst in holding if lst.names == holding[0].names]
    judged = [(lst, _judge_in_list(d, data, lst, names[lst.names])) for lst in holding]
    native = next((pair for pair in judged if pair[1].status == "native"), None)
    if native is not None:
        return native
    if judged:
        return judged[0]
    lst = _preferred(load, names)
    return lst, _judge_in_list(d, data, lst, names[lst.names])


def _preferred(lists: list[ArchList], names: dict[str, str]) -> ArchList:
    """The list that decides: a name found in it beats one missing (transformers loads by model_type, vLLM and
    SGLang by architectures[0]); ties go to file order."""
    for lst in lists:
        if names[lst.names] in lst.arch:
            return lst
    return lists[0]


def _source(data: ArchData, lst: ArchList, version: str) -> Source:
    return Source(ref=f"{lst.source} (generated: {data.generated_by})", version=version)


def _label(data: ArchData, engine_name: str) -> str:
    return data.versions_of or engine_name


def _judge_in_list(d: Deployment, data: ArchData, lst: ArchList, name: str, *, version: str | None = None,
                   label: str | None = None, engine_id: str | None = None) -> Judgement:
    """Judge ``name`` in one list at the deployment's version (or ``version``, for a derived judgement, with the
    other engine's ``label`` and id in the texts)."""
    engine = d.request.engine
    label = label or _label(data, engine.name)
    engine_id = engine_id or engine.id
    newest, oldest = lst.versions_read[-1], lst.versions_read[0]
    kind_word = {"gguf-arch": "GGUF architecture", "hf-class": "architecture", "model-type": "model_type"}[lst.names]
    entry = lst.arch.get(name)
    if data.versions_of is not None:
        # versions are another package's (mlx-lm for MLX): judge at the newest release read, require the first
        if entry is None or entry.last is not None:
            return Judgement(DIMENSION, "unsupported", [
                f"{kind_word} {name} is not in {label} {newest} (newest release read)"], [_source(data, lst, newest)])
        return Judgement(DIMENSION, "native", [f"{kind_word} {name} is in {label} since {entry.first}"],
                         [_source(data, lst, entry.first)], requires=[f"{label} >= {entry.first}"])
    version = version or d.version
    at = _requested(version, data.scheme, d.at, lst.parsed)
    idx = _position(lst, at)
    if entry is None:
        if at > lst.parsed[-1]:
            return Judgement(DIMENSION, "unknown", [
                f"{kind_word} {name} is not in {label} up to {newest} (the newest release read); {version} is "
                "newer and not read"], [_source(data, lst, newest)])
        if at < lst.parsed[0]:
            return Judgement(DIMENSION, "unknown", [
                f"{label} {version} is older than any release read ({oldest}); {name} is not in any of them"],
                [_source(data, lst, newest)])
        fallback = _fallback(d, lst, name, at)
        if fallback is not None:
            return fallback
        if lst.unlisted or not lst.exhaustive:
            return Judgement(DIMENSION, "unknown", [
                f"{kind_word} {name} is not listed by {label} in any release read ({oldest} .. {newest}); "
                f"{_not_exhaustive(lst)}"], [_source(data, lst, newest)])
        return Judgement(DIMENSION, "unsupported", [
            f"{label} {version} does not load {kind_word} {name}: it is in no release read ({oldest} .. {newest})"],
            [_source(data, lst, newest)])
    first_i = lst.versions_read.index(entry.first)
    last_i = lst.versions_read.index(entry.last) if entry.last else None
    src = [_source(data, lst, entry.first)]
    if at < lst.parsed[first_i]:
        if first_i > 0 and at <= lst.parsed[first_i - 1] and not lst.exhaustive:
            # a list that is not exhaustive (a docs page): absent at an older release read is not a refusal
            prev = lst.versions_read[first_i - 1]
            return Judgement(DIMENSION, "unknown", [
                f"{kind_word} {name} is listed by {label} from {entry.first}, not in {prev}; {_not_exhaustive(lst)}"], src,
                suggestions=[f"{label} {entry.first} lists {name}: --engine {engine_id}=={entry.first}"])
        if first_i > 0 and at <= lst.parsed[first_i - 1]:
            prev = lst.versions_read[first_i - 1]
            return Judgement(DIMENSION, "unsupported", [
                f"{label} {version} does not load {kind_word} {name}: it first appears in {entry.first} "
                f"(absent in {prev})"], src,
                suggestions=[f"{label} {entry.first} loads {name}: --engine {engine_id}=={entry.first}"])
        gap = f"between {lst.versions_read[first_i - 1]} and {entry.first}" if first_i > 0 else \
            f"in or before {entry.first} (the oldest release read)"
        return Judgement(DIMENSION, "unknown", [
            f"{kind_word} {name} appeared in {label} {gap}; whether {version} loads it is not known"], src,
            suggestions=[f"{label} {entry.first} loads {name}: --engine {engine_id}=={entry.first}"])
    if last_i is not None and at > lst.parsed[last_i]:
        nxt = lst.versions_read[last_i + 1]
        if not lst.exhaustive:
            return Judgement(DIMENSION, "unknown", [
                f"{kind_word} {name} is listed by {label} {entry.first} .. {entry.last}, not in the list read at "
                f"{nxt}; {_not_exhaustive(lst)}"], src,
                suggestions=[f"{label} {entry.last} lists {name}: --engine {engine_id}=={entry.last}"])
        if at >= lst.parsed[last_i + 1]:
            return Judgement(DIMENSION, "unsupported", [
                f"{label} {version} does not load {kind_word} {name}: it was removed after {entry.last} "
                f"(absent in {nxt})"], src,
                suggestions=[f"{label} {entry.last} still loads {name}: --engine {engine_id}=={entry.last}"])
        return Judgement(DIMENSION, "unknown", [
            f"{kind_word} {name} was removed from {label} between {entry.last} and {nxt}; whether {version} "
            "loads it is not known"], src)
    reason = f"{label} loads {kind_word} {name} since {entry.first}"
    if idx is None:
        reason += f" (releases read up to {newest}; {version} is newer)"
    # the evidence: the newest release read at or before the version judged
    judgement = Judgement(DIMENSION, "native", [reason],
                          [_source(data, lst, lst.versions_read[idx] if idx is not None else newest)])
    if entry.kind not in ("text", "multimodal"):
        article = "an" if entry.kind[0] in "aeiou" else "a"
        judgement.reasons.append(f"{name} is registered as {article} {entry.kind} model in {label}, not for text "
                                 "generation")
    return judgement


def _not_exhaustive(lst: ArchList) -> str:
    return lst.unlisted or "the list is not exhaustive (a name it lacks is neither confirmed nor refused)"


def _fallback(d: Deployment, lst: ArchList, name: str, at: Version) -> Judgement | None:
    """A name the list lacks, at a version whose registry has the generic loader (``fallback.marker``), and that
    the ``via`` engine loads: not refused, but not known to run either (unknown, with the loader's condition)."""
    fb = lst.fallback
    if fb is None:
        return None
    marker = lst.arch[fb["marker"]]
    i = lst.versions_read.index(marker.first)
    if at < lst.parsed[i] and (i == 0 or at <= lst.parsed[i - 1]):
        return None  # no generic loader in this release yet (between two releases read: unknown below)
    other = load_architectures(d.matrix.root, fb["via"])
    lists = [x for x in (other.lists if other else []) if x.names == lst.names and x.role == "load"]
    hit = next((x for x in lists if name in x.arch and x.arch[name].last is None), None)
    if hit is None:
        return None
    return Judgement(DIMENSION, "unknown", [
        f"architecture {name} is not in {d.request.engine.name}'s registry; from {marker.first} it falls back to "
        f"{fb['marker']} for {fb['via']} models ({fb['via']} loads {name} since {hit.arch[name].first}): "
        f"{fb['reason']}"], [_source(other, hit, hit.versions_read[-1])] if other else [])


def _requested(version: str, scheme: str, fallback: Version, read: tuple[Version, ...] = ()) -> Version:
    """The version asked for, as such (the weight rules evaluate a version newer than their data at their newest;
    the architecture lists must not: a release after the newest one read may differ). A pre-release after the
    newest release read counts as its release (0.34.0rc1 as 0.34.0); one within the releases read is placed as
    it is (Ollama's 0.33.0rc1 comes after 0.32.15 and before 0.33.0rc2, the newest tag read)."""
    try:
        parsed = parse_version(version, scheme)
    except ValueError:
        return fallback
    if parsed.is_prerelease and (not read or parsed > read[-1]):
        return parse_version(parsed.base_version)
    return parsed


def _position(lst: ArchList, at: Version) -> int | None:
    """Index of the newest release read at or before ``at`` (None when ``at`` is after the newest read)."""
    if at > lst.parsed[-1]:
        return None
    return max((i for i, v in enumerate(lst.parsed) if v <= at), default=0)


# --------------------------------------------------------------------------------------------------------------
# ``qcheck matrix --arch NAME``: which engines and versions load a name

@dataclass
class ArchSupport:
    """One engine's answer for a name: per list where it was found, or why there is no answer."""

    engine: str
    list: str | None
    names: str | None
    name: str | None
    role: str | None
    first: str | None
    last: str | None
    kind: str | None
    versions_read: builtins.list[str]
    versions_of: str | None
    source: str | None
    status: str  # "loads", "converts", "removed", "never", "not-listed" and "not-listed-later" (a
    # non-exhaustive list), "no-data", "no-list",
    # "derived:<engine>:<containers>"

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def line(self) -> str:
        span = f"{self.versions_read[0]} .. {self.versions_read[-1]}" if self.versions_read else ""
        of = f" ({self.versions_of} releases)" if self.versions_of else ""
        if self.status == "no-data":
            return f"{self.engine:<13} no architecture data: unknown"
        if self.status == "no-list":
            return f"{self.engine:<13} no list: {self.source}"
        if self.status.startswith("derived:"):
            _, other, containers = self.status.split(":", 2)
            mapped = f", release -> {other} version recorded for {span}" if span else ""
            return f"{self.engine:<13} {containers.upper():<13} loads what {other} loads{mapped}"
        if self.status == "never":
            word = {"hf-class": "architectures[0] classes", "model-type": "model_type values",
                    "gguf-arch": "GGUF general.architecture values"}.get(self.names or "", "names")
            keyed = ("; it names models by config.json model_type, not by class: ask --arch MODEL_TYPE"
                     if self.names == "model-type" else "")
            return f"{self.engine:<13} {self.list:<13} not among its {word} in any release read ({span}){of}{keyed}"
        if self.status == "not-listed":
            return (f"{self.engine:<13} {self.list:<13} not listed in any release read ({span}); the list is not "
                    "exhaustive: unknown")
        verb = "converts" if self.role == "convert" else "loads"
        until = f", removed after {self.last}" if self.last else ""
        if self.status == "not-listed-later":
            until = f", not listed after {self.last} (the list is not exhaustive: unknown there)"
        kind = f" [{self.kind}]" if self.kind not in (None, "text") else ""
        return (f"{self.engine:<13} {self.list:<13} {verb} {self.name} since {self.first}{until}{kind} "
                f"(read {span}){of}")


def arch_support(root: Path, engines: list[str], name: str) -> list[ArchSupport]:
    """Every engine's lists that hold ``name`` (case-insensitive, any naming); engines without data say so."""
    out: list[ArchSupport] = []
    wanted = name.strip().lower()
    for engine in engines:
        data = load_architectures(root, engine)
        if data is None:
            out.append(ArchSupport(engine, None, None, None, None, None, None, None, [], None, None, "no-data"))
            continue
        hits = 0
        for lst in data.lists:
            found = lst.folded.get(wanted)
            if found is None:
                continue
            hits += 1
            entry = lst.arch[found]
            status = ("removed" if lst.exhaustive else "not-listed-later") if entry.last else \
                ("converts" if lst.role == "convert" else "loads")
            out.append(ArchSupport(engine, lst.id, lst.names, found, lst.role, entry.first, entry.last, entry.kind,
                                   list(lst.versions_read), data.versions_of, lst.source, status))
        if not hits and data.lists:
            load = [x for x in data.lists if x.role == "load"] or data.lists
            # a name with capitals is asked as an HF class: say so of a class list when there is one (Ollama has
            # GGUF-name lists and a class list)
            classy = any(c.isupper() for c in name)
            lst = next((x for x in load if (x.names == "hf-class") == classy), load[0])
            namings = set(x.names for x in load)
            out.append(ArchSupport(engine, lst.id, lst.names if len(namings) == 1 or lst.names == "hf-class" else None,
                                   None, None, None, None, None, list(lst.versions_read), data.versions_of,
                                   lst.source, "never" if lst.exhaustive else "not-listed"))
        if data.derive is not None and data.derive.versions == {}:
            out.append(ArchSupport(engine, None, None, None, None, None, None, None, [], None,
                                   f"{'/'.join(data.derive.containers).upper()} through {data.derive.engine}, "
                                   f"{data.derive.note or 'releases not mapped'}: unknown", "no-list"))
        elif data.derive is not None:
            d = data.derive
            known = list(d.versions or {})
            span = [known[0], known[-1]] if known else []
            out.append(ArchSupport(engine, None, None, None, None, None, None, None, span, None, d.source,
                                   f"derived:{d.engine}:{'/'.join(d.containers)}"))
        elif not data.lists:
            out.append(ArchSupport(engine, None, None, None, None, None, None, None, [], None,
                                   f"{data.note or 'no list'}: unknown", "no-list"))
    return out


def validate_all(matrix: MatrixFiles) -> str:
    """Load and validate every architecture file; each must be named for an engine of the matrix. A summary."""
    files = all_architecture_files(matrix.root)
    names = 0
    for engine in files:
        if engine not in matrix.engines:
            raise MatrixDataError(f"{matrix.root.name}/{DIR}/{engine}.toml", "engine-id",
                                  f"no engine {engine!r} in engines/ (known: {', '.join(matrix.engines)})")
        data = load_architectures(matrix.root, engine)
        assert data is not None
        names += sum(len(lst.arch) for lst in data.lists)
    missing = [e for e in matrix.engines if e not in files]
    return (f"{len(files)} engines, {names} names ({', '.join(files)}); no data (unknown): "
            f"{', '.join(missing) or 'none'}")
