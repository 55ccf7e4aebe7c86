"""The architecture dimension: real GGUF and safetensors headers judged through the CLI against architecture
data per engine version (a test copy of the matrix with a small architectures/ file, and the shipped data)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from qcheck.cli import main
from qcheck.matrix.architectures import clear_cache as clear_arch_cache
from qcheck.matrix.architectures import validate
from qcheck.matrix.loader import clear_cache
from qcheck.matrix.schema import MatrixDataError
from support.builders import bf16_llama, fp8_block_deepseek, llama_config, mlx_fixture
from support.gguf_helpers import write_gguf

TEST_MATRIX = Path(__file__).parent / "data" / "matrices"

FASTSERVE_ARCHS = """
[architectures]
engine = "fastserve"
version_scheme = "pep440"
versions_read = ["0.9.0", "0.23.0", "0.33.0"]
generated_by = "test fixture"

[architectures.read]
"0.9.0" = "fastserve-0.9.0.tar.gz"
"0.23.0" = "fastserve-0.23.0.tar.gz"
"0.33.0" = "fastserve-0.33.0.tar.gz"

[[list]]
id = "registry"
names = "hf-class"
containers = ["safetensors"]
source = "example/fastserve: models/registry.py"
versions_read = ["0.9.0", "0.23.0", "0.33.0"]
# one name a line: NAME FIRST LAST KIND (LAST '-': still in the newest release read)
arch = '''
LlamaForCausalLM 0.9.0  -     text
Qwen3ForCausalLM 0.23.0 -     text
OldForCausalLM   0.9.0  0.9.0 text
BertModel        0.9.0  -     embedding
'''

[[list]]
id = "gguf"
names = "gguf-arch"
containers = ["gguf"]
source = "example/fastserve: gguf_loader.py"
versions_read = ["0.23.0", "0.33.0"]
# one name a line: NAME FIRST LAST KIND (LAST '-': still in the newest release read)
arch = '''
llama 0.23.0 - text
'''
"""


@pytest.fixture()
def matrices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test matrix with architectures/fastserve.toml replaced by FASTSERVE_ARCHS and no data for tinycpp."""
    root = tmp_path / "matrices"
    shutil.copytree(TEST_MATRIX, root)
    (root / "architectures" / "fastserve.toml").write_text(FASTSERVE_ARCHS)
    (root / "architectures" / "tinycpp.toml").unlink()
    monkeypatch.setenv("QCHECK_MATRICES", str(root))
    clear_cache()
    yield root
    clear_cache()


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def st_model(tmp_path: Path, arch: str, model_type: str, fixture=bf16_llama) -> Path:
    fx = fixture()
    fx.configs["config.json"] = llama_config(architectures=[arch], model_type=model_type,
                                             **{k: v for k, v in fx.configs.get("config.json", {}).items()
                                                if k == "quantization_config"})
    return fx.write(tmp_path / f"{arch}-{model_type}")


def gguf_model(tmp_path: Path, arch: str, name: str = "model.gguf") -> Path:
    import gguf

    return write_gguf(tmp_path / name, [("token_embd.weight", (32, 64), gguf.GGMLQuantizationType.F32)],
                      arch=arch)[0]


def verdicts(out: str) -> list[dict]:
    return json.loads(out)["verdicts"]


def dimension(verdict: dict, name: str = "architecture") -> dict:
    """One dimension of a JSON verdict (architecture, weights, kv-cache, parallel)."""
    return next(d for d in verdict["dimensions"] if d["dimension"] == name)


@pytest.mark.parametrize(("arch", "version", "status", "exit_code", "reason"), [
    ("LlamaForCausalLM", "0.33.0", "native", 0, None),
    ("Qwen3ForCausalLM", "0.33.0", "native", 0, None),
    ("Qwen3ForCausalLM", "0.23.0", "native", 0, None),
    # first read in 0.23.0, absent in 0.9.0: 0.9.0 cannot load it, 0.14.0 (between the two) is not known
    ("Qwen3ForCausalLM", "0.9.0", "unsupported", 1,
     "architecture: FastServe 0.9.0 does not load architecture Qwen3ForCausalLM: it first appears in 0.23.0"),
    ("Qwen3ForCausalLM", "0.14.0", "unknown", 1,
     "architecture: architecture Qwen3ForCausalLM appeared in FastServe between 0.9.0 and 0.23.0"),
    ("TotallyNewForCausalLM", "0.33.0", "unsupported", 1,
     "architecture: FastServe 0.33.0 does not load architecture TotallyNewForCausalLM: it is in no release read"),
    ("TotallyNewForCausalLM", "0.40.0", "unknown", 1,
     "architecture: architecture TotallyNewForCausalLM is not in FastServe up to 0.33.0"),
    ("OldForCausalLM", "0.9.0", "native", 0, None),
    ("OldForCausalLM", "0.33.0", "unsupported", 1,
     "architecture: FastServe 0.33.0 does not load architecture OldForCausalLM: it was removed after 0.9.0"),
])
def test_safetensors_architecture_per_version(tmp_path, capsys, matrices, arch, version, status, exit_code,
                                               reason) -> None:
    model = st_model(tmp_path, arch, "llama")
    code, out, err = cli(capsys, "check", str(model), "--engine", f"fastserve=={version}", "--gpu", "a100", "--json")
    [v] = verdicts(out)
    assert (code, v["status"]) == (exit_code, status), (out, err)
    arch_dim = dimension(v)
    assert arch_dim["status"] == status
    if reason:
        assert v["reasons"][0].startswith(reason), v["reasons"]
        assert any("example/fastserve: models/registry.py" in s["ref"] for s in v["sources"])


