"""The generic matcher on the test matrix (tests/data/matrices): specificity, versions, backends, GGUF
types, modifiers, providers, suggestions and data errors found only at resolution time."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from qcheck.errors import UsageError
from qcheck.matrix import resolve
from qcheck.matrix.loader import clear_cache, load_matrix
from qcheck.matrix.resolve import EngineRequest, parse_engine_spec, resolve_one, select_version
from qcheck.matrix.schema import MatrixDataError
from qcheck.model import Inspection, Quantization
from qcheck.pipeline import judge
from qcheck.request import CheckRequest
from support.matrix_sweep import rule_ties

TEST_MATRIX = Path(__file__).parent / "data" / "matrices"


@pytest.fixture(scope="module")
def m():
    return load_matrix(TEST_MATRIX)


def st(method: str, **quant) -> Inspection:
    return Inspection(path="model", container="safetensors", dtype="bfloat16",
                      quantization=Quantization(method=method, **quant))


def gguf(types: dict[str, int], split: int = 1, path: str = "model-Q4_K_M.gguf") -> Inspection:
    return Inspection(path=path, container="gguf", gguf_split_count=split,
                      quantization=Quantization(method="gguf", gguf_file_type="Q4_K_M", tensor_types=types))


def one(m, inspection: Inspection, engine: str, gpu: str | None):
    request = parse_engine_spec(engine, m)
    return resolve_one(m, inspection, request, m.gpus.lookup(gpu) if gpu else None)


def test_most_specific_rule_wins(m) -> None:
    # plain-fp16 (1 condition) vs plain-bf16-pre-ampere (3 conditions) on a V100
    v = one(m, st("none"), "fastserve", "v100")
    assert (v.status, v.rule_id, v.requires) == ("native", "plain-bf16-pre-ampere", ["--dtype half"])
    assert v.reasons == ["Bfloat16 is only supported on GPUs with compute capability of at least 8.0 (v100 is sm70)"]
    fp16 = Inspection(path="m", container="safetensors", dtype="float16", quantization=Quantization())
    v = one(m, fp16, "fastserve", "v100")
    assert (v.status, v.rule_id, v.requires) == ("native", "plain-fp16", [])


@pytest.mark.parametrize(
    ("gpu", "granularity", "status", "rule"),
    [
        ("v100", "per-tensor", "unsupported", "fp8-too-old"),
        ("t4", "per-tensor", "fallback", "fp8-marlin"),
        ("a100", "per-tensor", "fallback", "fp8-marlin"),
        ("l4", "per-tensor", "native", "fp8-native"),
        ("l4", "block", "fallback", "fp8-block-ada"),
        ("h100", "block", "native", "fp8-native"),
        ("b200", "block", "native", "fp8-native"),
        ("mi300x", "per-tensor", "unknown", "fp8-amd"),
    ],
)
def test_fp8_cells(m, gpu: str, granularity: str, status: str, rule: str) -> None:
    v = one(m, st("fp8", scale_granularity=granularity), "fastserve", gpu)
    assert (v.status, v.rule_id) == (status, rule)
    assert v.sources and v.sources[0].ref == "example/fastserve: quantization/fp8.py"
    assert v.sources[0].version == "0.33.0"


def test_verdict_fields(m) -> None:
    v = one(m, st("fp8"), "fastserve", "rtx-3090")
    assert v.engine == "fastserve" and v.engine_version == "0.33.0"
    assert (v.gpu, v.arch, v.compute_capability) == ("rtx-3090", "ampere", "8.6")
    assert v.kernel == "Marlin FP8 W8A16 (weight-only)"
    assert set(v.to_json()) >= {"engine", "engine_version", "gpu", "arch", "compute_capability", "status", "kernel",
                                "requires", "reasons", "suggestions", "sources", "warnings", "rule_id", "memory"}


def test_unknown_method_has_reason(m) -> None:
    v = one(m, st("exl3"), "fastserve", "h100")
    assert v.status == "unknown" and v.rule_id is None
    assert v.reasons == ["no sourced rule for FastServe 0.33.0 x exl3 on hopper"]


def test_vendor_gate(m) -> None:
    v = one(m, st("fp8"), "fastserve", "m3-max")
    assert v.status == "unsupported" and v.rule_id == "engine-hardware"
    assert v.reasons == ["FastServe does not run on apple hardware (it runs on: nvidia, amd)"]
    assert v.sources[0].ref == "example/fastserve: platforms/__init__.py"


class TestVersions:
    def test_default_is_newest(self, m) -> None:
        assert select_version(m.engines["fastserve"], None)[0] == "0.33.0"

    def test_newer_than_known_uses_newest_rules_and_warns(self, m) -> None:
        v = one(m, gguf({"Q4_K": 1, "F32": 1}), "fastserve==0.40.1", "h100")
        assert v.engine_version == "0.40.1"
        assert v.rule_id == "gguf-plugin"
        assert v.warnings == ["rules verified up to FastServe 0.33.0; 0.40.1 is newer, unverified"]

    def test_between_known_versions_uses_covering_rules(self, m) -> None:
        assert one(m, gguf({"Q4_K": 1}), "fastserve==0.23.9", "h100").rule_id == "gguf-in-tree"
        assert one(m, gguf({"Q4_K": 1}), "fastserve==0.24.0", "h100").rule_id == "gguf-plugin"
        rc = one(m, gguf({"Q4_K": 1}), "fastserve==0.24.0rc1", "h100")
        assert (rc.rule_id, rc.engine_version) == ("gguf-plugin", "0.24.0rc1")
        assert rc.warnings == ["FastServe 0.24.0rc1 is judged by the rules for 0.24.0"]
        post = one(m, gguf({"Q4_K": 1}), "fastserve==0.23.1.post1", "h100")
        assert (post.rule_id, post.warnings) == ("gguf-in-tree", [])
        local = one(m, gguf({"Q4_K": 1}), "fastserve==0.24.0+cu128", "h100")
        assert (local.rule_id, local.warnings) == ("gguf-plugin", [])

    def test_older_than_the_data_is_unknown(self, m) -> None:
        v = one(m, gguf({"Q4_K": 1}), "fastserve==0.5.0", "h100")
        assert (v.status, v.rule_id, v.warnings) == ("unknown", "engine-version", [])
        assert v.reasons == ["FastServe 0.5.0 predates all the data: qcheck's FastServe facts were read at 0.9.0 and "
                             "later (the newest: 0.33.0), so nothing says what 0.5.0 runs"]
        assert one(m, gguf({"Q4_K": 1}), "fastserve==0.9.0", "h100").rule_id == "gguf-in-tree"
        assert one(m, gguf({"Q4_K": 1}), "fastserve==0.9.0rc1", "h100").rule_id == "gguf-in-tree"
        assert one(m, gguf({"Q4_K": 1}), "fastserve==0.8.9", "h100").status == "unknown"

    def test_build_numbers(self, m) -> None:
        nvfp4 = gguf({"NVFP4": 3, "F32": 2})
        old = one(m, nvfp4, "tinycpp==b5000", "h100")
        assert (old.status, old.reasons) == ("unsupported", ["NVFP4 arrived after this build"])
        new = one(m, nvfp4, "tinycpp==10488", "h100")  # the b is optional
        assert (new.status, new.engine_version) == ("native", "10488")
        assert one(m, nvfp4, "tinycpp==b20000", "h100").warnings[0].startswith("rules verified up to tiny.cpp b10488")


class TestEngineSpec:
    def test_aliases_and_case(self, m) -> None:
        assert parse_engine_spec("FS", m).engine.id == "fastserve"
        assert parse_engine_spec("Tiny_CPP:Vulkan==b5000", m) == EngineRequest(m.engines["tinycpp"], "b5000", "vulkan")

    @pytest.mark.parametrize(
        ("spec", "fragment"),
        [("fastsrve", "did you mean: fastserve"), ("fastserve==", "missing version"),
         ("fastserve=0.3", "write name==version"), ("fastserve==banana", "not a PEP 440 version"),
         ("tinycpp==0.3.1", "not a build number"), ("tinycpp:cuda12", "no backend 'cuda12'"),
         ("fastserve:cuda", "has no selectable backends")],
    )
    def test_usage_errors(self, m, spec: str, fragment: str) -> None:
        with pytest.raises(UsageError) as info:
            parse_engine_spec(spec, m)
        assert fragment in str(info.value)


class TestBackends:
    def test_backend_follows_vendor(self, m) -> None:
        insp = gguf({"Q4_K": 2, "F32": 1})
        assert [(g, one(m, insp, "tinycpp", g).backend) for g in ("h100", "mi300x", "m3-max", "cpu")] == [
            ("h100", "cuda"), ("mi300x", "rocm"), ("m3-max", "metal"), ("cpu", "cpu")]
        assert one(m, insp, "tinycpp", "h100").kernel == "cuda MMQ"

    def test_explicit_backend(self, m) -> None:
        v = one(m, gguf({"Q4_K": 2}), "tinycpp:vulkan", "rtx-4090")
        assert (v.status, v.backend, v.kernel) == ("native", "vulkan", "vulkan MMQ")

    def test_explicit_backend_on_wrong_vendor(self, m) -> None:
        v = one(m, gguf({"Q4_K": 2}), "tinycpp:vulkan", "m3-max")
        assert v.status == "unsupported" and v.rule_id == "engine-backend"
        assert v.reasons == ["the vulkan backend of tiny.cpp does not run on apple hardware (it runs on: nvidia, amd)"]

    def test_backend_rule_names_the_types(self, m) -> None:
        v = one(m, gguf({"NVFP4": 3, "TQ1_0": 1, "Q4_K": 2, "F32": 4}), "tinycpp", "m3-max")
        assert (v.status, v.kernel) == ("fallback", "CPU backend for NVFP4, TQ1_0")
        assert v.reasons == ["Metal has no kernel for NVFP4, TQ1_0; those matmuls run on the CPU"]
        assert one(m, gguf({"NVFP4": 3}), "tinycpp", "h100").status == "native"


class TestGguf:
    def test_every_tensor_type_is_judged(self, m) -> None:
        v = one(m, gguf({"Q4_K": 100, "Q6_K": 20, "F32": 50, "IQ2_XXS": 3, "TQ2_0": 1}), "fastserve", "h100")
        assert v.status == "unsupported"
        assert v.reasons == ["Unsupported GGUF quantization type: IQ2_XXS, TQ2_0"]

    def test_plugin_boundary(self, m) -> None:
        insp = gguf({"Q4_K": 100, "Q6_K": 20, "F32": 50})
        old = one(m, insp, "fastserve==0.20.0", "h100")
        new = one(m, insp, "fastserve==0.24.0", "h100")
        assert (old.status, old.requires, old.kernel) == ("native", [], "GGUF MMQ kernels (in-tree)")
        assert (new.status, new.requires) == ("native", ["pip install fastserve-gguf-plugin"])

    def test_split_modifier_adds_to_the_deciding_rule(self, m) -> None:
        insp = gguf({"Q4_K": 100, "F32": 50}, split=3, path="m-00001-of-00003.gguf")
        v = one(m, insp, "fastserve", "h100")
        assert v.status == "native" and v.rule_id == "gguf-plugin+gguf-split"
        assert v.requires == ["pip install fastserve-gguf-plugin",
                              "merge shards: llama-gguf-split --merge m-00001-of-00003.gguf merged.gguf"]
        assert [s.ref for s in v.sources] == ["https://example.org/fastserve-gguf-plugin",
                                              "example/fastserve: quantization/gguf.py"]

    def test_modifier_does_not_apply_to_unsupported(self, m) -> None:
        v = one(m, gguf({"IQ1_S": 1}, split=2), "fastserve", "h100")
        assert v.status == "unsupported" and v.rule_id == "gguf-bad-types" and v.requires == []

    def test_gguf_conditions_never_hold_for_safetensors(self, m) -> None:
        insp = Inspection(path="m", container="safetensors",
                          quantization=Quantization(method="gguf", tensor_types={"Q4_K": 1}))
        assert one(m, insp, "fastserve", "h100").status == "unknown"


class TestProviders:
    def test_provider_takes_no_gpu(self, m) -> None:
        verdicts = resolve(m, st("fp8"), [parse_engine_spec("cloudco", m)],
                           [m.gpus.lookup("h100"), m.gpus.lookup("a100")])
        assert len(verdicts) == 1
        v = verdicts[0]
        assert (v.gpu, v.arch, v.compute_capability, v.status) == (None, None, None, "unsupported")
        assert "quantization_config" in v.reasons[0]

    def test_gpu_engine_without_gpu_is_a_usage_error(self, m) -> None:
        with pytest.raises(UsageError, match="give --gpu"):
            resolve_one(m, st("fp8"), parse_engine_spec("fastserve", m), None)


class TestSuggestions:
    def test_the_engines_own_fix_then_other_arch(self, m) -> None:
        """What the user can do with the engine and GPU they asked about comes first (issue 33)."""
        [v] = resolve(m, st("fp8"), [parse_engine_spec("fastserve", m)], [m.gpus.lookup("t4")])
        assert v.suggestions == [
            "FP8 only gets tensor cores from sm89; for t4 use a W4A16 (AWQ/GPTQ) release",
            "FastServe runs it natively on ada (e.g. l4): --gpu ada",
        ]

    def test_other_engine_on_same_gpu_after_the_engines_own_fix(self, m) -> None:
        [v] = resolve(m, gguf({"Q4_K": 1, "IQ2_XXS": 1}), [parse_engine_spec("fastserve", m)], [m.gpus.lookup("h100")])
        assert v.suggestions[:2] == [
            "requantize without IQ2_XXS: llama-quantize --allow-requantize model-Q4_K_M.gguf out.gguf Q4_K_M",
            "tiny.cpp b10488 runs it natively on h100 (cuda MMQ): --engine tinycpp"]

    def test_newer_version_first(self, m) -> None:
        [v] = resolve(m, gguf({"NVFP4": 1}), [parse_engine_spec("tinycpp==b5000", m)], [m.gpus.lookup("h100")])
        assert v.suggestions[0] == "tiny.cpp b10488 runs it natively (cuda MMQ): --engine tinycpp==b10488"

    def test_fallback_engine_offered_when_nothing_is_native(self, m) -> None:
        [v] = resolve(m, st("fp8", scale_granularity="block"), [parse_engine_spec("tinycpp", m)],
                      [m.gpus.lookup("l4")])
        assert v.status == "unsupported"
        assert v.suggestions[0] == ("FastServe 0.33.0 runs it on l4 through a fallback (Marlin FP8 W8A16 "
                                    "(weight-only)): --engine fastserve")

    def test_native_has_no_suggestions_and_cap_is_four(self, m) -> None:
        [v] = resolve(m, st("fp8"), [parse_engine_spec("fastserve", m)], [m.gpus.lookup("h100")])
        assert v.status == "native" and v.suggestions == []
        verdicts = resolve(m, st("fp8"), [parse_engine_spec(e, m) for e in ("fastserve", "tinycpp", "cloudco")],
                           [m.gpus.lookup(g) for g in ("v100", "t4", "m3-max", "cpu")])
        assert all(len(v.suggestions) <= 4 for v in verdicts)
        by_key = {(v.engine, v.gpu): v for v in verdicts}
        # nothing runs FP8 on Apple in this matrix: no invented suggestion
        assert by_key[("tinycpp", "m3-max")].suggestions == []
        assert by_key[("tinycpp", "t4")].suggestions == [
            "FastServe 0.33.0 runs it on t4 through a fallback (Marlin FP8 W8A16 (weight-only)): --engine fastserve"]


def test_ambiguous_rules_are_a_data_error_naming_both(tmp_path: Path) -> None:
    root = tmp_path / "matrices"
    shutil.copytree(TEST_MATRIX, root)
    path = root / "engines" / "fastserve.toml"
    path.write_text(path.read_text() + """
