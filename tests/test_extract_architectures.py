"""matrices/tools/extract_architectures.py on small fixture releases (no network): sdists, wheels and an npm
tarball carrying a llama.cpp git bundle, built here, placed in the script's download cache; the TOML it writes
must pass qcheck's own validation and say the right first/last versions."""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from qcheck.matrix.architectures import validate

SCRIPT = Path(__file__).resolve().parent.parent / "matrices" / "tools" / "extract_architectures.py"


@pytest.fixture()
def tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    spec = importlib.util.spec_from_file_location("extract_architectures", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "extract_architectures", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "CACHE", tmp_path / "cache")

    def offline(*_a, **_k):
        raise AssertionError("the fixture test must not download")

    monkeypatch.setattr(module.urllib.request, "urlopen", offline)
    return module


def _sdist(cache: Path, pkg: str, version: str, files: dict[str, str]) -> None:
    dest = cache / "pypi" / f"{pkg}-{version}"
    dest.mkdir(parents=True)
    with tarfile.open(dest / f"{pkg}-{version}.tar.gz", "w:gz") as t:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{pkg}-{version}/{name}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def _wheel(cache: Path, pkg: str, version: str, files: dict[str, str]) -> None:
    dest = cache / "pypi" / f"{pkg}-{version}"
    dest.mkdir(parents=True)
    with zipfile.ZipFile(dest / f"{pkg.replace('-', '_')}-{version}-py3-none-any.whl", "w") as z:
        for name, text in files.items():
            z.writestr(name, text)


def _read(path: Path, engine: str):
    return validate(tomllib.loads(path.read_text()), path.name, engine)


def _gguf_inputs(tool, cache: Path) -> None:
    """The transformers wheel and vllm-gguf-plugin wheel the vLLM GGUF list is derived with."""
    _wheel(cache, "transformers", tool.GGUF_TRANSFORMERS, {
        "transformers/models/auto/modeling_auto.py":
            'MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = OrderedDict([("llama", "LlamaForCausalLM"), '
            '("qwen3", "Qwen3ForCausalLM"), ("qwen3_moe", "Qwen3MoeForCausalLM"), ("cohere", "CohereForCausalLM"), '
            '("t5", "T5ForCausalLM"), ("gpt_oss", "GptOssForCausalLM")])\n',
        "transformers/integrations/ggml.py": 'GGUF_CONFIG_MAPPING = {"llama": {}, "qwen3": {}, "qwen3_moe": {}}\n'})
    _wheel(cache, "vllm-gguf-plugin", tool.GGUF_PLUGIN_VERSION, {
        "vllm_gguf_plugin/weights_adapter/default.py":
            'def build(model_type):\n    if model_type == "cohere":\n        model_type = "command-r"\n'
            '    if model_type in ("qwen2_moe", "qwen3_moe"):\n        # merged experts\n'
            '        model_type = model_type.replace("_", "")\n'})


def test_vllm_registry_history(tool, tmp_path, monkeypatch) -> None:
    cache = tmp_path / "cache"
    _gguf_inputs(tool, cache)
    monkeypatch.setattr(tool, "OUT_DIR", tmp_path / "no-llama-cpp-data")
    _sdist(cache, "vllm", "0.1.0", {"vllm/model_executor/models/__init__.py":
                                    '_MODELS = {"LlamaForCausalLM": ("llama", "LlamaForCausalLM"),\n'
                                    '           "OldForCausalLM": ("old", "Old")}\n'})
    _sdist(cache, "vllm", "0.2.0", {"vllm/model_executor/models/registry.py":
                                    '_TEXT_GENERATION_MODELS = {\n  "LlamaForCausalLM": ("llama", "L"),\n'
                                    '  "Qwen3ForCausalLM": ("qwen3", "Q"),\n}\n'
                                    '_EMBEDDING_MODELS: dict = {"BertModel": ("bert", "B")}\n'
                                    '_VLLM_MODELS = {**_TEXT_GENERATION_MODELS, **_EMBEDDING_MODELS}\n'
                                    '_PREVIOUSLY_SUPPORTED_MODELS = {"OldForCausalLM": "0.1.0"}\n'
                                    '_OOT_SUPPORTED_MODELS = {"BartModel": "https://example.org/plugin"}\n'})
    assert tool.main(["vllm", "--versions", "0.1.0", "0.2.0", "--out", str(tmp_path / "out")]) == 0
    data = _read(tmp_path / "out" / "vllm.toml", "vllm")
    assert data.versions_read == ("0.1.0", "0.2.0")
    [reg] = data.lists
    assert reg.arch["LlamaForCausalLM"].first == "0.1.0" and reg.arch["LlamaForCausalLM"].last is None
    assert (reg.arch["OldForCausalLM"].first, reg.arch["OldForCausalLM"].last) == ("0.1.0", "0.1.0")
    assert (reg.arch["Qwen3ForCausalLM"].first, reg.arch["BertModel"].kind) == ("0.2.0", "embedding")
    assert "BartModel" not in reg.arch  # an out-of-tree plugin's model is not vLLM's
    assert "vllm-0.2.0.tar.gz (PyPI sdist, sha256 " in data.read["0.2.0"]


