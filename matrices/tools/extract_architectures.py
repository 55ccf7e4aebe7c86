#!/usr/bin/env python3
"""Generate matrices/architectures/<engine>.toml from the engines' own released packages and source.

Which model architectures each engine loads, per release, read from the release itself (never typed):

* vllm: ``vllm/model_executor/models/registry.py`` (``_*_MODELS`` dicts; older releases
  ``models/__init__.py``) in the PyPI sdist of each release.
* transformers: the auto mappings ``models/auto/modeling_auto.py`` (``MODEL_*_MAPPING_NAMES``) and
  ``configuration_auto.py`` (``CONFIG_MAPPING_NAMES``), plus the GGUF loader's ``integrations/ggml.py``
  (``GGUF_CONFIG_MAPPING``: the ``general.architecture`` values ``from_pretrained(gguf_file=)`` reads),
  from the PyPI wheel of each release.
* sglang: ``python/sglang/srt/models/*.py`` ``EntryClass`` in the PyPI wheel of each release.
* mlx-lm: the module names of ``mlx_lm/models/*.py`` (a ``model_type`` loads when its module exists,
  after ``MODEL_REMAPPING`` in ``utils.py``), from the PyPI wheel of each release.
* llama.cpp: ``LLM_ARCH_NAMES`` in ``src/llama-arch.cpp`` (the ``general.architecture`` values llama.cpp
  loads) and the ``@ModelBase.register(...)`` HF classes of ``convert_hf_to_gguf.py`` (and, once it was split,
  ``conversion/*.py``), from the llama.cpp
  git bundle that each npm ``node-llama-cpp`` release carries at a llama.cpp release tag (``bNNNN``), and from
  the ``vendor/llama.cpp`` of llama-cpp-python sdists (``llama-cpp-python==X`` in ``--versions``; the build
  of each is in ``LLAMA_CPP_PYTHON``, checked against the commit its CHANGELOG names).

Downloads go through the registries' ordinary clients (``pip download --no-deps``, ``npm pack``) except
vLLM, whose sdist cannot be ``pip download``-ed without building it (its setup.py imports torch): its
sdist is fetched through PyPI's simple index (PEP 691 JSON) and checked against the published sha256. Everything is cached
under ``$QCHECK_ARCH_CACHE`` (default ``~/.cache/qcheck-arch``).

    python matrices/tools/extract_architectures.py all          # refresh every engine
    python matrices/tools/extract_architectures.py vllm sglang  # some engines
    python matrices/tools/extract_architectures.py vllm --versions 0.9.0 0.33.0

The output is deterministic for the same inputs, so a refresh is a reviewable diff.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
OUT_DIR = REPO / "matrices" / "architectures"
sys.path.insert(0, str(REPO))  # the parsers are qcheck's own (``--engine NAME=installed`` reads with them too)

from qcheck.matrix.arch_sources import (  # noqa: E402
    MLX_NOT_MODELS,
    parse_arch_strings,
    parse_causal_lm_types,
    parse_convert_hf,
    parse_gguf_renames,
    parse_llama_arch,
    parse_mlx_remapping,
    parse_ollama_convert,
    parse_ollama_engine,
    parse_sglang_entry,
    parse_transformers_config,
    parse_transformers_gguf,
    parse_transformers_model_type_kinds,
    parse_transformers_modeling,
    parse_trtllm_model_map,
    parse_trtllm_models,
    parse_vllm_registry,
)

CACHE = Path(os.environ.get("QCHECK_ARCH_CACHE", Path.home() / ".cache" / "qcheck-arch"))

#: releases read per engine: every minor release (and the versions the engine matrix names)
VERSIONS: dict[str, list[str]] = {
    "vllm": ["0.5.5", "0.6.0", "0.6.3", "0.6.6", "0.7.0", "0.7.3", "0.8.0", "0.8.5", "0.9.0", "0.10.0", "0.10.2",
             "0.11.0", "0.12.0", "0.13.0", "0.14.0", "0.15.1", "0.16.0", "0.17.0", "0.18.0", "0.19.0", "0.20.0",
             "0.21.0", "0.22.0", "0.23.0", "0.24.0", "0.25.0", "0.26.0", "0.27.0", "0.28.0", "0.29.0", "0.30.0",
             "0.31.0", "0.32.0", "0.33.0", "0.34.0"],
    "transformers": ["4.40.0", "4.43.0", "4.46.0", "4.49.0", "4.52.1", "4.55.0", "4.57.1", "5.0.0", "5.4.0",
                     "5.8.0", "5.12.0", "5.16.0", "5.20.0", "5.24.0", "5.25.0"],
    "sglang": ["0.4.0", "0.4.3", "0.4.6", "0.4.9", "0.5.1", "0.5.3", "0.5.6", "0.5.9", "0.5.12", "0.5.15",
               "0.5.18", "0.5.21", "0.5.23"],
    "mlx": ["0.19.0", "0.20.1", "0.22.0", "0.24.0", "0.26.0", "0.28.0", "0.29.1", "0.30.0", "0.31.1", "0.32.1", "0.32.2"],
    # node-llama-cpp releases -> the llama.cpp build each one bundles (read from the package itself)
    "exllamav2": ["0.1.0", "0.1.5", "0.2.0", "0.2.3", "0.2.6", "0.2.9", "0.3.0", "0.3.2"],
    "exllamav3": ["0.0.5", "0.0.10", "0.0.20", "0.0.30", "0.0.40", "1.0.0", "1.2.0", "1.4.1", "1.5.0", "1.6.5"],
    "llama.cpp": ["3.2.0", "3.4.0", "3.6.0", "3.8.1", "3.10.0", "3.12.0", "3.14.0", "3.16.0", "3.18.0",
                  "3.20.0", "3.21.1", "3.22.0", "llama-cpp-python==0.3.36"],
}

#: llama-cpp-python releases read for llama.cpp: version -> (the llama.cpp commit its CHANGELOG names for that
#: release, the llama.cpp build tag of that commit). The sdist carries llama.cpp's source (vendor/llama.cpp) but
#: not its build number; the commit -> build pairs are public pins ("b11312-0c1e57098", matrices/SOURCES.md). The
#: script checks the CHANGELOG still names the commit, so a wrong pair fails instead of mislabelling a build.
LLAMA_CPP_PYTHON: dict[str, tuple[str, str]] = {
    "0.3.36": ("0c1e57098", "b11312"),
}

# --------------------------------------------------------------------------------------------------------------
# version history -> TOML

@dataclass
class NameList:
    """One list of an engine: which names (HF class / model_type / GGUF arch), read from where, at which versions."""

    id: str
    names: str  # "hf-class" | "model-type" | "gguf-arch"
    containers: list[str]
    source: str
    note: str = ""
    #: "load" (the engine loads these names) or "convert" (it converts them to its own format first)
    role: str = "load"
    #: what the engine does with a name it does not list, when it does not refuse it (read from its source)
    unlisted: str = ""
    #: a generic loader for names the list lacks: {"via", "marker", "reason"} (see SCHEMA.md §7)
    fallback: dict[str, str] | None = None
    #: the weight methods whose checkpoints the list judges (empty: every one)
    methods: list[str] = field(default_factory=list)
    #: False: the list names what a vendor documents, not all the engine loads (absent -> unknown, never unsupported)
    exhaustive: bool = True
    #: version -> {name: kind}, oldest first
    seen: dict[str, dict[str, str]] = field(default_factory=dict)


def history(seen: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """{name: {"first", "last"?, "kind"}}: first and last version read that has the name (``last`` only when a
    later version read dropped it)."""
    versions = list(seen)
    out: dict[str, dict[str, str]] = {}
    for v in versions:
        for name, kind in seen[v].items():
            entry = out.setdefault(name, {"first": v, "kind": kind})
            entry["kind"] = kind
            entry["_last"] = v
    newest = versions[-1] if versions else None
    for entry in out.values():
        last = entry.pop("_last")
        if last != newest:
            entry["last"] = last
    return out


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _derive_lines(derive: dict[str, object]) -> list[str]:
    lines = ["", "[architectures.derive]"]
    for key in ("containers", "from", "source", "note", "absent"):
        value = derive.get(key)
        if isinstance(value, list):
            lines.append(f"{key} = [{', '.join(_q(v) for v in value)}]")
        elif value is not None:
            lines.append(f"{key} = {_q(str(value))}")
    versions = derive.get("versions")
    if isinstance(versions, dict):
        lines += ["", "[architectures.derive.versions]"] + [f"{_q(k)} = {_q(v)}" for k, v in versions.items()]
    return lines


#: engines that hand some checkpoints to another engine's loader (read from their source, see the refs)
DERIVES: dict[str, dict[str, object]] = {}


def render_toml(engine: str, scheme: str, lists: Sequence[NameList], read: dict[str, str], command: str,
                versions_of: str | None = None, derive: dict[str, object] | None = None, note: str | None = None,
                source: str | None = None, source_read: str | None = None) -> str:
    """The architectures file for one engine (deterministic: names sorted, versions oldest first)."""
    versions = list(read)
    lines = [
        f"# Architectures {engine} loads, per release. GENERATED by {command}; do not edit by hand.",
        "# Each list says what names it holds and where they were read; per name: the first release read",
        "# that has it and, when a later release read dropped it, the last one. Releases between two",
        "# releases read are not known exactly (qcheck says unknown there).",
        "",
        "[architectures]",
        f"engine = {_q(engine)}",
        f"version_scheme = {_q(scheme)}",
        f"versions_read = [{', '.join(_q(v) for v in versions)}]",
        f"generated_by = {_q(command)}",
        *([f"versions_of = {_q(versions_of)}"] if versions_of else []),
        *([f"note = {_q(note)}"] if note else []),
        *([f"source = {_q(source)}"] if source else []),
        *([f"source_read = {_q(source_read)}"] if source_read else []),
        *(_derive_lines(derive) if derive else []),
        "",
        "[architectures.read]",
    ]
    lines += [f"{_q(v)} = {_q(what)}" for v, what in read.items()]
    for lst in lists:
        lines += ["", "[[list]]", f"id = {_q(lst.id)}", f"names = {_q(lst.names)}",
                  f"containers = [{', '.join(_q(c) for c in lst.containers)}]", f"source = {_q(lst.source)}"]
        if lst.role != "load":
            lines.append(f"role = {_q(lst.role)}")
        if lst.note:
            lines.append(f"note = {_q(lst.note)}")
        if lst.unlisted:
            lines.append(f"unlisted = {_q(lst.unlisted)}")
        if not lst.exhaustive:
            lines.append("exhaustive = false")
        if lst.methods:
            lines.append(f"methods = [{', '.join(_q(m) for m in lst.methods)}]")
        if lst.fallback and any(lst.fallback["marker"] in names for names in lst.seen.values()):
            lines.append("fallback = { " + ", ".join(f"{k} = {_q(v)}" for k, v in lst.fallback.items()) + " }")
        lines += [f"versions_read = [{', '.join(_q(v) for v in lst.seen)}]",
                  "# one name a line: NAME FIRST LAST KIND (LAST '-': still in the newest release read)",
                  'arch = """']
        rows = [(name, e["first"], e.get("last", "-"), e["kind"]) for name, e in sorted(history(lst.seen).items())]
        width = max((len(r[0]) for r in rows), default=0)
        vwidth = max((len(r[1]) for r in rows), default=0)
        lwidth = max((len(r[2]) for r in rows), default=0)
        lines += [f"{n:<{width}} {f:<{vwidth}} {la:<{lwidth}} {k}" for n, f, la, k in rows]
        lines.append('"""')
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------------------
# fetching releases (cached)

