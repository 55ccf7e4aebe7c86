"""Data-level tests of the shipped matrix (matrices/): the GPU catalogue, per-engine coverage of every
canonical method, sources with versions, version boundaries and the fine-grained cells the research
calls out (docs/research/matrix.md). The resolver is the real one; inspections are built as the classifier
would report them.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from qcheck.matrix.loader import load_matrix
from qcheck.matrix.resolve import EngineRequest, resolve_one
from qcheck.matrix.schema import METHODS, Target
from qcheck.model import Inspection, Quantization, Verdict
from support.matrix_sweep import (
    arch_list_disagreements,
    build_overlaps,
    gpu_name_ties,
    kv_rule_ties,
    rule_ties,
    transformers_name_pairs,
)

DATA = Path(__file__).resolve().parent.parent / "matrices"

ENGINES = {
    "vllm", "sglang", "tensorrt-llm", "llama.cpp", "ollama", "lm-studio", "mlx", "exllamav2", "exllamav3",
    "transformers", "audio.cpp", "colibri", "deepinfer", "together", "fireworks", "groq", "cerebras",
}
PROVIDERS = {"together", "fireworks", "groq", "cerebras"}


@pytest.fixture(scope="module")
def m():
    return load_matrix()


def insp(method: str, *, container: str = "safetensors", dtype: str | None = "bfloat16", moe: bool = False,
         split: int | None = None, model_type: str | None = None, **quant: object) -> Inspection:
    q = Quantization(method=method, **quant)  # type: ignore[arg-type]
    return Inspection(path="model", container=container, quantization=q, dtype=dtype, moe=moe,  # type: ignore[arg-type]
                      gguf_split_count=split, model_type=model_type)


def gguf(*types: str, split: int | None = None) -> Inspection:
    return insp("gguf", container="gguf", dtype=None, split=split, tensor_types={t: 1 for t in types},
                gguf_file_type="Q4_K_M")


def verdict(m, inspection: Inspection, engine: str, gpu: str | None = None, version: str | None = None,
            backend: str | None = None) -> Verdict:
    target = m.gpus.lookup(gpu) if gpu else None
    return resolve_one(m, inspection, EngineRequest(m.engine(engine), version, backend), target)


def status(m, inspection: Inspection, engine: str, gpu: str | None = None, version: str | None = None,
           backend: str | None = None) -> str:
    return verdict(m, inspection, engine, gpu, version, backend).status


def text(v: Verdict) -> str:
    return " ".join([v.kernel or "", *v.requires, *v.reasons, *v.warnings]).lower()


def one_target_per_cc(m) -> list[Target]:
    """One target per (architecture, compute capability): the cheapest full sweep of the hardware axis."""
    out: dict[tuple[str, str | None], Target] = {}
    for gpu_id in sorted(m.gpus.gpu_ids()):
        t = m.gpus.lookup(gpu_id)
        out.setdefault((t.arch.id, t.cc), t)
    return list(out.values())


# --------------------------------------------------------------------------------------------- GPUs

REQUIRED_GPUS = [
    # (name as a user types it, arch, compute capability)
    ("V100", "volta", "7.0"), ("T4", "turing", "7.5"), ("RTX 2080", "turing", "7.5"),
    ("RTX 2080 Ti", "turing", "7.5"), ("RTX 3060", "ampere", "8.6"), ("RTX 3070", "ampere", "8.6"),
    ("RTX 3080", "ampere", "8.6"), ("RTX 3090", "ampere", "8.6"), ("RTX 4060", "ada", "8.9"),
    ("RTX 4070", "ada", "8.9"), ("RTX 4080", "ada", "8.9"), ("RTX 4090", "ada", "8.9"),
    ("RTX 5070", "blackwell-consumer", "12.0"), ("RTX 5080", "blackwell-consumer", "12.0"),
    ("RTX 5090", "blackwell-consumer", "12.0"), ("A10", "ampere", "8.6"), ("A40", "ampere", "8.6"),
    ("A100", "ampere", "8.0"), ("A100 40GB", "ampere", "8.0"), ("L4", "ada", "8.9"), ("L40S", "ada", "8.9"),
    ("H100", "hopper", "9.0"), ("H200", "hopper", "9.0"), ("GH200", "hopper", "9.0"),
    ("B200", "blackwell", "10.0"), ("B300", "blackwell", "10.3"), ("GB200", "blackwell", "10.0"),
    ("RTX PRO 6000 Blackwell", "blackwell-consumer", "12.0"), ("GB10", "blackwell-consumer", "12.1"),
    ("DGX Spark", "blackwell-consumer", "12.1"), ("Jetson AGX Orin", "ampere", "8.7"),
    ("MI210", "cdna2", None), ("MI250", "cdna2", None), ("MI250X", "cdna2", None), ("MI300X", "cdna3", None),
    ("MI325X", "cdna3", None), ("MI350X", "cdna4", None), ("MI355X", "cdna4", None),
    ("RX 7900 XTX", "rdna3", None), ("RX 9070 XT", "rdna4", None), ("Arc A770", "xe-hpg", None),
    ("Arc B580", "battlemage", None), ("Data Center GPU Max 1550", "xe-hpc", None), ("Gaudi 2", "gaudi", None),
    ("Gaudi 3", "gaudi", None), ("cpu", "x86", None), ("cpu-x86", "x86", None), ("cpu-arm", "arm", None),
]
APPLE = [f"M{n}{tier}" for n in range(1, 5) for tier in ("", " Pro", " Max")] + ["M1 Ultra", "M2 Ultra", "M3 Ultra"]


@pytest.mark.parametrize(("name", "arch", "cc"), REQUIRED_GPUS)
def test_required_gpu_is_catalogued_with_its_arch_and_compute_capability(m, name: str, arch: str,
                                                                        cc: str | None) -> None:
    t = m.gpus.lookup(name)
    assert t.gpu is not None, name
    assert (t.arch.id, t.cc) == (arch, cc)


def test_apple_families_are_catalogued_with_their_largest_unified_memory(m) -> None:
    for name in APPLE:
        t = m.gpus.lookup(name)
        assert t.arch.id == "apple" and t.gpu is not None, name
    memory = {g.id: g.memory_gib for g in m.gpus.gpus.values()}
    assert (memory["m1"], memory["m2-ultra"], memory["m3-max"], memory["m3-ultra"], memory["m4-pro"]) == \
        (16, 192, 128, 512, 64)


@pytest.mark.parametrize(("alias", "arch", "cc"), [
    ("volta", "volta", "7.0"), ("turing", "turing", "7.5"), ("ampere", "ampere", "8.0"), ("sm86", "ampere", "8.6"),
    ("ada", "ada", "8.9"), ("hopper", "hopper", "9.0"), ("sm90", "hopper", "9.0"), ("blackwell", "blackwell", "10.0"),
    ("sm100", "blackwell", "10.0"), ("sm103", "blackwell", "10.3"), ("blackwell-consumer", "blackwell-consumer", "12.0"),
    ("sm120", "blackwell-consumer", "12.0"), ("sm121", "blackwell-consumer", "12.1"), ("12.1", "blackwell-consumer", "12.1"),
    ("cdna2", "cdna2", None), ("gfx90a", "cdna2", None), ("cdna3", "cdna3", None), ("gfx942", "cdna3", None),
    ("cdna4", "cdna4", None), ("gfx950", "cdna4", None), ("rdna3", "rdna3", None), ("gfx1100", "rdna3", None),
    ("rdna4", "rdna4", None), ("gfx1201", "rdna4", None), ("xe-hpg", "xe-hpg", None), ("alchemist", "xe-hpg", None),
    ("battlemage", "battlemage", None), ("xe-hpc", "xe-hpc", None), ("ponte-vecchio", "xe-hpc", None),
    ("gaudi", "gaudi", None), ("apple", "apple", None), ("x86", "x86", None), ("arm", "arm", None),
])
def test_architecture_names_and_aliases(m, alias: str, arch: str, cc: str | None) -> None:
    t = m.gpus.lookup(alias)
    assert (t.arch.id, t.cc) == (arch, cc)


def test_native_formats_follow_the_hardware_generations(m) -> None:
    fmt = {a.id: a.native_formats for a in m.gpus.archs.values()}
    assert "bf16" not in fmt["volta"] and "bf16" not in fmt["turing"] and "bf16" in fmt["ampere"]
    assert "fp8" not in fmt["ampere"] and "fp8" in fmt["ada"] and "fp8" in fmt["hopper"]
    assert "fp4" not in fmt["hopper"] and "fp4" in fmt["blackwell"] and "fp4" in fmt["blackwell-consumer"]
    assert "fp8" not in fmt["cdna2"] and "fp8" in fmt["cdna3"] and "fp4" in fmt["cdna4"] and "fp4" not in fmt["cdna3"]
    assert "fp8" not in fmt["rdna3"] and "fp8" in fmt["rdna4"]


def test_every_gpu_names_a_source(m) -> None:
    raw = tomllib.loads((DATA / "gpus.toml").read_text(encoding="utf-8"))
    for entry in raw["arch"] + raw["gpu"]:
        assert entry["source"].strip(), entry["id"]


# ------------------------------------------------------------------------------------------ engines

def test_every_required_engine_has_a_file(m) -> None:
    assert set(m.engines) == ENGINES
    assert {e for e, eng in m.engines.items() if eng.kind == "provider"} == PROVIDERS
    assert set(m.engine("llama.cpp").backends) == {"cuda", "rocm", "metal", "vulkan", "sycl", "cpu"}


def test_every_source_names_the_version_it_was_read_at(m) -> None:
    for eng in m.engines.values():
        assert eng.sources, eng.id
        for name, src in eng.sources.items():
            assert src.ref.strip() and src.version.strip(), f"{eng.id}: source {name}"
        for rule in eng.rules:
            assert rule.sources, f"{eng.id}: {rule.id}"
            assert all(s.version for s in rule.sources), f"{eng.id}: {rule.id}"


def test_every_rule_that_is_not_native_says_why(m) -> None:
    for eng in m.engines.values():
        for rule in eng.rules:
            if rule.status != "native":
                assert rule.reasons, f"{eng.id}: {rule.id}"
            if rule.status == "fallback":
                assert rule.kernel, f"{eng.id}: {rule.id}"


def test_every_method_is_covered_on_every_architecture_the_engine_runs_on(m) -> None:
    """No (engine, method, arch) cell falls through to 'no sourced rule', at the default version."""
    targets = one_target_per_cc(m)
    gaps = []
    for eng in m.engines.values():
        for method in METHODS:
            probe = gguf("Q4_K", "F32") if method == "gguf" else insp(method)
            for t in (targets if eng.needs_gpu else [None]):
                if t is not None and t.vendor not in eng.hardware:
                    continue
                v = resolve_one(m, probe, EngineRequest(eng), t)
                if v.rule_id is None:
                    gaps.append((eng.id, method, t.arch.id if t else None, t.cc if t else None))
    assert gaps == []


def _variants(method: str, rnd: random.Random) -> list[Inspection]:
    if method == "gguf":
        sets = [("Q4_K", "Q6_K", "F32"), ("MXFP4", "F32"), ("NVFP4", "Q8_0"), ("TQ1_0", "F32"), ("IQ2_K", "F32"),
                ("TQ2_0", "IQ2_K", "MXFP4"), ("Q2_0", "Q1_0"), ("BF16",)]
        return [gguf(*s, split=sp) for s in sets for sp in (None, 3)]
    out = [insp(method)]
    for _ in range(24):
        out.append(insp(
            method, dtype=rnd.choice(["bfloat16", "float16"]), moe=rnd.choice([False, True]),
            activation_dtype=rnd.choice([None, "float8_e4m3", "fp4_e2m1", "int8"]),
            scale_granularity=rnd.choice([None, "per-tensor", "per-channel", "block", "group"]),
            producer=rnd.choice([None, "modelopt", "compressed-tensors", "quark", "gpt-oss", "deepseek"]),
            config_method=rnd.choice([None, "mxfp4", "fp8", "fbgemm_fp8", "compressed-tensors"]),
            format=rnd.choice([None, "affine", "mxfp4", "nvfp4", "mxfp8"]),
            weight_dtype=rnd.choice([None, "float8_e4m3", "float8_e5m2"]),
            group_size=rnd.choice([None, -1, 32, 128, 100]), weight_bits=rnd.choice([None, 4, 8])))
    return out


def test_no_two_rules_tie_with_different_outcomes(m) -> None:
    """Sampled checkpoint variants x every version x every backend x one GPU per compute capability:
    the resolver never meets an ambiguous tie (a data error) anywhere in the shipped data."""
    rnd = random.Random(20261130)
    variants = {method: _variants(method, rnd) for method in METHODS}
    errors, decided = rule_ties(m, variants, one_target_per_cc(m))
    assert sorted(errors) == []
    assert decided > 100_000  # the whole sweep ran (17 engines, ~70 version x backend pairs, 19 methods)


# Every other place where two entries of the data could answer one question: the answer must never depend on
# file order. Weight-format rules: above. Modifiers and [[suggestion]] entries do not compete (every one that
# holds applies, the engine's own suggestions first: matrices/SCHEMA.md 2.4, 2.5). Two default backends for one
# vendor and duplicate GPU/engine names are refused by the loader (test_matrix_loader). [parallel], [memory],
# [kv_cache] are one table per engine.

def test_no_two_kv_rules_tie_with_different_outcomes(m) -> None:
    """Every dtype each engine's [kv_cache] accepts x every version x backend x one GPU per compute capability:
    the most specific [[kv_rule]] is never a tie between different outcomes."""
    errors, decided = kv_rule_ties(m, insp("none"), one_target_per_cc(m))
    assert sorted(errors) == []
    assert decided > 5000  # the sweep ran over the engines with KV rules


def test_no_two_build_entries_describe_one_version(m) -> None:
    """The build dimension takes the first [[build]] covering a version: two would make file order decide."""
    assert build_overlaps(m) == []
    assert sum(len(e.builds) for e in m.engines.values()) >= 2  # there is something to compare


def test_no_gpu_value_has_two_answers(m) -> None:
    """A compute capability belongs to one architecture, and no name or alias reads as another architecture's
    capability (sm90 must mean Hopper whatever the file order)."""
    assert gpu_name_ties(m.gpus) == []


#: engines whose architecture data has two lists for one container, and the name the engine loads by: the first
#: list of the file that knows its name judges a checkpoint, so where the lists disagree that list must come first
LOADS_BY = {"transformers": "model-type"}  # from_pretrained resolves AutoConfig by model_type before any class


def test_architecture_lists_that_disagree_are_asked_in_the_order_the_engine_loads() -> None:
    """Real (model_type, class) pairs (the installed transformers' auto mappings) x every release read: where two
    lists of one engine disagree, the list of the name the engine loads by is asked first, never file order by
    accident."""
    from qcheck.matrix.architectures import load_architectures

    m = load_matrix()
    pairs = transformers_name_pairs()
    assert len(pairs) > 200
    disagreements = arch_list_disagreements(m, pairs)
    engines = {d.split()[0] for d in disagreements}
    assert engines <= set(LOADS_BY), sorted(disagreements)[:5]
    for engine, names in LOADS_BY.items():
        data = load_architectures(m.root, engine)
        for container in ("safetensors", "gguf"):
            load = [lst for lst in data.lists if container in lst.containers and lst.role == "load"]
            if len(load) > 1:
                assert load[0].names == names, (engine, container)
    # the model_type list was cut at 5.4.0 (transformers 5.8.0 moved CONFIG_MAPPING_NAMES to auto_mappings.py)
    assert len(disagreements) < 100


def test_transformers_judges_the_model_type_first() -> None:
    m = load_matrix()

    def arch(model_type: str, cls: str, version: str) -> str:
        ins = Inspection(path="x", container="safetensors", architecture=cls, model_type=model_type, dtype="bfloat16",
                         quantization=Quantization(method="none"))
        v = resolve_one(m, ins, EngineRequest(m.engine("transformers"), version), m.gpus.lookup("h100"))
        return next(j.status for j in v.dimensions if j.dimension == "architecture")

    assert arch("llama", "MyLlamaForCausalLM", "5.24.0") == "native"  # was unsupported: 'removed after 5.4.0'
    assert arch("exaone", "LlamaForCausalLM", "4.40.0") == "unsupported"  # was native: AutoConfig has no exaone
    assert arch("llama", "LlamaForCausalLM", "4.40.0") == "native"


def test_the_gpu_tie_check_sees_both_kinds() -> None:
    from qcheck.matrix.gpus import build_gpu_table

    raw = {"arch": [{"id": "a", "vendor": "nvidia", "compute_capability": ["9.0"], "native_formats": ["fp16"],
                     "source": "s", "aliases": ["sm89"]},
                    {"id": "b", "vendor": "nvidia", "compute_capability": ["8.9", "9.0"], "native_formats": ["fp16"],
                     "source": "s"}],
           "gpu": []}
    assert gpu_name_ties(build_gpu_table(raw, "gpus.toml")) == [
        "compute capability 9.0: a, b", "a answers to 'sm89', which reads as compute capability 8.9 of b"]


# ------------------------------------------------------------------------------- version boundaries

def test_vllm_version_boundaries(m) -> None:
    q4km = gguf("Q4_K", "Q6_K", "F32")
    old, new = verdict(m, q4km, "vllm", "h100", "0.23.0"), verdict(m, q4km, "vllm", "h100", "0.24.0")
    assert old.status == new.status == "native"
    assert not any("plugin" in r for r in old.requires) and any("vllm-gguf-plugin" in r for r in new.requires)
    bnb = insp("bitsandbytes", weight_bits=4)
    assert not verdict(m, bnb, "vllm", "a100", "0.27.0").requires
    assert any("vllm-bnb-plugin" in r for r in verdict(m, bnb, "vllm", "a100", "0.28.0").requires)
    w4a16 = insp("int4", producer="compressed-tensors", weight_bits=4, group_size=128, dtype="float16")
    assert [status(m, w4a16, "vllm", "t4", v) for v in ("0.9.0", "0.13.0", "0.14.0", "0.33.0")] == \
        ["unsupported", "fallback", "native", "native"]
    nvfp4 = insp("nvfp4", producer="modelopt", activation_dtype="fp4_e2m1")
    assert [status(m, nvfp4, "vllm", "a100", v) for v in ("0.8.0", "0.9.0", "0.33.0")] == \
        ["unknown", "fallback", "fallback"]
    gpt_oss = insp("mxfp4", config_method="mxfp4", producer="gpt-oss", moe=True)
    assert status(m, gpt_oss, "vllm", "h100", "0.9.0") == "unsupported"
    assert status(m, gpt_oss, "vllm", "h100", "0.10.2") == "fallback"


def test_llamacpp_and_mlx_version_boundaries(m) -> None:
    mxfp4 = gguf("MXFP4", "F32")
    assert status(m, mxfp4, "llama.cpp", "h100", "b6000") == "unknown"
    assert status(m, mxfp4, "llama.cpp", "h100", "b6301") == "native"
    nvfp4 = gguf("NVFP4", "F32")
    # read in every build's enum ggml_type: no NVFP4 up to b8179 (the file does not load), CUDA's supports_op
    # refuses its matmuls at b8352-b8390 (CPU), runs them from b8942; b8895 lies between builds read: not known
    assert [status(m, nvfp4, "llama.cpp", "rtx-5090", v) for v in ("b8000", "b8179", "b8352", "b8895", "b8942")] \
        == ["unsupported", "unsupported", "fallback", "unknown", "native"]
    mode = insp("mlx", format="mxfp4", weight_bits=4, group_size=32)
    assert status(m, mode, "mlx", "m3-max", "0.28.0") == "unsupported"
    assert status(m, mode, "mlx", "m3-max", "0.29.0") == "native"
    nv = insp("mlx", format="nvfp4", weight_bits=4, group_size=16)
    assert status(m, nv, "mlx", "m2-max", "0.29.0") == "unsupported"
    assert status(m, nv, "mlx", "m2-max", "0.32.1") == "native"


# ------------------------------------------------------------------------------- fine-grained cells

def test_vllm_fp8_granularity_and_weight_only(m) -> None:
    per_tensor = insp("fp8", activation_dtype="float8_e4m3", scale_granularity="per-tensor")
    block = insp("fp8", activation_dtype="float8_e4m3", scale_granularity="block", block_size=[128, 128],
                 producer="deepseek")
    w8a16 = insp("fp8", activation_dtype=None, scale_granularity="per-channel", producer="compressed-tensors")
    assert [status(m, per_tensor, "vllm", g) for g in ("v100", "t4", "a100", "l40s", "h100", "b200")] == \
        ["unsupported", "fallback", "fallback", "native", "native", "native"]
    assert [status(m, block, "vllm", g) for g in ("a100", "rtx-4090", "h100", "rtx-5090")] == \
        ["fallback", "fallback", "native", "native"]
    assert [status(m, w8a16, "vllm", g) for g in ("v100", "t4", "a100", "h100")] == \
        ["unsupported", "native", "native", "native"]
    modelopt = insp("fp8", activation_dtype="float8_e4m3", scale_granularity="per-tensor", producer="modelopt")
    v = verdict(m, modelopt, "vllm", "t4")
    assert v.status == "unsupported" and "80" in text(v)
    assert [status(m, per_tensor, "vllm", g) for g in ("mi250x", "mi300x", "mi355x", "rx-7900-xtx", "rx-9070-xt")] == \
        ["unsupported", "native", "native", "unsupported", "native"]


def test_vllm_nvfp4_w4a4_w4a16_and_moe(m) -> None:
    w4a4 = insp("nvfp4", activation_dtype="fp4_e2m1", producer="modelopt")
    w4a16 = insp("nvfp4", activation_dtype=None, producer="modelopt")
    moe = insp("nvfp4", activation_dtype="fp4_e2m1", producer="modelopt", moe=True)
    assert [status(m, w4a4, "vllm", g) for g in ("v100", "t4", "h100", "b200", "rtx-5090")] == \
        ["unsupported", "fallback", "fallback", "native", "native"]
    v = verdict(m, w4a16, "vllm", "b200")
    assert v.status == "native" and "marlin" in text(v)
    moe_v = verdict(m, moe, "vllm", "rtx-5090", "0.24.0")
    assert moe_v.status == "native" and "35065" in text(moe_v)  # FlashInfer CUTLASS FP4 MoE on family 120
    assert status(m, moe, "vllm", "rtx-5090") == "native"  # 0.33.0: CUTLASS FP4 MoE on family 120
    assert status(m, moe, "vllm", "b200") == "native"
    assert status(m, w4a4, "vllm", "arc-b580") == "unsupported"
    assert status(m, w4a4, "vllm", "mi300x") == "fallback"


def test_vllm_gguf_types_split_and_bf16_on_turing(m) -> None:
    split = verdict(m, gguf("Q4_K", "Q6_K", "F32", split=3), "vllm", "h100")
    assert split.status == "native" and any("merge" in r for r in split.requires)
    tq = verdict(m, gguf("TQ1_0", "F32"), "vllm", "h100", "0.24.0")
    assert tq.status == "unsupported" and "tq1_0" in text(tq)
    assert status(m, gguf("TQ1_0", "F32"), "vllm", "h100") == "unknown"  # later plugin releases were not read
    assert status(m, gguf("MXFP4", "F32"), "vllm", "h100", "0.20.0") == "unsupported"
    assert status(m, gguf("Q4_K", "F32"), "vllm", "cpu") == "unsupported"
    bf16 = verdict(m, insp("none", dtype="bfloat16"), "vllm", "t4")
    assert bf16.status == "fallback" and "--dtype half" in bf16.requires
    awq_bf16 = verdict(m, insp("awq", dtype="bfloat16", group_size=128, weight_bits=4), "vllm", "t4")
    assert awq_bf16.status == "native" and "--dtype half" in awq_bf16.requires
    assert not verdict(m, insp("none", dtype="float16"), "vllm", "t4").requires


@pytest.mark.parametrize(("types", "backend", "gpu", "expected"), [
    (("Q4_K", "Q6_K", "F32"), None, "h100", "native"),
    (("Q4_K", "Q6_K", "F32"), None, "m3-max", "native"),
    (("NVFP4", "Q8_0"), None, "m3-max", "fallback"),       # Metal rejects NVFP4 matmuls
    (("NVFP4", "Q8_0"), None, "rtx-5090", "native"),
    (("TQ1_0", "F32"), None, "h100", "fallback"),           # CUDA has no TQ1_0 matmul
    (("TQ2_0", "F32"), None, "m3-max", "native"),           # Metal has TQ2_0, not TQ1_0
    (("TQ1_0", "F32"), "vulkan", "h100", "native"),
    (("TQ1_0", "F32"), None, "arc-b580", "fallback"),       # SYCL excludes TQ types
    (("TQ1_0", "F32"), None, "cpu", "native"),
    (("MXFP4", "F32"), None, "t4", "native"),               # GPT-OSS GGUF on Turing
    (("IQ2_K", "F32"), None, "h100", "unsupported"),        # ik_llama.cpp-only type
    (("Q4_K", "F32"), None, "gaudi3", "unsupported"),
])
def test_llamacpp_gguf_types_per_backend(m, types, backend, gpu, expected) -> None:
    assert status(m, gguf(*types), "llama.cpp", gpu, backend=backend) == expected


def test_llamacpp_reads_gguf_only_and_suggests_conversion(m) -> None:
    v = verdict(m, insp("none"), "llama.cpp", "h100")
    assert v.status == "unsupported" and "gguf" in text(v)
    raw = tomllib.loads((DATA / "engines" / "llama.cpp.toml").read_text(encoding="utf-8"))
    commands = " ".join(s.get("command", "") for s in raw["suggestion"])
    assert "convert_hf_to_gguf.py" in commands and "llama-quantize" in commands


def test_other_engines_cells_from_the_research(m) -> None:
    gpt_oss = insp("mxfp4", config_method="mxfp4", producer="gpt-oss", moe=True)
    assert status(m, gpt_oss, "sglang", "mi300x") == "unsupported"
    assert status(m, gpt_oss, "sglang", "mi355x") == "native"
    assert status(m, gpt_oss, "tensorrt-llm", "l4") == "unsupported"
    assert status(m, gpt_oss, "tensorrt-llm", "h100") == "fallback"
    assert status(m, gpt_oss, "transformers", "t4") == "native"
    assert status(m, insp("gptq", weight_bits=4, group_size=128), "sglang", "t4") == "unsupported"
    assert status(m, insp("awq", weight_bits=4, group_size=128), "sglang", "t4") == "native"
    assert status(m, insp("exl3"), "exllamav3", "t4", "1.4.1") == "unsupported"
    assert status(m, insp("exl3"), "exllamav3", "t4") == "native"  # 1.6.5: sm75 paths
    assert status(m, insp("exl3"), "exllamav3", "a100") == "native"
    assert status(m, insp("exl2"), "exllamav2", "t4") == "native"
    assert status(m, insp("exl3"), "exllamav3", "mi300x") == "unsupported"  # wave64 CDNA rejected
    assert status(m, insp("mlx", format="affine", weight_bits=4), "lm-studio", "m2-max") == "native"
    assert status(m, insp("mlx", format="affine", weight_bits=4), "lm-studio", "rtx-4090") == "unsupported"
    # mlx-lm dequantises block FP8 in the model files that name weight_scale_inv (deepseek_v3 ...); others fail
    assert status(m, insp("fp8", scale_granularity="block", model_type="deepseek_v3"), "mlx", "m3-max") == "fallback"
    assert status(m, insp("fp8", scale_granularity="block"), "mlx", "m3-max") == "unsupported"
    v100 = verdict(m, insp("awq", weight_bits=4, group_size=128), "sglang", "v100")
    assert v100.status == "unsupported" and "sm75 and above" in text(v100)
    assert status(m, insp("none", dtype="bfloat16"), "sglang", "t4") == "fallback"
    assert status(m, gguf("Q4_K", "F32"), "lm-studio", "v100") == "unsupported"  # CUDA runtime lacks sm_70
    assert status(m, gguf("Q4_K", "F32"), "lm-studio", "v100", backend="vulkan") == "native"
    assert status(m, insp("fp8", activation_dtype="float8_e4m3"), "transformers", "a100") == "fallback"
    assert status(m, insp("nvfp4", producer="modelopt"), "transformers", "b200") == "unsupported"


def test_single_purpose_and_providers(m) -> None:
    dsv41 = insp("fp8", scale_granularity="block", block_size=[32, 32], moe=True)
    assert status(m, dsv41, "deepinfer", "b200") == "native"
    assert status(m, dsv41, "deepinfer", "h100") == "unsupported"
    assert status(m, insp("awq"), "deepinfer", "b200") == "unsupported"
    assert status(m, dsv41, "deepinfer", "mi300x") == "unsupported"  # NVIDIA only (vendor gate)
    fw = verdict(m, insp("fp8", activation_dtype="float8_e4m3"), "fireworks")
    assert fw.status == "unsupported" and "quantization_config" in text(fw)
    assert fw.gpu is None and status(m, insp("none"), "fireworks") == "native"
    assert status(m, gguf("Q4_K", "F32"), "together") == "unsupported"
    assert status(m, insp("none"), "groq") == "unknown"
    assert status(m, insp("none"), "cerebras") == "native"
    q8 = verdict(m, gguf("Q8_0", "F32"), "audio.cpp", "h100")
    assert q8.status == "native" and any("family" in r for r in q8.requires)
    assert status(m, gguf("Q4_K", "F32"), "audio.cpp", "h100") == "unknown"


def test_suggestions_give_conversion_commands(m) -> None:
    raw = {p.stem: tomllib.loads(p.read_text(encoding="utf-8")) for p in (DATA / "engines").glob("*.toml")}
    vllm_cmds = " ".join(s.get("command", "") for s in raw["vllm"]["suggestion"])
    assert "pip install vllm-gguf-plugin" in vllm_cmds and "llama-gguf-split --merge" in vllm_cmds
    assert "pip install vllm-bnb-plugin" in vllm_cmds
    texts = " ".join(s["text"] for s in raw["vllm"]["suggestion"])
    assert "FP8 release" in texts
    shared = tomllib.loads((DATA / "suggestions.toml").read_text(encoding="utf-8"))
    assert any(s["id"] == "gguf-to-safetensors-is-lossy" for s in shared["suggestion"])
