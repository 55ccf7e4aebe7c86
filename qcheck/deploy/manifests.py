"""Deployment manifests -> the requests they deploy: compose files, Kubernetes manifests (Deployment, StatefulSet,
DaemonSet, ReplicaSet, Job, CronJob, Pod, List; KServe InferenceService and KubeRay RayService/RayCluster pod
templates), Helm output (several YAML documents) and Ollama Modelfiles.

Each inference container is found with its file and line; its image and tag give the engine and version
(``matrices/deploy/images.toml``), its command/args/env the engine command line (read by ``qcheck.deploy.cmdline``),
its GPU limit or device reservation the GPU count and its node selector or affinity the GPU product
(``matrices/deploy/instances.toml``). What cannot be told (an unknown image, no GPU named) is a ``Gap``: the gate
reports it as ``unknown`` with the reason, never as a pass.

YAML is read with PyYAML's safe composer only (no Python objects), bounded: file size, documents, nesting depth
and nodes visited (aliases count every time they are reached, so an alias bomb is refused, not expanded).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from typing import Any

from qcheck.errors import QcheckError, UsageError
from qcheck.toml_compat import tomllib

__all__ = ["Container", "Gap", "ManifestError", "read_manifest"]

MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_DOCUMENTS = 1000
MAX_DEPTH = 64
MAX_NODES = 200_000
_K8S_TEMPLATES = {"Deployment": ("spec", "template", "spec"), "StatefulSet": ("spec", "template", "spec"),
                  "DaemonSet": ("spec", "template", "spec"), "ReplicaSet": ("spec", "template", "spec"),
                  "Job": ("spec", "template", "spec"), "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
                  "Pod": ("spec",)}


class ManifestError(UsageError):
    """A manifest that cannot be read (exit 2, naming the file and line)."""


class _Map(dict):  # type: ignore[type-arg]
    """A YAML mapping with its line and the line of each key (for messages that name a value's line)."""

    line = 0
    lines: dict[str, int] = {}  # noqa: RUF012 - replaced per instance


@dataclass
class Container:
    """One inference container: where it is, its image, the command it runs and the GPUs it gets."""

    file: str
    line: int
    name: str
    image: str
    engine: str
    version: str | None
    words: list[str]  # env assignments + program + args, for qcheck.deploy.cmdline
    gpu_count: int | None
    gpu: str | None
    notes: list[str] = field(default_factory=list)


@dataclass
class Gap:
    """A container qcheck cannot judge, and why (reported as unknown)."""

    file: str
    line: int
    name: str
    image: str
    reason: str
    engine: str = ""  # when the image names one


# ------------------------------------------------------------------------------------------ YAML, bounded
_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_NULL_TAG = "tag:yaml.org,2002:null"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_MERGE = object()  # the ``<<`` key


@dataclass
class _Open:
    """A collection being built: its value, its line, its anchor; a mapping's pending key, its merged mappings
    (``<<``) and its own pairs."""

    value: Any
    line: int
    anchor: str | None
    start: int  # nodes counted when it began (its size, for its anchor)
    depth: int
    key: Any = None
    has_key: bool = False
    key_line: int = 0
    merged: list[dict[str, Any]] = field(default_factory=list)
    pairs: list[tuple[Any, Any, int]] = field(default_factory=list)
    below: int = 0  # levels of the deepest value added so far


class _Builder:
    """Plain values (str, None, lists, ``_Map``) from a YAML event stream, bounded while it is read: documents,
    depth, and nodes (an alias costs the size of what it names every time it is used, so an alias bomb is refused
    after ``MAX_NODES``, never expanded). Merge keys (``<<: *anchor``, ``<<: [*a, *b]``) are applied as YAML 1.1
    (PyYAML's ``flatten_mapping``, go-yaml in docker compose and Kubernetes) applies them: the mapping's own keys
    win over merged ones, and an earlier merged mapping wins over a later one."""

    def __init__(self, name: str):
        self.name = name
        self.docs: list[Any] = []
        self.stack: list[_Open] = []
        self.anchors: dict[str, tuple[Any, int, int]] = {}  # name -> (value, nodes, depth below it)
        self.nodes = 0

    def fail(self, line: int, problem: str) -> ManifestError:
        return ManifestError(f"{self.name}:{line}: {problem}")

    def count(self, n: int, line: int) -> None:
        self.nodes += n
        if self.nodes > MAX_NODES:
            raise ManifestError(f"{self.name}: more than {MAX_NODES} YAML nodes (aliases counted each time they are "
                                "used): refused")

    def event(self, ev: Any) -> None:
        import yaml

        line = ev.start_mark.line + 1 if ev.start_mark is not None else 0
        if isinstance(ev, yaml.DocumentStartEvent):
            if len(self.docs) >= MAX_DOCUMENTS:
                raise ManifestError(f"{self.name}: more than {MAX_DOCUMENTS} YAML documents")
            self.anchors = {}
        elif isinstance(ev, yaml.ScalarEvent):
            self.count(1, line)
            plain = bool(ev.implicit and ev.implicit[0])
            if ev.tag == _MERGE_TAG or (plain and ev.tag is None and ev.value == "<<"):
                value: Any = _MERGE
            else:
                value = None if ev.tag == _NULL_TAG or (plain and ev.tag is None and ev.value in _NULLS) else ev.value
            self.add(value, line, ev.anchor, 0)
        elif isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            self.count(1, line)
            depth = len(self.stack) + 1
            if depth > MAX_DEPTH:
                raise self.fail(line, f"nested deeper than {MAX_DEPTH} levels")
            value = _Map() if isinstance(ev, yaml.MappingStartEvent) else []
            if isinstance(value, _Map):
                value.line, value.lines = line, {}
            self.stack.append(_Open(value, line, ev.anchor, self.nodes - 1, depth))
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            self.close()
        elif isinstance(ev, yaml.AliasEvent):
            if ev.anchor not in self.anchors:
                raise self.fail(line, f"the alias *{ev.anchor} names no anchor defined before it (or itself)")
            value, size, below = self.anchors[ev.anchor]
            self.count(size, line)
            if len(self.stack) + below > MAX_DEPTH:
                raise self.fail(line, f"nested deeper than {MAX_DEPTH} levels")
            self.add(value, line, None, below, size=size)

    def close(self) -> None:
        top = self.stack.pop()
        value = top.value
        if isinstance(value, _Map):
            merged = _Map()
            for other in reversed(top.merged):  # the first merged mapping wins: applied last
                merged.update(other)
                merged.lines.update(getattr(other, "lines", {}))
            for key, item, key_line in top.pairs:
                merged[key] = item
                merged.lines[key] = key_line
            merged.line = top.line
            value = merged
        self.add(value, top.line, top.anchor, top.below + 1, size=self.nodes - top.start)

    def add(self, value: Any, line: int, anchor: str | None, below: int, *, size: int = 1) -> None:
        """Put a finished value (scalar, collection, alias) into the collection being built."""
        top = self.stack[-1] if self.stack else None
        if value is _MERGE and (top is None or isinstance(top.value, list) or top.has_key):
            value = "<<"  # only a mapping key merges
        if anchor is not None:
            self.anchors[anchor] = (value, size, below)
        if top is None:
            self.docs.append(value)
            return
        top.below = max(top.below, below)
        if isinstance(top.value, list):
            top.value.append(value)
            return
        if not top.has_key:
            top.key, top.has_key, top.key_line = value, True, line
            return
        key, top.key, top.has_key = top.key, None, False
        if key is _MERGE:
            self.merge(top, value, line)
            return
        top.pairs.append((str(key), value, top.key_line))

    def merge(self, top: _Open, value: Any, line: int) -> None:
        """``<<: mapping`` or ``<<: [mapping, ...]``; anything else is the error YAML's merge gives."""
        sources = value if isinstance(value, list) else [value]
        for source in sources:
            if not isinstance(source, dict):
                raise self.fail(line, "a merge key (<<) needs a mapping or a list of mappings")
            top.merged.append(source)


def _load(text: str, name: str) -> list[Any]:
    import yaml

    builder = _Builder(name)
    loader = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader  # libyaml when PyYAML has it: ~20x faster
    try:
        for event in yaml.parse(text, Loader=loader):
            builder.event(event)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{name}:{mark.line + 1}" if mark is not None else name
        raise ManifestError(f"{where}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    return builder.docs


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


# ------------------------------------------------------------------------------------------ data tables
@functools.lru_cache(maxsize=2)
def _table(name: str) -> dict[str, Any]:
    from qcheck.data import data_dir

    return tomllib.loads((data_dir("matrices") / "deploy" / f"{name}.toml").read_text(encoding="utf-8"))


def image_engine(image: str) -> tuple[str | None, str | None, list[str], list[str], str | None]:
    """(engine, version, entrypoint, default args, why unknown) for an image reference."""
    ref = image.split("@", 1)[0]
    repo, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "latest")
    for row in _table("images")["images"]:
        if not re.search(row["repo"], repo):
            continue
        if row.get("tag") and not re.search(row["tag"], tag):
            continue
        if not row["engine"]:
            return None, None, [], [], f"image {image}: {row.get('note', 'not an engine qcheck knows')}"
        m = re.search(row["version"], tag) if row.get("version") else None
        return row["engine"], (m.group(1) if m else None), list(row["entrypoint"]), list(row.get("default_args", [])), \
            None
    return None, None, [], [], f"image {image}: not an inference engine image qcheck knows (matrices/deploy/images.toml)"


_OVERRIDE = "policy gpu"


def gpu_from_labels(labels: dict[str, str]) -> tuple[str | None, int | None, str | None]:
    """(gpu id, count per node, the label that said it) from node labels (or the policy's ``gpu``: a qcheck GPU name,
    else a product name as GPU feature discovery writes it)."""
    tables = _table("instances")
    if labels.get(_OVERRIDE):
        from qcheck.matrix import load_matrix

        try:
            return load_matrix().gpus.lookup(labels[_OVERRIDE]).label, None, f"the policy's gpu = {labels[_OVERRIDE]}"
        except UsageError:
            labels = {"nvidia.com/gpu.product": labels[_OVERRIDE]}
    itype = labels.get("node.kubernetes.io/instance-type") or labels.get("beta.kubernetes.io/instance-type")
    if itype:
        for row in tables["instances"]:
            if row["type"] == itype:
                return row["gpu"], int(row["count"]), f"node.kubernetes.io/instance-type={itype}"
    for key in ("nvidia.com/gpu.product", "cloud.google.com/gke-accelerator", "amd.com/gpu.product-name"):
        value = labels.get(key)
        if not value:
            continue
        for row in tables["products"]:
            if re.search(row["match"], value, re.IGNORECASE):
                return row["gpu"], None, f"{key}={value}"
    return None, None, None


# ------------------------------------------------------------------------------------------ containers
def _words(image: str, command: Any, args: Any, env: dict[str, str]) -> tuple[list[str], str | None, str | None]:
    engine, version, entrypoint, default_args, why = image_engine(image)
    if engine is None:
        return [], None, why
    import shlex

    try:
        cmd = _strings(command)
        rest = _strings(args)
        if len(cmd) >= 3 and cmd[:2] in (["/bin/sh", "-c"], ["sh", "-c"], ["bash", "-c"]):
            cmd, rest = shlex.split(" ".join(cmd[2:])), []
    except ValueError as exc:  # unbalanced quotes
        return [], None, f"image {image}: the command cannot be split into words ({exc})"
    words = (cmd or entrypoint) + (rest if (cmd or rest) else default_args)
    envs = [f"{k}={v}" for k, v in env.items()]
    return envs + words, version, None if words else f"image {image}: the container names no command to run"


def _strings(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        import shlex

        return shlex.split(value)
    if isinstance(value, list):
        return [str(v) for v in value if v is not None]
    return [str(value)]


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def _k8s_env(container: dict[str, Any]) -> dict[str, str]:
    out = {}
    for item in container.get("env") or []:
        if isinstance(item, dict) and isinstance(item.get("name"), str) and item.get("value") is not None:
            out[item["name"]] = str(item["value"])
    return out


def _node_labels(pod: dict[str, Any]) -> dict[str, str]:
    labels = {str(k): str(v) for k, v in (pod.get("nodeSelector") or {}).items()} if isinstance(
        pod.get("nodeSelector"), dict) else {}
    terms = _get(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                 "nodeSelectorTerms") or []
    for term in terms if isinstance(terms, list) else []:
        for expr in (term.get("matchExpressions") or []) if isinstance(term, dict) else []:
            values = expr.get("values") if isinstance(expr, dict) else None
            if isinstance(values, list) and len(values) == 1 and expr.get("operator") == "In":
                labels.setdefault(str(expr.get("key")), str(values[0]))
    return labels


def _pod(pod: dict[str, Any], file: str, kind: str, out: list[Container | Gap]) -> None:
    labels = _node_labels(pod)
    for c in pod.get("containers") or []:
        if not isinstance(c, dict):
            continue
        limits = _get(c, "resources", "limits") or {}
        count = _int(limits.get("nvidia.com/gpu")) or _int(limits.get("amd.com/gpu")) if isinstance(limits, dict) else None
        _container(out, _Found(file, getattr(c, "line", 0), f"{kind}/{c.get('name')}", str(c.get("image") or ""),
                               c.get("command"), c.get("args"), _k8s_env(c), count, labels))


@dataclass
class _Found:
    """A container as the manifest writes it, before it is judged."""

    file: str
    line: int
    name: str
    image: str
    command: Any
    args: Any
    env: dict[str, str]
    count: int | None
    labels: dict[str, str]


def _container(out: list[Container | Gap], found: _Found) -> None:
    file, line, name, image = found.file, found.line, found.name, found.image
    count, labels = found.count, found.labels
    words, version, why = _words(image, found.command, found.args, found.env)
    if why:
        out.append(Gap(file, line, name, image, why))
        return
    engine = image_engine(image)[0] or ""
    gpu, per_node, said = gpu_from_labels(labels)
    notes = [f"GPU from {said}"] if said else []
    if count is None and per_node is not None and not labels.get("nvidia.com/gpu.product"):
        notes.append(f"{per_node} GPU(s) per {labels.get('node.kubernetes.io/instance-type')} node; the container "
                     "asks for none")
    if not count:
        out.append(Gap(file, line, name, image, "the manifest gives the container no GPU (no nvidia.com/gpu or "
                                                "amd.com/gpu limit, no device reservation)", engine))
        return
    if gpu is None:
        out.append(Gap(file, line, name, image, f"{count} GPU(s), but no node selector or affinity names the GPU "
                                                "(nvidia.com/gpu.product, cloud.google.com/gke-accelerator, "
                                                "node.kubernetes.io/instance-type)", engine))
        return
    out.append(Container(file, line, name, image, engine, version, words, count, gpu, notes))


def _compose(doc: dict[str, Any], file: str, out: list[Container | Gap], gpu_override: str | None) -> None:
    for name, svc in (doc.get("services") or {}).items():
        if not isinstance(svc, dict):
            continue
        env = svc.get("environment") or {}
        if isinstance(env, list):
            env = dict(str(e).split("=", 1) for e in env if "=" in str(e))
        elif not isinstance(env, dict):
            line = svc.lines.get("environment", svc.line) if isinstance(svc, _Map) else 0
            raise ManifestError(f"{file}:{line}: services.{name}.environment must be a mapping (NAME: value) or a "
                                f"list of NAME=value, not {type(env).__name__} {str(env)[:40]!r} (docker compose "
                                "refuses it too)")
        devices = _get(svc, "deploy", "resources", "reservations", "devices") or []
        count = None
        for d in devices if isinstance(devices, list) else []:
            if isinstance(d, dict) and ("gpu" in (d.get("capabilities") or []) or d.get("driver") == "nvidia"):
                n = d.get("count")
                ids = d.get("device_ids")
                count = (count or 0) + (len(ids) if isinstance(ids, list) else (_int(n) or (1 << 16 if n == "all"
                                                                                             else 1)))
        labels = {_OVERRIDE: gpu_override} if gpu_override else {}
        _container(out, _Found(file, getattr(svc, "line", 0), f"service/{name}", str(svc.get("image") or ""),
                               svc.get("entrypoint"), svc.get("command"),
                               {str(k): str(v) for k, v in env.items() if v is not None}, count, labels))


def _document(doc: Any, file: str, out: list[Container | Gap], gpu_override: str | None) -> None:
    if not isinstance(doc, dict):
        return
    if isinstance(doc.get("services"), dict):
        _compose(doc, file, out, gpu_override)
        return
    kind = str(doc.get("kind") or "")
    if kind == "List":
        for item in doc.get("items") or []:
            _document(item, file, out, gpu_override)
        return
    path = _K8S_TEMPLATES.get(kind)
    pods = [_get(doc, *path)] if path else []
    if kind == "InferenceService":
        pods = [_get(doc, "spec", "predictor")]
    if kind in ("RayService", "RayCluster"):
        cluster = _get(doc, "spec", "rayClusterConfig") if kind == "RayService" else doc.get("spec")
        pods = [_get(cluster, "headGroupSpec", "template", "spec")]
        pods += [_get(g, "template", "spec") for g in (_get(cluster, "workerGroupSpecs") or [])]
    name = f"{kind}/{_get(doc, 'metadata', 'name')}"
    for pod in pods:
        if isinstance(pod, dict):
            _pod(pod, file, name, out)


def _is_modelfile(path: str, text: str) -> bool:
    name = os.path.basename(path)
    if name == "Modelfile" or name.endswith(".Modelfile") or name.endswith(".modelfile"):
        return True
    first = next((ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")), "")
    return first.upper().startswith("FROM ")


def _modelfile(path: str, shown: str, gpu_override: str | None, out: list[Container | Gap]) -> None:
    """An Ollama Modelfile: judged as ``ollama create NAME -f Modelfile`` on the policy's ``gpu`` (a Modelfile
    names none)."""
    labels = {_OVERRIDE: gpu_override} if gpu_override else {}
    gpu, _, said = gpu_from_labels(labels)
    if gpu is None:
        out.append(Gap(shown, 1, "Modelfile", "ollama", "a Modelfile names no GPU: give the deployment a gpu in the "
                                                         "policy", "ollama"))
        return
    out.append(Container(shown, 1, "Modelfile", "ollama/ollama", "ollama", None,
                         ["ollama", "create", "model", "-f", path], 1, gpu, [f"GPU from {said}"]))


#: parses kept for this run, by file identity: deployments naming one file parse it once
_PARSED: dict[tuple[str, int, int, int, int], tuple[list[Any] | None, str, str]] = {}
_PARSED_MAX = 64


def _parsed(path: str, shown: str) -> tuple[list[Any] | None, str, str]:
    """(YAML documents or None for a Modelfile, its text, why it cannot be read: '' when it can) of the manifest at
    ``path``, read and parsed once per run (a refusal is remembered too); ``shown`` names it in messages."""
    from qcheck.source import read_regular_file

    try:
        st = os.stat(path)
    except OSError as exc:
        raise ManifestError(f"{shown}: cannot read it: {exc.strerror or exc}") from None
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)
    if key in _PARSED:
        return _PARSED[key]
    docs: list[Any] | None = None
    text, why = "", ""
    try:
        raw = read_regular_file(path, MAX_MANIFEST_BYTES, "manifest", display=shown)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ManifestError(f"{shown}: not UTF-8 text") from None
        if not _is_modelfile(path, text):
            docs = _load(text, shown)
    except QcheckError as exc:
        why = str(exc).removeprefix(shown)  # said again with the name each deployment gives the file
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.pop(next(iter(_PARSED)))
    _PARSED[key] = (docs, text, why)
    return docs, text, why


def read_manifest(path: str, shown: str, *, gpu_override: str | None = None) -> list[Container | Gap]:
    """Every inference container of the manifest at ``path`` (``shown`` is how reports name it). The file must be
    a regular file of at most ``MAX_MANIFEST_BYTES``; it is parsed once per run however many deployments name it."""
    docs, _text, why = _parsed(path, shown)
    if why:
        raise ManifestError(shown + why)
    out: list[Container | Gap] = []
    if docs is None:
        _modelfile(path, shown, gpu_override, out)
        return out
    for doc in docs:
        _document(doc, shown, out, gpu_override)
    if not out:
        raise ManifestError(f"{shown}: no container found (a compose file's services, or a Kubernetes workload)")
    return out