class Missing(Exception):
    """A release has no file of the kind needed (e.g. no sdist on PyPI): the release is skipped, not guessed."""


def _releases(package: str, versions: Sequence[str], get: Callable[[str, str], Path]) -> Iterable[tuple[str, Path]]:
    """(version, downloaded file) for every release that has one; the others are reported and skipped."""
    for v in versions:
        try:
            yield v, get(package, v)
        except (Missing, subprocess.CalledProcessError) as exc:
            print(f"{package} {v}: skipped ({exc})", file=sys.stderr)


def _run(cmd: list[str], cwd: Path) -> None:
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def pip_wheel(package: str, version: str) -> Path:
    """The PyPI wheel of a pure-Python release, through ``pip download --no-deps --only-binary :all:``."""
    dest = CACHE / "pypi" / f"{package}-{version}"
    found = sorted(dest.glob("*.whl")) if dest.is_dir() else []
    if not found:
        dest.mkdir(parents=True, exist_ok=True)
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", f"{package}=={version}",
              "-d", str(dest)], dest)
        found = sorted(dest.glob("*.whl"))
    if not found:
        raise Missing(f"no wheel for {package}=={version}")
    return found[0]


def pypi_sdist(package: str, version: str) -> Path:
    """The sdist of a release from PyPI's simple index, checked against the sha256 PyPI publishes."""
    dest = CACHE / "pypi" / f"{package}-{version}"
    found = sorted(dest.glob("*.tar.gz")) if dest.is_dir() else []
    if found:
        return found[0]
    request = urllib.request.Request(f"https://pypi.org/simple/{package}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as resp:
        index = json.load(resp)
    wanted = {f"{package}-{version}.tar.gz", f"{package.replace('-', '_')}-{version}.tar.gz"}
    url = next((f for f in index["files"] if f["filename"] in wanted), None)
    if url is None:
        raise Missing(f"no sdist for {package}=={version} on PyPI")
    with urllib.request.urlopen(url["url"], timeout=300) as resp:
        data = resp.read()
    if hashlib.sha256(data).hexdigest() != url["hashes"]["sha256"]:
        raise SystemExit(f"{url['filename']}: sha256 does not match PyPI's")
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / url["filename"]
    path.write_bytes(data)
    return path


def npm_pack(package: str, version: str) -> Path:
    """An npm release tarball through ``npm pack``."""
    dest = CACHE / "npm" / f"{package}-{version}"
    found = sorted(dest.glob("*.tgz")) if dest.is_dir() else []
    if not found:
        dest.mkdir(parents=True, exist_ok=True)
        _run(["npm", "pack", "--silent", f"{package}@{version}"], dest)
        found = sorted(dest.glob("*.tgz"))
    if not found:
        raise Missing(f"npm pack {package}@{version} gave no tarball")
    return found[0]


class Archive:
    """Read members of a wheel (zip) or sdist/npm tarball by path suffix, without unpacking to disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.files: dict[str, bytes] = {}
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as z:
                self._names = z.namelist()
                self._read: Callable[[str], bytes] = lambda n: zipfile.ZipFile(path).read(n)
        else:
            with tarfile.open(path) as t:
                self._names = [m.name for m in t.getmembers() if m.isfile()]
            self._read = lambda n: _tar_member(path, n)

    def find(self, suffix: str) -> list[str]:
        return sorted(n for n in self._names if n.endswith(suffix))

    def text(self, name: str) -> str:
        return self._read(name).decode("utf-8", "replace")

    def glob(self, pattern: str) -> list[str]:
        rx = re.compile(pattern)
        return sorted(n for n in self._names if rx.search(n))


def _tar_member(path: Path, name: str) -> bytes:
    with tarfile.open(path) as t:
        f = t.extractfile(name)
        return f.read() if f else b""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------------------------
# engines

#: vLLM's GGUF path (read with the registry): core gguf_loader.py up to 0.23, vllm-gguf-plugin from 0.24.0 (its
#: newest release on PyPI is read for every vLLM release from then on), with transformers' auto mappings of this
#: release (how vLLM names a GGUF's HF class: MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])
GGUF_PLUGIN_FROM = "0.24.0"
GGUF_PLUGIN_VERSION = "0.0.5"
GGUF_TRANSFORMERS = "5.24.0"


def extract_vllm(versions: Sequence[str]) -> tuple[list[NameList], dict[str, str]]:
    from packaging.version import Version

    reg = NameList("registry", "hf-class", ["safetensors"],
                   "vllm-project/vllm: vllm/model_executor/models/registry.py (every _*_MODELS dict; "
                   "before 0.6: models/__init__.py)",
                   note="kinds from the dict names: _TEXT_GENERATION_MODELS text, _EMBEDDING_MODELS embedding, "
                        "_MULTIMODAL_MODELS multimodal, _SPECULATIVE_DECODING_MODELS speculative ...",
                   fallback={"via": "transformers", "marker": "TransformersForCausalLM",
                             "reason": "vLLM's Transformers backend (--model-impl auto/transformers) runs it only if "
                                       "transformers' implementation supports vLLM's attention interface"})
    tf = Archive(pip_wheel("transformers", GGUF_TRANSFORMERS))
    causal = parse_causal_lm_types(tf.text(tf.find("transformers/models/auto/modeling_auto.py")[0]))
    tf_gguf = parse_transformers_gguf(tf.text(tf.find("transformers/integrations/ggml.py")[0]))
    plugin_path = pip_wheel("vllm-gguf-plugin", GGUF_PLUGIN_VERSION)
    plugin = Archive(plugin_path)
    plugin_renames = parse_gguf_renames(plugin.text(plugin.find("vllm_gguf_plugin/weights_adapter/default.py")[0]))
    gguf = NameList("gguf", "gguf-arch", ["gguf"],
                    f"vllm-project/vllm: model_loader/gguf_loader.py (before 0.7: model_loader/loader.py) up to 0.23, "
                    f"vllm-gguf-plugin {GGUF_PLUGIN_VERSION} weights_adapter/default.py from {GGUF_PLUGIN_FROM} "
                    f"(model_type -> GGUF name renames); transformers {GGUF_TRANSFORMERS} MODEL_FOR_CAUSAL_LM_MAPPING_NAMES "
                    "(model_type -> the class vLLM loads) and, before 0.24, GGUF_CONFIG_MAPPING (transformers' GGUF "
                    "config reader); this release's registry",
                    note=f"a GGUF architecture is listed when its model_type (after the loader's renames) is a "
                         f"transformers causal-LM type whose class this vLLM release registers, and a GGUF name "
                         f"llama.cpp defines (architectures/llama.cpp.toml); transformers {GGUF_TRANSFORMERS} stands in "
                         "for the transformers installed beside each vLLM release",
                    unlisted="vLLM names a GGUF's class from transformers' causal-LM mapping of its model_type; a "
                             "GGUF architecture qcheck cannot trace through that chain (no causal-LM model_type of "
                             "that name, a class vLLM does not register, or a rename the loader does in code qcheck "
                             "does not read) is not known either way")
    gguf_names = _llama_cpp_gguf_names()
    read = {}
    for v, path in _releases("vllm", versions, pypi_sdist):
        arc = Archive(path)
        files = arc.find("vllm/model_executor/models/registry.py") or arc.find("vllm/model_executor/models/__init__.py")
        if not files:
            raise SystemExit(f"vllm {v}: no registry.py in {path.name}")
        reg.seen[v] = parse_vllm_registry(arc.text(files[0]))
        what = f"{path.name} (PyPI sdist, sha256 {sha256(path)}...)"
        if Version(v) >= Version(GGUF_PLUGIN_FROM):
            renames: dict[str, str] | None = plugin_renames
            what += f"; GGUF: {plugin_path.name} (PyPI wheel, sha256 {sha256(plugin_path)}...)"
        else:
            loader = [n for n in arc.find("model_loader/gguf_loader.py") + arc.find("model_loader/loader.py")
                      if "GGUFModelLoader" in arc.text(n)]
            renames = parse_gguf_renames(arc.text(loader[0])) if loader else None
        if renames is not None:
            names = _vllm_gguf_names(reg.seen[v], causal, renames,
                                     None if Version(v) >= Version(GGUF_PLUGIN_FROM) else tf_gguf)
            gguf.seen[v] = {n: k for n, k in names.items() if not gguf_names or n in gguf_names}
        read[v] = what
    return [reg, gguf] if gguf.seen else [reg], read


def _llama_cpp_gguf_names() -> set[str]:
    """Every GGUF architecture name llama.cpp defined in a build read (architectures/llama.cpp.toml, generated
    first): a model_type that is no such name (gpt_oss: the GGUF name is gpt-oss) is one no GGUF file carries, and
    vLLM's weight mapping (gguf-py's MODEL_ARCH_NAMES) would not find it either. Empty when there is no file."""
    import tomllib

    path = OUT_DIR / "llama.cpp.toml"
    if not path.is_file():
        return set()
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return {line.split()[0] for lst in data["list"] if lst["names"] == "gguf-arch"
            for line in lst["arch"].splitlines() if line.strip()}


def _vllm_gguf_names(registry: dict[str, str], causal: dict[str, str], renames: dict[str, str],
                     config_reader: set[str] | None) -> dict[str, str]:
    """{GGUF architecture: kind} a vLLM release loads: model_type -> (renamed) GGUF name, kept when transformers
    maps the model_type to a class the registry has, and (in-tree loader) transformers' GGUF config reader knows
    the model_type or the GGUF name."""
    out: dict[str, str] = {}
    for model_type, cls in sorted(causal.items()):
        name = renames.get(model_type, model_type)
        if cls not in registry:
            continue
        if config_reader is not None and model_type not in config_reader and name not in config_reader:
            continue
        out.setdefault(name, registry[cls])
    return out


def extract_transformers(versions: Sequence[str]) -> tuple[list[NameList], dict[str, str]]:
    classes = NameList("auto-classes", "hf-class", ["safetensors"],
                       "huggingface/transformers: src/transformers/models/auto/modeling_auto.py (MODEL_*_MAPPING_NAMES: "
                       "causal LM, image-text-to-text, seq2seq, encoders)")
    types = NameList("model-types", "model-type", ["safetensors"],
                     "huggingface/transformers: src/transformers/models/auto/configuration_auto.py and, from 5.8.0, "
                     "auto_mappings.py (CONFIG_MAPPING_NAMES)")
    gguf = NameList("gguf", "gguf-arch", ["gguf"],
                    "huggingface/transformers: src/transformers/integrations/ggml.py (GGUF_CONFIG_MAPPING: the "
                    "general.architecture values from_pretrained(gguf_file=...) reads)")
    read = {}
    for v, path in _releases("transformers", versions, pip_wheel):
        arc = Archive(path)
        modeling = arc.text(arc.find("transformers/models/auto/modeling_auto.py")[0])
        classes.seen[v] = parse_transformers_modeling(modeling)
        mappings = arc.find("transformers/models/auto/auto_mappings.py")  # >= 5.8: the generated mapping moved here
        # a model_type's kind is that of the model mappings naming it (a model_type only CONFIG_MAPPING knows, a
        # vision tower or an audio encoder, has no language-model head: other)
        kinds = parse_transformers_model_type_kinds(modeling)
        types.seen[v] = {t: kinds.get(t, "other") for t in sorted(parse_transformers_config(
            arc.text(arc.find("transformers/models/auto/configuration_auto.py")[0]),
            *(arc.text(m) for m in mappings[:1])))}
        ggml = arc.find("transformers/integrations/ggml.py")
        gguf.seen[v] = dict.fromkeys(parse_transformers_gguf(arc.text(ggml[0])) if ggml else set(), "text")
        read[v] = f"{path.name} (PyPI wheel, sha256 {sha256(path)}...)"
    # model_type first: from_pretrained resolves AutoConfig by model_type before any class (a model_type it does
    # not know fails whatever architectures[0] says), so where the two lists disagree the model_type list decides
    return [types, classes, gguf], read


#: SGLang's GGUF config path (srt/utils/hf_transformers/config.py): a GGUF without a config.json beside it gets the
#: class transformers' causal-LM mapping names for its model_type
SGLANG_GGUF_CLASS = "_set_architectures(config, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type])"


def extract_sglang(versions: Sequence[str]) -> tuple[list[NameList], dict[str, str]]:
    lst = NameList("models", "hf-class", ["safetensors"],
                   "sgl-project/sglang: python/sglang/srt/models/*.py (EntryClass of each module)")
    gguf = NameList("gguf", "gguf-arch", ["gguf"],
                    "sgl-project/sglang: srt/utils/hf_transformers/config.py (a GGUF without config.json: transformers' "
                    "GGUF config reader, then the class MODEL_FOR_CAUSAL_LM_MAPPING_NAMES names for its model_type), "
                    "srt/model_loader/loader.py GGUFModelLoader (model_type -> gguf-py name renames); the transformers "
                    "release the SGLang wheel pins (Requires-Dist transformers==X): integrations/ggml.py "
                    "GGUF_CONFIG_MAPPING and models/auto/modeling_auto.py; this release's EntryClass registry",
                    exhaustive=False,
                    unlisted="SGLang names a GGUF's class through transformers' GGUF config reader and causal-LM "
                             "mapping; a GGUF architecture qcheck cannot trace through that chain (renamed, built "
                             "by SGLang's own GGUF config builders, or a config.json placed beside the file) is not "
                             "known either way")
    gguf_names = _llama_cpp_gguf_names()
    read = {}
    for v, path in _releases("sglang", versions, pip_wheel):
        arc = Archive(path)
        names: dict[str, str] = {}
        for member in arc.glob(r"sglang/srt/models/[^/]+\.py$"):
            for cls in parse_sglang_entry(arc.text(member)):
                names.setdefault(cls, "text")
        lst.seen[v] = names
        read[v] = f"{path.name} (PyPI wheel, sha256 {sha256(path)}...)"
        traced = _sglang_gguf(arc, names, gguf_names)
        if traced is not None:
            gguf.seen[v], pin = traced
            read[v] += f"; GGUF: transformers {pin} (the pinned release, PyPI wheel)"
    return ([lst, gguf] if gguf.seen else [lst]), read


def _sglang_gguf(arc: Archive, registry: dict[str, str], gguf_names: set[str]) -> tuple[dict[str, str], str] | None:
    """{GGUF architecture: kind} an SGLang release loads through its GGUF config path, and the transformers release
    it pins; None when the release has no such path or pins no exact transformers."""
    configs = [n for n in arc.find("srt/utils/hf_transformers/config.py") if SGLANG_GGUF_CLASS in arc.text(n)]
    loaders = [n for n in arc.find("srt/model_loader/loader.py") if "GGUFModelLoader" in arc.text(n)]
    metadata = [n for n in arc.glob(r"\.dist-info/METADATA$")]
    if not configs or not loaders or not metadata:
        return None
    pin = re.search(r"^Requires-Dist: transformers==([0-9][^\s;]*)", arc.text(metadata[0]), re.M)
    if pin is None:
        return None
    tf = Archive(pip_wheel("transformers", pin.group(1)))
    causal = parse_causal_lm_types(tf.text(tf.find("transformers/models/auto/modeling_auto.py")[0]))
    reader = parse_transformers_gguf(tf.text(tf.find("transformers/integrations/ggml.py")[0]))
    names = _vllm_gguf_names(registry, causal, parse_gguf_renames(arc.text(loaders[0])), reader)
    return {n: k for n, k in names.items() if not gguf_names or n in gguf_names}, pin.group(1)


def extract_mlx(versions: Sequence[str]) -> tuple[list[NameList], dict[str, str]]:
    lst = NameList("models", "model-type", ["safetensors"],
                   "ml-explore/mlx-lm: mlx_lm/models/<model_type>.py modules + MODEL_REMAPPING (mlx_lm/utils.py)")
    read = {}
    for v, path in _releases("mlx-lm", versions, pip_wheel):
        arc = Archive(path)
        names = {Path(m).stem for m in arc.glob(r"mlx_lm/models/[^/]+\.py$")} - MLX_NOT_MODELS
        remap: dict[str, str] = {}
        for member in arc.find("mlx_lm/utils.py") + arc.find("mlx_lm/models/__init__.py"):
            remap.update(parse_mlx_remapping(arc.text(member)))
        names |= {k for k, target in remap.items() if target in names}
        lst.seen[v] = dict.fromkeys(sorted(names), "text")
        read[v] = f"{path.name} (PyPI wheel, sha256 {sha256(path)}...)"
    return [lst], read


def _extract_exllama(package: str, pattern: str, source: str, versions: Sequence[str], unlisted: str = ""
                     ) -> tuple[list[NameList], dict[str, str]]:
    lst = NameList("architectures", "hf-class", ["safetensors"], source, unlisted=unlisted)
    read = {}
    for v, path in _releases(package, versions, pip_wheel):
        arc = Archive(path)
        names: set[str] = set()
        for member in arc.glob(pattern):
            names |= parse_arch_strings(arc.text(member))
        lst.seen[v] = dict.fromkeys(sorted(names), "text")
        read[v] = f"{path.name} (PyPI wheel, sha256 {sha256(path)}...)"
    return [lst], read


def extract_exllamav2(versions: Sequence[str]) -> tuple[list[NameList], dict[str, str]]:
    return _extract_exllama("exllamav2", r"exllamav2/architecture\.py$",
                            "turboderp-org/exllamav2: exllamav2/architecture.py (arch_string == ... branches)", versions,
                            unlisted="ExLlamaV2 loads an unlisted architecture as LlamaForCausalLM with a warning "
                                     "(architecture.py: 'Loading as LlamaForCausalLM'), so only a Llama-shaped "
                                     "model of that name loads")


def extract_exllamav3(versions: Sequence[str]) -> tuple[list[NameList], dict[str, str]]:
    return _extract_exllama("exllamav3", r"exllamav3/architecture/[^/]+\.py$",
                            "turboderp-org/exllamav3: exllamav3/architecture/*.py (config classes' arch_string)",
                            versions)


def extract_llama_cpp(versions: Sequence[str]) -> tuple[list[NameList], dict[str, str]]:
    archs = NameList("gguf", "gguf-arch", ["gguf"],
                     "ggml-org/llama.cpp: src/llama-arch.cpp (LLM_ARCH_NAMES: the general.architecture values "
                     "llama_model_load accepts)")
    convert = NameList("convert", "hf-class", ["safetensors"],
                       "ggml-org/llama.cpp: convert_hf_to_gguf.py (@ModelBase.register classes: HF checkpoints "
                       "the converter turns into GGUF)",
                       note="llama.cpp loads GGUF only: a safetensors checkpoint runs after conversion",
                       role="convert")
    read: dict[str, str] = {}
    rows: list[tuple[int, str, set[str], set[str], str]] = []
    py = [v.split("==", 1)[1] for v in versions if v.startswith("llama-cpp-python==")]
    for v in py:
        if v not in LLAMA_CPP_PYTHON:
            raise SystemExit(f"llama-cpp-python {v}: no llama.cpp build recorded for it in LLAMA_CPP_PYTHON (add the "
                             "commit its CHANGELOG names and that commit's build tag, with a source)")
    for pkg_version, sdist in _releases("llama-cpp-python", py, pypi_sdist):
        rows.append(_llama_cpp_python_release(pkg_version, sdist))
    versions = [v for v in versions if not v.startswith("llama-cpp-python==")]
    for pkg_version, tgz in _releases("node-llama-cpp", versions, npm_pack):
        with tarfile.open(tgz) as t:
            release = json.loads(_member(t, "package/llama/binariesGithubRelease.json"))["release"]
            bundle = _member(t, "package/llama/gitRelease.bundle")
        m = re.fullmatch(r"b(\d+)", release)
        if not m:
            print(f"node-llama-cpp {pkg_version}: llama.cpp release {release!r} is not a build tag; skipped",
                  file=sys.stderr)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp)
            (repo / "r.bundle").write_bytes(bundle)
            _run(["git", "init", "-q", "--bare", "g"], repo)
            _run(["git", "--git-dir", "g", "fetch", "-q", "r.bundle", "HEAD:refs/heads/rel"], repo)

            def show(p: str, repo: Path = repo) -> str:
                r = subprocess.run(["git", "--git-dir", "g", "show", f"rel:{p}"], cwd=repo, capture_output=True)
                return r.stdout.decode("utf-8", "replace") if r.returncode == 0 else ""

            arch_text = show("src/llama-arch.cpp") or show("src/llama.cpp") or show("llama.cpp")
            names = parse_llama_arch(arch_text)
            listing = subprocess.run(["git", "--git-dir", "g", "ls-tree", "-r", "--name-only", "rel", "conversion/"],
                                     cwd=repo, capture_output=True, text=True).stdout.split()
            # the converter was split into conversion/*.py modules (b10xxx); read both layouts
            conv = set().union(*(parse_convert_hf(show(p)) for p in ["convert_hf_to_gguf.py", *listing]
                                 if p.endswith(".py")))
        rows.append((int(m.group(1)), release, names, conv, f"node-llama-cpp {pkg_version} (npm; git bundle of "
                                                                f"llama.cpp {release}, sha256 {sha256(tgz)}...)"))
    for _, release, names, conv, what in sorted(rows):
        archs.seen[release] = dict.fromkeys(sorted(names), "text")
        convert.seen[release] = dict.fromkeys(sorted(conv), "text")
        read[release] = what
    return [archs, convert], read


def _llama_cpp_python_release(pkg_version: str, sdist: Path) -> tuple[int, str, set[str], set[str], str]:
    """(build, tag, GGUF names, converter classes, what was read) from a llama-cpp-python sdist's vendored llama.cpp."""
    commit, build = LLAMA_CPP_PYTHON[pkg_version]
    wanted = re.compile(r"^[^/]+/(CHANGELOG\.md|vendor/llama\.cpp/(src/llama-arch\.cpp|convert_hf_to_gguf\.py|"
                        r"conversion/[^/]+\.py))$")
    files = _tar_members(sdist, wanted)
    changelog = next((t for n, t in files.items() if n.endswith("/CHANGELOG.md")), "")
    section = re.search(rf"^## \[{re.escape(pkg_version)}\]\n(.*?)(?=^## \[)", changelog, re.S | re.M)
    named = re.findall(r"llama\.cpp@([0-9a-f]{7,40})", section.group(1)) if section else []
    if not named or not named[0].startswith(commit):
        raise SystemExit(f"llama-cpp-python {pkg_version}: its CHANGELOG names llama.cpp@{named[:1]}, not {commit} "
                         "as LLAMA_CPP_PYTHON says")
    arch = next((t for n, t in files.items() if n.endswith("/src/llama-arch.cpp")), "")
    if not arch:
        raise SystemExit(f"llama-cpp-python {pkg_version}: no vendor/llama.cpp/src/llama-arch.cpp in {sdist.name}")
    conv = set().union(*(parse_convert_hf(t) for n, t in files.items() if n.endswith(".py")))
    what = (f"llama-cpp-python {pkg_version} ({sdist.name}, PyPI sdist, sha256 {sha256(sdist)}...: vendor/llama.cpp "
            f"at ggml-org/llama.cpp@{commit} per its CHANGELOG = {build})")
    return int(build[1:]), build, parse_llama_arch(arch), conv, what