def test_unsupported_architecture_suggests_the_first_version_that_loads_it(tmp_path, capsys, matrices) -> None:
    model = st_model(tmp_path, "Qwen3ForCausalLM", "qwen3")
    code, out, _ = cli(capsys, "check", str(model), "--engine", "fastserve==0.9.0", "--gpu", "a100")
    assert code == 1
    assert "UNSUPPORTED" in out
    assert "try:       FastServe 0.23.0 loads Qwen3ForCausalLM: --engine fastserve==0.23.0" in out


def test_fp8_checkpoint_of_an_unknown_architecture_is_not_native(tmp_path, capsys, matrices) -> None:
    model = st_model(tmp_path, "TotallyNewForCausalLM", "totally_new", fixture=fp8_block_deepseek)
    code, out, _ = cli(capsys, "check", str(model), "--engine", "fastserve", "--gpu", "h100", "--json")
    [v] = verdicts(out)
    assert (code, v["status"]) == (1, "unsupported")
    assert [d["dimension"] for d in v["dimensions"]] == ["weights", "architecture"]
    assert v["dimensions"][0]["status"] == "native"  # the FP8 kernel alone would run it
    # an engine without architecture data is unknown for it, never native
    code, out, _ = cli(capsys, "check", str(model), "--engine", "tinycpp", "--gpu", "h100", "--json")
    [v] = verdicts(out)
    arch_dim = dimension(v)
    assert v["status"] != "native" and code == 1
    assert arch_dim["status"] == "unknown"
    assert arch_dim["reasons"] == ["qcheck has no data on which architectures TinyCpp loads from safetensors "
                                   "checkpoints: whether it loads TotallyNewForCausalLM is not known"] or \
        arch_dim["reasons"][0].startswith("qcheck has no architecture data for")


def test_text_shows_no_kernel_for_a_model_the_engine_does_not_load(tmp_path, capsys, shipped) -> None:
    """An architecture vLLM 0.8.0 does not load: no kernel runs, so the text names none (the JSON's dimensions say why:
    the architecture is refused, and no weight rule was read at 0.8.0)."""
    model = st_model(tmp_path, "Qwen3ForCausalLM", "qwen3", fixture=fp8_block_deepseek)
    code, out, _ = cli(capsys, "check", str(model), "--engine", "vllm==0.8.0", "--gpu", "h100")
    assert code == 1 and out.splitlines()[2].startswith("UNSUPPORTED  vllm 0.8.0 x h100")
    assert "  kernel:" not in out
    assert "  why:       architecture: vLLM 0.8.0 does not load architecture Qwen3ForCausalLM" in out
    # the first release the block-FP8 rule was read at (an older one answers "not read" for the weights)
    code, out, _ = cli(capsys, "check", str(model), "--engine", "vllm==0.9.0", "--gpu", "h100")
    assert code == 0 and "  kernel:    Block FP8" in out
    code, out, _ = cli(capsys, "check", str(model), "--engine", "vllm==0.8.0", "--gpu", "h100", "--json")
    [v] = verdicts(out)
    assert v["kernel"] is None and [d["status"] for d in v["dimensions"]][:2] == ["unknown", "unsupported"]


@pytest.mark.parametrize(("arch", "version", "status"), [
    ("llama", "0.33.0", "native"), ("llama", "0.23.0", "native"),
    ("llama", "0.9.0", "unknown"),  # older than the GGUF list's first release read
    ("totally-new-arch", "0.33.0", "unsupported"), ("totally-new-arch", "0.23.0", "unsupported"),
])
def test_gguf_architecture_per_version(tmp_path, capsys, matrices, arch, version, status) -> None:
    path = gguf_model(tmp_path, arch)
    code, out, _ = cli(capsys, "check", str(path), "--engine", f"fastserve=={version}", "--gpu", "h100", "--json")
    [v] = verdicts(out)
    arch_dim = dimension(v)
    assert arch_dim["status"] == status, arch_dim
    if status != "native":
        assert v["status"] in (status, "unsupported") and code == 1
        assert arch in " ".join(arch_dim["reasons"])


def test_mmproj_gguf_is_not_judged_as_a_language_model(tmp_path, capsys, matrices) -> None:
    path = gguf_model(tmp_path, "clip", name="mmproj-model-f16.gguf")
    code, out, _ = cli(capsys, "check", str(path), "--engine", "fastserve", "--gpu", "h100", "--json")
    arch_dim = dimension(verdicts(out)[0])
    assert arch_dim["status"] == "unknown"
    assert "not a language model" in arch_dim["reasons"][0] and "--mmproj" in arch_dim["reasons"][0]
    assert code == 1