def test_vllm_gguf_names_per_release(tool, tmp_path, monkeypatch) -> None:
    """vLLM's GGUF list: model_type -> class (transformers) -> this release's registry, renamed to the GGUF name by
    the in-tree loader (before 0.24) or vllm-gguf-plugin (from 0.24), limited to names llama.cpp defines."""
    cache = tmp_path / "cache"
    _gguf_inputs(tool, cache)
    llama = tmp_path / "arch"
    llama.mkdir()
    (llama / "llama.cpp.toml").write_text('[[list]]\nnames = "gguf-arch"\narch = """\nllama b1 - text\n'
                                          'qwen3 b1 - text\nqwen3moe b1 - text\ncommand-r b1 - text\n'
                                          't5 b1 - text\ngpt-oss b1 - text\n"""\n')
    monkeypatch.setattr(tool, "OUT_DIR", llama)
    registry = ('_TEXT_GENERATION_MODELS = {"LlamaForCausalLM": ("l", "L"), "Qwen3ForCausalLM": ("q", "Q"), '
                '"Qwen3MoeForCausalLM": ("q", "Q"), "CohereForCausalLM": ("c", "C"), "GptOssForCausalLM": ("g", "G")}\n')
    _sdist(cache, "vllm", "0.23.0", {
        "vllm/model_executor/models/registry.py": registry,
        "vllm/model_executor/model_loader/gguf_loader.py":
            'class GGUFModelLoader:\n    def m(self, model_type):\n        if model_type == "cohere":\n'
            '            model_type = "command-r"\n'})
    _sdist(cache, "vllm", "0.24.0", {"vllm/model_executor/models/registry.py": registry})
    out = tmp_path / "out"
    assert tool.main(["vllm", "--versions", "0.23.0", "0.24.0", "--out", str(out)]) == 0
    data = _read(out / "vllm.toml", "vllm")
    _, gguf = data.lists
    assert gguf.containers == ("gguf",) and gguf.names == "gguf-arch" and gguf.unlisted
    # 0.23: transformers' GGUF config reader knows llama, qwen3, qwen3_moe; the core loader has no qwen3moe rename
    assert {n for n, e in gguf.arch.items() if e.first == "0.23.0"} == {"llama", "qwen3"}
    # 0.24 (plugin): no config-reader gate; the plugin renames cohere and qwen3_moe; t5's class is not registered;
    # gpt_oss is no GGUF name (the GGUF one is gpt-oss): not listed, so unknown rather than guessed
    assert set(gguf.arch) == {"llama", "qwen3", "qwen3moe", "command-r"}
    assert gguf.arch["command-r"].first == "0.24.0"
    assert "vllm_gguf_plugin-" in data.read["0.24.0"] and "vllm_gguf_plugin" not in data.read["0.23.0"]


