"""Every rule issue #24 added, through ``qcheck check`` on both sides of its version boundary.

The KV-pair rules (``[[kv_rule]]``: llama.cpp per backend and build, ExLlamaV3 K/V bits, LM Studio's runtime), the
attention-backend rules (``[[attention_rule]]``: vLLM, SGLang), the KV-scale rules (``[[kv_scale_rule]]``), the
known issues (``matrices/known_issues.toml``) and the transformers 5.25.0 MXFP4 boundary: each case is one
deployment that the rule decides at a version inside its range, asked again at a version outside it, where it must
not. The command runs in process (``qcheck check ... --json``, the CLI the user types) on real header-only files, and
the rule is read from the JSON: ``dimensions[].rule_id`` (the KV-cache or attention rule that decided),
``risks[].id`` (a KV-scale rule or a known issue), ``rule_id`` (the weight-format rule).

A completeness test keeps the table honest: every KV-pair rule of llama.cpp, every attention and KV-scale rule and
every known issue the matrix ships must have a case here, and every case must name a rule the matrix has; and every
one of those rules names a source with a file and line (or a tracker link) at the release it was read at.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from click.testing import CliRunner

from qcheck.cli import cli
from qcheck.matrix.loader import load_matrix
from support import builders as b
from support.gguf_helpers import Q, write_gguf


class Case(NamedTuple):
    model: str  # a key of the `files` fixture
    gpu: str
    inside: str  # --engine at a version the rule holds for
    outside: str | None  # --engine at a version it does not (None: the rule has no version boundary)
    flags: tuple[str, ...] = ()


def _kv(kv: str, fa: str | None = None) -> tuple[str, ...]:
    return ("--kv-cache-dtype", kv, *(("-fa", fa) if fa else ()))


NEW = "llama.cpp"  # b11312, the newest build the data has
OLD = "llama.cpp==b8895"  # inside b6673..b10361

#: (engine id, kind, rule id) -> the deployment it decides, and the versions on each side of its boundary
CASES: dict[tuple[str, str, str], Case] = {
    # --- llama.cpp CUDA at b11312: GGML_CUDA_FA_QUANTS pairs native, other pairs converted to f16, iq4_nl
    ("llama.cpp", "kv_rule", "kv-cuda-compiled-pair"): Case("gguf", "rtx-4090", NEW, OLD, _kv("q8_0")),
    ("llama.cpp", "kv_rule", "kv-cuda-converted-pair"): Case("gguf", "rtx-4090", NEW, OLD, _kv("q8_0,q4_0")),
    ("llama.cpp", "kv_rule", "kv-cuda-iq4nl-v"): Case("gguf", "rtx-4090", NEW, OLD, _kv("q8_0,iq4_nl")),
    ("llama.cpp", "kv_rule", "kv-cuda-iq4nl-k-quantised-v"): Case("gguf", "rtx-4090", NEW, OLD, _kv("iq4_nl,q8_0")),
    ("llama.cpp", "kv_rule", "kv-cuda-iq4nl-k"): Case("gguf", "rtx-4090", NEW, OLD, _kv("iq4_nl,f16")),
    # --- Metal, Vulkan, SYCL at b11312
    ("llama.cpp", "kv_rule", "kv-metal-same-type"): Case("gguf", "m3-max", NEW, OLD, _kv("q5_1")),
    ("llama.cpp", "kv_rule", "kv-metal-iq4nl"): Case("gguf", "m3-max", NEW, OLD, _kv("iq4_nl")),
    ("llama.cpp", "kv_rule", "kv-metal-mixed-quantised-v"): Case("gguf", "m3-max", NEW, OLD, _kv("q8_0,q4_0")),
    ("llama.cpp", "kv_rule", "kv-metal-mixed-plain-v"): Case("gguf", "m3-max", NEW, OLD, _kv("q8_0,f16")),
    ("llama.cpp", "kv_rule", "kv-vulkan-pair"): Case("gguf", "rtx-4090", "llama.cpp:vulkan",
                                                     "llama.cpp:vulkan==b8895", _kv("q8_0,q4_0")),
    ("llama.cpp", "kv_rule", "kv-vulkan-bf16"): Case("gguf", "rtx-4090", "llama.cpp:vulkan",
                                                     "llama.cpp:vulkan==b8895", _kv("bf16")),
    ("llama.cpp", "kv_rule", "kv-vulkan-bf16-mixed-quantised-v"): Case(
        "gguf", "rtx-4090", "llama.cpp:vulkan", "llama.cpp:vulkan==b8895", _kv("bf16,q8_0")),
    ("llama.cpp", "kv_rule", "kv-vulkan-bf16-mixed"): Case("gguf", "rtx-4090", "llama.cpp:vulkan",
                                                           "llama.cpp:vulkan==b8895", _kv("bf16,f16")),
    ("llama.cpp", "kv_rule", "kv-sycl-same-type"): Case("gguf", "arc-a770", NEW, OLD, _kv("q8_0")),
    ("llama.cpp", "kv_rule", "kv-sycl-other-type"): Case("gguf", "arc-a770", NEW, OLD, _kv("q4_1")),
    ("llama.cpp", "kv_rule", "kv-sycl-mixed-quantised-v"): Case("gguf", "arc-a770", NEW, OLD, _kv("q8_0,q4_0")),
    ("llama.cpp", "kv_rule", "kv-sycl-mixed-plain-v"): Case("gguf", "arc-a770", NEW, OLD, _kv("q8_0,f16")),
    # --- CPU: every pair from b6673
    ("llama.cpp", "kv_rule", "kv-cpu-any-pair"): Case("gguf", "cpu", OLD, "llama.cpp==b6301", _kv("q8_0,q4_0")),
    # --- -fa off / on (llama.cpp's own flag)
    ("llama.cpp", "kv_rule", "kv-fa-off-quantised-v"): Case("gguf", "rtx-4090", NEW, OLD, _kv("q8_0", "off")),
    ("llama.cpp", "kv_rule", "kv-fa-off-quantised-k"): Case("gguf", "rtx-4090", NEW, OLD, _kv("q8_0,f16", "off")),
    ("llama.cpp", "kv_rule", "kv-fa-on-cpu-fallback-k"): Case("gguf", "rtx-4090", NEW, OLD, _kv("iq4_nl,f16", "on")),
    ("llama.cpp", "kv_rule", "kv-fa-on-cpu-fallback-v"): Case("gguf", "rtx-4090", NEW, OLD, _kv("q8_0,iq4_nl", "on")),
    ("llama.cpp", "kv_rule", "kv-fa-on-cpu-fallback-mixed"): Case("gguf", "m3-max", NEW, OLD, _kv("q8_0,q4_0", "on")),
    ("llama.cpp", "kv_rule", "kv-fa-on-cpu-fallback-metal-iq4nl"): Case("gguf", "m3-max", NEW, OLD,
                                                                        _kv("iq4_nl", "on")),
    ("llama.cpp", "kv_rule", "kv-fa-on-cpu-fallback-sycl-types"): Case("gguf", "arc-a770", NEW, OLD,
                                                                       _kv("q4_1", "on")),
    # --- CUDA b6673..b10361: flash attention off the GPU for a pair without a kernel
    ("llama.cpp", "kv_rule", "kv-cuda-older-pair"): Case("gguf", "rtx-4090", OLD, NEW, _kv("q8_0")),
    ("llama.cpp", "kv_rule", "kv-cuda-older-other-quantised-v"): Case("gguf", "rtx-4090", OLD, NEW,
                                                                      _kv("q8_0,q4_0")),
    ("llama.cpp", "kv_rule", "kv-cuda-older-quantised-k"): Case("gguf", "rtx-4090", OLD, NEW, _kv("q8_0,f16")),
    ("llama.cpp", "kv_rule", "kv-cuda-older-fa-on-cpu"): Case("gguf", "rtx-4090", OLD, NEW, _kv("q8_0,q4_0", "on")),
    ("llama.cpp", "kv_rule", "kv-cuda-older-fa-on-compiled"): Case("gguf", "rtx-4090", OLD, NEW, _kv("q8_0", "on")),
    # --- builds between the ones read: not known either way
    ("llama.cpp", "kv_rule", "kv-pairs-unread-k"): Case("gguf", "rtx-4090", "llama.cpp==b11000", NEW,
                                                        _kv("q8_0,f16")),
    ("llama.cpp", "kv_rule", "kv-pairs-unread-v"): Case("gguf", "rtx-4090", "llama.cpp==b11000", NEW,
                                                        _kv("f16,q4_0")),
    # --- ExLlamaV3 K/V bits (1.6.5: one side quantised and the other fp16 is refused), LM Studio's runtime
    ("exllamav3", "kv_rule", "kv-quantised-k-fp16-v"): Case("exl3", "rtx-4090", "exllamav3", "exllamav3==1.4.1",
                                                            ("-ctk", "q4", "-ctv", "fp16")),
    ("exllamav3", "kv_rule", "kv-fp16-k-quantised-v"): Case("exl3", "rtx-4090", "exllamav3", "exllamav3==1.4.1",
                                                            ("-ctk", "fp16", "-ctv", "q4")),
    ("lm-studio", "kv_rule", "kv-llama-runtime-build-k"): Case("gguf", "rtx-4090", "lm-studio", "lm-studio==0.3.4",
                                                               _kv("q8_0,f16")),
    ("lm-studio", "kv_rule", "kv-llama-runtime-build-v"): Case("gguf", "rtx-4090", "lm-studio", "lm-studio==0.3.4",
                                                               _kv("f16,q4_0")),
    # --- KV scales: the checkpoint declares a static FP8 cache and ships no k/v scales (or no q/prob scales)
    ("vllm", "kv_scale_rule", "kv-scales-default-one"): Case("fp8-no-kv-scales", "rtx-4090", "vllm", "vllm==0.28.0"),
    ("vllm", "kv_scale_rule", "kv-scales-query-fp8"): Case("fp8-kv-scales", "h100", "vllm", "vllm==0.28.0"),
    ("sglang", "kv_scale_rule", "kv-scales-default-one"): Case("fp8-no-kv-scales", "h100", "sglang",
                                                               "sglang==0.5.21"),
    # --- known issues (matrices/known_issues.toml), both ends of each range where the data has a release there
    ("vllm", "issue", "vllm-fp8-flashinfer-linear-sm100"): Case("fp8-weights", "b200", "vllm==0.34.0",
                                                                "vllm==0.24.0"),
    ("vllm", "issue", "vllm-cutlass-fp8-selected-pre-ada"): Case("fp8-weights", "a100", "vllm==0.30.0",
                                                                 "vllm==0.31.0"),
    ("llama.cpp", "issue", "llamacpp-cuda-quantised-kv-prefill"): Case("gguf", "rtx-3090", NEW, OLD, _kv("q8_0")),
    ("llama.cpp", "issue", "llamacpp-cuda-fa-on-cpu-mixed"): Case("gguf", "rtx-3090", OLD, NEW,
                                                                  _kv("q4_1,q8_0", "on")),
    # --- transformers 5.25.0 keeps MXFP4 on the CPU without use_kernels
    ("transformers", "rule", "mxfp4-cpu-use-kernels"): Case("gpt-oss", "cpu", "transformers==5.24.0",
                                                            "transformers==5.25.0"),
    ("transformers", "rule", "mxfp4-cpu"): Case("gpt-oss", "cpu", "transformers==5.25.0", "transformers==5.24.0"),
    ("transformers", "rule", "mxfp4-xpu"): Case("gpt-oss", "arc-a770", "transformers==5.25.0", None),
}


#: attention rules: rule id -> (model, GPU, --kv-cache-dtype or None); vLLM read at 0.33.0 and 0.34.0 (0.28.0 is
#: before the range), SGLang at 0.5.23 (0.5.21 before it)
ATTENTION: dict[str, tuple[str, str, dict[str, tuple[str, str, str | None]]]] = {
    "vllm": ("vllm", "vllm==0.28.0", {
        "attn-mla-sm100": ("mla", "b200", None),
        "attn-mla-sm90": ("mla", "h100", None),
        "attn-mla-sm90-fp8": ("mla", "h100", "fp8"),
        "attn-mla-triton": ("mla", "rtx-4090", None),
        "attn-mla-triton-sm12x": ("mla", "rtx-5090", None),
        "attn-mla-ampere": ("mla", "a100", None),
        "attn-mla-ampere-fp8": ("mla", "a100", "fp8"),
        "attn-mla-e5m2": ("mla", "h100", "fp8_e5m2"),
        "attn-sinks-ampere": ("sinks", "a100", None),
        "attn-sinks-ampere-fp8": ("sinks", "a100", "fp8"),
        "attn-sinks-ada": ("sinks", "rtx-4090", None),
        "attn-sinks-hopper": ("sinks", "h100", None),
        "attn-hopper": ("plain", "h100", None),
        "attn-blackwell": ("plain", "b200", None),
        "attn-fa2": ("plain", "a100", None),
        "attn-fa2-head-512": ("head512", "a100", None),
        "attn-fa2-wide-head": ("head320", "rtx-4090", None),
        "attn-fa2-sm12x": ("plain", "rtx-5090", None),
        "attn-fp8-flashinfer": ("plain", "a100", "fp8"),
        "attn-fp8-flashinfer-sm12x": ("plain", "rtx-5090", "fp8"),
    }),
    "sglang": ("sglang", "sglang==0.5.21", {
        "attn-hopper": ("plain", "h100", None),
        "attn-mla-hopper": ("mla", "h100", None),
        "attn-sm100": ("plain", "b200", None),
        "attn-mla-sm100": ("mla", "b200", None),
        "attn-flashinfer": ("plain", "rtx-4090", None),
        "attn-flashinfer-sm12x": ("plain", "rtx-5090", None),
        "attn-sinks-triton": ("sinks", "rtx-4090", None),
        "attn-sinks-triton-sm12x": ("sinks", "rtx-5090", None),
        "attn-mla-triton": ("mla", "rtx-4090", None),
        "attn-mla-triton-sm12x": ("mla", "rtx-5090", None),
    }),
}
for _engine, (_inside, _outside, _rules) in ATTENTION.items():
    for _id, (_model, _gpu, _dtype) in _rules.items():
        CASES[(_engine, "attention_rule", _id)] = Case(_model, _gpu, _inside, _outside, _kv(_dtype) if _dtype else ())


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("boundaries")
    gguf = write_gguf(root / "m-q8_0.gguf", [("blk.0.attn_q.weight", (256, 256), Q.Q8_0),
                                             ("output_norm.weight", (256,), Q.F32)])[0]
    mla = b.bf16_llama()
    mla.configs["config.json"].update(kv_lora_rank=512, qk_rope_head_dim=64, q_lora_rank=None)
    sinks = b.bf16_llama()
    for n in range(b.DEFAULT.layers):
        sinks.tensors[f"model.layers.{n}.self_attn.sinks"] = ("BF16", (b.DEFAULT.heads,))
    no_kv_scales = b.fp8_ct_static()
    no_kv_scales.tensors = {k: v for k, v in no_kv_scales.tensors.items() if not k.endswith(("k_scale", "v_scale"))}
    weights_only = b.fp8_ct_static()
    del weights_only.configs["config.json"]["quantization_config"]["kv_cache_scheme"]
    weights_only.tensors = {k: v for k, v in weights_only.tensors.items() if not k.endswith(("k_scale", "v_scale"))}
    out = {"gguf": str(gguf)}
    for head in (512, 320):  # head sizes FlashAttention 2 does not take
        wide = b.bf16_llama()
        wide.configs["config.json"].update(head_dim=head)
        out[f"head{head}"] = str(wide.write(root / f"head{head}"))
    for name, fx in (("mla", mla), ("sinks", sinks), ("plain", b.bf16_llama()), ("exl3", b.exl3_fixture()),
                     ("fp8-kv-scales", b.fp8_ct_static()), ("fp8-no-kv-scales", no_kv_scales),
                     ("fp8-weights", weights_only), ("gpt-oss", b.gpt_oss_fixture())):
        out[name] = str(fx.write(root / name))
    return out


def check_json(path: str, engine: str, gpu: str, flags: tuple[str, ...]) -> dict[str, Any]:
    """``qcheck check PATH --engine E --gpu G FLAGS --json``, in process: the one verdict."""
    args = ["check", path, "--engine", engine, "--gpu", gpu, *flags, "--json", "--allow-unknown"]
    result = CliRunner().invoke(cli, args, standalone_mode=False, catch_exceptions=False)
    assert result.return_value in (0, 1), result.output
    verdicts = json.loads(result.stdout)["verdicts"]
    assert len(verdicts) == 1
    return verdicts[0]


def decided_by(verdict: dict[str, Any]) -> set[str]:
    """Every matrix entry the verdict names as deciding or warning: the weight rule, each dimension's rule, risks."""
    ids = {verdict["rule_id"]} | {d.get("rule_id") for d in verdict["dimensions"]}
    return {i for i in ids | {r["id"] for r in verdict["risks"]} if i}