def _tar_members(path: Path, wanted: re.Pattern[str]) -> dict[str, str]:
    """The text of every member whose name matches, in one pass over the (large, gzipped) tarball."""
    out: dict[str, str] = {}
    with tarfile.open(path) as t:
        for member in t:
            if member.isfile() and wanted.search(member.name):
                f = t.extractfile(member)
                out[member.name] = f.read().decode("utf-8", "replace") if f else ""
    return out


def write_ollama(git_dir: Path, out_dir: Path = OUT_DIR) -> Path:
    """matrices/architectures/ollama.toml, from the release tags of an Ollama git repository (a clone or mirror):

    * which llama.cpp build each release runs GGUF files with (``LLAMA_CPP_VERSION`` at the tag);
    * which HF classes ``ollama create`` imports from safetensors (the ``Architectures[0]`` switch of
      convert/convert.go, convert/safetensors.go before 0.3.3), at every final release tag and the newest tag.
    """
    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True)

    from packaging.version import Version

    tags = git("tag", "--list", "v*").stdout.split()
    version_of = {tag: tag[1:].replace("-rc", "rc") for tag in tags}
    tags = sorted((t for t in tags if _pep440(version_of[t])), key=lambda t: Version(version_of[t]))
    builds: dict[str, str] = {}
    for tag in tags:
        r = git("show", f"{tag}:LLAMA_CPP_VERSION")
        build = r.stdout.strip().splitlines()[0].strip() if r.returncode == 0 and r.stdout.strip() else ""
        if re.fullmatch(r"b\d+", build):
            builds[version_of[tag]] = build
    head = git("rev-parse", "--short=8", "HEAD").stdout.strip()
    convert = NameList("import", "hf-class", ["safetensors"],
                       "ollama/ollama: convert/convert.go (the Architectures[0] switch of the safetensors importer; "
                       "convert/safetensors.go before 0.3.3)",
                       note="ollama create imports these from FP16/BF16/FP32 safetensors (FP8 ones become Q8_0, "
                            "GPT-OSS keeps MXFP4) and refuses any other class: 'unsupported architecture'; the "
                            "experimental MLX runner's importer (x/create) is not read; kinds from the HF class "
                            "names (XModel: embedding, ...ForConditionalGeneration: multimodal)",
                       methods=["none", "fp8", "mxfp4"])
    engine = NameList("engine", "gguf-arch", ["gguf"],
                      "ollama/ollama: model/models/*/ (model.Register names of Ollama's own Go engine)",
                      note="Ollama runs these GGUF architectures on its own engine whatever llama.cpp it bundles")
    vendored = NameList("vendored", "gguf-arch", ["gguf"],
                        "ollama/ollama: llama/llama.cpp/src/llama-arch.cpp (llama/llama.cpp before 0.6: the llama.cpp "
                        "source Ollama vendored before LLAMA_CPP_VERSION)",
                        note="from 0.30 Ollama pins a llama.cpp build instead (see derive); releases whose llama.cpp "
                             "was a git submodule (llm/llama.cpp, before 0.4) are not read")
    read: dict[str, str] = {}
    finals = [t for t in tags if not Version(version_of[t]).is_prerelease]
    for tag in finals + [t for t in tags[-1:] if t not in finals]:
        sha = git("rev-parse", "--short=8", f"{tag}^{{commit}}").stdout.strip()
        version = version_of[tag]
        listing = git("ls-tree", "-r", "--name-only", tag, "model/models/").stdout.split()
        if listing or engine.seen:
            engine.seen[version] = dict.fromkeys(sorted(set().union(*(
                parse_ollama_engine(git("show", f"{tag}:{f}").stdout) for f in listing
                if f.endswith(".go") and not f.endswith("_test.go")))), "text")
            read[version] = f"ollama git tag {tag} ({sha})"
        submodule = git("ls-tree", tag, "llm/llama.cpp").stdout.split()[1:2] == ["commit"]
        if version not in builds and not submodule:
            text = next((t for t in (git("show", f"{tag}:{f}").stdout for f in (
                "llama/llama.cpp/src/llama-arch.cpp", "llama/llama.cpp/src/llama.cpp", "llama/llama.cpp")) if t), "")
            archs = parse_llama_arch(text) if text else set()
            if "llama" in archs:  # a vendored llama.cpp defines llama; anything else is not one qcheck can read
                vendored.seen[version] = dict.fromkeys(sorted(archs), "text")
                read[version] = f"ollama git tag {tag} ({sha})"
        text = "\n".join(git("show", f"{tag}:{f}").stdout for f in ("convert/convert.go", "convert/safetensors.go"))
        names = parse_ollama_convert(text)
        if not names:
            if convert.seen:
                raise SystemExit(f"ollama {tag}: no Architectures[0] switch found in convert/ (the parser needs updating)")
            continue  # before the safetensors importer
        convert.seen[version] = {n: _hf_kind(n) for n in sorted(names)}
        read[version] = f"ollama git tag {tag} ({sha})"
    read = dict(sorted(read.items(), key=lambda kv: Version(kv[0])))
    derive = {"containers": ["gguf"], "from": "llama.cpp",
              "source": f"ollama/ollama: LLAMA_CPP_VERSION at each release tag (repository at {head})",
              "note": "Ollama runs GGUF files with the llama.cpp build it pins (llama-server); releases before "
                      "LLAMA_CPP_VERSION vendored llama.cpp by commit and are not mapped", "versions": builds}
    command = "python matrices/tools/extract_architectures.py ollama --ollama-git OLLAMA_GIT_DIR"
    if not read:
        newest = list(builds)[-1:] or ["0"]
        read = {newest[0]: f"ollama git tag v{newest[0]} ({head})"}
    lists = [lst for lst in (engine, vendored, convert) if lst.seen]
    text = render_toml("ollama", "pep440", lists, read, command, derive=derive)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "ollama.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _hf_kind(name: str) -> str:
    """A kind from the HF class-naming convention, for lists that carry no kind of their own (Ollama's importer):
    a bare ``XModel`` (no LM head) is an encoder used for embeddings, ``...ForConditionalGeneration`` a
    vision-language model, anything else text generation."""
    if name.endswith("ForConditionalGeneration"):
        return "multimodal"
    if name.endswith("Model") and "For" not in name:
        return "embedding"
    return "text"


