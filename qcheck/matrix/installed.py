"""``--engine NAME=installed``: the engine installed in this Python, its version and its own model registry.

Nothing is imported: the package is located with ``importlib.util.find_spec`` (which does not run a top-level
package), its version comes from the distribution metadata, and its registry files are read as text with the
same parsers that generate ``matrices/architectures/`` (``qcheck.matrix.arch_sources``). llama-cpp-python has
no Python registry: its shared library is scanned for the ``general.architecture`` names llama.cpp has ever
defined. No GPU is touched, no engine code runs.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from qcheck.errors import UsageError
from qcheck.matrix import arch_sources as src

__all__ = ["INSTALLED_MODULES", "InstalledEngine", "find_installed"]

#: engine id -> (import name, distribution name)
INSTALLED_MODULES: dict[str, tuple[str, str]] = {
    "vllm": ("vllm", "vllm"),
    "sglang": ("sglang", "sglang"),
    "transformers": ("transformers", "transformers"),
    "mlx": ("mlx_lm", "mlx-lm"),
    "llama.cpp": ("llama_cpp", "llama-cpp-python"),
}
#: bytes of one shared library scanned for architecture names (libllama is tens of MB)
MAX_LIBRARY_BYTES = 512 << 20


@dataclass(frozen=True)
class InstalledEngine:
    """What the installed engine says about itself (hashable: it rides on an EngineRequest)."""

    engine: str
    package: str
    version: str
    location: str
    #: naming ("hf-class", "model-type", "gguf-arch") -> names its registry holds
    names: tuple[tuple[str, frozenset[str]], ...]
    #: the version in the engine's own scheme, when the package version is it (None: llama.cpp's build number is
    #: not recorded in llama-cpp-python)
    engine_version: str | None
    note: str | None = None

    def registry(self, naming: str) -> frozenset[str] | None:
        return dict(self.names).get(naming)


def find_installed(engine: str, *, known_gguf_names: frozenset[str] = frozenset()) -> InstalledEngine:
    """Locate and read the installed engine; a usage error when it is not installed or not supported here."""
    if engine not in INSTALLED_MODULES:
        raise UsageError(f"--engine {engine}=installed: qcheck reads the installed registry of "
                         f"{', '.join(INSTALLED_MODULES)} only")
    module, package = INSTALLED_MODULES[engine]
    spec = importlib.util.find_spec(module)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise UsageError(f"--engine {engine}=installed: {module} is not installed in this Python ({sys.executable})")
    root = Path(locations[0])
    try:
        version = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        raise UsageError(f"--engine {engine}=installed: {module} is importable from {root} but has no "
                         f"{package} distribution metadata, so its version is unknown") from None
    names = _READERS[engine](root, known_gguf_names)
    engine_version: str | None = version
    note = None
    if engine == "llama.cpp":
        engine_version = None
        note = (f"{package} {version} does not record the llama.cpp build it bundles; the weight-format rules are "
                "judged at the newest build the matrix knows")
    elif engine == "mlx":
        try:
            engine_version = importlib.metadata.version("mlx")  # qcheck's mlx engine versions are the framework's
        except importlib.metadata.PackageNotFoundError:
            engine_version = None
    return InstalledEngine(engine, package, version, str(root), tuple(sorted(names.items())), engine_version, note)


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _vllm(root: Path, _known: frozenset[str]) -> dict[str, frozenset[str]]:
    models = root / "model_executor" / "models"
    text = _text(models / "registry.py") or _text(models / "__init__.py")
    return {"hf-class": frozenset(src.parse_vllm_registry(text))}


def _sglang(root: Path, _known: frozenset[str]) -> dict[str, frozenset[str]]:
    names: set[str] = set()
    for path in sorted((root / "srt" / "models").glob("*.py")):
        names.update(src.parse_sglang_entry(_text(path)))
    return {"hf-class": frozenset(names)}


def _transformers(root: Path, _known: frozenset[str]) -> dict[str, frozenset[str]]:
    auto = root / "models" / "auto"
    return {
        "hf-class": frozenset(src.parse_transformers_modeling(_text(auto / "modeling_auto.py"))),
        "model-type": frozenset(src.parse_transformers_config(_text(auto / "configuration_auto.py"),
                                                              _text(auto / "auto_mappings.py"))),
        "gguf-arch": frozenset(src.parse_transformers_gguf(_text(root / "integrations" / "ggml.py"))),
    }


def _mlx(root: Path, _known: frozenset[str]) -> dict[str, frozenset[str]]:
    models = {p.stem for p in (root / "models").glob("*.py")} - src.MLX_NOT_MODELS
    remap: dict[str, str] = {}
    for path in (root / "utils.py", root / "models" / "__init__.py"):
        remap.update(src.parse_mlx_remapping(_text(path)))
    return {"model-type": frozenset(models | {k for k, v in remap.items() if v in models})}


def _llama_cpp(root: Path, known: frozenset[str]) -> dict[str, frozenset[str]]:
    """Names of ``known`` (every name llama.cpp has defined in the releases read) that the bundled libllama holds
    as NUL-terminated strings: its ``LLM_ARCH_NAMES`` table is compiled into the library. The linker may store a
    name as the tail of a longer one ("bert" inside "nomic-bert"), so a name counts when it ends a string."""
    found: set[str] = set()
    libs = [p for p in sorted(root.rglob("*")) if p.is_file() and ("libllama" in p.name or p.name.startswith("llama"))
            and p.suffix in (".so", ".dylib", ".dll")]
    for lib in libs:
        try:
            with lib.open("rb") as fh:
                blob = fh.read(MAX_LIBRARY_BYTES)
        except OSError:
            continue
        found.update(n for n in known if n.encode() + b"\0" in blob)
    return {"gguf-arch": frozenset(found)} if libs else {}


_READERS: dict[str, Callable[[Path, frozenset[str]], dict[str, frozenset[str]]]] = {
    "vllm": _vllm, "sglang": _sglang, "transformers": _transformers, "mlx": _mlx, "llama.cpp": _llama_cpp,
}