@pytest.mark.parametrize("key", list(CASES), ids=[":".join(k[::2]) for k in CASES])
def test_the_rule_decides_inside_its_range_and_not_outside(files: dict[str, str], key: tuple[str, str, str]) -> None:
    case = CASES[key]
    rule_id = key[2]
    inside = check_json(files[case.model], case.inside, case.gpu, case.flags)
    assert rule_id in decided_by(inside), (case.inside, inside["status"], decided_by(inside))
    status = _status_of(key)
    if status is not None:  # the rule's own status is what its dimension says
        judged = [d for d in inside["dimensions"] if d.get("rule_id") == rule_id]
        assert judged and judged[0]["status"] == status, judged
    if case.outside is not None:
        outside = check_json(files[case.model], case.outside, case.gpu, case.flags)
        assert rule_id not in decided_by(outside), (case.outside, decided_by(outside))


def _status_of(key: tuple[str, str, str]) -> str | None:
    engine, kind, rule_id = key
    if kind not in ("kv_rule", "attention_rule"):
        return None
    e = load_matrix().engines[engine]
    rules = e.kv_rules if kind == "kv_rule" else e.attention_rules
    return next(r.rule.status for r in rules if r.rule.id == rule_id)


def _shipped() -> dict[tuple[str, str, str], Any]:
    """The rules this file must cover: every llama.cpp KV-pair rule, every attention and KV-scale rule, every known
    issue; and the other cases' rules, which must exist."""
    m = load_matrix()
    out: dict[tuple[str, str, str], Any] = {}
    for e in m.engines.values():
        for kv in e.kv_rules:
            out[(e.id, "kv_rule", kv.rule.id)] = kv.rule
        for a in e.attention_rules:
            out[(e.id, "attention_rule", a.rule.id)] = a.rule
        for s in e.kv_scale_rules:
            out[(e.id, "kv_scale_rule", s.rule.id)] = s.rule
        for i in e.known_issues:
            out[(e.id, "issue", i.rule.id)] = i.rule
        for r in e.rules:
            out[(e.id, "rule", r.id)] = r
    return out


