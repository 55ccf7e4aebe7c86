"""Every rule issue #24 added, through ``qcheck check`` on both sides of its version boundary.

The KV-pair rules (``[[kv_rule]]``: llama.cpp per backend and build, ExLlamaV3 K/V bits, LM Studio's runtime), the
attention-backend rules (``[[attention_rule]]``: vLLM, SGLang), the KV-scale rules (``[[kv_scale_rule]]``), the
known issues (``matrices/known_issues.toml``) and the transformers 5.25.0 MXFP4 boundary: each case is one
deployment that the rule decides at a version inside its range, asked again at a version outside it, where it must
not. The command runs in process (``qcheck check ... --json``, the CLI the user types) on real header-only files, and
the rule is read from the JSON: ``dimensions[].rule_id`` (the KV-cache or attention rule that decided),
``risks[].id`` (a KV-scale rule or a known issue), ``rule_id`` (the weight-format rule).

llama.cpp's rules are generated from each build's code (matrices/generated/llama.cpp.toml): every one of them is
asked through ``qcheck check`` at every listed build its ``verified`` range covers (and at both ends of that range,
builds read), and at the build just outside its ``versions``, where it must not decide (``GENERATED``).

A completeness test keeps the table honest: every KV-pair rule of llama.cpp, every attention and KV-scale rule and
every known issue the matrix ships must have a case here, and every case must name a rule the matrix has; and every
one of those rules names a source with a file and line (or a tracker link) at the release it was read at.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from click.testing import CliRunner

from qcheck.cli import cli
from qcheck.matrix.loader import load_matrix
from support import builders as b
from support.gguf_helpers import Q, RawGGUF, kv_scalar, tensor_info, write_gguf

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


class Case(NamedTuple):
    model: str  # a key of the `files` fixture
    gpu: str
    inside: str  # --engine at a version the rule holds for
    outside: str | None  # --engine at a version it does not (None: the rule has no version boundary)
    flags: tuple[str, ...] = ()


def _kv(kv: str, fa: str | None = None) -> tuple[str, ...]:
    return ("--kv-cache-dtype", kv, *(("-fa", fa) if fa else ()))


NEW = "llama.cpp"  # b11312, the newest build the data has
OLD = "llama.cpp==b10068"  # inside b6673..b10361

#: (engine id, kind, rule id) -> the deployment it decides, and the versions on each side of its boundary
CASES: dict[tuple[str, str, str], Case] = {
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


#: where each llama.cpp backend is asked: (--engine prefix, --gpu)
BACKEND_GPU = {"cuda": ("llama.cpp", "rtx-4090"), "rocm": ("llama.cpp", "mi300x"), "metal": ("llama.cpp", "m3-max"),
               "vulkan": ("llama.cpp:vulkan", "rtx-4090"), "sycl": ("llama.cpp", "arc-a770"), "cpu": ("llama.cpp", "cpu")}
#: GGUF tensor type -> the ggml type id a test file holds (Q2_0 is newer than the installed gguf-py; 77 is no type)
TYPE_IDS = {q.name: int(q) for q in Q} | {"Q2_0": 42, "unknown(77)": 77}
GENERATED_FILE = Path(__file__).resolve().parent.parent / "matrices" / "generated" / "llama.cpp.toml"


class Generated(NamedTuple):
    table: str  # "rule" or "kv_rule"
    model: str  # "gguf" (a Q8_0 file) or "type:<NAME>" (a file holding that tensor type)
    engine: str  # --engine without the version
    gpu: str
    inside: tuple[str, ...]  # builds the rule was read at and listed builds it covers
    outside: str | None  # the build just outside its versions
    flags: tuple[str, ...] = ()


def _bounds(rule: dict[str, Any]) -> tuple[str | None, str | None, str, str]:
    """(exclusive lower, exclusive upper, first read, last read) of a generated rule."""
    lower = re.search(r">(b\d+)", rule.get("versions", "")) if ">=" not in rule.get("versions", "") else None
    upper = re.search(r"<(b\d+)", rule.get("versions", ""))
    read = re.findall(r"b\d+", rule["verified"])
    return (lower.group(1) if lower else None), (upper.group(1) if upper else None), read[0], read[-1]


def _generated() -> dict[str, Generated]:
    data = tomllib.loads(GENERATED_FILE.read_text(encoding="utf-8"))
    listed = load_matrix().engines["llama.cpp"].versions
    num = lambda b: int(b[1:])  # noqa: E731
    out = {}
    for table in ("rule", "kv_rule"):
        for rule in data.get(table, []):
            lower, upper, first, last = _bounds(rule)
            inside = tuple(dict.fromkeys([first, *(b for b in listed if num(first) <= num(b) <= num(last)), last]))
            outside = lower or upper
            backend = rule["backend"] if isinstance(rule["backend"], str) else rule["backend"][0]
            engine, gpu = BACKEND_GPU[backend]
            if table == "kv_rule":
                k, v = rule["pairs"][0].split("-")
                knob = rule["knobs"]["flash_attn"]
                flags = _kv(f"{k},{v}", None if knob == "null" else ("on" if knob else "off"))
                out[rule["id"]] = Generated(table, "gguf", engine, gpu, inside, outside, flags)
            else:
                types = rule["match"].get("gguf_types_any_in") or ["unknown(77)"]
                name = next(t for t in types if t in TYPE_IDS)
                out[rule["id"]] = Generated(table, f"type:{name}", engine, gpu, inside, outside)
    return out


GENERATED = _generated()


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
    for case in GENERATED.values():
        if case.model.startswith("type:") and case.model not in out:
            name = case.model[5:]
            out[case.model] = str(_typed_gguf(root / f"t-{TYPE_IDS[name]}.gguf", TYPE_IDS[name]))
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


def _typed_gguf(path: Path, type_id: int) -> Path:
    """A header-only-valid GGUF with one 256x4 weight of ggml type ``type_id`` (any id: the bytes are filler)."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

    block, size = (64, 18) if type_id == 42 else GGML_QUANT_SIZES.get(GGMLQuantizationType(type_id), (1, 1)) \
        if type_id in {int(q) for q in Q} else (1, 1)
    weight = 4 * (256 // block) * size
    raw = RawGGUF(kvs=[kv_scalar("general.architecture", GGUFValueType.STRING, "llama"),
                       kv_scalar("llama.context_length", GGUFValueType.UINT32, 2048)])
    raw.tensors = [tensor_info("output_norm.weight", [256], Q.F32, 0),
                   tensor_info("blk.0.attn_q.weight", [256, 4], type_id, 1024)]
    raw.data = struct.pack("<256f", *([1.0] * 256)) + b"\x01" * weight
    path.write_bytes(raw.build())
    return path


@pytest.mark.parametrize("rule_id", list(GENERATED))
def test_each_generated_llama_cpp_rule_decides_where_it_was_read(files: dict[str, str], rule_id: str) -> None:
    """At every listed build the rule's verified range covers (and the builds read at its ends) the rule decides,
    with its own status; at the build just outside its versions it does not."""
    case = GENERATED[rule_id]
    status = next(r.status for r in load_matrix().engines["llama.cpp"].rules if r.id == rule_id) \
        if case.table == "rule" else _status_of(("llama.cpp", "kv_rule", rule_id))
    for build in case.inside:
        verdict = check_json(files[case.model], f"{case.engine}=={build}", case.gpu, case.flags)
        assert rule_id in decided_by(verdict), (build, verdict["status"], decided_by(verdict))
        judged = verdict if case.table == "rule" else next(d for d in verdict["dimensions"] if d.get("rule_id") ==
                                                           rule_id)
        assert judged["status"] == status or (case.table == "rule" and verdict["dimensions"][0]["status"] == status)
    if case.outside is not None:
        verdict = check_json(files[case.model], f"{case.engine}=={case.outside}", case.gpu, case.flags)
        assert rule_id not in decided_by(verdict), (case.outside, decided_by(verdict))


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
    covered = set(CASES) | {("llama.cpp", case.table, rule_id) for rule_id, case in GENERATED.items()}
    assert must <= covered, sorted(must - covered)
    assert {("llama.cpp", "rule", i) for i, c in GENERATED.items() if c.table == "rule"} <= set(shipped)


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