def test_embedding_model_says_what_it_is(tmp_path, capsys, matrices) -> None:
    model = st_model(tmp_path, "BertModel", "bert")
    _, out, _ = cli(capsys, "check", str(model), "--engine", "fastserve", "--gpu", "a100", "--json")
    arch_dim = dimension(verdicts(out)[0])
    assert arch_dim["status"] == "native"
    assert "registered as a embedding model" not in " ".join(arch_dim["reasons"])
    assert "BertModel is registered as an embedding model in FastServe" in " ".join(arch_dim["reasons"])


def test_matrix_arch_lists_engines_and_versions(tmp_path, capsys, matrices) -> None:
    code, out, _ = cli(capsys, "matrix", "--arch", "qwen3forcausallm")
    assert code == 0
    assert "fastserve     registry      loads Qwen3ForCausalLM since 0.23.0 (read 0.9.0 .. 0.33.0)" in out
    assert "tinycpp       no architecture data: unknown" in out
    code, out, _ = cli(capsys, "matrix", "--arch", "OldForCausalLM", "--json")
    [row] = [r for r in json.loads(out)["engines"] if r["engine"] == "fastserve"]
    assert (row["status"], row["first"], row["last"]) == ("removed", "0.9.0", "0.9.0")
    code, out, _ = cli(capsys, "matrix", "--arch", "llama", "--json", "-o", str(tmp_path / "arch.json"))
    assert (code, out) == (0, "")
    assert json.loads((tmp_path / "arch.json").read_text())["architecture"] == "llama"


def _state_verified(root: Path) -> None:
    """Give every rule of the test matrix's engine files the releases it was "read at" (each listed release its
    ``versions`` covers): ``--validate`` refuses a rule without ``verified`` (issue #35), while the other tests keep
    the unmigrated files, which still load for checks."""
    import re

    import tomllib

    from qcheck.matrix.versions import contains, parse_specifier, parse_version

    for path in sorted((root / "engines").glob("*.toml")):
        text = path.read_text()
        engine = tomllib.loads(text)["engine"]
        scheme = engine.get("version_scheme", "pep440")
        out = []
        for block in re.split(r"(?m)^(?=\[)", text):
            table = tomllib.loads(block.split("\n", 1)[1]) if re.match(r"\[\[\w*rule\]\]\n", block) else None
            if table is not None and "verified" not in table and not table.get("modifier"):
                spec = table.get("versions")
                read = [v for v in engine["versions"] if spec is None
                        or contains(parse_specifier(spec, scheme), parse_version(v, scheme))]
                block = block.replace("\n", f"\nverified = {json.dumps(read)}\n", 1)
            out.append(block)
        path.write_text("".join(out).replace("[engine]\n", "[engine]\nrules_verified = true\n", 1))


def test_validate_covers_architecture_files(capsys, matrices) -> None:
    code, out, err = cli(capsys, "matrix", "--validate")
    assert code == 2 and "[missing-verified]" in err  # the test files state no verified ranges
    _state_verified(matrices)
    clear_cache()
    code, out, err = cli(capsys, "matrix", "--validate")
    assert code == 0 and "architecture data OK: 2 engines, 20 names (cloudco, fastserve); no data (unknown): tinycpp" \
        in out, err
    bad = FASTSERVE_ARCHS.replace("Qwen3ForCausalLM 0.23.0 -", "Qwen3ForCausalLM 0.24.0 -")
    (matrices / "architectures" / "fastserve.toml").write_text(bad)
    clear_arch_cache()
    code, _, err = cli(capsys, "matrix", "--validate")
    assert code == 2
    assert err.startswith("qcheck: error: matrix data error: matrices/architectures/fastserve.toml: list 'registry' "
                          "arch line 2: [version] Qwen3ForCausalLM: first '0.24.0' is not a version this list read")
    (matrices / "architectures" / "nosuch.toml").write_text(FASTSERVE_ARCHS.replace('"fastserve"', '"nosuch"'))
    (matrices / "architectures" / "fastserve.toml").write_text(FASTSERVE_ARCHS)
    clear_arch_cache()
    code, _, err = cli(capsys, "matrix", "--validate")
    assert code == 2 and "[engine-id] no engine 'nosuch'" in err


OLD_ROW = "OldForCausalLM   0.9.0  0.9.0 text"


@pytest.mark.parametrize(("edit", "check"), [
    (lambda t: t.replace("-     embedding", "-     poetry"), "[kind]"),
    (lambda t: t.replace(OLD_ROW, "OldForCausalLM 0.9.0"), "[row]"),
    (lambda t: t.replace(OLD_ROW, "LlamaForCausalLM 0.9.0 - text"), "[duplicate-name]"),
    (lambda t: t.replace(OLD_ROW, "OldForCausalLM 0.23.0 0.9.0 text"), "[version-order]"),
    (lambda t: t.replace('names = "gguf-arch"', 'names = "gguf"'), "[names]"),
    (lambda t: t.replace('versions_read = ["0.9.0", "0.23.0", "0.33.0"]\ngenerated_by',
                         'versions_read = ["0.23.0", "0.9.0", "0.33.0"]\ngenerated_by'), "[version-order]"),
    (lambda t: t.replace('"0.9.0" = "fastserve-0.9.0.tar.gz"\n', ""), "[read]"),
    (lambda t: t.replace('names = "gguf-arch"', 'names = "gguf-arch"\ncolor = "red"'), "[unknown-key]"),
    (lambda t: t.replace('names = "gguf-arch"', 'names = "gguf-arch"\narch2 = 1'), "[unknown-key]"),
])
def test_validation_names_the_problem(edit, check) -> None:
    with pytest.raises(MatrixDataError) as exc:
        validate(tomllib.loads(edit(FASTSERVE_ARCHS)), "architectures/fastserve.toml", "fastserve")
    assert check in str(exc.value)