def test_transformers_model_types_from_5_8_are_read_from_auto_mappings() -> None:
    """transformers 5.8.0 moved the generated CONFIG_MAPPING_NAMES to auto_mappings.py; configuration_auto.py
    imports it, adds names with .update() and re-assigns it with gpt-sw3 first. Every form counts (reading
    configuration_auto.py alone lost 800 model types, and qcheck said 'removed after 5.4.0')."""
    from qcheck.matrix.arch_sources import parse_transformers_config

    config_auto = ('from .auto_mappings import CONFIG_MAPPING_NAMES\n'
                   'CONFIG_MAPPING_NAMES.update({"mimi_decoder": "MimiDecoderConfig"})\n'
                   'CONFIG_MAPPING_NAMES = OrderedDict(**{"gpt-sw3": "GPT2Config"}, **CONFIG_MAPPING_NAMES)\n')
    mappings = 'CONFIG_MAPPING_NAMES = OrderedDict([("llama", "LlamaConfig"), ("qwen3", "Qwen3Config")])\n'
    assert parse_transformers_config(config_auto, mappings) == {"llama", "qwen3", "mimi_decoder", "gpt-sw3"}
    assert parse_transformers_config(mappings) == {"llama", "qwen3"}  # before 5.8: one file


def test_wheels_of_transformers_sglang_mlx_exllama(tool, tmp_path) -> None:
    cache = tmp_path / "cache"
    _wheel(cache, "transformers", "4.50.0", {
        "transformers/models/auto/modeling_auto.py":
            'from collections import OrderedDict\nMODEL_FOR_CAUSAL_LM_MAPPING_NAMES = OrderedDict([\n'
            '    ("llama", "LlamaForCausalLM"),\n    ("gemma3", ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration")),\n'
            '])\nMODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES = OrderedDict([("bert", "BertForTokenClassification")])\n',
        "transformers/models/auto/configuration_auto.py":
            'CONFIG_MAPPING_NAMES = OrderedDict([("llama", "LlamaConfig"), ("gemma3", "Gemma3Config")])\n',
        "transformers/integrations/ggml.py": 'GGUF_CONFIG_MAPPING = {"llama": {}, "qwen2": {}}\n'})
    _wheel(cache, "sglang", "0.5.0", {"sglang/srt/models/llama.py": "class A: pass\nEntryClass = [LlamaForCausalLM, "
                                                                     "Phi3ForCausalLM]\n",
                                       "sglang/srt/models/qwen.py": "EntryClass = QWenLMHeadModel\n",
                                       "sglang/srt/models/utils.py": "x = 1\n"})
    _wheel(cache, "mlx-lm", "0.30.0", {"mlx_lm/models/llama.py": "", "mlx_lm/models/base.py": "",
                                        "mlx_lm/models/qwen3.py": "",
                                        "mlx_lm/utils.py": 'MODEL_REMAPPING = {"mistral": "llama", "x": "nosuch"}\n'})
    _wheel(cache, "exllamav3", "1.0.0", {"exllamav3/architecture/llama.py": 'class C:\n    arch_string = "LlamaForCausalLM"\n'})
    out = tmp_path / "out"
    for engine, version in (("transformers", "4.50.0"), ("sglang", "0.5.0"), ("mlx", "0.30.0"),
                            ("exllamav3", "1.0.0")):
        assert tool.main([engine, "--versions", version, "--out", str(out)]) == 0
    tf = _read(out / "transformers.toml", "transformers")
    types, classes, gguf = tf.lists  # model_type first: transformers resolves AutoConfig by it before any class
    assert set(classes.arch) == {"LlamaForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"}
    assert set(types.arch) == {"llama", "gemma3"} and set(gguf.arch) == {"llama", "qwen2"}
    assert gguf.containers == ("gguf",)
    assert set(_read(out / "sglang.toml", "sglang").lists[0].arch) == {"LlamaForCausalLM", "Phi3ForCausalLM",
                                                                       "QWenLMHeadModel"}
    mlx = _read(out / "mlx.toml", "mlx")
    assert set(mlx.lists[0].arch) == {"llama", "qwen3", "mistral"} and mlx.versions_of == "mlx-lm"
    assert set(_read(out / "exllamav3.toml", "exllamav3").lists[0].arch) == {"LlamaForCausalLM"}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to build the bundle")