def test_every_new_rule_has_a_case_and_every_case_a_rule() -> None:
    shipped = _shipped()
    assert set(CASES) <= set(shipped), sorted(set(CASES) - set(shipped))
    must = {k for k in shipped if k[1] in ("attention_rule", "kv_scale_rule", "issue")
            or (k[0] == "llama.cpp" and k[1] == "kv_rule")}
    assert must <= set(CASES), sorted(must - set(CASES))


#: a file and line (path.ext:N or :N-M) or a tracker/pull-request link
_CITED = re.compile(r"\.(?:py|cpp|cu|cuh|h|m|txt|cmake|go|toml|json):\d+|:\d+-\d+|https://github\.com/\S+/(?:issues|pull)/\d+")


@pytest.mark.parametrize("key", list(CASES), ids=[":".join(k[::2]) for k in CASES])
def test_each_rule_names_a_file_and_line_at_a_release(key: tuple[str, str, str]) -> None:
    rule = _shipped()[key]
    refs = [s.ref for s in rule.sources]
    assert any(_CITED.search(ref) for ref in refs), refs
    assert all(s.version for s in rule.sources), [(s.ref[:60], s.version) for s in rule.sources]


def test_a_header_only_checkpoint_with_and_without_kv_scales(files: dict[str, str], tmp_path: Path) -> None:
    """The same static-FP8-KV checkpoint, once with its k_scale/v_scale tensors and once without: only the second
    gets vLLM's own log line as a warning and a 'kv-scales' risk; --require-kv-scales makes it fail."""
    line = "Using KV cache scaling factor 1.0 for fp8_e4m3"
    args = ["--engine", "vllm", "--gpu", "rtx-4090"]
    runner = CliRunner()
    for model, warned in (("fp8-kv-scales", False), ("fp8-no-kv-scales", True)):
        text = runner.invoke(cli, ["check", files[model], *args], standalone_mode=False, catch_exceptions=False)
        assert text.return_value == 0 and (line in text.stdout) is warned, text.stdout
        strict = runner.invoke(cli, ["check", files[model], *args, "--require-kv-scales"], standalone_mode=False,
                               catch_exceptions=False)
        assert strict.return_value == (1 if warned else 0)
        verdict = check_json(files[model], "vllm", "rtx-4090", ())
        assert [r["id"] for r in verdict["risks"] if r["kind"] == "kv-scales"] == (
            ["kv-scales-default-one"] if warned else [])


def test_flash_attention_is_required_only_for_a_quantised_v(files: dict[str, str]) -> None:
    """llama.cpp refuses a quantised V cache with -fa off; a quantised K with an f16 V runs either way."""
    def kv_requires(kv: str, gpu: str = "rtx-4090") -> list[str]:
        verdict = check_json(files["gguf"], "llama.cpp", gpu, _kv(kv))
        return next(d for d in verdict["dimensions"] if d["dimension"] == "kv-cache")["requires"]

    assert any(r.startswith("flash attention on for a quantised V cache") for r in kv_requires("q8_0"))
    assert any(r.startswith("flash attention on for a quantised V cache") for r in kv_requires("q4_0", "cpu"))
    assert not any("flash attention" in r for r in kv_requires("q8_0,f16"))
    assert not any("flash attention" in r for r in kv_requires("q8_0,f16", "m3-max"))