# ---------------------------------------------------------------------------------- the shipped data

@pytest.fixture()
def shipped(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("QCHECK_MATRICES", raising=False)
    clear_cache()
    yield
    clear_cache()


def test_shipped_data_validates(capsys, shipped) -> None:
    code, out, _ = cli(capsys, "matrix", "--validate")
    assert code == 0
    for engine in ("vllm", "sglang", "transformers", "llama.cpp", "mlx", "exllamav2", "exllamav3"):
        assert engine in out.split("architecture data OK:")[1].split("no data")[0]


@pytest.mark.parametrize(("arch", "engine", "status"), [
    ("LlamaForCausalLM", "vllm", "native"), ("LlamaForCausalLM", "sglang", "native"),
    ("TotallyNewForCausalLM", "vllm", "unsupported"), ("TotallyNewForCausalLM", "sglang", "unsupported"),
    ("Qwen3ForCausalLM", "vllm==0.6.0", "unsupported"), ("Qwen3ForCausalLM", "vllm==0.9.0", "native"),
])
def test_shipped_fp8_checkpoint_on_vllm_and_sglang(tmp_path, capsys, shipped, arch, engine, status) -> None:
    model = st_model(tmp_path, arch, "llama", fixture=fp8_block_deepseek)
    code, out, _ = cli(capsys, "check", str(model), "--engine", engine, "--gpu", "h100", "--json")
    [v] = verdicts(out)
    arch_dim = dimension(v)
    assert arch_dim["status"] == status, arch_dim
    assert (code == 0) == (v["status"] in ("native", "fallback"))


@pytest.mark.parametrize(("arch", "engine", "status"), [
    ("llama", "llama.cpp==b10361", "native"), ("qwen3", "llama.cpp==b10361", "native"),
    ("totally-new-arch", "llama.cpp==b10361", "unsupported"),
    ("totally-new-arch", "llama.cpp", "unsupported"),  # the default b11312 is read (llama-cpp-python 0.3.36)
    ("totally-new-arch", "llama.cpp==b11400", "unknown"),  # newer than the newest build read
    ("qwen4exp", "llama.cpp", "native"), ("qwen4exp", "llama.cpp==b11312", "native"),
    ("qwen4exp", "llama.cpp==b10361", "unsupported"),  # first in b11312
    ("qwen4exp", "llama.cpp==b10900", "unknown"),  # between b10361 and b11312: not read
    ("qwen4exp", "ollama==0.33.0rc2", "unknown"),  # Ollama pins b10488: between the two builds read
    ("qwen3", "ollama==0.33.0rc2", "native"),
    # before LLAMA_CPP_VERSION: the llama.cpp Ollama vendored, and its own Go engine
    ("qwen3", "ollama==0.6.6", "native"), ("qwen3", "ollama==0.6.5", "unsupported"),  # vendored from 0.6.6
    ("gemma4", "ollama==0.20.0", "native"), ("gemma4", "ollama==0.19.0", "unsupported"),  # own engine from 0.20.0
    ("gemma4", "ollama==0.30.0", "native"),  # the own engine runs it whatever llama.cpp b9452 knows
    ("totally-new-arch", "ollama==0.12.0", "unsupported"),
])
def test_shipped_gguf_on_llama_cpp(tmp_path, capsys, shipped, arch, engine, status) -> None:
    path = gguf_model(tmp_path, arch)
    gpu = "rtx-4090" if engine.startswith("ollama") else "h100"
    code, out, _ = cli(capsys, "check", str(path), "--engine", engine, "--gpu", gpu, "--json")
    [v] = verdicts(out)
    arch_dim = dimension(v)
    assert arch_dim["status"] == status, arch_dim
    # the weights decide too (Ollama's weight rules were read at 0.33.0rc2 only: older releases are unknown there)
    assert code == (0 if v["status"] in ("native", "fallback") else 1)
    assert status == "native" or code == 1
    if engine == "llama.cpp==b10361" and arch == "qwen4exp":
        assert arch_dim["suggestions"] == ["llama.cpp b11312 loads qwen4exp: --engine llama.cpp==b11312"]


@pytest.mark.parametrize(("arch", "engine", "status", "first"), [
    ("LlamaForCausalLM", "ollama", "native", None),
    ("Gemma4ForCausalLM", "ollama==0.20.0", "native", None),
    ("Gemma4ForCausalLM", "ollama==0.19.0", "unsupported", "--engine ollama==0.20.0"),  # first in 0.20.0
    ("Qwen3ForCausalLM", "ollama", "unsupported", None),  # no converter: 'unsupported architecture' (#11084)
    ("MistralForCausalLM", "ollama==0.6.4", "native", None),
    ("MistralForCausalLM", "ollama", "unsupported", "--engine ollama==0.6.4"),  # dropped from the importer in 0.6.5
    ("TotallyNewForCausalLM", "ollama==0.34.0", "unknown", None),  # newer than the newest tag read
])
def test_shipped_safetensors_import_on_ollama(tmp_path, capsys, shipped, arch, engine, status, first) -> None:
    """`ollama create` from BF16 safetensors: the importer's architecture list at the version asked for."""
    model = st_model(tmp_path, arch, "x")
    code, out, _ = cli(capsys, "check", str(model), "--engine", engine, "--gpu", "rtx-4090", "--json")
    [v] = verdicts(out)
    arch_dim = dimension(v)
    assert arch_dim["status"] == status, arch_dim
    assert any("ollama/ollama: convert/convert.go" in s["ref"] for s in arch_dim["sources"])
    if first:
        assert any(first in s for s in arch_dim["suggestions"]), arch_dim["suggestions"]
    if status == "unsupported":
        assert code == 1 and v["status"] == "unsupported"


def test_ollama_import_list_judges_only_the_weights_it_imports(tmp_path, capsys, shipped) -> None:
    """MLX safetensors go to Ollama's experimental MLX runner, not the GGUF importer: its list does not apply."""
    fx = mlx_fixture()
    fx.configs["config.json"].update(architectures=["Qwen3ForCausalLM"], model_type="qwen3")
    model = fx.write(tmp_path / "mlx-qwen3")
    code, out, _ = cli(capsys, "check", str(model), "--engine", "ollama", "--gpu", "m3-max", "--json")
    [v] = verdicts(out)
    arch_dim = dimension(v)
    assert arch_dim["status"] == "unknown" and code == 1
    assert arch_dim["reasons"] == ["qcheck has no data on which architectures Ollama loads from safetensors "
                                   "checkpoints: whether it loads Qwen3ForCausalLM is not known"]


@pytest.mark.parametrize(("arch", "engine", "status", "suggestion"), [
    ("llama", "vllm", "native", None), ("llama", "vllm==0.6.0", "native", None),
    ("qwen3", "vllm==0.8.0", "unsupported", "--engine vllm==0.8.5"),  # Qwen3 arrived in vLLM 0.8.5
    ("qwen3", "vllm==0.8.5", "native", None),
    ("qwen2moe", "vllm==0.10.0", "unsupported", "--engine vllm==0.10.2"),  # the loader's qwen2_moe rename
    ("command-r", "vllm==0.23.0", "unsupported", "--engine vllm==0.24.0"),  # needs the plugin's reader
    ("mpt", "vllm==0.33.0", "unsupported", "--engine vllm==0.28.0"),  # MPT left the registry after 0.28
    ("t5", "vllm", "unknown", None),  # no causal-LM class vLLM registers: not traceable, never native
])
def test_shipped_gguf_on_vllm(tmp_path, capsys, shipped, arch, engine, status, suggestion) -> None:
    """vLLM's own GGUF mapping per release (in-tree loader, then vllm-gguf-plugin), through the CLI."""
    code, out, _ = cli(capsys, "check", str(gguf_model(tmp_path, arch)), "--engine", engine, "--gpu", "h100", "--json")
    [v] = verdicts(out)
    arch_dim = dimension(v)
    assert arch_dim["status"] == status, arch_dim
    assert any("vllm-gguf-plugin" in s["ref"] for s in arch_dim["sources"])
    if suggestion:
        assert any(suggestion in s for s in arch_dim["suggestions"]), arch_dim["suggestions"]
    if status != "native":
        assert code == 1 and v["status"] != "native"


def test_lm_studio_and_providers_say_why_the_architecture_is_unknown(tmp_path, capsys, shipped) -> None:
    """What the sources settle is answered (issue 24): every llama.cpp that reads GGUF loads llama, so LM Studio's
    runtime does whatever its build; the providers' upload docs name the Llama family. Anything else stays unknown,
    saying why."""
    code, out, _ = cli(capsys, "check", str(gguf_model(tmp_path, "llama")), "--engine", "lm-studio", "--gpu",
                       "rtx-4090", "--json")
    assert dimension(verdicts(out)[0])["status"] == "native"
    code, out, _ = cli(capsys, "check", str(gguf_model(tmp_path, "qwen2")), "--engine", "lm-studio", "--gpu",
                       "rtx-4090", "--json")
    [v] = verdicts(out)
    arch_dim = dimension(v)
    assert code == 1 and arch_dim["status"] == "unknown"
    assert "a build no public source names" in arch_dim["reasons"][0]
    llama = st_model(tmp_path, "LlamaForCausalLM", "llama")
    other = st_model(tmp_path, "Phi3ForCausalLM", "phi3")
    for provider, needle in (("fireworks", "non-exhaustive list of model families"),
                             ("together", "documents no architecture list")):
        code, out, _ = cli(capsys, "check", str(llama), "--engine", provider, "--json")
        assert dimension(verdicts(out)[0])["status"] == "native", provider
        code, out, _ = cli(capsys, "check", str(other), "--engine", provider, "--json")
        [v] = verdicts(out)
        arch_dim = dimension(v)
        assert arch_dim["status"] == "unknown" and needle in arch_dim["reasons"][0], arch_dim
        assert arch_dim["sources"][0]["version"] == "2026.10"


# ---------------------------------------------------------------------------------- --engine NAME=installed

def _fake_install(site: Path, dist: str, version: str, files: dict[str, str]) -> None:
    """A real installed layout: package files plus the distribution's metadata, found by importlib."""
    for name, text in files.items():
        path = site / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    meta = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")


@pytest.fixture()
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def test_installed_is_only_for_engines_with_a_readable_registry(tmp_path, capsys, matrices) -> None:
    code, _, err = cli(capsys, "check", str(st_model(tmp_path, "LlamaForCausalLM", "llama")), "--engine",
                       "fastserve=installed", "--gpu", "a100")
    assert code == 2
    assert err == ("qcheck: error: --engine fastserve=installed: qcheck reads the installed registry of vllm, "
                   "sglang, transformers, mlx, llama.cpp only\n")


def test_installed_engine_through_the_shipped_matrix(tmp_path, capsys, shipped, site) -> None:
    import importlib

    _fake_install(site, "vllm", "0.23.0", {
        "vllm/__init__.py": "raise RuntimeError('qcheck must not import the engine')\n",
        "vllm/model_executor/models/registry.py":
            '_TEXT_GENERATION_MODELS = {"LlamaForCausalLM": ("llama", "L"), "BrandNewForCausalLM": ("b", "B")}\n'})
    importlib.invalidate_caches()
    new = st_model(tmp_path, "BrandNewForCausalLM", "brand_new", fixture=fp8_block_deepseek)
    code, out, _ = cli(capsys, "check", str(new), "--engine", "vllm=installed", "--gpu", "h100", "--json")
    [v] = verdicts(out)
    assert v["engine_version"] == "0.23.0"
    arch_dim = dimension(v)
    assert arch_dim["status"] == "native" and code == 0
    assert arch_dim["reasons"][0].startswith(f"installed vllm 0.23.0 ({site / 'vllm'}) registers BrandNewForCausalLM")
    assert arch_dim["warnings"][0].startswith("the shipped data disagrees: vLLM 0.23.0 does not load architecture "
                                              "BrandNewForCausalLM")
    assert "vllm 0.23.0 vs the shipped data (read up to 0.34.0): 1 names only installed (BrandNewForCausalLM), " \
        in arch_dim["warnings"][1]
    assert any("architecture: the shipped data disagrees" in w for w in v["warnings"])  # shown whatever the status
    qwen = st_model(tmp_path, "Qwen3ForCausalLM", "qwen3", fixture=fp8_block_deepseek)
    code, out, _ = cli(capsys, "check", str(qwen), "--engine", "vllm=installed", "--gpu", "h100", "--json")
    [v] = verdicts(out)
    assert (v["status"], code) == ("unsupported", 1)
    assert v["reasons"][0].startswith("architecture: installed vllm 0.23.0")
    assert "does not register Qwen3ForCausalLM" in v["reasons"][0]
    code, _, err = cli(capsys, "check", str(qwen), "--engine", "sglang=installed", "--gpu", "h100")
    assert code == 2 and "sglang is not installed in this Python" in err
    # a GGUF: qcheck reads no GGUF mapping from an installed vLLM, so the shipped list judges it at 0.23.0
    for arch, status in (("qwen3", "native"), ("command-r", "unsupported")):
        code, out, _ = cli(capsys, "check", str(gguf_model(tmp_path, arch, f"{arch}.gguf")), "--engine",
                           "vllm=installed", "--gpu", "h100", "--json")
        [v] = verdicts(out)
        arch_dim = dimension(v)
        assert arch_dim["status"] == status, arch_dim
        assert arch_dim["warnings"] == ["installed vllm 0.23.0: qcheck reads no gguf list from it; judged from the "
                                        "shipped data"]


def test_plain_check_never_imports_an_engine(tmp_path, site) -> None:
    """In a fresh process (other tests may have imported transformers): a plain check, with an importable
    engine package that raises on import, imports no engine."""
    import os
    import subprocess
    import sys

    _fake_install(site, "vllm", "0.23.0", {"vllm/__init__.py": "raise RuntimeError('imported')\n"})
    model = st_model(tmp_path, "LlamaForCausalLM", "llama")
    code = ("import sys\nfrom qcheck.cli import main\n"
            f"try:\n    main(['check', {str(model)!r}, '--engine', 'vllm', '--engine', 'transformers', "
            "'--gpu', 'h100', '--json'])\nexcept SystemExit as e:\n    print('EXIT', e.code, file=sys.stderr)\n"
            "print('ENGINES', sorted({'vllm', 'transformers', 'llama_cpp', 'mlx_lm', 'sglang'} & set(sys.modules)),"
            " file=sys.stderr)\n")
    env = {k: v for k, v in os.environ.items() if k != "QCHECK_MATRICES"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(Path(__file__).resolve().parent.parent)])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.stderr.strip().splitlines()[-2:] == ["EXIT 0", "ENGINES []"], proc.stderr