def test_llama_cpp_from_an_npm_git_bundle(tool, tmp_path) -> None:
    def release(pkg_version: str, build: str, names: list[str], converts: list[str]) -> None:
        repo = tmp_path / f"repo-{build}"
        (repo / "src").mkdir(parents=True)
        table = "".join(f'    {{ LLM_ARCH_{n.upper().replace("-", "_")}, "{n}" }},\n' for n in names)
        (repo / "src" / "llama-arch.cpp").write_text(
            f"static const std::map<llm_arch, const char *> LLM_ARCH_NAMES = {{\n{table}"
            '    { LLM_ARCH_UNKNOWN, "(unknown)" },\n};\n')
        (repo / "convert_hf_to_gguf.py").write_text(
            "".join(f'@ModelBase.register(\n    "{c}",\n)\nclass M{i}: pass\n' for i, c in enumerate(converts)))
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", build], check=True)
        subprocess.run([*git, "bundle", "create", "-q", str(tmp_path / "r.bundle"), "HEAD"], check=True)
        dest = tmp_path / "cache" / "npm" / f"node-llama-cpp-{pkg_version}"
        dest.mkdir(parents=True)
        with tarfile.open(dest / f"node-llama-cpp-{pkg_version}.tgz", "w:gz") as t:
            t.add(tmp_path / "r.bundle", "package/llama/gitRelease.bundle")
            data = json.dumps({"release": build}).encode()
            info = tarfile.TarInfo("package/llama/binariesGithubRelease.json")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))

    release("3.0.0", "b5000", ["llama", "old-arch"], ["LlamaForCausalLM"])
    release("3.1.0", "b6000", ["llama", "qwen3", "clip"], ["LlamaForCausalLM", "Qwen3ForCausalLM"])
    release("3.2.0", "v0.5.0", ["llama"], [])  # not a build tag: skipped
    assert tool.main(["llama.cpp", "--versions", "3.1.0", "3.0.0", "3.2.0", "--out", str(tmp_path / "out")]) == 0
    data = _read(tmp_path / "out" / "llama.cpp.toml", "llama.cpp")
    assert data.versions_read == ("b5000", "b6000")  # ordered by build, whatever the package order
    archs, convert = data.lists
    assert set(archs.arch) == {"llama", "old-arch", "qwen3", "clip"}
    assert (archs.arch["old-arch"].last, archs.arch["qwen3"].first) == ("b5000", "b6000")
    assert convert.role == "convert" and convert.arch["Qwen3ForCausalLM"].first == "b6000"


def test_llama_cpp_from_a_llama_cpp_python_sdist(tool, tmp_path, monkeypatch) -> None:
    """The llama.cpp vendored by llama-cpp-python, at the build its CHANGELOG's commit is recorded as."""
    monkeypatch.setattr(tool, "LLAMA_CPP_PYTHON", {"9.9.1": ("abc1234", "b12000"), "9.9.2": ("def5678", "b12100")})
    arch = ('static const std::map<llm_arch, const char *> LLM_ARCH_NAMES = {\n'
            '    { LLM_ARCH_LLAMA, "llama" },\n    { LLM_ARCH_NEWER, "newer-arch" },\n'
            '    { LLM_ARCH_UNKNOWN, "(unknown)" },\n};\n')
    changelog = ("# Changelog\n\n## [Unreleased]\n\n## [9.9.2]\n\n- feat: update llama.cpp to "
                 "ggml-org/llama.cpp@0000000aa\n\n## [9.9.1]\n\n- feat: update llama.cpp to "
                 "ggml-org/llama.cpp@abc1234ff\n- fix: something\n\n## [9.9.0]\n\n- x\n")
    _sdist(tmp_path / "cache", "llama-cpp-python", "9.9.1", {
        "CHANGELOG.md": changelog, "vendor/llama.cpp/src/llama-arch.cpp": arch,
        "vendor/llama.cpp/conversion/newer.py": '@ModelBase.register("NewerForCausalLM")\nclass N: pass\n',
        "vendor/llama.cpp/convert_hf_to_gguf.py": '@ModelBase.register("LlamaForCausalLM", "X")\nclass L: pass\n',
        "vendor/llama.cpp/tests/test.py": '@ModelBase.register("NotAConverter")\n'})
    out = tmp_path / "out"
    assert tool.main(["llama.cpp", "--versions", "llama-cpp-python==9.9.1", "--out", str(out)]) == 0
    data = _read(out / "llama.cpp.toml", "llama.cpp")
    assert data.versions_read == ("b12000",)
    assert "llama-cpp-python 9.9.1" in data.read["b12000"] and "llama.cpp@abc1234 per its CHANGELOG" in \
        data.read["b12000"]
    archs, convert = data.lists
    assert set(archs.arch) == {"llama", "newer-arch"}
    assert set(convert.arch) == {"LlamaForCausalLM", "X", "NewerForCausalLM"}
    # the CHANGELOG of 9.9.2 names another commit than the table: refuse rather than mislabel the build
    _sdist(tmp_path / "cache", "llama-cpp-python", "9.9.2", {
        "CHANGELOG.md": changelog, "vendor/llama.cpp/src/llama-arch.cpp": arch})
    with pytest.raises(SystemExit, match=r"names llama\.cpp@.*0000000aa.*not def5678"):
        tool.main(["llama.cpp", "--versions", "llama-cpp-python==9.9.2", "--out", str(out)])
    with pytest.raises(SystemExit, match=r"no llama\.cpp build recorded"):
        tool.main(["llama.cpp", "--versions", "llama-cpp-python==9.9.0", "--out", str(out)])


@pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to build the repository")
def test_ollama_from_release_tags(tool, tmp_path) -> None:
    """An Ollama repository with tags: the importer's Architectures[0] switch per final release (and the newest
    tag), LLAMA_CPP_VERSION per tag; tags before the importer are not read."""
    repo = tmp_path / "ollama"
    (repo / "convert").mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)

    def tag(name: str, files: dict[str, str]) -> None:
        for path, text in files.items():
            (repo / path).write_text(text)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", name, "--allow-empty"], check=True)
        subprocess.run([*git, "tag", name], check=True)

    def switch(*cases: str) -> str:
        body = "".join(f"\tcase {c}:\n\t\tconv = &m{{}}\n" for c in cases)
        return f"func LoadModelMetadata() {{\n\tswitch p.Architectures[0] {{\n{body}\tdefault:\n\t\treturn err\n\t}}\n}}\n"

    arch = 'LLM_ARCH_NAMES = {\n    { LLM_ARCH_LLAMA, "llama" },\n    { LLM_ARCH_GEMMA, "gemma" },\n};\n'
    tag("v0.1.0", {"README.md": "no importer yet\n"})
    (repo / "llama" / "llama.cpp" / "src").mkdir(parents=True)
    (repo / "model" / "models" / "gemma3").mkdir(parents=True)
    tag("v0.2.0", {"convert/safetensors.go": switch('"MistralForCausalLM"', '"GemmaForCausalLM"'),
                   "llama/llama.cpp/src/llama-arch.cpp": arch,
                   "model/models/gemma3/model.go": 'func init() {\n\tmodel.Register("gemma3", New)\n'
                                                   '\tmodel.Register("gemma3_embed", newEmbed)\n}\n'})
    (repo / "convert" / "safetensors.go").unlink()
    tag("v0.3.0", {"convert/convert.go": switch('"LlamaForCausalLM"', '"GemmaForCausalLM", "BertModel"',
                                                '"Qwen2VLForConditionalGeneration"'),
                   "LLAMA_CPP_VERSION": "b5000\n"})
    tag("v0.4.0-rc1", {"convert/convert.go": switch('"LlamaForCausalLM"', '"Qwen3ForCausalLM"'),
                       "LLAMA_CPP_VERSION": "b6000\n"})
    path = tool.write_ollama(repo / ".git", tmp_path / "out")
    data = _read(path, "ollama")
    assert data.versions_read == ("0.2.0", "0.3.0", "0.4.0rc1")
    assert data.derive is not None and data.derive.versions == {"0.3.0": "b5000", "0.4.0rc1": "b6000"}
    engine, vendored, imp = data.lists
    assert imp.methods == ("none", "fp8", "mxfp4") and imp.containers == ("safetensors",)
    # the own engine at every tag from its first; the vendored llama.cpp only where no build is pinned
    assert set(engine.arch) == {"gemma3"} and engine.versions_read == ("0.2.0", "0.3.0", "0.4.0rc1")
    assert set(vendored.arch) == {"llama", "gemma"} and vendored.versions_read == ("0.2.0",)
    assert (imp.arch["MistralForCausalLM"].first, imp.arch["MistralForCausalLM"].last) == ("0.2.0", "0.2.0")
    assert (imp.arch["GemmaForCausalLM"].last, imp.arch["Qwen3ForCausalLM"].first) == ("0.3.0", "0.4.0rc1")
    assert (imp.arch["BertModel"].kind, imp.arch["Qwen2VLForConditionalGeneration"].kind) == ("embedding",
                                                                                              "multimodal")
    assert data.read["0.4.0rc1"].startswith("ollama git tag v0.4.0-rc1 (")
    # a tag whose importer the parser cannot read fails loudly instead of dropping every architecture
    tag("v0.5.0", {"convert/convert.go": "func LoadModelMetadata() { lookup(p.Architectures[0]) }\n"})
    with pytest.raises(SystemExit, match="no Architectures"):
        tool.write_ollama(repo / ".git", tmp_path / "out")


