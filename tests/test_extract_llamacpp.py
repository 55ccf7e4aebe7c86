"""matrices/tools/extract_llamacpp.py and its readers on small fixture source snippets (no network, no release).

The snippets have the shapes llama.cpp's own code has (an enum, a supports_op switch with fallthrough, a best-kernel
function gated by ``#ifndef GGML_CUDA_FA_ALL_QUANTS``, the three -fa auto behaviours ...); each test asserts the fact
the reader must return, and the readers refuse code of a shape they do not know instead of guessing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "matrices" / "tools"


def _load(name: str) -> ModuleType:
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


cpp = _load("cpp_facts")
read = _load("llamacpp_read")
rules = _load("llamacpp_rules")
tool = _load("extract_llamacpp")

SUPPORTS_CUDA = """
static bool ggml_backend_cuda_device_supports_op(ggml_backend_dev_t dev, const ggml_tensor * op) {
    // a loop over the operands: not a type decision
    for (int i = 0; i < GGML_MAX_SRC; i++) {
        if (op->src[i] && op->src[i]->buffer && ggml_backend_buft_is_cuda_split(op->src[i]->buffer->buft)) {
            return false;
        }
    }
    switch (op->op) {
        case GGML_OP_MUL_MAT:
        case GGML_OP_MUL_MAT_ID:
            {
                struct ggml_tensor * a = op->src[0];
                if (a->nb[0] != ggml_element_size(a)) {
                    return false;
                }
#ifdef GGML_USE_MUSA
                if (a->type == GGML_TYPE_Q4_K) { return false; }
#endif
                switch (a->type) {
                    case GGML_TYPE_F32:
                    case GGML_TYPE_F16:
                    case GGML_TYPE_Q4_K: /* a K-quant */
                    case GGML_TYPE_MXFP4:
                        return true;
                    default:
                        return false;
                }
            } break;
        default:
            return false;
    }
}
"""

FATTN = """
static best_fattn_kernel ggml_cuda_get_best_fattn_kernel(const int device, const ggml_tensor * dst) {
    const ggml_tensor * K = dst->src[1];
    const ggml_tensor * V = dst->src[2];
    switch (K->ne[0]) {
        case  64:
        case 128:
            break;
        default:
            return BEST_FATTN_KERNEL_NONE;
    }
#ifndef GGML_CUDA_FA_ALL_QUANTS
    if (K->type != V->type) {
        return BEST_FATTN_KERNEL_NONE;
    }
#endif // GGML_CUDA_FA_ALL_QUANTS
    switch (K->type) {
        case GGML_TYPE_F16:
            break;
        case GGML_TYPE_Q4_1:
#ifndef GGML_CUDA_FA_ALL_QUANTS
            return BEST_FATTN_KERNEL_NONE;
#endif // GGML_CUDA_FA_ALL_QUANTS
        case GGML_TYPE_Q8_0:
            break;
        default:
            return BEST_FATTN_KERNEL_NONE;
    }
    if (turing_mma_available(cc)) {
        return BEST_FATTN_KERNEL_MMA_F16;
    }
    return BEST_FATTN_KERNEL_TILE;
}
"""

CONTEXT = {
    "off-by-default": 'if (ggml_is_quantized(params.type_v) && !params.flash_attn) {\n'
                      '    LLAMA_LOG_ERROR("%s: V cache quantization requires flash_attn\\n", __func__);\n}\n',
    "auto-refuses": 'if (params.flash_attn_type == LLAMA_FLASH_ATTN_TYPE_AUTO) {}\n'
                    'throw std::runtime_error("quantized V cache was requested, but this requires Flash Attention");\n',
    "auto-enables": 'LLAMA_LOG_INFO("%s: enabling flash_attn since it is required for quantized V cache\\n", __func__);\n'
                    'throw std::runtime_error("quantized V cache was requested, but this requires Flash Attention");\n',
}


def tree(root: Path, types: list[str], era: str, *, cmake_quants: str | None = None, fattn: str = FATTN) -> Path:
    """A fixture llama.cpp tree with the files the readers open (CUDA and CPU backends only)."""
    enum = "".join(f"    GGML_TYPE_{t} = {i},\n" for i, t in enumerate(types))
    files = {
        "ggml/include/ggml.h": f"enum ggml_type {{\n{enum}    // GGML_TYPE_Q4_0_4_4 = 99,\n"
                               f"    GGML_TYPE_COUNT = {len(types)},\n}};\n",
        "ggml/src/gguf.cpp": 'if (info.t.type < 0 || info.t.type >= GGML_TYPE_COUNT) {\n'
                             '    GGML_LOG_ERROR("%s: tensor \'%s\' has invalid ggml type %d\\n", __func__);\n}\n',
        "common/arg.cpp": "const std::vector<ggml_type> kv_cache_types = {\n    GGML_TYPE_F16, GGML_TYPE_Q8_0, "
                          "GGML_TYPE_Q4_1,\n};\n",
        "src/llama-context.cpp": CONTEXT[era] + ("LLAMA_FLASH_ATTN_TYPE_AUTO\n" if era != "off-by-default" else ""),
        "ggml/src/ggml-cuda/ggml-cuda.cu": SUPPORTS_CUDA,
        "ggml/src/ggml-cuda/fattn.cu": fattn,
        "ggml/src/ggml-cpu/ggml-cpu.cpp": "static bool ggml_backend_cpu_device_supports_op(ggml_backend_dev_t dev, "
                                          "const struct ggml_tensor * op) {\n switch (op->op) {\n"
                                          "  case GGML_OP_CPY: return true;\n  default: return true;\n }\n}\n",
    }
    if cmake_quants is not None:
        files["ggml/CMakeLists.txt"] = f'set   (GGML_CUDA_FA_QUANTS "{cmake_quants}" CACHE STRING "")\n'
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


# ------------------------------------------------------------------------------------------------ cpp_facts

def test_comments_and_inactive_branches_are_blanked_keeping_lines() -> None:
    text = 'a /* x\ny */ b // c\n#ifndef ALL\nno\n#else\nyes\n#endif\n"// kept"\n'
    clean = cpp.blank_comments(text)
    assert clean.count("\n") == text.count("\n") and "x" not in clean and '"// kept"' in clean
    done = cpp.preprocess(clean, {"ALL": False})
    assert "no" in done and "yes" not in done and "#" not in done
    assert "yes" in cpp.preprocess(clean, {"ALL": True})
    both = cpp.preprocess(clean, {})  # a condition not decided keeps every branch
    assert "no" in both and "yes" in both


def test_a_switch_with_fallthrough_and_an_ifndef_is_followed_per_type() -> None:
    text = cpp.preprocess(cpp.blank_comments(FATTN), {"GGML_CUDA_FA_ALL_QUANTS": False})
    start, end = cpp.function_body(text, "ggml_cuda_get_best_fattn_kernel")

    def outcome(k: str, v: str) -> str:
        env = cpp.Env({"K->type": f"GGML_TYPE_{k}", "V->type": f"GGML_TYPE_{v}", "K->ne[0]": "128"}, {},
                      lambda atom: "cc" in atom)
        out = cpp.run(text, start, end, env)
        return out.value if out.kind == "return" else out.kind

    assert outcome("Q8_0", "Q8_0") == "BEST_FATTN_KERNEL_TILE"  # the unknown device test is not taken
    assert outcome("Q4_1", "Q4_1") == "BEST_FATTN_KERNEL_NONE"
    assert outcome("Q8_0", "F16") == "BEST_FATTN_KERNEL_NONE"
    every = cpp.preprocess(cpp.blank_comments(FATTN), {"GGML_CUDA_FA_ALL_QUANTS": True})
    s2, e2 = cpp.function_body(every, "ggml_cuda_get_best_fattn_kernel")
    env = cpp.Env({"K->type": "GGML_TYPE_Q4_1", "V->type": "GGML_TYPE_F16", "K->ne[0]": "128"}, {}, lambda a: "cc" in a)
    assert cpp.run(every, s2, e2, env).value == "BEST_FATTN_KERNEL_TILE"  # falls through to Q8_0's break


def test_conditions_are_three_valued_and_unknown_atoms_stop_the_reader() -> None:
    env = cpp.Env({"a->type": "GGML_TYPE_Q4_0"}, {"has_simd": True}, lambda atom: "ne[" in atom)
    assert cpp.evaluate("has_simd && a->type != GGML_TYPE_NVFP4", env) is True
    assert cpp.evaluate("a->type == GGML_TYPE_F16 || a->ne[0] > 4", env) is None
    assert cpp.holds("a->ne[0] % 32 == 0", env) is True  # a shape test counts as holding
    assert cpp.evaluate("(a->type == GGML_TYPE_Q4_0) != (a->type == GGML_TYPE_BF16)", env) is True
    with pytest.raises(cpp.Shape, match="cannot judge"):
        cpp.evaluate("some_device_flag", env)


# ------------------------------------------------------------------------------------------------ readers

def test_the_readers_return_the_facts_of_a_tree(tmp_path: Path) -> None:
    t = read.Tree(tree(tmp_path, ["F32", "F16", "Q4_1", "Q8_0", "Q4_K", "TQ1_0", "MXFP4"], "auto-enables",
                       cmake_quants="q8_0-q8_0;f16-f16"))
    types = read.ggml_types(t)
    assert types.value == ["F32", "F16", "Q4_1", "Q8_0", "Q4_K", "TQ1_0", "MXFP4"] and types.lines == ":2-8"
    assert read.gguf_refuses(t).value == "tensor '%s' has invalid ggml type %d"
    assert read.kv_cache_types(t).value == ["F16", "Q8_0", "Q4_1"]
    assert read.fa_auto(t).value == "auto-enables"
    assert read.mul_mat(t, "cuda", types.value).value == ["Q4_1", "Q8_0", "TQ1_0"]
    fa = read.flash_attn(t, "cuda", ["F16", "Q8_0", "Q4_1"])
    assert fa.value == {"native": ["f16-f16", "q8_0-q8_0"], "converted": []}
    assert read.flash_attn(t, "cpu", ["F16", "Q8_0"]).value["native"] == ["f16-f16", "f16-q8_0", "q8_0-f16",
                                                                          "q8_0-q8_0"]


@pytest.mark.parametrize("era", list(CONTEXT))
def test_the_three_fa_auto_behaviours_are_told_apart(tmp_path: Path, era: str) -> None:
    assert read.fa_auto(read.Tree(tree(tmp_path, ["F16"], era))).value == era


def test_a_best_kernel_without_a_same_type_gate_uses_the_compiled_pairs(tmp_path: Path) -> None:
    """b11312's shape: no K != V refusal, a pair outside GGML_CUDA_FA_QUANTS is converted to f16."""
    fattn = FATTN.replace("#ifndef GGML_CUDA_FA_ALL_QUANTS\n    if (K->type != V->type) {\n        return "
                          "BEST_FATTN_KERNEL_NONE;\n    }\n#endif // GGML_CUDA_FA_ALL_QUANTS\n", "")
    fattn = fattn.replace("switch (K->type)", "if (V->type == GGML_TYPE_Q4_1) { return BEST_FATTN_KERNEL_NONE; }\n"
                                              "    switch (K->type)")
    t = read.Tree(tree(tmp_path, ["F32", "F16", "Q4_1", "Q8_0"], "auto-enables", cmake_quants="q8_0-q8_0", fattn=fattn))
    fa = read.flash_attn(t, "cuda", ["F16", "Q8_0", "Q4_1"])
    assert fa.value == {"native": ["f16-f16", "q8_0-q8_0"], "converted": ["f16-q8_0", "q8_0-f16"]}