def test_derived_engine_judges_gguf_through_the_engine_it_bundles(tmp_path, capsys, matrices) -> None:
    """An engine that runs GGUF with another engine's loader (Ollama -> llama.cpp, vLLM -> transformers) is judged
    by that engine's list at the version it bundles."""
    text = (matrices / "architectures" / "cloudco.toml").read_text()
    text = text[: text.index("[[list]]\nid = \"gguf\"")]
    text = text.replace('[architectures.read]', '[architectures.derive]\ncontainers = ["gguf"]\nfrom = "fastserve"\n'
                        'source = "example/cloudco: runs GGUF with FastServe"\n\n[architectures.derive.versions]\n'
                        '"2026.10" = "0.23.0"\n\n[architectures.read]')
    (matrices / "architectures" / "cloudco.toml").write_text(text)
    llama = gguf_model(tmp_path, "llama")
    code, out, _ = cli(capsys, "check", str(llama), "--engine", "cloudco", "--json")
    arch_dim = dimension(verdicts(out)[0])
    assert arch_dim["status"] == "native"
    assert arch_dim["reasons"] == ["CloudCo 2026.10 loads GGUF files through fastserve 0.23.0: fastserve loads GGUF "
                                   "architecture llama since 0.23.0"]
    assert arch_dim["sources"][-1] == {"ref": "example/cloudco: runs GGUF with FastServe", "version": "2026.10",
                                       "note": None}
    new = gguf_model(tmp_path, "totally-new-arch", name="new.gguf")
    code, out, _ = cli(capsys, "check", str(new), "--engine", "cloudco", "--json")
    [v] = verdicts(out)
    arch_dim = dimension(v)
    assert (code, v["status"], arch_dim["status"]) == (1, "unsupported", "unsupported")
    assert arch_dim["reasons"] == ["CloudCo 2026.10 loads GGUF files through fastserve 0.23.0: fastserve 0.23.0 does "
                                   "not load GGUF architecture totally-new-arch: it is in no release read "
                                   "(0.23.0 .. 0.33.0)"]