def _tagged_repo(root: Path):
    """A git repository and a function committing files and tagging the commit."""
    root.mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root)]
    subprocess.run([*git, "init", "-q"], check=True)

    def tag(name: str, files: dict[str, str]) -> None:
        for path, text in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", name, "--allow-empty"], check=True)
        subprocess.run([*git, "tag", name], check=True)

    return tag


@pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to build the repository")
def test_tensorrt_llm_from_release_tags(tool, tmp_path) -> None:
    """TensorRT-LLM's PyTorch backend (decorators, then the lazy index) and its engine backend's MODEL_MAP, per
    final release tag; release candidates are not read."""
    tag = _tagged_repo(tmp_path / "trt")
    models = "tensorrt_llm/_torch/models/"
    tag("v1.0.0", {models + "modeling_llama.py": '@register_auto_model("LlamaForCausalLM")\nclass L: pass\n',
                   models + "modeling_qwen.py": '@register_auto_model(\n    "Qwen2ForCausalLM")\nclass Q: pass\n',
                   "tensorrt_llm/models/__init__.py": "MODEL_MAP = {'GPT2LMHeadModel': G, 'LlamaForCausalLM': L}\n"})
    tag("v1.1.0rc1", {models + "modeling_gemma.py": '@register_auto_model("Gemma3ForCausalLM")\n'})
    tag("v1.1.0", {models + "_arch_index.py": 'MODEL_ARCH_TO_MODULE = {"Qwen3ForCausalLM": "modeling_qwen3",\n'
                                              '    "LlamaForCausalLM": "modeling_llama"}\n'})
    (tmp_path / "trt" / models / "modeling_qwen.py").unlink()
    tag("v1.2.0", {})
    path = tool.write_tensorrt_llm(tmp_path / "trt" / ".git", tmp_path / "out")
    data = _read(path, "tensorrt-llm")
    assert data.versions_read == ("1.0.0", "1.1.0", "1.2.0")
    torch, engine = data.lists
    assert (torch.role, engine.role) == ("load", "convert")
    assert set(torch.arch) == {"LlamaForCausalLM", "Qwen2ForCausalLM", "Gemma3ForCausalLM", "Qwen3ForCausalLM"}
    assert (torch.arch["Qwen2ForCausalLM"].last, torch.arch["Gemma3ForCausalLM"].first) == ("1.1.0", "1.1.0")
    assert set(engine.arch) == {"GPT2LMHeadModel", "LlamaForCausalLM"}
    with pytest.raises(SystemExit, match="no release tag"):
        tool.write_tensorrt_llm(_empty_repo(tmp_path / "empty"), tmp_path / "out2")