def test_code_of_an_unknown_shape_is_recorded_unread(tmp_path: Path) -> None:
    root = tree(tmp_path, ["F16", "Q8_0"], "auto-refuses")
    (root / "ggml/src/ggml-cuda/fattn.cu").write_text("// the FA decision moved elsewhere\n")
    (root / "ggml/src/ggml-cuda/ggml-cuda.cu").write_text(SUPPORTS_CUDA.replace("switch (a->type)",
                                                                                "if (mystery_flag) return false;\n"
                                                                                "switch (a->type)"))
    facts = tool.read_tree(root)
    assert str(facts[("flash-attn", "cuda")].value).startswith("unread: ggml/src/ggml-cuda/fattn.cu: no ")
    assert facts[("mul-mat", "cuda")].value == "unread: cannot judge the condition 'mystery_flag'"
    assert facts[("flash-attn", "cpu")].value["native"]  # the other facts are still read


# ------------------------------------------------------------------------------------------------ facts -> rules

def _two_builds(tmp_path: Path) -> tuple[dict, dict]:
    """b100: no MXFP4, flash attention off by default; b200: MXFP4, -fa auto enables it for a quantised V."""
    per_release = {"b100": tool.read_tree(tree(tmp_path / "a", ["F32", "F16", "Q4_1", "Q8_0", "Q4_K", "TQ1_0"],
                                               "off-by-default")),
                   "b200": tool.read_tree(tree(tmp_path / "b", ["F32", "F16", "Q4_1", "Q8_0", "Q4_K", "TQ1_0", "MXFP4"],
                                               "auto-enables"))}
    manifests = {b: {"file": f"x-{b}.tgz (node-llama-cpp 1)", "sha256": "0" * 64, "sources_sha256": "1" * 64}
                 for b in per_release}
    return manifests, tool.histories(per_release)