[[rule]]
id = "fp8-hopper-other"
methods = ["fp8"]
hardware = { vendor = "nvidia", has = ["fp8"] }
status = "fallback"
kernel = "Triton"
reasons = ["x"]
sources = ["fp8_py"]
""")
    clear_cache()
    try:
        mm = load_matrix(root)  # loads fine: the clash only shows when both rules match
        with pytest.raises(MatrixDataError) as info:
            resolve_one(mm, st("fp8"), parse_engine_spec("fastserve", mm), mm.gpus.lookup("h100"))
        # the sweeps of the shipped data (support.matrix_sweep) find the same clash without building verdicts
        ties, _ = rule_ties(mm, {"fp8": [st("fp8")]}, [mm.gpus.lookup("h100"), mm.gpus.lookup("t4")])
        assert ties == {str(info.value)}
    finally:
        clear_cache()
    message = str(info.value)
    assert info.value.check == "ambiguous-rules"
    assert "matrices/engines/fastserve.toml" in message
    assert "'fp8-native'" in message and "'fp8-hopper-other'" in message


def test_priority_breaks_ties(tmp_path: Path) -> None:
    root = tmp_path / "matrices"
    shutil.copytree(TEST_MATRIX, root)
    path = root / "engines" / "fastserve.toml"
    path.write_text(path.read_text() + """
