"""matrices/tools/extract_vllm.py (with codefacts.py, gates.py, releases.py) on small fixture source trees: two fake
vLLM releases, written here in the layout releases.py leaves behind, are read with ``ast``; the facts and the gates
derived from them must say what the fixture code says, load and resolve through qcheck's own matrix, and
``--check`` must pass offline and against the releases, and fail when either side was edited."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from qcheck.matrix.loader import clear_cache, load_matrix
from qcheck.matrix.resolve import parse_engine_spec, resolve_one
from qcheck.model import Inspection, Quantization

TOOLS = Path(__file__).resolve().parent.parent / "matrices" / "tools"
TEST_GPUS = Path(__file__).parent / "data" / "matrices" / "gpus.toml"
Q = "vllm/model_executor/layers/quantization"


def _load(name: str):
    sys.path.insert(0, str(TOOLS))
    try:
        spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(TOOLS))


@pytest.fixture()
def tool(monkeypatch: pytest.MonkeyPatch):
    module = _load("extract_vllm")
    monkeypatch.setattr(module.EXTRACTOR, "versions", ("1.0.0", "2.0.0"))
    yield module
    for name in ("extract_vllm", "codefacts", "gates", "releases"):
        sys.modules.pop(name, None)


def release(root: Path, version: str, fp8_min: int, w4a16_min: int, rocm: list[str], registered: list[str]) -> Path:
    """One fake vLLM release: what ``releases.py`` writes (the Python sources and RELEASE.json)."""
    tree = root / f"vllm-{version}"
    files = {
        f"{Q}/__init__.py": f"""
            from typing import Literal, get_args
            QuantizationMethods = Literal[{", ".join(repr(n) for n in registered)}]
            QUANTIZATION_METHODS: list[str] = list(get_args(QuantizationMethods))

            def get_quantization_config(quantization: str):
                from .fp8 import Fp8Config
                from .compressed_tensors.compressed_tensors import CompressedTensorsConfig
                method_to_config: dict[str, type] = {{
                    "fp8": Fp8Config, "compressed-tensors": CompressedTensorsConfig,
                }}
                return method_to_config[quantization]
            """,
        f"{Q}/fp8.py": f"""
            class Fp8Config:
                @classmethod
                def get_min_capability(cls) -> int:
                    return {fp8_min}
            """,
        f"{Q}/compressed_tensors/compressed_tensors.py": """
            class CompressedTensorsConfig:
                @classmethod
                def get_min_capability(cls) -> int:
                    return 70

                def _get_scheme_from_parts(self, weight_quant, input_quant, format=None):
                    if self._is_nvfp4_format(weight_quant) and input_quant is None:
                        return CompressedTensorsW4A16Fp4()
                    if self._is_nvfp4_format(weight_quant) and self._is_nvfp4_format(input_quant):
                        if cutlass_fp4_supported():
                            return CompressedTensorsW4A4Fp4()
                        else:
                            return CompressedTensorsW4A16Fp4(has_input_global_scale=True)
                    if self._is_fp8_w8a8(weight_quant, input_quant):
                        ok = self._check_scheme_supported(CompressedTensorsW8A8Fp8.get_min_capability(), error=False)
                        if ok:
                            return CompressedTensorsW8A8Fp8(weight_quant=weight_quant)
                        else:
                            return CompressedTensorsW8A16Fp8(strategy=weight_quant.strategy)
                    raise NotImplementedError("No compressed-tensors compatible scheme was found.")
            """,
        f"{Q}/compressed_tensors/schemes/w4a16.py": f"""
            class CompressedTensorsW4A16Fp4:
                @classmethod
                def get_min_capability(cls) -> int:
                    return {w4a16_min}
            class CompressedTensorsW4A4Fp4:
                @classmethod
                def get_min_capability(cls) -> int:
                    return 100
            class CompressedTensorsW8A8Fp8:
                @classmethod
                def get_min_capability(cls) -> int:
                    return 89
            class CompressedTensorsW8A16Fp8:
                @classmethod
                def get_min_capability(cls) -> int:
                    return {w4a16_min}
            """,
        f"{Q}/kernels/mixed_precision/__init__.py": """
            from .marlin import MarlinLinearKernel
            _POSSIBLE_KERNELS: dict[PlatformEnum, list[type]] = {
                PlatformEnum.CUDA: [MarlinLinearKernel],
                PlatformEnum.XPU: [XPUwNa16LinearKernel],
            }
            """,
        f"{Q}/kernels/mixed_precision/marlin.py": """
            _XPU_TYPES = [scalar_types.uint4, scalar_types.uint4b8]
            class MarlinLinearKernel:
                @classmethod
                def get_min_capability(cls) -> int:
                    return 80
                @classmethod
                def can_implement(cls, c):
                    if c.weight_type not in _XPU_TYPES:
                        return False, f"Quant type ({c.weight_type}) not supported"
                    return True, None
            """,
        "vllm/platforms/rocm.py": f"""
            class RocmPlatform:
                supported_quantization: list[str] = {rocm!r}
            """,
        "vllm/platforms/cuda.py": """
            def _get_backend_priorities(use_mla, device_capability):
                if use_mla:
                    return [AttentionBackendEnum.TRITON_MLA]
                if device_capability.major == 10:
                    return [AttentionBackendEnum.FLASHINFER, AttentionBackendEnum.FLASH_ATTN]
                return [AttentionBackendEnum.FLASH_ATTN, AttentionBackendEnum.FLASHINFER]
            """,
    }
    for path, text in files.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(textwrap.dedent(text))
    digest = hashlib.sha256(version.encode()).hexdigest()
    (tree / "RELEASE.json").write_text(json.dumps({"package": "vllm", "version": version, "file":
                                                   f"vllm-{version}-py3-none-any.whl", "size": 1, "sha256": digest}))
    return tree


@pytest.fixture()
def releases(tmp_path: Path) -> Path:
    root = tmp_path / "releases"
    release(root, "1.0.0", fp8_min=80, w4a16_min=80, rocm=["fp8"], registered=["fp8", "compressed-tensors"])
    release(root, "2.0.0", fp8_min=75, w4a16_min=75, rocm=["fp8", "compressed-tensors"],
            registered=["fp8", "compressed-tensors", "mxfp4"])
    return root


def run(tool, *args: str) -> int:
    return tool.main(tool.EXTRACTOR, list(args))


def test_the_facts_are_what_the_fixture_code_says(tool, releases: Path, tmp_path: Path) -> None:
    out = tmp_path / "generated"
    assert run(tool, "--releases", str(releases), "--out", str(out)) == 0
    facts = {(f["kind"], f["key"]): f["history"]
             for f in __import__("tomllib").loads((out / "vllm.facts.toml").read_text())["fact"]}
    assert [(s["value"], s["from"], s["to"]) for s in facts[("min_capability", "Fp8Config")]] == \
        [(80, "1.0.0", "1.0.0"), (75, "2.0.0", "2.0.0")]
    assert facts[("registry", "QUANTIZATION_METHODS")][-1]["value"] == ["fp8", "compressed-tensors", "mxfp4"]
    assert facts[("method_config", "fp8")][0]["value"] == "Fp8Config"
    scheme = facts[("decisions", "ct_scheme")][0]["value"]
    # the flag the W8A8 branch tests is shown as the capability check it was assigned from
    assert ("self._is_fp8_w8a8(weight_quant, input_quant); not (self._check_scheme_supported("
            "CompressedTensorsW8A8Fp8.get_min_capability(), error=False)) -> CompressedTensorsW8A16Fp8") in scheme
    assert facts[("kernels", "mixed_precision/_POSSIBLE_KERNELS[CUDA]")][0]["value"] == ["MarlinLinearKernel"]
    assert facts[("kernel_bounds", "MarlinLinearKernel.can_implement")][0]["value"][0] == \
        "c.weight_type not in _XPU_TYPES -> (False, f'Quant type ({c.weight_type}) not supported')"
    assert facts[("constant", "marlin._XPU_TYPES")][0]["value"] == "[scalar_types.uint4, scalar_types.uint4b8]"
    assert facts[("decisions", "cuda_attention_priorities")][0]["value"][1] == \
        ("device_capability.major == 10 -> "
         "[AttentionBackendEnum.FLASHINFER, AttentionBackendEnum.FLASH_ATTN]")
    head = __import__("tomllib").loads((out / "vllm.facts.toml").read_text())["facts"]
    assert head["read"]["2.0.0"]["sha256"] == hashlib.sha256(b"2.0.0").hexdigest()


def test_the_gates_derived_load_and_decide_through_the_matrix(tool, releases: Path, tmp_path: Path) -> None:
    root = tmp_path / "m"
    (root / "engines").mkdir(parents=True)
    shutil.copy(TEST_GPUS, root / "gpus.toml")
    (root / "engines" / "vllm.toml").write_text(textwrap.dedent("""
        [engine]
        id = "vllm"
        name = "vLLM"
        kind = "engine"
        versions = ["1.0.0", "2.0.0"]
        hardware = ["nvidia", "amd"]
        hardware_sources = ["code"]
        rules_verified = true

        [sources]
        code = { ref = "example: quant.py:1", version = "2.0.0" }
        """))
    assert run(tool, "--releases", str(releases), "--out", str(root / "generated")) == 0
    clear_cache()
    try:
        m = load_matrix(root)
        m.validate()

        def ask(engine: str, gpu: str, method: str, **quant: object):
            inspection = Inspection(path="m", container="safetensors", dtype="bfloat16",
                                    quantization=Quantization(method=method, **quant))  # type: ignore[arg-type]
            return resolve_one(m, inspection, parse_engine_spec(engine, m), m.gpus.lookup(gpu))

        fp8 = {"config_method": "fp8"}
        assert ask("vllm==1.0.0", "t4", "fp8", **fp8).reasons[0].startswith(
            "The quantization method fp8 is not supported for the current GPU. Minimum capability: 80. Current "
            "capability: sm75")
        assert ask("vllm==2.0.0", "t4", "fp8", **fp8).status == "unknown"  # 75: no gate on sm75 any more
        assert ask("vllm==2.0.0", "v100", "fp8", **fp8).status == "unsupported"
        # CT NVFP4 W4A4 without FP4 tensor cores becomes W4A16, whose minimum moved from 80 to 75
        ct = {"producer": "compressed-tensors", "config_method": "compressed-tensors", "activation_dtype": "fp4_e2m1"}
        v = ask("vllm==1.0.0", "t4", "nvfp4", **ct)
        assert (v.status, v.rule_id) == ("unsupported", "gen-ct-w4a4-nvfp4-1.0.0")
        assert "picks CompressedTensorsW4A16Fp4 here, whose minimum capability is 80" in v.reasons[0]
        assert ask("vllm==2.0.0", "t4", "nvfp4", **ct).status == "unknown"
        # a platform list without the method refuses it there, at the release that lacks it only
        v = ask("vllm==1.0.0", "mi300x", "fp8", producer="compressed-tensors", config_method="compressed-tensors")
        assert v.reasons[0].startswith("compressed-tensors quantization is currently not supported in rocm.")
        assert ask("vllm==2.0.0", "mi300x", "fp8", config_method="compressed-tensors").status == "unknown"
        # a method registered at 2.0.0 only is refused at 1.0.0
        assert ask("vllm==1.0.0", "h100", "mxfp4", config_method="mxfp4").reasons[0].startswith(
            "Unknown quantization method: mxfp4.")
    finally:
        clear_cache()


def test_check_offline_and_against_the_releases(tool, releases: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "generated"
    assert run(tool, "--releases", str(releases), "--out", str(out)) == 0
    facts, rules = out / "vllm.facts.toml", out / "vllm.toml"
    before = (facts.read_bytes(), rules.read_bytes())
    assert run(tool, "--check", "--out", str(out)) == 0
    assert run(tool, "--check", "--out", str(out), "--releases", str(releases)) == 0
    # re-running the extractor on the same releases reproduces both files byte for byte
    assert run(tool, "--releases", str(releases), "--out", str(out)) == 0
    assert (facts.read_bytes(), rules.read_bytes()) == before
    # a hand edit of the rules is caught offline
    rules.write_text(rules.read_text().replace("Minimum capability: 80", "Minimum capability: 70"))
    assert run(tool, "--check", "--out", str(out)) == 1
    assert "vllm.toml is not what vllm.facts.toml derives" in capsys.readouterr().out
    rules.write_bytes(before[1])
    # a release whose code changed no longer matches the facts recorded for it
    fp8 = releases / "vllm-2.0.0" / Q / "fp8.py"
    fp8.write_text(fp8.read_text().replace("return 75", "return 70"))
    assert run(tool, "--check", "--out", str(out), "--releases", str(releases)) == 1
    assert "2.0.0: the fetched wheel or the files read differ from the recorded hashes" in capsys.readouterr().out


def test_changes_lists_what_moved_between_releases(tool, releases: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "generated"
    assert run(tool, "--releases", str(releases), "--out", str(out)) == 0
    capsys.readouterr()
    assert run(tool, "--out", str(out), "--changes", "min_capability", "registry") == 0
    text = capsys.readouterr().out
    assert "== 1.0.0 -> 2.0.0" in text
    assert "  min_capability Fp8Config: 80 -> 75" in text
    assert "  registry QUANTIZATION_METHODS: -[] +['mxfp4']" in text


def test_releases_keeps_the_python_sources_and_the_wheel_hash(tmp_path: Path, monkeypatch) -> None:
    tool = _load("releases")
    wheel_bytes: list[bytes] = []

    def fake_pip(cmd: list[str], **_kw: object) -> None:
        dest = Path(cmd[cmd.index("-d") + 1])
        with zipfile.ZipFile(dest / "vllm-9.9.9-py3-none-any.whl", "w") as z:
            z.writestr("vllm/platforms/cuda.py", "X = 1\n")
            z.writestr("vllm/_C.abi3.so", b"\0" * 10)
            z.writestr("../escape.py", "no")
        wheel_bytes.append((dest / "vllm-9.9.9-py3-none-any.whl").read_bytes())

    monkeypatch.setattr(tool.subprocess, "run", fake_pip)
    tree = tool.fetch("vllm", "9.9.9", tmp_path)
    assert (tree / "vllm" / "platforms" / "cuda.py").read_text() == "X = 1\n"
    assert not (tree / "vllm" / "_C.abi3.so").exists() and not (tmp_path / "escape.py").exists()
    info = tool.manifest(tree)
    assert info["sha256"] == hashlib.sha256(wheel_bytes[0]).hexdigest()
    assert not list(tmp_path.glob("*.whl")) and not list(tmp_path.rglob("*.whl"))
    assert tool.fetch("vllm", "9.9.9", tmp_path) == tree and len(wheel_bytes) == 1  # fetched once