def test_facts_round_trip_and_rules_are_scoped_to_the_builds_read(tmp_path: Path) -> None:
    manifests, hist = _two_builds(tmp_path)
    text = tool.render_facts(manifests, hist)
    assert tool.parse_facts(text) == (manifests, hist)
    releases = [tool.Release("b100", "node-llama-cpp", "1"), tool.Release("b200", "node-llama-cpp", "2")]
    content = rules.derive(manifests, hist, releases)
    by_id = {r["id"]: r for r in content["rules"]}
    absent = by_id["gguf-types-absent-b100-b100"]
    assert (absent["versions"], absent["verified"], absent["match"]) == ("<b200", "b100",
                                                                         {"gguf_types_any_in": ["MXFP4"]})
    cpu = by_id["gguf-cuda-cpu-b100-b200"]  # refused at both builds read: one rule, read at both ends
    assert cpu["verified"] == ">=b100,<=b200" and "versions" not in cpu
    assert cpu["match"] == {"gguf_types_any_in": ["Q4_1", "Q8_0", "TQ1_0"]}
    kv = {r["id"]: r for r in content["kv_rules"]}
    # CUDA, ROCm and the CPU refuse a quantised V without -fa alike: one rule
    assert kv["kv-cuda-rocm-cpu-refused-off-old-b100"]["pairs"] == ["f16-q8_0", "f16-q4_1", "q8_0-q8_0", "q8_0-q4_1",
                                                               "q4_1-q8_0", "q4_1-q4_1"]
    assert kv["kv-cuda-rocm-cpu-refused-off-old-b100"]["versions"] == "<b200"
    fa_cpu = kv["kv-cuda-rocm-fa-cpu-b200"]  # b200 runs a quantised V the CUDA kernel lacks on the CPU
    assert fa_cpu["status"] == "fallback" and fa_cpu["versions"] == ">b100" and "q4_1-q4_1" in fa_cpu["pairs"]
    assert kv["kv-cuda-rocm-native-b200"]["pairs"] == ["f16-f16", "q8_0-q8_0"]
    rendered = rules.render_rules(content)
    assert rendered.startswith("# llama.cpp rules read from its released source") and "_tail" not in rendered


