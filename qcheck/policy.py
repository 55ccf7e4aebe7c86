"""The ``qcheck gate`` policy: which models, on which engines and GPUs, under which memory and quality limits.

Read from ``qcheck.toml``, from ``[tool.qcheck]`` in ``pyproject.toml``, or from ``--policy FILE`` (tomllib;
no code runs). Every key is checked: an unknown key or a bad value is a ``PolicyError`` (exit 2) naming the
file, the key and what is allowed, so a typo can never silently weaken a CI gate. Paths and globs are
relative to the policy file's directory. docs/ci.md documents every key.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from qcheck import validate
from qcheck.errors import UsageError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.request import EngineKnobs, KVCacheTypes, Parallel
from qcheck.toml_compat import tomllib

if TYPE_CHECKING:
    from qcheck.doors import Asked
    from qcheck.matrix.loader import Matrix
    from qcheck.request import CheckRequest

POLICY_FILE = "qcheck.toml"
PYPROJECT = "pyproject.toml"
MAX_POLICY_BYTES = 4 * 1024 * 1024
#: models one glob may expand to (a policy is not a way to scan a whole disk)
MAX_MODELS = 10_000
#: entries of ``deployments`` (each names a manifest of up to 4 MiB; one file is parsed once however often named)
MAX_DEPLOYMENTS = 1_000
LFS_MODES = ("error", "skip")
#: eval backends that take a model path (an "endpoint" candidate is a URL, not a policy model)
PATH_BACKENDS = ("simulated", "llamacpp")
REFERENCE_DTYPES = ("float32", "bfloat16", "float16")
#: qcheck eval's window modes (``qcheck.eval.encode.WINDOW_MODES``; not imported: policies load without the eval stack)
WINDOW_MODES = ("sliding", "chunks")
DEVICES = ("cpu", "cuda", "auto")

TOP_KEYS = ("models", "targets", "require-native", "allow-unknown", "require-kv-scales", "kernels-only",
            "lfs-pointers", "memory", "quality", "deployments", "allow-nothing-judged")
DEPLOYMENT_KEYS = ("file", "models", "model", "gpu")
MODEL_KEYS = ("path", "name")
TARGET_KEYS = ("engine", "gpu", "models", "require-native", "allow-unknown", "require-kv-scales", "kernels-only")
MEMORY_KEYS = ("context", "batch", "kv-cache-dtype", "tp", "pp", "ep", "enforce")  # + qcheck.knobs.KNOBS
#: [memory] keys that set how a model is deployed: a manifest's command line sets these itself, so a policy with
#: deployments may not (its [memory] may hold the load, ``batch``, and ``enforce``)
DEPLOYMENT_SETTING_KEYS = ("context", "kv-cache-dtype", "tp", "pp", "ep")
QUALITY_KEYS = ("reference", "tasks", "backend", "models", "max-length", "stride", "windows", "max-items",
                "reference-dtype", "device", "cache-dir", "tier", "use-intervals", "simulate-engine",
                "kv-cache-dtype", "cache-type-k", "cache-type-v", "kv-split")
#: qcheck eval's --simulate-engine values (``qcheck.eval.emulation.SIMULATE_ENGINES``; not imported, as above)
SIMULATE_ENGINES = ("auto", "llama.cpp", "vllm", "sglang", "weights")


class PolicyError(UsageError):
    """A policy that cannot be used: names the file, the key and what is allowed."""

    def __init__(self, file: str, key: str | None, problem: str, allowed: str | None = None):
        self.file, self.key, self.problem, self.allowed = file, key, problem, allowed
        where = f"{file}: {key}" if key else file
        super().__init__(f"{where}: {problem}" + (f" (allowed: {allowed})" if allowed else ""))


@dataclass
class ModelSpec:
    """One model to gate: ``path`` is what the readers get (absolute for local files), ``name`` is shown."""

    name: str
    path: str
    hub: bool = False
    entry: str = ""  # the policy key it came from, e.g. "models[2]"


@dataclass
class TargetSpec:
    engines: list[str]
    gpus: list[str]
    require_native: bool = False
    allow_unknown: bool = False
    key: str = ""
    #: default KV-cache scales of 1.0 (a "kv-scales" risk) fail the target (require-kv-scales)
    require_kv_scales: bool = False
    #: glob patterns of model names this target applies to (None: every model)
    models: list[str] | None = None
    #: judge the kernels only: the engine's start-up with the [memory] settings is reported, not enforced
    kernels_only: bool = False

    def applies_to(self, model: ModelSpec) -> bool:
        """Whether this target judges ``model`` (``models`` patterns match its name or its path)."""
        if self.models is None:
            return True
        import fnmatch

        return any(fnmatch.fnmatchcase(model.name, p) or fnmatch.fnmatchcase(model.path, p) for p in self.models)


@dataclass
class MemorySpec:
    context: int | None = None
    batch: int = 1
    kv_cache_dtype: str | None = None
    #: what the engine does at start-up with these settings decides (false: reported only, as kernels-only = true)
    enforce: bool = True
    #: the engine settings (gpu-memory-utilization, n-gpu-layers ...), as qcheck check's flags give them
    knobs: EngineKnobs = field(default_factory=EngineKnobs)
    #: the parallel layout (``tp``, ``pp``, ``ep``: qcheck check's --tp/--pp/--ep)
    parallel: Parallel = field(default_factory=Parallel)


@dataclass
class QualitySpec:
    reference: str
    tasks: list[str]
    thresholds: Any  # qcheck.eval.gate.Thresholds
    backend: str = "simulated"
    models: list[str] | None = None
    max_length: int = 512
    #: sliding-window step for long text items (None: half of max_length) and the window mode (qcheck eval)
    stride: int | None = None
    windows: str = "sliding"
    max_items: int | None = None
    reference_dtype: str = "float32"
    device: str = "cpu"
    cache_dir: str | None = None
    #: whose arithmetic simulated candidates reproduce (``qcheck eval --simulate-engine``)
    simulate_engine: str = "auto"
    #: the KV cache every candidate runs with (``--kv-cache-dtype``, ``--cache-type-k/-v``); unset: engine defaults
    kv_cache: KVCacheTypes = field(default_factory=KVCacheTypes)
    kv_split: bool = True


@dataclass
class DeploymentSpec:
    """A manifest the gate judges (compose file, Kubernetes/Helm YAML, Modelfile): ``models`` maps a model path
    inside the container (a mounted volume) to a model path in the repository or a Hub id; ``gpu`` names the GPU
    when no node label does (compose has none)."""

    file: str  # absolute
    shown: str  # as the policy writes it
    models: dict[str, str]
    gpu: str | None = None
    key: str = ""
    #: the model when the command names none qcheck can read (``ollama serve``, a library name)
    model: str | None = None


@dataclass
class Policy:
    file: str
    models: list[ModelSpec]
    targets: list[TargetSpec]
    memory: MemorySpec | None = None
    quality: QualitySpec | None = None
    lfs_pointers: str = "error"
    base_dir: str = "."
    deployments: list[DeploymentSpec] = dataclasses.field(default_factory=list)
    #: the top-level strictness (require-native, allow-unknown, require-kv-scales, kernels-only): every target's
    #: default, and what the deployments are judged with
    require_native: bool = False
    allow_unknown: bool = False
    require_kv_scales: bool = False
    kernels_only: bool = False
    #: ``--allow-outside``: paths (also those a deployment's manifest names) may leave the repository
    allow_outside: bool = False
    #: ``allow-nothing-judged``: a run that judged no combination (every model a skipped LFS pointer) may pass
    allow_nothing_judged: bool = False

    def asked(self, target: TargetSpec | None = None, limits: Limits = DEFAULT_LIMITS) -> Asked:
        """What this policy asks of one ``[[targets]]`` entry (its engines, GPUs and strictness, the ``[memory]``
        settings), or with ``target`` None of its deployments (the top-level strictness, the ``[memory]`` batch;
        a manifest's command line is the deployment): the input of ``qcheck.doors.build_request``, as ``qcheck
        check``'s flags are."""
        from qcheck.doors import Asked
        from qcheck.request import Deploy

        mem = self.memory
        relaxed = mem is not None and not mem.enforce  # enforce = false: the start-up is reported, not enforced
        if target is None:
            return Asked(deploy=Deploy(batch=mem.batch if mem else 1), settings_named=True,
                         require_native=self.require_native, allow_unknown=self.allow_unknown,
                         require_kv_scales=self.require_kv_scales, kernels_only=self.kernels_only or relaxed,
                         limits=limits)
        deploy = Deploy(mem.context, mem.batch, KVCacheTypes.parse(mem.kv_cache_dtype), mem.parallel, mem.knobs) \
            if mem else Deploy()
        return Asked(tuple(target.engines), tuple(target.gpus), deploy, settings_named=mem is not None,
                     require_native=target.require_native, allow_unknown=target.allow_unknown,
                     require_kv_scales=target.require_kv_scales, kernels_only=target.kernels_only or relaxed,
                     limits=limits)

    def confinement(self) -> Confinement:
        """Where paths read for this policy may lead: its repository unless ``allow_outside``."""
        return Confinement(repository_root(Path(self.base_dir)), self.allow_outside)

    def request_for(self, model: ModelSpec, target: TargetSpec, limits: Limits = DEFAULT_LIMITS) -> CheckRequest:
        """The question the gate asks for one model on one target: the same ``CheckRequest`` ``qcheck check``
        builds from the equivalent flags (``qcheck.doors.build_request``)."""
        from qcheck.doors import build_request

        return build_request(self.asked(target, limits), model.path)

    def to_json(self) -> dict[str, Any]:
        """The policy as resolved (globs expanded), for the gate report."""
        quality = None
        if self.quality:
            quality = {k: v for k, v in dataclasses.asdict(self.quality).items() if k not in ("thresholds", "kv_cache")}
            quality["thresholds"] = self.quality.thresholds.to_json()
            quality["kv_cache"] = self.quality.kv_cache.to_json()
        return {"file": self.file, "models": [dataclasses.asdict(m) for m in self.models],
                "targets": [dataclasses.asdict(t) for t in self.targets],
                "memory": ({**dataclasses.asdict(self.memory), "knobs": self.memory.knobs.to_json(),
                            "parallel": self.memory.parallel.to_json()} if self.memory else None), "quality": quality,
                "lfs_pointers": self.lfs_pointers,
                "require_native": self.require_native, "allow_unknown": self.allow_unknown,
                "require_kv_scales": self.require_kv_scales, "kernels_only": self.kernels_only,
                **({"deployments": [dataclasses.asdict(d) for d in self.deployments]} if self.deployments else {})}


# ------------------------------------------------------------------------------------------ finding it
def find_policy(directory: str | Path = ".") -> Path | None:
    """``qcheck.toml`` in ``directory``, else its ``pyproject.toml`` when that has ``[tool.qcheck]``."""
    root = Path(directory)
    if (root / POLICY_FILE).is_file():
        return root / POLICY_FILE
    pyproject = root / PYPROJECT
    if pyproject.is_file():
        data = _read_toml(pyproject)
        if isinstance(data.get("tool"), dict) and "qcheck" in data["tool"]:
            return pyproject
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    name = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_POLICY_BYTES:
            raise PolicyError(name, None, f"{size} bytes is too large for a policy file (at most {MAX_POLICY_BYTES})")
        raw = path.read_bytes()
    except OSError as exc:
        raise PolicyError(name, None, f"cannot read it: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise PolicyError(name, None, "not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(name, None, f"invalid TOML: {exc}") from None


def load_policy(path: str | Path | None = None, *, directory: str | Path = ".", validate: bool = True,
                allow_outside: bool = False) -> Policy:
    """Load and check a policy: ``path`` or the one found in ``directory``.

    ``validate`` also resolves every engine and GPU against the matrix (unknown names are errors here,
    before any model is read). ``allow_outside`` lets model, reference and task paths leave the
    policy's repository (``--allow-outside``; see ``Confinement``).
    """
    if path is None:
        found = find_policy(directory)
        if found is None:
            raise UsageError(f"no policy found: no {POLICY_FILE} and no [tool.qcheck] in {PYPROJECT} in "
                             f"{Path(directory).resolve()}; create one with `qcheck gate --init` or pass --policy FILE")
        path = found
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"--policy {path}: no such file")
    data = _read_toml(file)
    display = str(path)
    if file.name == PYPROJECT:
        tool = data.get("tool")
        if not isinstance(tool, dict) or "qcheck" not in tool:
            raise PolicyError(display, "[tool.qcheck]", "missing: this pyproject.toml has no qcheck policy")
        data = tool["qcheck"]
        display = f"{path} [tool.qcheck]"
        if not isinstance(data, dict):
            raise PolicyError(display, None, "must be a table")
    policy = parse_policy(data, display, file.resolve().parent, allow_outside=allow_outside)
    if validate:
        validate_targets(policy)
    return policy


# ------------------------------------------------------------------------------------------ parsing
def parse_policy(data: dict[str, Any], file: str, base_dir: Path, *, allow_outside: bool = False) -> Policy:
    """Check every key of a parsed policy table and resolve its paths against ``base_dir``, inside the
    policy's repository unless ``allow_outside``."""
    c = _Checker(file)
    confine = Confinement(repository_root(base_dir), allow_outside)
    c.keys(data, TOP_KEYS, None)
    defaults = {"require_native": c.boolean(data, "require-native", None, False),
                "allow_unknown": c.boolean(data, "allow-unknown", None, False),
                "require_kv_scales": c.boolean(data, "require-kv-scales", None, False),
                "kernels_only": c.boolean(data, "kernels-only", None, False)}
    lfs = c.choice(data, "lfs-pointers", None, LFS_MODES, "error")
    nothing = c.boolean(data, "allow-nothing-judged", None, False)
    deployments = _deployments(c, data.get("deployments", []), base_dir, confine)
    memory = _memory(c, data["memory"]) if "memory" in data else None
    if deployments and "models" not in data and "targets" not in data:
        _deployments_only(c, data, base_dir, confine)
        return _with_strictness(Policy(file=file, models=[], targets=[], lfs_pointers=lfs, base_dir=str(base_dir),
                                       deployments=deployments, memory=memory, allow_outside=allow_outside,
                                       allow_nothing_judged=nothing), defaults)
    if deployments and memory is not None:
        _memory_for_deployments(c, data["memory"])
    if "models" not in data:
        raise PolicyError(file, "models", "missing: list the models to gate (paths, globs or Hub ids)",
                          'models = ["models/*.gguf", "org/name"]')
    models = _models(c, data["models"], base_dir, confine)
    if "targets" not in data:
        raise PolicyError(file, "targets", "missing: list where the models must run",
                          '[[targets]] engine = "vllm", gpu = ["h100"]')
    targets = _targets(c, data["targets"], defaults)
    for t in targets:
        if t.models is not None and not any(t.applies_to(m) for m in models):
            raise c.fail(f"{t.key}.models", f"{', '.join(t.models)} matches none of the policy's models",
                         ", ".join(m.name for m in models[:20]))
    unjudged = [m.name for m in models if not any(t.applies_to(m) for t in targets)]
    if unjudged:
        raise c.fail("targets", f"no target applies to {', '.join(unjudged[:10])}: add a [[targets]] without "
                     "models, or one whose models match them")
    quality = _quality(c, data["quality"], base_dir, models, confine) if "quality" in data else None
    return _with_strictness(Policy(file=file, models=models, targets=targets, memory=memory, quality=quality,
                                   lfs_pointers=lfs, base_dir=str(base_dir), deployments=deployments,
                                   allow_outside=allow_outside, allow_nothing_judged=nothing), defaults)


def _with_strictness(policy: Policy, defaults: dict[str, bool]) -> Policy:
    """The policy with its top-level strictness (what the deployments are judged with)."""
    return dataclasses.replace(policy, require_native=defaults["require_native"],
                               allow_unknown=defaults["allow_unknown"],
                               require_kv_scales=defaults["require_kv_scales"], kernels_only=defaults["kernels_only"])


def _memory_for_deployments(c: _Checker, raw: dict[str, Any]) -> None:
    """A manifest's command line sets how it is deployed: a ``[memory]`` context, KV type or engine setting could
    not apply to the policy's deployments, so it is refused rather than silently judged for the models alone."""
    from qcheck.knobs import KNOBS

    for key in (*DEPLOYMENT_SETTING_KEYS, *(k.policy_key for k in KNOBS)):
        if key in raw:
            raise c.fail(f"memory.{key}", "cannot apply to the policy's deployments: a manifest's command line sets "
                         "its own context, KV cache and engine settings; keep [memory] to batch and enforce here, "
                         "or gate the deployments with a policy of their own")


def _deployments_only(c: _Checker, data: dict[str, Any], base_dir: Path, confine: Confinement) -> None:
    """A policy of deployments alone: every table is still checked, and a table no deployment can use is refused
    (``[memory]`` settings a manifest sets itself, a ``[quality]`` gate with no models to evaluate)."""
    if "memory" in data:
        _memory_for_deployments(c, data["memory"])
    if "quality" in data:
        quality = _quality(c, data["quality"], base_dir, [], confine)  # unknown keys and bad values first
        from qcheck.readers import looks_like_repo_id

        if not os.path.exists(quality.reference) and not looks_like_repo_id(quality.reference):
            raise c.fail("quality.reference", f"{quality.reference!r}: no such directory, and not a Hub repo id")
        raise c.fail("quality", "a quality gate evaluates the policy's models, and this policy lists none (only "
                     "deployments): add models = [...] and [[targets]], or remove [quality]")


def _deployments(c: _Checker, raw: Any, base_dir: Path, confine: Confinement) -> list[DeploymentSpec]:
    """``deployments = ["deploy/compose.yaml", {file = "k8s/vllm.yaml", models = {"/models/m" = "models/m"},
    gpu = "h100"}]``: every file inside the repository; model paths resolved like ``models``."""
    if not isinstance(raw, list):
        raise c.fail("deployments", f"must be a list of files or {{file, models, gpu}} tables, not {_type(raw)}")
    if len(raw) > MAX_DEPLOYMENTS:
        raise c.fail("deployments", f"{len(raw)} entries; at most {MAX_DEPLOYMENTS}")
    out = []
    for i, entry in enumerate(raw):
        key = f"deployments[{i}]"
        if isinstance(entry, str):
            entry = {"file": entry}
        c.keys(entry, DEPLOYMENT_KEYS, key)
        text = c.string(entry, "file", key, required=True)
        assert text is not None
        local = _local_path(c, f"{key}.file", text, base_dir, confine)
        if not local.is_file():
            raise c.fail(f"{key}.file", f"{text!r}: no such file (relative to {base_dir})")
        confine.check(c, f"{key}.file", text, local, walk=False)
        mapping = entry.get("models", {})
        if not isinstance(mapping, dict) or not all(isinstance(v, str) and v for v in mapping.values()):
            raise c.fail(f"{key}.models", "must be a table of container path = model path or Hub id")
        models = {}
        for inner, model in mapping.items():
            target = _local_path(c, f"{key}.models", model, base_dir, confine)
            if target.exists():
                confine.check(c, f"{key}.models", model, target)
                models[str(inner)] = str(target)
            else:
                models[str(inner)] = model
        model = c.string(entry, "model", key)
        if model is not None:
            target = _local_path(c, f"{key}.model", model, base_dir, confine)
            if target.exists():
                confine.check(c, f"{key}.model", model, target)
                model = str(target)
        out.append(DeploymentSpec(str(local), text, models, c.string(entry, "gpu", key), key, model))
    return out


class _Checker:
    """Typed access to policy tables through ``qcheck.validate``; every failure names the file and the full key."""

    def __init__(self, file: str):
        self.file = file
        self.root = validate.At(lambda path, problem, allowed: PolicyError(file, path or None, problem, allowed))

    def at(self, prefix: str | None, key: str | None = None) -> validate.At:
        at = self.root.key(prefix) if prefix else self.root
        return at.key(key) if key else at

    def fail(self, key: str | None, problem: str, allowed: str | None = None) -> PolicyError:
        return PolicyError(self.file, key, problem, allowed)

    def keys(self, table: Any, allowed: tuple[str, ...], prefix: str | None) -> None:
        if prefix is not None and isinstance(table, dict):  # TOML put a top-level key into the table above it
            misplaced = next((k for k in table if k not in allowed and k in TOP_KEYS), None)
            if misplaced is not None:
                raise self.fail(f"{prefix}.{misplaced}", "unknown key here; it is a top-level key, and TOML puts a "
                                "key written after a [[targets]], [memory] or [quality] header into that table: "
                                "move it above the first one", ", ".join(allowed))
        validate.check_keys(validate.table(table, self.at(prefix)), allowed, self.at(prefix))

    def boolean(self, table: dict[str, Any], key: str, prefix: str | None, default: bool) -> bool:
        return validate.boolean(table.get(key, default), self.at(prefix, key))

    def choice(self, table: dict[str, Any], key: str, prefix: str | None, allowed: tuple[str, ...],
               default: str) -> str:
        return validate.choice(table.get(key, default), self.at(prefix, key), allowed)

    def string(self, table: dict[str, Any], key: str, prefix: str | None, *, required: bool = False) -> str | None:
        if key not in table:
            if required:
                self.at(prefix, key).fail("missing")
            return None
        return validate.string(table[key], self.at(prefix, key))

    def strings(self, table: dict[str, Any], key: str, prefix: str | None) -> list[str]:
        """A string or a list of non-empty strings."""
        return validate.strings(table.get(key, []), self.at(prefix, key))

    @overload
    def integer(self, table: dict[str, Any], key: str, prefix: str | None, *, minimum: int, maximum: int,
                default: int) -> int: ...

    @overload
    def integer(self, table: dict[str, Any], key: str, prefix: str | None, *, minimum: int, maximum: int,
                default: None) -> int | None: ...

    def integer(self, table: dict[str, Any], key: str, prefix: str | None, *, minimum: int, maximum: int,
                default: int | None) -> int | None:
        if key not in table:
            return default
        return validate.integer(table[key], self.at(prefix, key), minimum=minimum, maximum=maximum)


_type = validate.type_name


_GLOB_CHARS = set("*?[")


#: directory entries one glob may visit before it is refused (a policy is not a way to walk a disk)
MAX_GLOB_ENTRIES = 200_000
#: entries of one model directory checked for symlinks that leave the repository
MAX_DIR_ENTRIES = 100_000


def repository_root(base_dir: Path) -> Path:
    """The policy's repository: the nearest directory at or above the policy file with ``.git``, else the
    policy file's own directory."""
    base = Path(os.path.realpath(base_dir))
    for d in (base, *base.parents):
        if (d / ".git").exists():
            return d
    return base


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@dataclass
class Confinement:
    """Where policy paths may lead: inside the policy's repository, after every symlink, unless
    ``--allow-outside``. A policy arrives in pull requests from strangers, so ``/etc/...``, ``~/.ssh``,
    ``../../..`` and a committed symlink to a secret must not become files the gate reads (and whose
    errors it reports)."""

    root: Path
    allow_outside: bool = False

    def check(self, c: _Checker, key: str, text: str, local: Path, *, walk: bool = True) -> None:
        """Raise a PolicyError if ``local`` (as written: ``text``), or (``walk``) a symlink inside it, leaves
        the root."""
        problem = self.problem(text, local, walk=walk)
        if problem:
            raise c.fail(key, problem)

    def problem(self, text: str, local: Path, *, walk: bool = True) -> str | None:
        """Why ``local`` (as written: ``text``), or (``walk``) a symlink inside it, may not be read, or None. The
        same words whether or not the path exists (a refusal must not tell what is on the runner)."""
        if self.allow_outside:
            return None
        root = str(self.root)
        if not _inside(os.path.realpath(local), root):
            return (f"{text!r} is outside the policy's repository ({root}, after following symlinks); "
                    "pass --allow-outside to gate files outside it")
        if not walk or not local.is_dir():
            return None
        seen = 0
        for dirpath, dirnames, filenames in os.walk(local):  # symlinked directories are listed, not entered
            for name in (*dirnames, *filenames):
                seen += 1
                entry = os.path.join(dirpath, name)
                if seen > MAX_DIR_ENTRIES:
                    return f"{text!r} holds more than {MAX_DIR_ENTRIES} entries: not a model directory"
                if os.path.islink(entry) and not _inside(os.path.realpath(entry), root):
                    rel = os.path.relpath(entry, local)
                    return (f"{text!r}: {rel!r} is a symlink out of the policy's repository ({root}); "
                            "pass --allow-outside to follow it")
        return None


def _policy_name(text: str) -> str:
    """A model's default name: the path as the policy writes it, normalised (``./a//b`` -> ``a/b``), with
    symlinks and ``..`` kept, so target ``models`` globs match what the policy says."""
    return Path(os.path.normpath(text)).as_posix()


def _match_parts(parts: list[str], pats: list[str]) -> bool:
    """Path components against glob components; ``**`` is any number of non-hidden components."""
    import fnmatch

    if not pats:
        return not parts
    if pats[0] == "**":
        for i in range(len(parts) + 1):
            if i and parts[i - 1].startswith("."):
                return False
            if _match_parts(parts[i:], pats[1:]):
                return True
        return False
    if not parts or (parts[0].startswith(".") and not pats[0].startswith(".")):
        return False
    return fnmatch.fnmatchcase(parts[0], pats[0]) and _match_parts(parts[1:], pats[1:])


def _could_descend(parts: list[str], pats: list[str]) -> bool:
    """Whether a directory at ``parts`` can hold a match (prunes the walk)."""
    import fnmatch

    for i, part in enumerate(parts):
        if i >= len(pats):
            return False
        if pats[i] == "**":
            return True
        if (part.startswith(".") and not pats[i].startswith(".")) or not fnmatch.fnmatchcase(part, pats[i]):
            return False
    return len(parts) < len(pats)


def bounded_glob(c: _Checker, key: str, text: str, base_dir: Path) -> list[tuple[str, str]]:
    """Expand a policy glob: (name as the policy would write it, path) pairs, sorted.

    Unlike ``glob.glob(recursive=True)`` it never enters a symlinked directory (two committed symlinks
    made a cycle that never ended), stops as soon as there are more than ``MAX_MODELS`` matches, and
    refuses a pattern that makes it visit more than ``MAX_GLOB_ENTRIES`` entries."""
    comps = Path(text).parts
    first = next(i for i, comp in enumerate(comps) if _GLOB_CHARS & set(comp))
    prefix_text = os.path.join(*comps[:first]) if first else ""
    pats = list(comps[first:])
    start = Path(prefix_text) if os.path.isabs(text) else base_dir / prefix_text
    if not start.is_dir():
        return []
    found: list[tuple[str, str]] = []
    visited = 0
    stack: list[tuple[Path, list[str]]] = [(start, [])]
    while stack:
        directory, parts = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            visited += 1
            if visited > MAX_GLOB_ENTRIES:
                raise c.fail(key, f"the glob {text!r} visits more than {MAX_GLOB_ENTRIES} files and directories; "
                             "narrow it")
            sub = [*parts, entry.name]
            if _match_parts(sub, pats):
                found.append((os.path.join(prefix_text, *sub) if prefix_text else os.path.join(*sub), entry.path))
                if len(found) > MAX_MODELS:
                    raise c.fail(key, f"the glob {text!r} matches more than {MAX_MODELS} models")
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if is_dir and _could_descend(sub, pats):
                stack.append((Path(entry.path), sub))
    return sorted(found)


def _local_path(c: _Checker, key: str, text: str, base_dir: Path, confine: Confinement) -> Path:
    """The file a policy path names (relative to the policy's directory); ``~`` only with --allow-outside."""
    if text.startswith("~"):
        if not confine.allow_outside:
            raise c.fail(key, f"{text!r}: a home-directory path is outside the policy's repository; pass "
                         "--allow-outside to use it")
        text = os.path.expanduser(text)
    return Path(text) if os.path.isabs(text) else base_dir / text


def _models(c: _Checker, raw: Any, base_dir: Path, confine: Confinement) -> list[ModelSpec]:
    if not isinstance(raw, list):
        raise c.fail("models", f"must be a list of paths, globs, Hub ids or {{path, name}} tables, not {_type(raw)}")
    if not raw:
        raise c.fail("models", "is empty: list at least one model", 'models = ["models/*.gguf"]')
    out: list[ModelSpec] = []
    for i, entry in enumerate(raw):
        key = f"models[{i}]"
        name: str | None = None
        if isinstance(entry, dict):
            c.keys(entry, MODEL_KEYS, key)
            text = c.string(entry, "path", key, required=True)
            name = c.string(entry, "name", key)
        elif isinstance(entry, str) and entry.strip():
            text = entry.strip()
        else:
            raise c.fail(key, f"must be a path, glob, Hub id or {{path, name}} table, not {entry!r}")
        assert text is not None
        local = _local_path(c, key, text, base_dir, confine)
        written = text if not text.startswith("~") else str(local)
        if _GLOB_CHARS & set(text):
            matches = bounded_glob(c, key, written, base_dir)
            if not matches:
                raise c.fail(key, f"the glob {text!r} matches no file (relative to {base_dir})")
            if name and len(matches) > 1:
                raise c.fail(f"{key}.name", f"a name needs a single model, but {text!r} matches {len(matches)}")
            for shown, m in matches:
                confine.check(c, key, shown, Path(m))
                out.append(ModelSpec(name=name or _policy_name(shown), path=m, entry=key))
                if len(out) > MAX_MODELS:
                    raise c.fail(key, f"more than {MAX_MODELS} models")
        elif local.exists() or os.path.lexists(local):
            confine.check(c, key, text, local)
            out.append(ModelSpec(name=name or _policy_name(written), path=str(local), entry=key))
        else:
            from qcheck.readers import looks_like_repo_id

            if not looks_like_repo_id(text):
                raise c.fail(key, f"{text!r}: no such file or directory (relative to {base_dir}), and not a Hub "
                             "repo id", "a path, a glob, or org/name[@revision][:file]")
            out.append(ModelSpec(name=name or text, path=text, hub=True, entry=key))
        if len(out) > MAX_MODELS:
            raise c.fail(key, f"more than {MAX_MODELS} models")
    names = [m.name for m in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise c.fail("models", f"the same model is listed twice: {', '.join(dupes)}")
    return out


def _targets(c: _Checker, raw: Any, defaults: dict[str, bool]) -> list[TargetSpec]:
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise c.fail("targets", "must be a non-empty array of tables ([[targets]] with engine and gpu)",
                     '[[targets]] engine = "vllm", gpu = ["h100"]')
    out = []
    for i, entry in enumerate(raw):
        key = f"targets[{i}]"
        c.keys(entry, TARGET_KEYS, key)
        engines = c.strings(entry, "engine", key)
        gpus = c.strings(entry, "gpu", key)
        if not engines and not gpus:
            raise c.fail(key, "needs an engine and/or a gpu", 'engine = "vllm==0.11.0", gpu = ["h100", "l4"]')
        patterns = c.strings(entry, "models", key) if "models" in entry else None
        if patterns is not None and not patterns:
            raise c.fail(f"{key}.models", "is empty: leave it out to apply the target to every model")
        out.append(TargetSpec(engines=engines, gpus=gpus,
                              require_native=c.boolean(entry, "require-native", key, defaults["require_native"]),
                              allow_unknown=c.boolean(entry, "allow-unknown", key, defaults["allow_unknown"]),
                              key=key, models=patterns,
                              require_kv_scales=c.boolean(entry, "require-kv-scales", key,
                                                          defaults["require_kv_scales"]),
                              kernels_only=c.boolean(entry, "kernels-only", key, defaults["kernels_only"])))
    return out


def _memory(c: _Checker, raw: Any) -> MemorySpec:
    from qcheck.knobs import KNOBS

    c.keys(raw, MEMORY_KEYS + tuple(k.policy_key for k in KNOBS), "memory")
    kv = c.string(raw, "kv-cache-dtype", "memory")
    if kv is not None:
        from qcheck.kvtypes import KV_DTYPE_BYTES

        if kv.lower() not in KV_DTYPE_BYTES:
            raise c.fail("memory.kv-cache-dtype", f"unknown KV cache dtype {kv!r}", ", ".join(sorted(KV_DTYPE_BYTES)))
        kv = kv.lower()
    sizes = {k: c.integer(raw, k, "memory", minimum=1, maximum=1 << 16, default=None) for k in ("tp", "pp", "ep")}
    return MemorySpec(context=c.integer(raw, "context", "memory", minimum=1, maximum=1 << 24, default=None),
                      batch=c.integer(raw, "batch", "memory", minimum=1, maximum=1 << 16, default=1),
                      kv_cache_dtype=kv, enforce=c.boolean(raw, "enforce", "memory", True), knobs=_knobs(c, raw),
                      parallel=Parallel(**sizes))


def _knobs(c: _Checker, raw: dict[str, Any]) -> EngineKnobs:
    """The ``[memory]`` engine settings, parsed as ``qcheck check``'s flags parse them and validated as a request
    validates them; a bad one names its key."""
    from qcheck.knobs import KNOBS, parse_knob

    given: dict[str, Any] = {}
    for knob in KNOBS:
        if knob.policy_key not in raw:
            continue
        key = f"memory.{knob.policy_key}"
        value = raw[knob.policy_key]
        if not isinstance(value, (bool, int, float, str)):
            raise c.fail(key, f"must be a {'boolean' if knob.kind == 'flag' else 'number or string'}, not "
                              f"{type(value).__name__}")
        try:
            parsed = parse_knob(knob, value)
            if parsed is not None:
                EngineKnobs(**{knob.field: parsed})
                given[knob.field] = parsed
        except UsageError as exc:
            raise c.fail(key, str(exc).split(": ", 1)[-1]) from None
    return EngineKnobs(**given)



def _quality(c: _Checker, raw: Any, base_dir: Path, models: list[ModelSpec], confine: Confinement) -> QualitySpec:
    from qcheck.eval.gate import Thresholds

    threshold_keys = tuple(n.replace("_", "-") for n in Thresholds.names())
    c.keys(raw, QUALITY_KEYS + threshold_keys, "quality")
    reference = c.string(raw, "reference", "quality", required=True)
    assert reference is not None
    ref_path = _local_path(c, "quality.reference", reference, base_dir, confine)
    if ref_path.exists():
        confine.check(c, "quality.reference", reference, ref_path)
        reference = str(ref_path)
    tasks = []
    for i, t in enumerate(c.strings(raw, "tasks", "quality")):
        p = _local_path(c, f"quality.tasks[{i}]", t, base_dir, confine)
        if p.exists():
            confine.check(c, f"quality.tasks[{i}]", t, p)
        tasks.append(str(p) if p.exists() else t)
    names = c.strings(raw, "models", "quality") if "models" in raw else None
    if names is not None:
        known = [m.name for m in models]
        for i, n in enumerate(names):
            if n not in known:
                raise c.fail(f"quality.models[{i}]", f"{n!r} is not one of the policy's models", ", ".join(known))
    backend = c.choice(raw, "backend", "quality", quality_backends(), "simulated")
    reference_dtype = c.choice(raw, "reference-dtype", "quality", REFERENCE_DTYPES, "float32")
    device = c.choice(raw, "device", "quality", DEVICES, "cpu")
    max_length = c.integer(raw, "max-length", "quality", minimum=8, maximum=1_000_000, default=512)
    stride = c.integer(raw, "stride", "quality", minimum=1, maximum=max_length - 1, default=None)
    windows = c.choice(raw, "windows", "quality", WINDOW_MODES, "sliding")
    max_items = c.integer(raw, "max-items", "quality", minimum=1, maximum=10_000_000, default=None)
    thresholds_raw = {k: v for k, v in raw.items() if k in threshold_keys or k in ("tier", "use-intervals")}
    for key, value in thresholds_raw.items():  # each on its own first, so the error names its key
        try:
            Thresholds.from_mapping({key: value})
        except UsageError as exc:
            raise c.fail(f"quality.{key}", str(exc)) from None
    try:
        thresholds = Thresholds.from_mapping(thresholds_raw)
    except UsageError as exc:
        raise c.fail("quality", str(exc)) from None
    if not thresholds.active():
        raise c.fail("quality", "sets no threshold: a quality gate needs a tier or at least one threshold",
                     "tier = \"near-lossless\" | \"good\" | \"acceptable\", " + ", ".join(threshold_keys))
    cache_dir = c.string(raw, "cache-dir", "quality")
    if cache_dir is not None:
        cache_path = _local_path(c, "quality.cache-dir", cache_dir, base_dir, confine)
        confine.check(c, "quality.cache-dir", cache_dir, cache_path, walk=False)  # qcheck writes there
        cache_dir = str(cache_path)
    return QualitySpec(
        reference=reference, tasks=tasks, thresholds=thresholds, backend=backend, models=names,
        max_length=max_length, stride=stride, windows=windows, max_items=max_items,
        reference_dtype=reference_dtype, device=device, cache_dir=cache_dir,
        simulate_engine=c.choice(raw, "simulate-engine", "quality", SIMULATE_ENGINES, "auto"),
        kv_cache=_quality_kv(c, raw), kv_split=c.boolean(raw, "kv-split", "quality", True))


def _quality_kv(c: _Checker, raw: Any) -> KVCacheTypes:
    """``kv-cache-dtype`` (one type, or "K,V"), ``cache-type-k``, ``cache-type-v`` as a KVCacheTypes."""
    both = c.string(raw, "kv-cache-dtype", "quality")
    k = c.string(raw, "cache-type-k", "quality")
    v = c.string(raw, "cache-type-v", "quality")
    try:
        return KVCacheTypes.parse(both, k, v)
    except UsageError as exc:
        raise c.fail("quality.kv-cache-dtype", str(exc)) from None


def check_quality_inputs(policy: Policy) -> None:
    """What the quality gate will read, checked before ``qcheck gate`` judges any model (a bad one would otherwise
    surface after every compatibility check): the reference exists (a local directory or a Hub repo id), no model
    it evaluates is a Hub repo, every task set loads and validates, and the eval extra is installed. Raises the
    ``PolicyError`` (or ``DependencyError``) naming the key."""
    q = policy.quality
    if q is None:
        return
    from qcheck.readers import looks_like_repo_id

    if not os.path.exists(q.reference) and not looks_like_repo_id(q.reference):
        raise PolicyError(policy.file, "quality.reference", f"{q.reference!r}: no such directory, and not a Hub repo id")
    chosen = [m for m in policy.models if (m.name in q.models if q.models is not None else not m.hub)]
    hub = [m.name for m in chosen if m.hub]
    if hub:
        raise PolicyError(policy.file, "quality.models", f"{', '.join(hub)} is a Hub repo; the quality gate needs "
                          "local model files")
    from qcheck.errors import QcheckError
    from qcheck.eval.tasks import load_tasks

    try:
        load_tasks(list(q.tasks))
    except QcheckError as exc:
        raise PolicyError(policy.file, "quality.tasks", str(exc)) from None
    import importlib.util

    for module in ("torch", "transformers"):
        if importlib.util.find_spec(module) is None:
            from qcheck.errors import DependencyError

            raise DependencyError(module, "eval", f"the policy's [quality] gate ({policy.file})")


def quality_backends() -> tuple[str, ...]:
    """The eval backends a policy may name: those registered in qcheck.eval.runners that read a model path."""
    try:
        from qcheck.eval.runners import BACKENDS
    except ImportError:
        return ("simulated",)
    return tuple(b for b in PATH_BACKENDS if b in BACKENDS) or ("simulated",)


def validate_targets(policy: Policy, matrix: Matrix | None = None) -> None:
    """Resolve every target's engines and GPUs against the matrix: unknown names name their key."""
    from qcheck.pipeline import plan
    from qcheck.request import CheckRequest

    for t in policy.targets:  # plan() loads the default matrix (cached per root) when none is given
        try:
            plan(CheckRequest("-", tuple(t.engines), tuple(t.gpus)), matrix)
        except UsageError as exc:
            raise PolicyError(policy.file, t.key, str(exc).replace("--engine", "engine").replace("--gpu", "gpu")) \
                from None


# ------------------------------------------------------------------------------------------ --init
def discover_models(directory: str | Path) -> list[str]:
    """Model files and model directories under ``directory`` (two levels deep), as relative paths."""
    root = Path(directory)
    found: list[str] = []
    skip = {".git", ".venv", "venv", "node_modules", "__pycache__", ".tox"}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.startswith("."))
        if len(rel.parts) >= 2:
            dirnames[:] = []
        weights = sorted(f for f in filenames if f.endswith(".safetensors"))
        if "config.json" in filenames and weights:  # a model directory is one model
            found.append(rel.as_posix() if rel.parts else ".")
            dirnames[:] = []
            continue
        for f in sorted(filenames):
            gguf = f.endswith(".gguf") and not _is_later_split_shard(f)
            if gguf or f.endswith(".safetensors"):
                found.append((rel / f).as_posix())
        if len(found) > 200:
            break
    return sorted(found)


def _is_later_split_shard(name: str) -> bool:
    import re

    m = re.search(r"-(\d{5})-of-(\d{5})\.gguf$", name)
    return m is not None and int(m.group(1)) != 1


def starter_policy(directory: str | Path = ".") -> str:
    """A commented starter ``qcheck.toml`` for the models found in ``directory``."""
    models = discover_models(directory)
    has_gguf = any(m.endswith(".gguf") for m in models)
    has_st = any(not m.endswith(".gguf") for m in models)
    lines = ["# qcheck gate policy: `qcheck gate` reads this file (docs/ci.md lists every key).",
             "# Exit codes: 0 every model runs on every target; 1 a model cannot run there (or its status is",
             "# unknown, or it misses a memory or quality limit); 2 a model or this policy could not be read.", ""]
    if models:
        lines.append("# The models to gate: paths or globs (relative to this file) or Hub ids (org/name[@rev]).")
        lines.append("models = [")
        lines.extend(f"  {_toml_str(m)}," for m in models)
        lines.append("]")
    else:
        lines.append("# No model files were found here: list yours (paths, globs or Hub ids).")
        lines.append('models = ["models/*.gguf"]')
    lines += ["", "# Defaults for every target (each [[targets]] may override them):",
              "require-native = false   # true: a slower fallback kernel fails the gate",
              "allow-unknown = false    # true: a combination without a sourced answer passes",
              "kernels-only = false     # true: the engine's start-up with [memory] is reported, not judged",
              'lfs-pointers = "error"   # "skip": Git LFS pointer files are reported and skipped', "",
              "# Optional: the manifests that ship (compose, Kubernetes, Helm output), each inference container",
              "# judged as deployed (docs/ci.md, qcheck gate --explain); models and targets may then be left out.",
              "# deployments = [",
              '#   { file = "deploy/compose.yaml", models = { "/models/m.gguf" = "models/m.gguf" }, gpu = "rtx-4090" },',
              "# ]", ""]
    lines += ["# Where the models must run: engine (name or name==version) x gpu (product, architecture, sm90);",
              "# `models` (globs of model names) limits a target to some models; without it, it judges all."]
    if has_gguf or not models:
        lines += ["[[targets]]", 'engine = "llama.cpp"', 'gpu = ["cpu", "rtx-4090"]']
        lines += ['models = ["*.gguf"]', ""] if has_st else [""]
    if has_st:
        lines += ["[[targets]]", 'engine = "vllm"', 'gpu = ["h100"]']
        st = [m for m in models if not m.endswith(".gguf")]  # discover_models: sorted, no trailing slashes
        lines += [f"models = [{', '.join(_toml_str(m) for m in st)}]", ""] if has_gguf else [""]
    lines += ["# Optional: the deployment's settings; a model fails when the engine would not start with them",
              "# (kernels-only = true, at the top or per target, reports that without failing).",
              "# [memory]", "# context = 8192", "# batch = 1", '# kv-cache-dtype = "fp8"', "# enforce = true",
              "# engine settings, named as qcheck check's flags: gpu-memory-utilization = 0.9, max-num-seqs = 256,",
              '# mem-fraction-static = 0.85, n-gpu-layers = 30, parallel = 1, flash-attn = "on", fit = "off" ...', "",
              "# Optional: a quality gate against the unquantised reference (needs qcheck's eval extra).",
              "# [quality]", '# reference = "path/to/bf16-model"', '# tasks = ["arithmetic", "prose"]',
              '# tier = "good"            # or thresholds: max-kld = 0.03, min-top1 = 0.92, max-accuracy-drop = 0.02',
              '# backend = "simulated"', "# max-items = 100", ""]
    return "\n".join(lines)


def _toml_str(text: str) -> str:
    """A TOML basic string (escapes quotes, backslashes and control characters)."""
    out = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'