def _pep440(version: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        Version(version)
    except InvalidVersion:
        return False
    return True


def write_tensorrt_llm(git_dir: Path, out_dir: Path = OUT_DIR) -> Path:
    """matrices/architectures/tensorrt-llm.toml from the final release tags (``vX.Y.Z``) of a TensorRT-LLM git
    repository (a clone or mirror; ``git clone --filter=blob:none`` is enough): the PyTorch backend's registered
    HF classes (the default backend since 1.0) and the TensorRT-engine backend's ``MODEL_MAP`` (a checkpoint is
    converted and built with trtllm-build first: shown by ``--arch``, not a verdict)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True).stdout

    from packaging.version import Version

    tags = [t for t in git("tag", "--list", "v*").split() if re.fullmatch(r"v\d+\.\d+\.\d+", t)]
    tags.sort(key=lambda t: Version(t[1:]))
    torch = NameList("pytorch", "hf-class", ["safetensors"],
                     "NVIDIA/TensorRT-LLM: tensorrt_llm/_torch/models/*.py (@register_auto_model decorators; "
                     "_arch_index.py MODEL_ARCH_TO_MODULE)",
                     note="the PyTorch backend (trtllm-serve / LLM API default since 1.0)")
    engine = NameList("trt-engine", "hf-class", ["safetensors"],
                      "NVIDIA/TensorRT-LLM: tensorrt_llm/models/__init__.py (MODEL_MAP)", role="convert",
                      note="the TensorRT-engine backend: convert_checkpoint.py then trtllm-build")
    read: dict[str, str] = {}
    for tag in tags:
        version = tag[1:]
        files = [f for f in git("ls-tree", "-r", "--name-only", tag, "tensorrt_llm/_torch/models/").split()
                 if f.endswith(".py")]
        names = set().union(*(parse_trtllm_models(git("show", f"{tag}:{f}")) for f in files)) if files else set()
        model_map = parse_trtllm_model_map(git("show", f"{tag}:tensorrt_llm/models/__init__.py") or "x = 0\n")
        if not names and not model_map:
            continue
        torch.seen[version] = {n: _hf_kind(n) for n in sorted(names)}
        engine.seen[version] = {n: _hf_kind(n) for n in sorted(model_map)}
        read[version] = f"NVIDIA/TensorRT-LLM git tag {tag} ({git('rev-parse', '--short=8', tag + '^{commit}').strip()})"
    if not read:
        raise SystemExit(f"{git_dir}: no release tag vX.Y.Z with TensorRT-LLM model sources")
    lists = [lst for lst in (torch, engine) if any(lst.seen.values())]
    text = render_toml("tensorrt-llm", "pep440", lists, read,
                       "python matrices/tools/extract_architectures.py tensorrt-llm --trtllm-git TRTLLM_GIT_DIR")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "tensorrt-llm.toml"
    path.write_text(text, encoding="utf-8")
    return path


#: the stored rows of TensorRT-LLM's versioned "Supported Models" pages (one file per release read)
TRTLLM_DOCS = Path(__file__).resolve().parent / "trtllm_docs"
TRTLLM_DOCS_UNLISTED = ("TensorRT-LLM's supported-models page lists the models NVIDIA documents for the PyTorch "
                        "backend, not every class it registers, so a class it does not list is neither confirmed "
                        "nor refused")
_DOC_HEAD = re.compile(r"<!--\s*([a-z ]+):\s*(.*?)\s*-->")
_DOC_ROW = re.compile(r"^\|\s*`([A-Za-z_][A-Za-z0-9_]*)`\s*((?:\[\^?\w+\]\s*)*)\|(.*)$")


@dataclass
class DocsTable:
    """One release's supported-models table: the classes listed plainly, those with a footnote (kept out: a footnote
    narrows them, e.g. "AutoDeploy backend only" or "Blackwell only"), and where and how much of it was read."""

    version: str
    url: str
    read: str
    listed: dict[str, str]  # class -> kind
    footnoted: list[str]


def _doc_kind(name: str, modality: str) -> str:
    """A kind for a documented class: reward/classifier/embedding heads by name, a modality column with I/V/A as
    multimodal, else the HF naming convention."""
    if "RewardModel" in name:
        return "reward"
    if "SequenceClassification" in name:
        return "classifier"
    if "Embedding" in name:
        return "embedding"
    if set(modality.replace("+", " ").split()) & {"I", "V", "A"}:
        return "multimodal"
    kind = _hf_kind(name)
    return "multimodal" if kind == "embedding" else kind  # a bare XModel on this page is a VLM (LlavaLlamaModel)


def parse_trtllm_docs(text: str) -> DocsTable:
    """The first ``| `Class` | Model | ...`` table of a supported-models page (markdown, as in
    docs/source/models/supported-models.md or the stored rows), with its ``<!-- key: value -->`` header (url, version,
    read). Raises ValueError when the header or the table is missing, so a wrong file fails instead of reading as
    an empty release."""
    head = {k.strip(): v for k, v in _DOC_HEAD.findall(text)}
    for key in ("url", "version", "read"):
        if not head.get(key):
            raise ValueError(f"no '<!-- {key}: ... -->' line")
    listed: dict[str, str] = {}
    footnoted: list[str] = []
    started = False
    for line in text.splitlines():
        row = _DOC_ROW.match(line.strip())
        if row is None:
            if started and not line.strip().startswith("|"):
                break  # the first table ends at its first non-table line
            continue
        started = True
        name, notes, rest = row.groups()
        if notes.strip():
            footnoted.append(name)
            continue
        cells = [c.strip() for c in rest.split("|")]
        modality = cells[-2] if len(cells) >= 2 and re.fullmatch(r"[LIVA +]+", cells[-2] or "-") else ""
        listed[name] = _doc_kind(name, modality)
    if not listed:
        raise ValueError("no '| `Class` | Model |' table rows")
    return DocsTable(head["version"], head["url"], head["read"], listed, sorted(set(footnoted) - set(listed)))


def write_tensorrt_llm_docs(files: Sequence[Path], out_dir: Path = OUT_DIR) -> Path:
    """matrices/architectures/tensorrt-llm.toml from TensorRT-LLM's versioned supported-models pages (one file of
    table rows per release, see matrices/tools/trtllm_docs/). A class listed at release R loads at R; a class not
    listed is unknown (the page is not exhaustive: the list's ``unlisted``), never unsupported; a footnoted class
    (AutoDeploy only, Blackwell only ...) is left out, so it is unknown too."""
    from packaging.version import Version

    tables = sorted((parse_trtllm_docs(f.read_text(encoding="utf-8")) for f in files), key=lambda t: Version(t.version))
    if len({t.version for t in tables}) != len(tables):
        raise SystemExit("two files for one TensorRT-LLM release")
    footnoted = "; ".join(f"{t.version}: {', '.join(t.footnoted)}" for t in tables if t.footnoted)
    docs = NameList("docs-pytorch", "hf-class", ["safetensors"],
                    "NVIDIA/TensorRT-LLM docs: the supported-models table of the PyTorch backend "
                    "(nvidia.github.io/TensorRT-LLM/<release>/models/supported-models.html; before 1.0 "
                    "reference/support-matrix.html 'Models (PyTorch Backend)'), per release: see [architectures.read]",
                    note="the PyTorch backend (trtllm-serve / LLM API default since 1.0), as documented; classes with "
                         "a footnote are left out (unknown)" + (f" ({footnoted})" if footnoted else ""),
                    unlisted=TRTLLM_DOCS_UNLISTED, exhaustive=False)
    read: dict[str, str] = {}
    for t in tables:
        docs.seen[t.version] = dict(sorted(t.listed.items()))
        read[t.version] = f"{t.url} (read: {t.read})"
    text = render_toml("tensorrt-llm", "pep440", [docs], read,
                       "python matrices/tools/extract_architectures.py tensorrt-llm --trtllm-docs "
                       "matrices/tools/trtllm_docs/*.md")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "tensorrt-llm.toml"
    path.write_text(text, encoding="utf-8")
    return path


#: LM Studio: where its llama.cpp runtime versions were seen, and why they map to no llama.cpp build per app release
LM_STUDIO = {
    "source": "lmstudio-ai/lmstudio-bug-tracker #966 (app 0.3.24 with the runtime 'CUDA 12 llama.cpp (Linux) v1.48.0'), "
              "#1308 (runtime 1.63.1 carries llama.cpp commit 7bed317), #1758 (app 0.4.9, runtimes v2.10.0/v2.11.0), "
              "#2422 (runtimes 2.29.1/2.31.2, 2026-09); lmstudio-ai/docs (no runtime-to-llama.cpp table)",
    "note": "LM Studio runs GGUF with a llama.cpp runtime that it updates separately from the app (runtime v1.x/v2.x, "
            "Settings > Runtime); no public source maps an app or runtime release to a llama.cpp build",
}


#: the first llama-cpp-python release whose vendored llama.cpp reads GGUF (GGUF_VERSION 1): the oldest llama.cpp any
#: GGUF runtime can be, so what it loads is a lower bound for every LM Studio llama.cpp runtime
FIRST_GGUF_LLAMA_CPP = "0.1.79"
LM_STUDIO_VERSIONS = ["0.3.4", "0.4.9"]


def first_gguf_names(sdist: Path) -> set[str]:
    """The GGUF architectures the first GGUF llama.cpp loads: LLM_ARCH_NAMES entries with a case in its loader."""
    text = _tar_member_text(sdist, "vendor/llama.cpp/llama.cpp")
    names = dict(re.findall(r"\{\s*(LLM_ARCH_\w+),\s*\"([^\"]+)\"\s*\}", text))
    loaded = set(re.findall(r"case (LLM_ARCH_\w+):", text))
    return {name for enum, name in names.items() if enum in loaded}


def _tar_member_text(path: Path, suffix: str) -> str:
    with tarfile.open(path, "r:gz") as t:
        member = next((m for m in t.getmembers() if m.isfile() and m.name.endswith(suffix)), None)
        if member is None:
            raise Missing(f"{suffix} is not in {path.name}")
        return _member(t, member.name).decode("utf-8", errors="replace")


def write_lm_studio(out_dir: Path = OUT_DIR) -> Path:
    """matrices/architectures/lm-studio.toml: GGUF goes through a llama.cpp runtime no release names, so an
    architecture is known only where every llama.cpp that reads GGUF loads it: the names the first GGUF llama.cpp
    loads (llama-cpp-python 0.1.79) that every llama.cpp release read since still loads (architectures/llama.cpp.toml).
    Every other GGUF architecture is unknown on LM Studio, with the reason."""
    import tomllib

    sdist = pypi_sdist("llama-cpp-python", FIRST_GGUF_LLAMA_CPP)
    first = first_gguf_names(sdist)
    data = tomllib.loads((out_dir / "llama.cpp.toml").read_text(encoding="utf-8"))
    oldest = data["architectures"]["versions_read"][0]
    kept: set[str] = set()
    for lst in data.get("list", []):
        if lst.get("names") != "gguf-arch" or lst.get("role", "load") != "load":
            continue
        for row in lst["arch"].splitlines():
            parts = row.split()
            if len(parts) == 4 and parts[0] in first and parts[1] == oldest and parts[2] == "-":
                kept.add(parts[0])
    lst = NameList(
        "gguf-lower-bound", "gguf-arch", ["gguf"],
        f"llama-cpp-python {FIRST_GGUF_LLAMA_CPP} sdist (vendor/llama.cpp/llama.cpp: LLM_ARCH_NAMES with a loader case, "
        f"GGUF_VERSION 1) and architectures/llama.cpp.toml (loaded at every release read, {oldest} to "
        f"{data['architectures']['versions_read'][-1]})",
        exhaustive=False,
        unlisted="LM Studio's llama.cpp runtime is a build no public source names, so an architecture llama.cpp "
                 "added after its first GGUF release may or may not be in it",
        seen={v: {name: "text" for name in sorted(kept)} for v in LM_STUDIO_VERSIONS})
    read = {v: (f"lower bound: every llama.cpp runtime that reads GGUF loads these (llama-cpp-python "
                f"{FIRST_GGUF_LLAMA_CPP} sdist, sha256 {sha256(sdist)[:16]}..., and llama.cpp {oldest} onwards)")
            for v in LM_STUDIO_VERSIONS}
    derive = {"containers": ["gguf"], "from": "llama.cpp", "source": LM_STUDIO["source"], "note": LM_STUDIO["note"],
              "versions": {}}
    text = render_toml("lm-studio", "pep440", [lst], read,
                       "python matrices/tools/extract_architectures.py lm-studio", derive=derive)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "lm-studio.toml"
    path.write_text(text, encoding="utf-8")
    return path


#: hosted providers: what their upload docs say about architectures (read 2026-12-01 with the docs search
#: tool; no provider publishes an exhaustive list of HF classes, so every architecture stays unknown)
PROVIDERS: dict[str, tuple[str, str]] = {
    "together": ("Together AI documents no architecture list for uploads: any 'text generation or embedding model' "
                 "in Hugging Face format that fits one node is eligible, and the upload is validated on their side",
                 "https://docs.together.ai/docs/dedicated-endpoints/custom-models"),
    "fireworks": ("Fireworks documents its upload architectures as a non-exhaustive list of model families ('supports "
                  "most popular model architectures, including' DeepSeek, Qwen, Kimi K2, GLM 4, Llama, Mistral, Gemma, "
                  "GPT-OSS ...), not HF classes: a class is neither confirmed nor refused by it",
                  "https://docs.fireworks.ai/models/uploading-custom-models"),
    "groq": ("Groq documents no upload of full custom weights (LoRA adapters for its own base models only)",
             "docs/research/peers.md §1.4 (Groq docs)"),
    "cerebras": ("Cerebras takes fine-tuned weights only for the architecture of an existing dedicated endpoint "
                 "(Management API, private preview) and publishes no list",
                 "docs/research/peers.md §1.4 (Cerebras docs)"),
}
PROVIDERS_READ = "2026-12-01"
#: TensorRT-LLM until a release is read with --trtllm-git (the same note-only file as a provider's)
PROVIDERS_NO_DATA = {
    "tensorrt-llm": ("no TensorRT-LLM release was read: PyPI has stub sdists only (its wheels are on pypi.nvidia.com), "
                     "and the generator needs a git clone with release tags (--trtllm-git)",
                     "pypi.org/simple/tensorrt-llm (sdists of 1.2.x-1.4.0rc1: PKG-INFO, LICENSE, pyproject.toml only)"),
}


#: HF classes a provider's upload docs name (by the model family and the transformers page it links), per provider:
#: (the provider version the docs were read at, the quote, the classes). Only families with one HF class are named.
PROVIDERS_DOCUMENTED: dict[str, tuple[str, str, list[str]]] = {
    "fireworks": ("2026.10", "https://docs.fireworks.ai/models/uploading-custom-models ('Fireworks supports most "
                  "popular model architectures, including': 'Llama 1, 2, 3, 3.1, 4' -> transformers model_doc/llama2, "
                  "'Mistral & Mixtral' -> model_doc/mistral, 'Gemma' -> model_doc/gemma, 'Qwen, Qwen2, Qwen2.5, "
                  "Qwen2.5-VL, Qwen3', 'GPT-OSS 120B and 20B')",
                  ["LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "GemmaForCausalLM",
                   "Qwen2ForCausalLM", "Qwen3ForCausalLM", "GptOssForCausalLM"]),
    "together": ("2026.10", "https://docs.together.ai/docs/custom-models ('When uploading from Hugging Face, simply "
                 "provide the repository path (e.g., meta-llama/Llama-2-7b-hf)': the upload guide's own example, a "
                 "LlamaForCausalLM checkpoint; 'text generation and embedding models' in from_pretrained format)",
                 ["LlamaForCausalLM"]),
}


def write_provider(engine: str, out_dir: Path = OUT_DIR) -> Path:
    """matrices/architectures/<provider>.toml: the HF classes its docs name (a list that is not exhaustive: any other
    class is unknown), or no list and why (every architecture is unknown there)."""
    note, source = {**PROVIDERS, **PROVIDERS_NO_DATA}[engine]
    lists: list[NameList] = []
    read: dict[str, str] = {}
    if engine in PROVIDERS_DOCUMENTED:
        version, quote, classes = PROVIDERS_DOCUMENTED[engine]
        lists.append(NameList("documented", "hf-class", ["safetensors"], quote, exhaustive=False, unlisted=note,
                              seen={version: {name: "text" for name in classes}}))
        read[version] = f"the upload docs as read {PROVIDERS_READ}"
    text = render_toml(engine, "pep440", lists, read, f"python matrices/tools/extract_architectures.py {engine}",
                       note=None if lists else note, source=None if lists else source,
                       source_read=None if lists else PROVIDERS_READ)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{engine}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _member(t: tarfile.TarFile, name: str) -> bytes:
    f = t.extractfile(name)
    if f is None:
        raise SystemExit(f"{name} missing")
    return f.read()


#: engine id -> (version scheme, the package whose versions are read when not the engine's own, extractor)
ENGINES: dict[str, tuple[str, str | None, Callable[[Sequence[str]], tuple[list[NameList], dict[str, str]]]]] = {
    "vllm": ("pep440", None, extract_vllm),
    "transformers": ("pep440", None, extract_transformers),
    "sglang": ("pep440", None, extract_sglang),
    # qcheck's mlx engine versions are the mlx framework's; the model modules live in mlx-lm
    "mlx": ("pep440", "mlx-lm", extract_mlx),
    "llama.cpp": ("build", None, extract_llama_cpp),
    "exllamav2": ("pep440", None, extract_exllamav2),
    "exllamav3": ("pep440", None, extract_exllamav3),
}


def write_engine(engine: str, versions: Sequence[str], out_dir: Path = OUT_DIR) -> Path:
    scheme, versions_of, extract = ENGINES[engine]
    lists, read = extract(versions)
    command = f"python matrices/tools/extract_architectures.py {engine}"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{engine}.toml"
    path.write_text(render_toml(engine, scheme, lists, read, command, versions_of, DERIVES.get(engine)),
                    encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("engines", nargs="+",
                        help=f"'all' or some of: {', '.join(ENGINES)}, ollama, lm-studio, tensorrt-llm, "
                             f"{', '.join(PROVIDERS)}")
    parser.add_argument("--versions", nargs="*", help="releases to read (default: the list in this script)")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument("--ollama-git", type=Path, help="an Ollama git repository with its release tags (for ollama)")
    parser.add_argument("--trtllm-git", type=Path, help="a TensorRT-LLM git repository with its release tags")
    parser.add_argument("--trtllm-docs", type=Path, nargs="+",
                        help="TensorRT-LLM supported-models tables, one markdown file per release (default: "
                             "matrices/tools/trtllm_docs/*.md); used unless --trtllm-git is given")
    args = parser.parse_args(argv)
    engines = [*ENGINES, "ollama", "lm-studio", "tensorrt-llm", *PROVIDERS] if args.engines == ["all"] \
        else args.engines
    for engine in engines:
        if engine == "lm-studio":
            print(f"wrote {write_lm_studio(args.out)}")
            continue
        if engine in PROVIDERS:
            print(f"wrote {write_provider(engine, args.out)}")
            continue
        if engine == "tensorrt-llm":
            if args.trtllm_git is not None:
                print(f"wrote {write_tensorrt_llm(args.trtllm_git, args.out)}")
                continue
            files = args.trtllm_docs or sorted(TRTLLM_DOCS.glob("*.md"))
            try:
                print(f"wrote {write_tensorrt_llm_docs(files, args.out)}")
            except (OSError, ValueError) as exc:
                parser.error(f"--trtllm-docs: {exc}")
            continue
        if engine == "ollama":
            if args.ollama_git is None:
                print("ollama: skipped (give --ollama-git DIR: a clone of github.com/ollama/ollama with tags)",
                      file=sys.stderr)
                continue
            print(f"wrote {write_ollama(args.ollama_git, args.out)}")
            continue
        if engine not in ENGINES:
            parser.error(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
        path = write_engine(engine, args.versions or VERSIONS[engine], args.out)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