def test_check_fails_when_a_generated_file_was_edited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifests, hist = _two_builds(tmp_path)
    facts, out = tmp_path / "llama.cpp.facts.toml", tmp_path / "llama.cpp.toml"
    monkeypatch.setattr(tool, "FACTS", facts)
    monkeypatch.setattr(tool, "RULES", out)
    monkeypatch.setattr(tool, "REPO", tmp_path)
    monkeypatch.setattr(tool, "RELEASES", (tool.Release("b100", "node-llama-cpp", "1"),
                                           tool.Release("b200", "node-llama-cpp", "2")))
    want_facts, want_rules = tool.outputs(manifests, hist)
    facts.write_text(want_facts)
    out.write_text(want_rules)
    assert tool.main(["--check"]) == 0
    out.write_text(want_rules.replace('status = "fallback"', 'status = "native"', 1))
    assert tool.main(["--check"]) == 1


def test_a_changelog_naming_another_commit_stops_the_fetch() -> None:
    release = tool.Release("b1", "llama-cpp-python", "0.3.9", "abc1234")
    tool._check_changelog(release, "## [0.3.9]\n- update llama.cpp to ggml-org/llama.cpp@abc1234567\n## [0.3.8]\n")
    with pytest.raises(SystemExit, match=r"names llama\.cpp@"):
        tool._check_changelog(release, "## [0.3.9]\n- update llama.cpp to ggml-org/llama.cpp@fff0000\n## [0.3.8]\n")
    assert tool._wanted("ggml/src/ggml-metal/kernels/fa_q4_0.metal") and not tool._wanted("README.md")
