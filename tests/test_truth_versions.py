"""Issue #35's vLLM and SGLang findings, through ``qcheck check`` at every listed version each rule covers.

Each finding names the rule (hand-written or generated from the released code) that now answers it, the deployment,
and what the released code does there (status and the words of the engine's own message or kernel). The test asks
``qcheck check ... --json`` at every version the engine file lists: where the rule was read (its ``verified`` range
within its ``versions``) that rule must decide with that status; at every other listed version it must not. A
second set pins the boundaries between the rules (the release where the code changed), and a last test keeps the
data honest: every vLLM/SGLang rule answers only where it was read, with file and line at a release.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from click.testing import CliRunner

from qcheck.cli import cli
from qcheck.matrix.loader import load_matrix
from qcheck.matrix.schema import Engine, Rule
from qcheck.matrix.versions import contains, parse_version
from support import builders as b


class Finding(NamedTuple):
    engine: str
    rule: str
    model: str  # a key of the ``files`` fixture
    gpu: str
    status: str
    words: str  # in the verdict's kernel, reasons or requires (lower case)
    flags: tuple[str, ...] = ()


FINDINGS: tuple[Finding, ...] = (
    # vLLM 0.14.0: CT NVFP4 W4A4 off sm100 becomes CompressedTensorsW4A16Fp4, minimum 80 up to 0.15.1 (refused on T4)
    Finding("vllm", "gen-ct-w4a4-nvfp4-0.9.2", "ct-nvfp4-w4a4", "t4", "unsupported", "min capability: 80"),
    Finding("vllm", "gen-ct-w4a16-nvfp4-0.9.0", "ct-nvfp4-w4a16", "t4", "unsupported", "min capability: 80"),
    # ... and 75 from 0.16.0: W4A16 NVFP4 runs through Marlin on Turing (was `unknown` for 0.14.0-0.32.x)
    Finding("vllm", "nvfp4-w4a16-turing", "ct-nvfp4-w4a16", "t4", "native", "marlin"),
    Finding("vllm", "nvfp4-turing-marlin", "modelopt-nvfp4", "t4", "fallback", "marlin"),
    # awq-xpu / gptq-xpu: IPEX before 0.16.0 (4-bit only), XPUwNa16 (uint4/uint4b8) from 0.16.0
    Finding("vllm", "awq-gptq-xpu-ipex", "awq", "arc-a770", "native", "intel_extension_for_pytorch>=2.6.0"),
    Finding("vllm", "awq-gptq-xpu-ipex-8bit", "gptq-8bit", "arc-a770", "unsupported", "supports weight bits [4]"),
    Finding("vllm", "awq-xpu", "awq", "arc-a770", "native", "xpuwna16"),
    Finding("vllm", "gptq-xpu", "gptq", "arc-a770", "native", "xpuwna16"),
    Finding("vllm", "gptq-xpu-8bit", "gptq-8bit", "arc-a770", "unsupported",
            "failed to find a kernel that can implement the wna16 linear layer"),
    # mx-older-versions: ModelOpt MXFP8 is not a method before 0.16.0; from 0.20.2 the MXFP8 kernel lists answer
    Finding("vllm", "gen-unregistered-modelopt_mxfp8-0.9.0", "modelopt-mxfp8", "h100", "unsupported",
            "has no modelopt_mxfp8 quantization configuration"),
    Finding("vllm", "mxfp8-marlin", "modelopt-mxfp8", "h100", "fallback", "marlin mxfp8"),
    Finding("vllm", "mxfp8-sm120", "modelopt-mxfp8", "rtx-5090", "native", "flashinfer cutlass mm_mxfp8"),
    Finding("vllm", "mxfp8-modelopt-turing", "modelopt-mxfp8", "t4", "unsupported", "capability 80"),
    # quant-apple: the CPU backend refuses no quantised method as such (was `unsupported`); BF16 with FEAT_BF16
    Finding("vllm", "quant-apple", "awq", "m3-max", "unknown", "no code refuses quantised checkpoints"),
    Finding("vllm", "none-apple", "bf16", "m3-max", "fallback", "bf16 on cpus with feat_bf16 from 0.10.2"),
    # issue 33 item 7: vLLM 0.11.0 with an FP8 KV cache on L40S (sm89) runs Triton attention; on A100 it does not
    Finding("vllm", "kv-fp8-011-triton", "bf16", "l40s", "native", "triton attention", ("--kv-cache-dtype", "fp8")),
    Finding("vllm", "kv-fp8-011-ampere", "bf16", "a100", "unsupported", "fp8e4nv", ("--kv-cache-dtype", "fp8")),
    Finding("vllm", "kv-fp8-native", "bf16", "l40s", "native", "flashinfer", ("--kv-cache-dtype", "fp8")),
    # SGLang 0.5.23: MXFP8 on AMD (CDNA3 converts to block FP8; CDNA2 below the minimum; RDNA has no kernel)
    Finding("sglang", "mxfp8-amd-cdna3", "modelopt-mxfp8", "mi300x", "fallback", "block fp8 [128, 128]"),
    Finding("sglang", "mxfp8-amd-cdna2", "modelopt-mxfp8", "mi250", "unsupported", "minimum capability: 100"),
    Finding("sglang", "mxfp8-amd-rdna", "modelopt-mxfp8", "rx-7900-xtx", "unsupported",
            "no mxfp8 dense gemm kernel is available on this device"),
    # mxfp8-sm120: flashinfer 0.7.2's mm_mxfp8 CUTLASS backend declares sm120/121
    Finding("sglang", "mxfp8-sm120", "modelopt-mxfp8", "rtx-5090", "native", "flashinfer cutlass mm_mxfp8"),
    # mlx-mps: SGLANG_USE_MLX=1, torch 2.13.x and MLX >= 0.32
    Finding("sglang", "mlx-mps", "mlx", "m3-max", "native", "sglang_use_mlx=1"),
    # none-turing: the default attention backend on sm75 is FlashInfer
    Finding("sglang", "none-turing", "fp16", "t4", "native", "flashinfer attention by default"),
    # ModelOpt NVFP4 on ROCm: parsed as modelopt_fp4, which the ROCm list lacks (Petit never claims it)
    Finding("sglang", "nvfp4-amd-modelopt", "modelopt-nvfp4", "mi300x", "unsupported",
            "modelopt_fp4 quantization is currently not supported in rocm"),
    # self-audit (matrices/AUDIT.md): compressed-tensors NVFP4 on ROCm has no kernel (FP4 Marlin is CUDA-only) ...
    Finding("sglang", "nvfp4-amd-ct", "ct-nvfp4-w4a4", "mi300x", "unsupported", "imported only on cuda"),
    # ... FP8 on an x86 CPU asserts AMX; on Apple MPS every base method is registered (no refusal as such)
    Finding("sglang", "fp8-cpu", "fp8-tensor", "cpu-x86", "native",
            "fp8linearmethod on cpu requires that cpu has amx support"),
    Finding("sglang", "quant-apple", "awq", "m3-max", "unknown", "registers every base quantization method"),
    # vLLM NVFP4 MoE on sm120: FlashInfer CUTLASS / vLLM CUTLASS FP4 MoE take family 120 before Marlin from 0.16.0
    Finding("vllm", "nvfp4-moe-sm120-016", "modelopt-nvfp4-moe", "rtx-5090", "native", "flashinfer cutlass"),
    Finding("vllm", "nvfp4-moe-sm120", "modelopt-nvfp4-moe", "rtx-5090", "unknown", "cutlass_fp4_supported"),
    # second self-audit draw (vLLM/SGLang rules): block FP8 on sm120 at 0.9.0 (no sm120 kernel yet), NVFP4 and
    # torchao on XPU, compressed-tensors FP8 weight-only on XPU (SGLang)
    Finding("vllm", "fp8-block-sm120-090", "fp8-block", "rtx-5090", "unknown", "no sm120 kernel for block fp8"),
    Finding("vllm", "nvfp4-xpu", "ct-nvfp4-w4a4", "arc-a770", "unsupported",
            "failed to find a kernel that can implement the nvfp4 linear layer"),
    Finding("vllm", "nvfp4-xpu-weight-only", "ct-nvfp4-w4a16", "arc-a770", "unknown", "were not read"),
    Finding("sglang", "fp8-xpu-ct-weight-only", "ct-fp8-w8a16", "arc-a770", "unsupported",
            "compressedtensorsw8a16fp8 is not supported on xpu"),
    Finding("sglang", "fp8-xpu", "fp8-tensor", "arc-a770", "native", "sgl-kernel-xpu"),
    # ModelOpt W4A16_NVFP4 before vLLM 0.21.0: no W4A16 branch, read as W4A4 NVFP4 (was 'Marlin W4A16')
    Finding("vllm", "nvfp4-w4a16-modelopt-pre-021", "modelopt-nvfp4-w4a16", "h100", "unknown",
            "has no w4a16_nvfp4 branch"),
    Finding("vllm", "nvfp4-w4a16-marlin", "ct-nvfp4-w4a16", "h100", "native", "marlin nvfp4 w4a16"),
)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("truth-versions")
    mxfp8_hq = {"producer": {"name": "modelopt", "version": "0.37.0"},
                "quantization": {"quant_algo": "MXFP8", "kv_cache_quant_algo": None, "group_size": 32,
                                 "exclude_modules": ["lm_head"]}}
    mxfp8 = {"quant_method": "modelopt", "quant_algo": "MXFP8", "group_size": 32, "ignore": ["lm_head"],
             "producer": {"name": "modelopt", "version": "0.37.0"}}
    w4a16 = b.qargs(4, "float", "tensor_group", group_size=16, scale_dtype="torch.float8_e4m3fn")
    fp16 = b.bf16_llama()
    fp16.configs["config.json"]["torch_dtype"] = "float16"
    fp16.tensors = {k: ("F16", shape) for k, (_, shape) in fp16.tensors.items()}
    made = {
        "ct-nvfp4-w4a4": b.nvfp4_ct_fixture(),
        "ct-nvfp4-w4a16": b._q(b.DEFAULT, lambda p, o, i: b.nvfp4_ct(p, o, i, activations=False),
                               b.ct_config({"group_0": b.scheme(w4a16)}, fmt="nvfp4-pack-quantized")),
        "modelopt-nvfp4": b.nvfp4_modelopt_fixture(),
        "modelopt-mxfp8": b._q(b.DEFAULT, b.mxfp8_ct, mxfp8, extra_configs={"hf_quant_config.json": mxfp8_hq}),
        "awq": b.awq_fixture(), "gptq": b.gptq_fixture(desc_act=False),
        "gptq-8bit": b.gptq_fixture(bits=8, desc_act=False), "bf16": b.bf16_llama(), "fp16": fp16,
        "fp8-block": b.fp8_block_deepseek(), "torchao": b.torchao_fixture(),
        "ct-fp8-w8a16": b._q(b.DEFAULT, b.fp8_channel, b.ct_config({"group_0": b.scheme(b.qargs(8, "float", "channel"))},
                                                                    fmt="float-quantized")),
        "mlx": b.mlx_fixture(), "fp8-tensor": b._q(b.DEFAULT, b.fp8_tensor, {"quant_method": "fp8", "activation_scheme": "dynamic"}), "modelopt-nvfp4-moe": b.nvfp4_modelopt_fixture(),
    }
    w4a16 = made["modelopt-nvfp4-w4a16"] = b.nvfp4_modelopt_fixture()
    w4a16.configs["config.json"]["quantization_config"]["quant_algo"] = "W4A16_NVFP4"
    w4a16.configs["config.json"]["quantization_config"]["config_groups"]["group_0"]["input_activations"] = None
    w4a16.configs["hf_quant_config.json"]["quantization"]["quant_algo"] = "W4A16_NVFP4"
    moe = made["modelopt-nvfp4-moe"].configs["config.json"]
    moe["num_local_experts"], moe["num_experts_per_tok"] = 8, 2
    return {name: str(fx.write(root / name)) for name, fx in made.items()}


def check_json(path: str, engine: str, gpu: str, flags: tuple[str, ...] = ()) -> dict[str, Any]:
    """``qcheck check PATH --engine E --gpu G FLAGS --json``, in process: the one verdict."""
    args = ["check", path, "--engine", engine, "--gpu", gpu, *flags, "--json", "--allow-unknown"]
    result = CliRunner().invoke(cli, args, standalone_mode=False, catch_exceptions=False)
    assert result.return_value in (0, 1), result.output
    verdicts = json.loads(result.stdout)["verdicts"]
    assert len(verdicts) == 1
    return verdicts[0]


def judged(verdict: dict[str, Any], rule: str) -> dict[str, Any] | None:
    """The part of the verdict the rule decided: the weights (``rule_id``, with modifiers after '+') or a dimension."""
    if verdict["rule_id"] and verdict["rule_id"].split("+")[0] == rule:
        return {"status": verdict["dimensions"][0]["status"], "text": " ".join(
            [verdict.get("kernel") or "", *verdict["requires"], *verdict["reasons"]])}
    for d in verdict["dimensions"]:
        if d.get("rule_id") == rule:
            return {"status": d["status"], "text": " ".join([*d["reasons"], *d["requires"]])}
    return None


def find_rule(engine: Engine, rule_id: str) -> Rule:
    pool = [*engine.rules, *(k.rule for k in engine.kv_rules), *(a.rule for a in engine.attention_rules)]
    return next(r for r in pool if r.id == rule_id)


def covered(engine: Engine, rule: Rule) -> list[str]:
    """The listed versions a rule answers: inside its ``versions`` and read there (``verified``)."""
    out = []
    for version in engine.versions:
        at = parse_version(version, engine.scheme)
        if (rule.versions is None or contains(rule.versions, at)) and rule.verified is not None \
                and rule.verified.covers(at):
            out.append(version)
    return out


@pytest.mark.parametrize("finding", FINDINGS, ids=[f"{f.engine}:{f.rule}:{f.gpu}" for f in FINDINGS])
def test_each_finding_at_every_listed_version(files: dict[str, str], finding: Finding) -> None:
    engine = load_matrix().engines[finding.engine]
    inside = covered(engine, find_rule(engine, finding.rule))
    assert inside, f"{finding.rule} covers no listed version"
    for version in engine.versions:
        verdict = check_json(files[finding.model], f"{finding.engine}=={version}", finding.gpu, finding.flags)
        got = judged(verdict, finding.rule)
        if version in inside:
            assert got is not None, (version, verdict["rule_id"], verdict["status"], verdict["reasons"][:1])
            assert got["status"] == finding.status, (version, got)
            assert finding.words in got["text"].lower(), (version, got["text"])
        else:
            assert got is None, (version, verdict["rule_id"])


#: the releases where the code changes: (model, GPU, flags, [(version, status, rule id)]) on both sides
BOUNDARIES: dict[str, tuple[str, str, tuple[str, ...], list[tuple[str, str, str]]]] = {
    "ct-w4a4-nvfp4-turing": ("ct-nvfp4-w4a4", "t4", (), [
        ("0.14.0", "unsupported", "gen-ct-w4a4-nvfp4-0.9.2"), ("0.16.0", "fallback", "nvfp4-turing-marlin"),
        ("0.23.0", "fallback", "nvfp4-turing-marlin")]),
    "ct-w4a16-nvfp4-turing": ("ct-nvfp4-w4a16", "t4", (), [
        ("0.14.0", "unsupported", "gen-ct-w4a16-nvfp4-0.9.0"), ("0.16.0", "native", "nvfp4-w4a16-turing"),
        ("0.28.0", "native", "nvfp4-w4a16-turing")]),
    "awq-xpu": ("awq", "arc-a770", (), [
        ("0.14.0", "native", "awq-gptq-xpu-ipex"), ("0.16.0", "native", "awq-xpu")]),
    "gptq-8bit-xpu": ("gptq-8bit", "arc-a770", (), [
        ("0.14.0", "unsupported", "awq-gptq-xpu-ipex-8bit"), ("0.34.0", "unsupported", "gptq-xpu-8bit")]),
    "modelopt-mxfp8-hopper": ("modelopt-mxfp8", "h100", (), [
        ("0.14.0", "unsupported", "gen-unregistered-modelopt_mxfp8-0.9.0"),
        ("0.16.0", "unsupported", "gen-min-capability-modelopt_mxfp8-0.16.0"),  # ModelOptMxFp8Config: 100 then
        ("0.23.0", "fallback", "mxfp8-marlin")]),
    # torchao on XPU: the platform list (0.27.1+) refuses it; the hand rule agrees (it was an 'unknown')
    "torchao-xpu": ("torchao", "arc-a770", (), [
        ("0.33.0", "unsupported", "gen-xpu-torchao-0.27.1"), ("0.34.0", "unsupported", "gen-xpu-torchao-0.27.1")]),
    "kv-fp8-l40s": ("bf16", "l40s", ("--kv-cache-dtype", "fp8"), [
        ("0.10.2", "unknown", "kv-quantised-older"), ("0.11.0", "native", "kv-fp8-011-triton"),
        ("0.12.0", "unknown", "kv-quantised-older"), ("0.33.0", "native", "kv-fp8-native")]),
}


@pytest.mark.parametrize("name", list(BOUNDARIES))
def test_the_boundaries_fall_where_the_code_changed(files: dict[str, str], name: str) -> None:
    model, gpu, flags, steps = BOUNDARIES[name]
    for version, status, rule in steps:
        verdict = check_json(files[model], f"vllm=={version}", gpu, flags)
        ids = {verdict["rule_id"], *(verdict["rule_id"] or "").split("+"), *(d.get("rule_id") for d in
                                                                             verdict["dimensions"])}
        part = judged(verdict, rule) or ({"status": verdict["status"]} if rule in ids else None)
        assert part is not None and part["status"] == status, (version, verdict["rule_id"], verdict["status"],
                                                               [d.get("rule_id") for d in verdict["dimensions"]])


def test_a_version_not_read_names_the_releases_read(files: dict[str, str]) -> None:
    """vLLM 0.16.0, AWQ on MI300X: the ROCm AWQ rule was read from 0.20.2 (where the Triton W4A16 kernel joined ROCm's
    list) to 0.34.0; the answer says so and names where it was read, instead of borrowing a later answer."""
    verdict = check_json(files["awq"], "vllm==0.16.0", "mi300x")
    assert (verdict["status"], verdict["rule_id"]) == ("unknown", "not-read")
    assert "vLLM 0.16.0 was not read for this" in verdict["reasons"][0]
    assert "'awq-amd' (fallback) was read at 0.20.2-0.34.0" in verdict["reasons"][0]
    assert "0.34.0" in {s["version"] for s in verdict["sources"]}


def test_every_vllm_and_sglang_rule_is_scoped_and_cited() -> None:
    """rules_verified on both files; every rule's range is closed or exact; every source names a release."""
    m = load_matrix()
    for ident in ("vllm", "sglang"):
        engine = m.engines[ident]
        assert engine.rules_verified
        pool = [*engine.rules, *(k.rule for k in engine.kv_rules), *(a.rule for a in engine.attention_rules),
                *(s.rule for s in engine.kv_scale_rules)]
        assert pool and all(r.verified is not None for r in pool)
        for rule in pool:
            assert all(s.version for s in rule.sources), rule.id
        generated = [r for r in engine.rules if r.generated]
        assert generated and all(r.gate and r.status == "unsupported" for r in generated)


def test_the_generated_tables_check_offline() -> None:
    """``python matrices/tools/extract_vllm.py --check`` and ``extract_sglang.py --check`` (no network)."""
    import subprocess
    import sys

    tools = Path(__file__).resolve().parent.parent / "matrices" / "tools"
    for script in ("extract_vllm.py", "extract_sglang.py"):
        done = subprocess.run([sys.executable, str(tools / script), "--check"], capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "checked" in done.stdout