def test_inspect_flags_a_gguf_architecture_llama_cpp_never_defined(tmp_path, capsys, shipped) -> None:
    new = gguf_model(tmp_path, "totally-new-arch")
    code, out, _ = cli(capsys, "inspect", str(new), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["architecture"] == "totally-new-arch"
    [warning] = [w for w in data["warnings"] if "general.architecture" in w]
    assert warning.startswith("general.architecture 'totally-new-arch' is not an architecture llama.cpp has defined "
                              "in any build read (b")
    code, out, _ = cli(capsys, "inspect", str(gguf_model(tmp_path, "qwen3", name="q.gguf")), "--json")
    assert not [w for w in json.loads(out)["warnings"] if "general.architecture" in w]


@pytest.mark.parametrize(("engine", "module", "dist"), [("transformers", "transformers", "transformers"),
                                                        ("llama.cpp", "llama_cpp", "llama-cpp-python")])
def test_real_installed_engines_are_read_without_importing_them(tmp_path, capsys, shipped, engine, module,
                                                                dist) -> None:
    import importlib.metadata
    import importlib.util
    import sys

    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
    before = set(sys.modules)
    if engine == "transformers":
        good, bad = st_model(tmp_path, "LlamaForCausalLM", "llama"), st_model(tmp_path, "TotallyNewForCausalLM", "x")
        gpu = "h100"
    else:
        good, bad = gguf_model(tmp_path, "llama"), gguf_model(tmp_path, "totally-new-arch", name="new.gguf")
        gpu = "cpu"
    code, out, _ = cli(capsys, "check", str(good), "--engine", f"{engine}=installed", "--gpu", gpu, "--json")
    [v] = verdicts(out)
    arch_dim = dimension(v)
    version = importlib.metadata.version(dist)
    assert (code, arch_dim["status"]) == (0, "native")
    assert arch_dim["reasons"][0].startswith(f"installed {dist} {version} (")
    assert arch_dim["sources"][0]["version"] == version
    code, out, _ = cli(capsys, "check", str(bad), "--engine", f"{engine}=installed", "--gpu", gpu, "--json")
    [v] = verdicts(out)
    assert (code, v["status"]) == (1, "unsupported")
    assert "does not register" in v["reasons"][0]
    assert module not in set(sys.modules) - before  # read as text, never imported


def test_an_engine_that_loads_unlisted_names_another_way_is_unknown_not_unsupported(tmp_path, capsys,
                                                                                    matrices) -> None:
    """ExLlamaV2 loads an architecture it does not list as LlamaForCausalLM: such a name is not refused."""
    text = FASTSERVE_ARCHS.replace('source = "example/fastserve: models/registry.py"',
                                   'source = "example/fastserve: models/registry.py"\n'
                                   'unlisted = "FastServe loads unlisted names as LlamaForCausalLM"')
    (matrices / "architectures" / "fastserve.toml").write_text(text)
    model = st_model(tmp_path, "MyLlamaForCausalLM", "llama")
    code, out, _ = cli(capsys, "check", str(model), "--engine", "fastserve", "--gpu", "a100", "--json")
    [v] = verdicts(out)
    assert (code, v["status"]) == (1, "unknown")
    assert v["reasons"][0] == ("architecture: architecture MyLlamaForCausalLM is not listed by FastServe in any "
                               "release read (0.9.0 .. 0.33.0); FastServe loads unlisted names as LlamaForCausalLM")


def test_vllm_runs_transformers_only_architectures_through_its_transformers_backend(tmp_path, capsys,
                                                                                   shipped) -> None:
    from qcheck.matrix.architectures import load_architectures
    from qcheck.matrix.loader import load_matrix

    root = load_matrix().root
    vllm = {n for n, e in load_architectures(root, "vllm").lists[0].arch.items() if e.last is None}
    tf = next(lst for lst in load_architectures(root, "transformers").lists if lst.names == "hf-class")
    only_tf = sorted(n for n, e in tf.arch.items() if e.last is None and e.kind == "text" and n not in vllm)
    assert only_tf, "transformers has causal-LM classes vLLM does not register"
    name = only_tf[0]
    model = st_model(tmp_path, name, "x")
    code, out, _ = cli(capsys, "check", str(model), "--engine", "vllm", "--gpu", "h100", "--json")
    [v] = verdicts(out)
    arch_dim = dimension(v)
    assert (code, arch_dim["status"]) == (1, "unknown")
    assert arch_dim["reasons"][0].startswith(f"architecture {name} is not in vLLM's registry; from 0.8.5 it falls "
                                             "back to TransformersForCausalLM for transformers models")
    code, out, _ = cli(capsys, "check", str(model), "--engine", "vllm==0.8.0", "--gpu", "h100", "--json")
    arch_dim = dimension(verdicts(out)[0])
    assert arch_dim["status"] == "unsupported"


@pytest.mark.parametrize(("version", "arch_status", "overall"), [
    ("1.2.1", "native", "native"),  # listed since 0.19.0 (1.0.0 page), weight rules read at 1.2.1: FP8 block runs
    ("1.3.0rc13", "native", "native"),  # listed on the 1.3.0rc13 page
    ("1.0.0", "native", "unknown"),  # listed, but the weight rules start at 1.2.1: unknown from the weights only
])
def test_shipped_tensorrt_llm_lists_what_its_docs_list(tmp_path, capsys, shipped, version, arch_status,
                                                       overall) -> None:
    """TensorRT-LLM's architectures come from its versioned supported-models pages: a listed class is judged on
    its weights, and each judgement names the page of the release it was read at."""
    model = st_model(tmp_path, "LlamaForCausalLM", "llama", fixture=fp8_block_deepseek)
    code, out, _ = cli(capsys, "check", str(model), "--engine", f"tensorrt-llm=={version}", "--gpu", "h100", "--json")
    [v] = verdicts(out)
    arch_dim = dimension(v)
    weights = dimension(v, "weights")
    assert (arch_dim["status"], v["status"], code) == (arch_status, overall, 0 if overall == "native" else 1), out
    assert arch_dim["reasons"][0].startswith("TensorRT-LLM loads architecture LlamaForCausalLM since 0.19.0")
    assert "supported-models table of the PyTorch backend" in arch_dim["sources"][0]["ref"]
    assert weights["status"] == overall  # the verdict is the weight format's


@pytest.mark.parametrize("version", ["1.0.0", "1.3.0rc13"])
def test_shipped_tensorrt_llm_docs_never_refuse_a_class(tmp_path, capsys, shipped, version) -> None:
    """A class the docs do not list (the page is not exhaustive), or list only with a footnote (AutoDeploy only:
    Glm4MoeLiteForCausalLM at 1.3.0rc13), or no longer show (Qwen3ForCausalLM: the 1.3.0rc13 text read ends at
    Mixtral), is unknown with the reason, never unsupported."""
    for arch in ("TotallyNewForCausalLM", "Glm4MoeLiteForCausalLM", "Qwen3ForCausalLM"):
        model = st_model(tmp_path, arch, "llama", fixture=fp8_block_deepseek)
        code, out, _ = cli(capsys, "check", str(model), "--engine", f"tensorrt-llm=={version}", "--gpu", "h100",
                           "--json")
        [v] = verdicts(out)
        arch_dim = dimension(v)
        expected = "native" if (arch, version) == ("Qwen3ForCausalLM", "1.0.0") else "unknown"
        assert (arch_dim["status"], code == 1) == (expected, expected == "unknown" or v["status"] != "native"), out
        if expected == "unknown":
            assert v["status"] == "unknown"
            assert "neither confirmed nor refused" in arch_dim["reasons"][0], arch_dim


def test_matrix_arch_shows_tensorrt_llm(capsys, shipped) -> None:
    code, out, _ = cli(capsys, "matrix", "--arch", "LlamaForCausalLM")
    assert code == 0
    [line] = [x.strip() for x in out.splitlines() if x.strip().startswith("tensorrt-llm")]
    assert "docs-pytorch  loads LlamaForCausalLM since 0.19.0 (read 0.19.0 .. 1.3.0rc13)" in line