[[rule]]
id = "fp8-hopper-other"
methods = ["fp8"]
hardware = { vendor = "nvidia", has = ["fp8"] }
status = "fallback"
kernel = "Triton"
reasons = ["x"]
sources = ["fp8_py"]
priority = 5
""")
    clear_cache()
    try:
        mm = load_matrix(root)
        v = resolve_one(mm, st("fp8"), parse_engine_spec("fastserve", mm), mm.gpus.lookup("h100"))
    finally:
        clear_cache()
    assert (v.status, v.rule_id) == ("fallback", "fp8-hopper-other")


def test_judge_cross_product_and_dedup(m) -> None:
    result = judge(st("fp8"), CheckRequest("x", ("fastserve", "fs", "cloudco"), ("h100", "H100", "t4")), m)
    assert [(v.engine, v.gpu) for v in result.verdicts] == [("fastserve", "h100"), ("fastserve", "t4"),
                                                            ("cloudco", None)]


def test_data_suggestion_versions_and_placeholders(m) -> None:
    insp = gguf({"Q4_K": 1, "IQ1_M": 1}, path="x.gguf")
    [new] = resolve(m, insp, [parse_engine_spec("fastserve", m)], [m.gpus.lookup("h100")])
    [old] = resolve(m, insp, [parse_engine_spec("fastserve==0.20.0", m)], [m.gpus.lookup("h100")])
    hint = "requantize without IQ1_M: llama-quantize --allow-requantize x.gguf out.gguf Q4_K_M"
    assert hint in new.suggestions
    assert hint not in old.suggestions and old.status == "unsupported"