def test_tensorrt_llm_from_its_supported_models_pages(tool, tmp_path) -> None:
    """The docs mode: one markdown table per release (the upstream .md layout, footnote markers included). Listed
    classes load from the release that lists them; a footnoted class (AutoDeploy only ...) is left out; the list is
    not exhaustive, so a missing class is unknown; each release names its page."""
    old = tmp_path / "a.md"
    old.write_text("<!-- url: https://example.test/1.0.0/models/supported-models.html -->\n<!-- version: 1.0.0 -->\n"
                   "<!-- read: the whole table -->\n# Supported Models\n\n"
                   "| Architecture | Model | HuggingFace Example |\n| --- | --- | --- |\n"
                   "| `LlamaForCausalLM` | Llama 3 | `meta-llama/x` |\n| `Qwen2ForRewardModel` | Qwen2-based | `q/x` |\n"
                   "\n| `NotInTheFirstTableForCausalLM` | Later table | x |\n")
    new = tmp_path / "b.md"
    new.write_text("<!-- url: https://example.test/1.2.0/models/supported-models.html -->\n<!-- version: 1.2.0 -->\n"
                   "<!-- read: rows up to X -->\n| Architecture | Model | Modality |\n| --- | --- | --- |\n"
                   "| `LlamaForCausalLM` | Llama 3 | L |\n| `GraniteForCausalLM` [^5] | Granite 3 | L |\n"
                   "| `Gemma4ForConditionalGeneration` [7] | Gemma 4 | L + I |\n| `LlavaLlamaModel` | VILA | L + V |\n")
    path = tool.write_tensorrt_llm_docs([new, old], tmp_path / "out")
    data = _read(path, "tensorrt-llm")
    assert data.versions_read == ("1.0.0", "1.2.0")
    assert data.read["1.0.0"] == "https://example.test/1.0.0/models/supported-models.html (read: the whole table)"
    [docs] = data.lists
    assert (docs.exhaustive, docs.role) == (False, "load") and "neither confirmed nor refused" in (docs.unlisted or "")
    assert {n: (a.first, a.last, a.kind) for n, a in docs.arch.items()} == {
        "LlamaForCausalLM": ("1.0.0", None, "text"), "Qwen2ForRewardModel": ("1.0.0", "1.0.0", "reward"),
        "LlavaLlamaModel": ("1.2.0", None, "multimodal")}
    assert "1.2.0: Gemma4ForConditionalGeneration, GraniteForCausalLM" in (docs.note or "")
    bad = tmp_path / "bad.md"
    bad.write_text("<!-- url: u -->\n<!-- version: 1.0.0 -->\n| Architecture | Model |\n")
    with pytest.raises(ValueError, match="read"):
        tool.parse_trtllm_docs(bad.read_text())
    bad.write_text("<!-- url: u -->\n<!-- version: 1.0.0 -->\n<!-- read: all -->\nno table here\n")
    with pytest.raises(ValueError, match="no '"):
        tool.parse_trtllm_docs(bad.read_text())


def test_shipped_tensorrt_llm_file_is_what_the_stored_pages_give(tool, tmp_path) -> None:
    """matrices/architectures/tensorrt-llm.toml is regenerated byte for byte from matrices/tools/trtllm_docs/."""
    path = tool.write_tensorrt_llm_docs(sorted(tool.TRTLLM_DOCS.glob("*.md")), tmp_path / "out")
    assert path.read_text(encoding="utf-8") == (tool.OUT_DIR / "tensorrt-llm.toml").read_text(encoding="utf-8")


def _empty_repo(root: Path) -> Path:
    _tagged_repo(root)("v0.1.0", {"README.md": "x\n"})
    return root / ".git"


def test_lm_studio_lists_what_every_gguf_llama_cpp_loads(tool, tmp_path) -> None:
    """LM Studio's runtime build is unpublished; a lower bound settles some names: the ones the first GGUF llama.cpp
    (llama-cpp-python 0.1.79) loads that every llama.cpp release read since still loads (issue 24)."""
    _sdist(tmp_path / "cache", "llama-cpp-python", tool.FIRST_GGUF_LLAMA_CPP, {"vendor/llama.cpp/llama.cpp": (
        'static std::map<llm_arch, std::string> LLM_ARCH_NAMES = {\n    { LLM_ARCH_LLAMA,   "llama"   },\n'
        '    { LLM_ARCH_FALCON,  "falcon"  },\n    { LLM_ARCH_GPT2,    "gpt2"    },\n    { LLM_ARCH_MPT, "mpt" },\n};\n'
        'switch (model.arch) {\n    case LLM_ARCH_LLAMA:\n    case LLM_ARCH_FALCON:\n    case LLM_ARCH_MPT:\n}\n')})
    (tmp_path / "llama.cpp.toml").write_text(
        '[architectures]\nversions_read = ["b1", "b2"]\n[[list]]\nnames = "gguf-arch"\narch = """\n'
        'llama b1 - text\nfalcon b2 - text\nmpt b1 b1 text\nqwen2 b1 - text\n"""\n')
    data = _read(tool.write_lm_studio(tmp_path), "lm-studio")
    [lst] = data.lists
    # falcon came after the oldest build read, mpt was dropped, gpt2 had no loader, qwen2 came after the first GGUF
    assert set(lst.arch) == {"llama"} and not lst.exhaustive and lst.containers == ("gguf",)
    assert data.versions_read == tuple(tool.LM_STUDIO_VERSIONS) and "no public source names" in lst.unlisted
    assert data.derive is not None and "no public source maps" in (data.derive.note or "")


def test_a_provider_lists_the_classes_its_docs_name(tool, tmp_path) -> None:
    data = _read(tool.write_provider("fireworks", tmp_path), "fireworks")
    [lst] = data.lists
    assert "LlamaForCausalLM" in lst.arch and not lst.exhaustive and lst.names == "hf-class"
    assert "non-exhaustive list of model families" in lst.unlisted
    groq = _read(tool.write_provider("groq", tmp_path), "groq")
    assert groq.lists == [] and groq.note


def test_sglang_gguf_names_through_its_pinned_transformers(tool, tmp_path, monkeypatch) -> None:
    """A GGUF without config.json: transformers' GGUF config reader, then the class transformers' causal-LM mapping
    names, which the release must register; a release without that path or without an exact pin gets no list."""
    cache = tmp_path / "cache"
    llama = tmp_path / "arch"
    llama.mkdir()
    (llama / "llama.cpp.toml").write_text('[[list]]\nnames = "gguf-arch"\narch = """\nllama b1 - text\n'
                                          'qwen3moe b1 - text\nphi3 b1 - text\n"""\n')
    monkeypatch.setattr(tool, "OUT_DIR", llama)
    _wheel(cache, "transformers", "5.0.0", {
        "transformers/models/auto/modeling_auto.py":
            'MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = OrderedDict([("llama", "LlamaForCausalLM"), '
            '("qwen3_moe", "Qwen3MoeForCausalLM"), ("phi3", "Phi3ForCausalLM")])\n',
        "transformers/integrations/ggml.py": 'GGUF_CONFIG_MAPPING = {"llama": {}, "qwen3_moe": {}, "phi3": {}}\n'})
    entry = "sglang/srt/models/m.py"
    path_files = {
        "sglang/srt/utils/hf_transformers/config.py": f"    {tool.SGLANG_GGUF_CLASS}\n",
        "sglang/srt/model_loader/loader.py": 'class GGUFModelLoader:\n    def m(self, model_type):\n'
                                             '        if model_type == "qwen3_moe":\n            model_type = "qwen3moe"\n'}
    _wheel(cache, "sglang", "0.5.1", {entry: "EntryClass = [LlamaForCausalLM]\n",
                                      "sglang-0.5.1.dist-info/METADATA": "Requires-Dist: transformers>=4.0\n",
                                      **path_files})
    _wheel(cache, "sglang", "0.5.2", {entry: "EntryClass = [LlamaForCausalLM, Qwen3MoeForCausalLM]\n",
                                      "sglang-0.5.2.dist-info/METADATA": "Requires-Dist: transformers==5.0.0\n",
                                      **path_files})
    out = tmp_path / "out"
    assert tool.main(["sglang", "--versions", "0.5.1", "0.5.2", "--out", str(out)]) == 0
    data = _read(out / "sglang.toml", "sglang")
    _, gguf = data.lists
    # 0.5.1 pins no exact transformers: no GGUF list there; phi3's class is not registered
    assert set(gguf.arch) == {"llama", "qwen3moe"} and gguf.arch["llama"].first == "0.5.2"
    assert not gguf.exhaustive and "transformers 5.0.0" in data.read["0.5.2"]


def test_output_is_deterministic(tool, tmp_path) -> None:
    lst = tool.NameList("l", "hf-class", ["safetensors"], "src")
    lst.seen = {"1.0": {"B": "text", "A": "text"}, "2.0": {"A": "text"}}
    one = tool.render_toml("e", "pep440", [lst], {"1.0": "a", "2.0": "b"}, "cmd")
    lst.seen = {"1.0": {"A": "text", "B": "text"}, "2.0": {"A": "text"}}
    assert tool.render_toml("e", "pep440", [lst], {"1.0": "a", "2.0": "b"}, "cmd") == one
    assert "\nA 1.0 -   text\nB 1.0 1.0 text\n" in one
    assert _read_text(one).lists[0].arch["B"].last == "1.0"


def _read_text(text: str):
    return validate(tomllib.loads(text), "e.toml", "e")
