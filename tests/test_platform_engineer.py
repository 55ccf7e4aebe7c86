"""Issue 33, "What a platform engineer ran into": each item as the user met it, through the real CLI.

The checkpoints are real headers: an 8B Llama Q4_K_M GGUF (gguf-py's writer, tensor data left sparse) and tiny
safetensors checkpoints from tests/support/builders.py; the matrix is the shipped one (``matrix=False``), since
the items are about what users are told.
"""

from __future__ import annotations

import json
import re
import shutil
import stat
from pathlib import Path

import pytest
import tomllib

from support import model_headers
from support.gate_helpers import qcheck

GIB = 2**30


@pytest.fixture(scope="module")
def llama8b(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("gguf") / "llama8b-Q4_K_M.gguf"
    model_headers.write_header(path, model_headers.llama31_8b_q4_k_m())
    return str(path)


def check_json(*args: str, **env: str) -> tuple[int, dict, str]:
    proc = qcheck("check", *args, "--json", matrix=False, **env)
    return proc.returncode, (json.loads(proc.stdout) if proc.stdout else {}), proc.stderr


# ------------------------------------------------------------------------------ 1. GPU variants

def test_rtx_4060_is_the_8_gb_card_and_says_nothing_about_variants(llama8b) -> None:
    """The RTX 4060 is sold with 8 GB only: judged at 8 GB (it was the 16 GB 4060 Ti before), no default to state."""
    _, data, _ = check_json(llama8b, "--engine", "llama.cpp", "--gpu", "rtx-4060", "--context", "32768")
    (v,) = data["verdicts"]
    assert v["gpu"] == "rtx-4060" and v["gpu_note"] is None
    assert v["memory"]["gpu_memory_gib"] == 7.84 and "its 8 GB datasheet size" in v["memory"]["capacity"]
    assert v["memory"]["fits"] is False


def test_a_product_sold_in_two_sizes_is_judged_at_its_default_and_says_so(llama8b) -> None:
    proc = qcheck("check", llama8b, "--engine", "llama.cpp", "--gpu", "rtx-4060-ti", "--context", "32768",
                  matrix=False)
    assert proc.returncode == 0, proc.stderr
    gpu_line = next(line for line in proc.stdout.splitlines() if line.startswith("  gpu:"))
    assert "rtx-4060-ti judged as the 8 GB configuration, its default" in gpu_line
    assert "also sold as rtx-4060-ti-16gb (16 GB)" in gpu_line and "--gpu rtx-4060-ti:16gb" in gpu_line
    _, data, _ = check_json(llama8b, "--engine", "llama.cpp", "--gpu", "rtx-4060-ti", "--context", "32768")
    assert data["verdicts"][0]["memory"]["gpu_memory_gib"] == 7.84
    assert "the 8 GB card went on sale first" in data["verdicts"][0]["gpu_note"]


@pytest.mark.parametrize("name", ["rtx-4060-ti:16gb", "rtx-4060-ti-16gb", "RTX 4060 Ti 16GB", "rtx-4060-ti:16",
                                  "NVIDIA GeForce RTX 4060 Ti 16GB", "rtx_4060_ti 16 GB"])
def test_a_size_picks_the_configuration_however_it_is_written(llama8b, name: str) -> None:
    code, data, err = check_json(llama8b, "--engine", "llama.cpp", "--gpu", name, "--context", "32768")
    assert code == 0, err
    (v,) = data["verdicts"]
    assert (v["gpu"], v["gpu_note"], v["memory"]["gpu_memory_gib"]) == ("rtx-4060-ti-16gb", None, 15.68)
    assert v["memory"]["fits"] is True


@pytest.mark.parametrize(("name", "gpu", "gib"), [  # gib: the runtime total (a driver figure, else 0.98 x datasheet)
    ("NVIDIA GeForce RTX 4060 8GB", "rtx-4060", 7.84), ("rtx-4060:8gb", "rtx-4060", 7.84),
    ("rtx-4060-8gb", "rtx-4060", 7.84), ("NVIDIA H100 80GB HBM3", "h100", 79.19), ("NVIDIA H100 NVL", "h100-nvl", 92.12),
    ("h100:94gb", "h100-nvl", 92.12), ("NVIDIA A100-SXM4-80GB", "a100-80gb", 79.25), ("a100-40gb", "a100", 39.5),
    ("Tesla V100-SXM2-32GB", "v100-32gb", 31.73), ("NVIDIA GH200 480GB", "gh200", 94.08),
    ("GeForce RTX 3060 8GB", "rtx-3060-8gb", 7.84), ("rtx-5060-ti:16gb", "rtx-5060-ti-16gb", 15.68),
])
def test_device_tool_names_and_sizes_name_the_configuration(llama8b, name: str, gpu: str, gib: float) -> None:
    code, data, err = check_json(llama8b, "--engine", "llama.cpp", "--gpu", name, "--batch", "1")
    assert code == 0, err
    (v,) = data["verdicts"]
    assert (v["gpu"], v["gpu_note"], v["memory"]["gpu_memory_gib"]) == (gpu, None, gib)


def test_every_default_of_a_product_sold_in_several_sizes_is_stated(llama8b) -> None:
    """a100 is the 40 GB part (the one AWS p4d, GCP A2 and Azure ND A100 v4 rent); h100 the SXM5 part."""
    _, data, _ = check_json(llama8b, "--engine", "llama.cpp", "--gpu", "a100", "--gpu", "h100", "--gpu",
                               "v100", "--gpu", "rtx-3060", "--context", "8192")
    notes = {v["gpu"]: v["gpu_note"] for v in data["verdicts"]}
    assert set(notes) == {"a100", "h100", "v100", "rtx-3060"}
    assert "40 GB configuration" in notes["a100"] and "a100-80gb (80 GB)" in notes["a100"]
    assert "h100-pcie (80 GB), h100-nvl (94 GB)" in notes["h100"] and "--gpu h100-pcie" in notes["h100"]
    assert "16 GB configuration" in notes["v100"] and "12 GB configuration" in notes["rtx-3060"]


@pytest.mark.parametrize(("name", "fragment"), [
    ("rtx-4090:48gb", "knows rtx-4090 with 24 GB, not 48 GB"),
    ("rtx-4090-48gb", "knows rtx-4090 with 24 GB, not 48 GB"),
    ("rtx-4060-ti:12gb", "with 8 GB and 16 GB, not 12 GB"),
    ("hopper:80gb", "'hopper' is an architecture"),
    ("h100:lots", "after ':' give a memory size"),
    ("rtx-4061", "did you mean: rtx-4060"),
    ("rtx-4090-\u00b2gb", "did you mean: rtx-4090"),  # a superscript two is no size (isdigit, but not int)
    ("rtx-4090:\u0662gb", "after ':' give a memory size"),
])
def test_a_size_the_product_is_not_sold_in_is_one_line_exit_2(llama8b, name: str, fragment: str) -> None:
    proc = qcheck("check", llama8b, "--engine", "llama.cpp", "--gpu", name, matrix=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and fragment in proc.stderr, proc.stderr


def _fake_nvidia_smi(bindir: Path, line: str) -> str:
    bindir.mkdir(parents=True, exist_ok=True)
    tool = bindir / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\necho '{line}'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return str(bindir)


@pytest.mark.parametrize(("total_mib", "gpu"), [(16380, "rtx-4060-ti-16gb"), (8188, "rtx-4060-ti")])
def test_gpu_auto_picks_the_configuration_by_the_memory_the_card_reports(llama8b, tmp_path, total_mib: int,
                                                                         gpu: str) -> None:
    path = _fake_nvidia_smi(tmp_path / "bin", f"NVIDIA GeForce RTX 4060 Ti, {total_mib}, {total_mib - 400}")
    code, data, err = check_json(llama8b, "--engine", "llama.cpp", "--gpu", "auto", PATH=path,
                                 QCHECK_NO_GPU_DETECT="")
    assert code in (0, 1), err
    (v,) = data["verdicts"]
    assert (v["gpu"], v["gpu_note"]) == (gpu, None)  # the device said which: no default to state
    assert v["memory"]["gpu_memory_bytes"] == int(round((total_mib - 400) / 1024, 2) * GIB)


def test_docs_state_every_default_and_its_reason() -> None:
    """docs/gpus.md's table of defaults is the data's (matrices/gpus.toml default_because), row for row."""
    from qcheck.matrix import load_matrix

    gpus = load_matrix().gpus
    rows = []
    for default, members in gpus.families.items():
        g = gpus.gpus[default]
        others = ", ".join(f"`{m}` ({gpus.gpus[m].memory_gib:g} GB)" for m in members[1:])
        rows.append(f"| `{default}` | {g.memory_gib:g} GB | {others} | {g.default_because} |")
    doc = (Path(__file__).resolve().parents[1] / "docs" / "gpus.md").read_text(encoding="utf-8")
    assert "\n".join(rows) in doc
    assert len(rows) >= 15 and {"a100", "h100", "rtx-4060-ti", "rtx-3060", "rtx-5060-ti"} <= set(gpus.families)


# ------------------------------------------------------------------------------ 6. warnings that do not apply

@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Real safetensors headers: AWQ with head size 128, BF16 with head sizes 512 and 320, sliding-window, MLA."""
    from support import builders as b

    root = tmp_path_factory.mktemp("shapes")
    out = {"awq128": str(b.awq_fixture(b.Shape(hidden=512, intermediate=1024, heads=4, kv_heads=2)).write(
        root / "awq128"))}
    for name, extra in (("head512", {"head_dim": 512}), ("head320", {"head_dim": 320}),
                        ("swa", {"sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"]}),
                        ("mla", {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "q_lora_rank": None})):
        fx = b.bf16_llama()
        fx.configs["config.json"].update(extra)
        out[name] = str(fx.write(root / name))
    return out


@pytest.mark.parametrize("gpu", ["l40s", "rtx-4090", "a100"])
def test_a_head_size_128_model_gets_no_warning_about_head_sizes_above_256(shapes, gpu: str) -> None:
    proc = qcheck("check", shapes["awq128"], "--engine", "vllm", "--gpu", gpu, matrix=False)
    assert proc.returncode == 0, proc.stderr
    assert "vLLM picks FLASH_ATTN (FlashAttention 2)" in proc.stdout
    assert "head sizes above" not in proc.stdout and "warning:" not in proc.stdout


@pytest.mark.parametrize(("model", "backend"), [("head512", "vLLM picks FLASHINFER"),
                                                ("head320", "vLLM picks TRITON_ATTN")])
def test_a_wide_head_model_is_told_the_backend_it_gets(shapes, model: str, backend: str) -> None:
    proc = qcheck("check", shapes[model], "--engine", "vllm", "--gpu", "a100", matrix=False)
    attention = next(line for line in proc.stdout.splitlines() if line.startswith("  attention:"))
    assert backend in attention and "FlashAttention 2 takes" in attention and "FLASH_ATTN" not in attention


def test_sliding_window_and_mla_warnings_reach_only_those_models(shapes) -> None:
    swa = qcheck("check", shapes["swa"], "--engine", "transformers", "--gpu", "a100", "--kv-cache-dtype", "q4",
                 matrix=False).stdout
    plain = qcheck("check", shapes["head512"], "--engine", "transformers", "--gpu", "a100", "--kv-cache-dtype", "q4",
                   matrix=False).stdout
    assert "this model has sliding-window layers, which QuantizedCache refuses" in swa
    assert "sliding-window" not in plain and "warning:" not in plain
    mla = qcheck("check", shapes["mla"], "--engine", "vllm", "--gpu", "cpu", "--kv-cache-dtype", "fp8",
                 matrix=False).stdout
    dense = qcheck("check", shapes["swa"], "--engine", "vllm", "--gpu", "cpu", "--kv-cache-dtype", "fp8",
                   matrix=False).stdout
    assert "MLA models (DeepSeek-style) take only" in mla and "MLA models" not in dense


def test_tensor_parallelism_that_divides_is_a_flag_to_pass_not_a_warning(shapes) -> None:
    proc = qcheck("check", shapes["awq128"], "--engine", "vllm", "--gpu", "h100", "--tp", "2", matrix=False)
    assert proc.returncode == 0 and "warning:" not in proc.stdout
    assert "  requires:  --tensor-parallel-size 2" in proc.stdout
    data = json.loads(qcheck("check", shapes["awq128"], "--engine", "vllm", "--gpu", "h100", "--tp", "2", "--json",
                             matrix=False).stdout)
    (v,) = data["verdicts"]
    assert v["warnings"] == [] and "--tensor-parallel-size 2" in v["requires"]


# ------------------------------------------------------------------------------ 7. the versions teams run

def test_a_pasted_command_says_which_release_it_is_judged_as_and_why(shapes) -> None:
    proc = qcheck("check", "--gpu", "l40s", "--", "vllm", "serve", shapes["awq128"], "--max-model-len", "4096",
                  matrix=False)
    assert proc.returncode == 0, proc.stderr
    release = next(line for line in proc.stdout.splitlines() if line.startswith("  release:"))
    assert "vllm 0.34.0, the newest vLLM release qcheck has data for" in release
    assert "a command line does not say which release runs it" in release and "--engine vllm==VERSION" in release
    data = json.loads(qcheck("check", "--gpu", "l40s", "--json", "--", "vllm", "serve", shapes["awq128"],
                             matrix=False).stdout)
    assert data["deployment"]["release"].startswith("vllm 0.34.0, the newest")
    pinned = qcheck("check", "--gpu", "l40s", "--engine", "vllm==0.11.0", "--", "vllm", "serve", shapes["awq128"],
                    matrix=False)
    assert "release:" not in pinned.stdout and "vllm 0.11.0 x l40s" in pinned.stdout  # the user said which


def test_a_release_older_than_all_the_data_is_one_plain_line(shapes) -> None:
    proc = qcheck("check", shapes["awq128"], "--engine", "vllm==0.1.0", "--gpu", "l40s", matrix=False)
    assert proc.returncode == 1
    why = [line for line in proc.stdout.splitlines() if line.startswith("  why:")]
    assert proc.stdout.count("predates") == 1 and why == ["  why:       vLLM 0.1.0 predates all the data: qcheck's vLLM facts were read at 0.7.2 and later "
                   "(the newest: 0.34.0), so nothing says what 0.1.0 runs"]
    assert "architecture:" not in proc.stdout and "warning:" not in proc.stdout
    assert "try:       vLLM 0.34.0 runs it natively" in proc.stdout  # the fix on their engine first


def test_the_attention_line_says_why_it_is_not_judged_at_an_older_release(shapes) -> None:
    proc = qcheck("check", shapes["awq128"], "--engine", "vllm==0.11.0", "--gpu", "l40s", matrix=False)
    assert proc.returncode == 0
    assert ("warning:   attention: not judged at vLLM 0.11.0: which attention backend it picks for MHA/GQA models "
            "was read for vLLM >=0.33.0 only") in proc.stdout
    assert ("read at:   the weight-format rule was read at vllm 0.33.0, 0.34.0, not at 0.11.0: it covers 0.11.0 by "
            "its version range") in proc.stdout
    sources = proc.stdout.split("sources:")[1].splitlines()
    assert sources[0].endswith("@ 0.11.0")  # the source read at the release asked is cited first


# ------------------------------------------------------------------------------ 10. the smaller things

def test_a_typo_in_an_engine_flag_gets_did_you_mean_on_that_engine_first(shapes) -> None:
    proc = qcheck("check", "--gpu", "l40s", "--", "vllm", "serve", shapes["awq128"], "--max-model-lenn", "4096",
                  matrix=False)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    tries = [line for line in lines if line.startswith("  try:")]
    assert tries == ["  try:       vLLM has no --max-model-lenn: did you mean --max-model-len or --max-log-len? Fix "
                     "the command and judge it again"]
    assert "  refused:    --max-model-lenn; 4096 (the verdict says why)" in lines
    assert not any(line.startswith("  not judged: none") for line in lines)  # not beside a refused flag
    judged = next(line for line in lines if line.startswith("  judged:"))
    assert judged == f"  judged:     {shapes['awq128']} -> model" and "<model_tag>" not in proc.stdout
    far = qcheck("check", "--gpu", "h100", "--", "vllm", "serve", shapes["awq128"], "--frobnicate", matrix=False)
    tries = [line for line in far.stdout.splitlines() if line.startswith(("  try:", "             "))]
    assert far.returncode == 1 and tries[0] == ("  try:       vLLM 0.34.0 has no --frobnicate (nor any flag close to "
                                                "it): remove it from the command and judge it again")


# ------------------------------------------------------------------------------ 9. tables without names

def test_a_folder_of_two_different_models_names_each_row(tmp_path) -> None:
    folder = tmp_path / "two"
    folder.mkdir()
    model_headers.write_header(folder / "llama8b-Q4_K_M.gguf", model_headers.llama31_8b_q4_k_m())
    model_headers.write_header(folder / "gemma12b-Q4_K_M.gguf", model_headers.gemma3_12b_q4_k_m())
    proc = qcheck("check", str(folder), "--gpu", "rtx-4090", "--engine", "llama.cpp", matrix=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[2].split()[:2] == ["file", "quant"]
    assert [line.split()[:2] for line in lines[3:5]] == [["llama8b-Q4_K_M.gguf", "Q4_K_M"],
                                                          ["gemma12b-Q4_K_M.gguf", "Q4_K_M"]]
    data = json.loads(qcheck("check", str(folder), "--gpu", "rtx-4090", "--engine", "llama.cpp", "--json",
                             matrix=False).stdout)
    assert [(r["file"], r["model"]) for r in data["quants"]] == [
        ("llama8b-Q4_K_M.gguf", "llama 8030261312"), ("gemma12b-Q4_K_M.gguf", "gemma3 11765788416")]


def test_quants_of_one_model_need_no_file_column_and_help_says_what_happens(tmp_path) -> None:
    from support.gguf_helpers import Q, write_gguf

    folder = tmp_path / "one"
    folder.mkdir()
    tensors = [("token_embd.weight", (256, 256)), ("blk.0.attn_q.weight", (256, 256)),
               ("output_norm.weight", (256,))]
    for quant, qtype, ftype in (("Q8_0", Q.Q8_0, 7), ("Q4_0", Q.Q4_0, 2)):
        write_gguf(folder / f"tiny-{quant}.gguf", [(n, s, qtype if len(s) == 2 else Q.F32) for n, s in tensors],
                   file_type=ftype)
    proc = qcheck("check", str(folder), "--gpu", "rtx-4090", "--engine", "llama.cpp", matrix=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[2].split()[0] == "quant"
    help_text = " ".join(qcheck("check", "--help", matrix=False).stdout.split())
    assert "several models (GGUF files, safetensors variants in sub-folders, org/name@* branches): with --gpu, one " \
           "which-quant-fits table" in help_text
    bare = qcheck("check", str(folder), matrix=False)  # without --gpu: the usage error the help describes
    assert bare.returncode == 2 and "2 GGUF checkpoints here" in bare.stderr


# ------------------------------------------------------------------------------ 4. advice in the engine's words

def _block(stdout: str, engine: str) -> str:
    """One verdict's block of the text output."""
    blocks = stdout.split("\n\n")
    return next(b for b in blocks if f"  {engine} " in b.lstrip().split("\n")[0])  # status words, then engine


def test_ollama_is_told_num_gpu_and_num_ctx_not_llama_cpp_flags(llama8b) -> None:
    proc = qcheck("check", llama8b, "--engine", "ollama", "--engine", "lm-studio", "--engine", "llama.cpp",
                  "--gpu", "rtx-4060", "--context", "32768", matrix=False)
    # LM Studio places no layers by itself: its start-up is unknown (exit 1), and the fix is said in its words
    assert proc.returncode == 1, proc.stderr
    ollama, lms, cpp = (_block(proc.stdout, e) for e in ("ollama", "lm-studio", "llama.cpp"))
    assert "START UNKNOWN" in lms and "set them: LM Studio's GPU offload: 28 of 33 layers" in lms
    assert "-ngl" not in ollama.replace("(passed as -ngl)", "")
    assert "Ollama leaves the layers to llama-server's own fit (num_gpu unset): about 26 of 33 on the GPU" in ollama
    assert "PARAMETER num_gpu 26 in a Modelfile pins it" in ollama
    assert ("requires:  PARAMETER num_ctx 32768 in the Modelfile (or OLLAMA_CONTEXT_LENGTH=32768 on the server): "
            "without it Ollama runs 4096 (ollama's default for a GPU of 8 GiB)") in ollama
    assert "lms load --gpu 0.85" in lms and "lms load --context-length 32768" in lms and "-ngl" not in lms
    assert "-ngl 24 of 33" in cpp and "requires:" not in cpp  # llama.cpp's own words; its default is the model's


@pytest.mark.parametrize(("context", "said"), [("32768", False), ("65536", True)])
def test_ollamas_default_context_follows_its_source_thresholds(llama8b, context: str, said: bool) -> None:
    """An RTX 4090 reports 23.65 GiB: Ollama 0.33 runs 32768 by default from 23 GiB of VRAM (server/routes.go)."""
    _, data, _ = check_json(llama8b, "--engine", "ollama", "--gpu", "rtx-4090", "--context", context)
    (v,) = data["verdicts"]
    assert v["memory"]["default_context"] == 32768
    assert any("PARAMETER num_ctx 65536" in r for r in v["requires"]) is said
    _, bare, _ = check_json(llama8b, "--engine", "ollama", "--gpu", "rtx-4090", "--batch", "1")
    assert bare["verdicts"][0]["memory"]["context"] == 32768 and bare["verdicts"][0]["requires"] == []


def test_engine_words_are_validated_data() -> None:
    from qcheck.engine_words import parse_engine_words
    from qcheck.matrix.schema import MatrixDataError, SourceSpec, Where

    src = {"s": SourceSpec("s", "r", "1")}
    where = Where("matrices/suggestions.toml", "[[engine_words]]")
    for raw, check in (([{"engine": "nope", "sources": ["s"]}], "bad-value"),
                       ([{"engine": "ollama", "offload": "{ngls}", "sources": ["s"]}], "bad-placeholder"),
                       ([{"engine": "ollama", "sources": ["x"]}], "undefined-source"),
                       ([{"engine": "ollama", "sources": ["s"], "colour": 1}], "unknown-key")):
        with pytest.raises(MatrixDataError) as info:
            parse_engine_words(raw, {"ollama"}, src, where)
        assert info.value.check == check


def test_a_fallback_names_only_the_kernels_of_its_own_format(tmp_path) -> None:
    """An FP8 checkpoint on an A100 is never told 'INT8 kernels would allow 2.0x' (no INT8 kernel runs FP8 weights);
    on an L40S (FP8 tensor cores) the lost FP8 rate is named."""
    from support import builders as b

    fp8 = str(b.fp8_ct_channel().write(tmp_path / "fp8"))
    a100 = json.loads(qcheck("check", fp8, "--engine", "vllm", "--gpu", "a100", "--context", "4096", "--json",
                             matrix=False).stdout)["verdicts"][0]
    assert a100["status"] == "fallback" and a100["memory"]["speed"]["native_format"] == "fp8"
    assert "would allow" not in a100["memory"]["speed_summary"] and "INT8" not in a100["memory"]["speed_summary"]
    block = str(b.fp8_block_deepseek().write(tmp_path / "block"))
    l40s = json.loads(qcheck("check", block, "--engine", "vllm", "--gpu", "l40s", "--context", "4096", "--json",
                             matrix=False).stdout)["verdicts"][0]
    assert "the fallback computes in BF16: FP8 kernels would allow 2.0x" in l40s["memory"]["speed_summary"]


def test_several_paths_in_one_command_are_each_judged(tmp_path) -> None:
    from support import builders as b

    root = Path(__file__).resolve().parents[1] / "examples"
    mlx = str(b.mlx_fixture().write(tmp_path / "mlx"))
    proc = qcheck("check", str(root / "tiny-llama-Q4_0.gguf"), mlx, "--engine", "llama.cpp", "--gpu", "rtx-4090",
                  "--json", matrix=False)
    data = json.loads(proc.stdout)
    assert data["schema"] == "qcheck.check-set/1" and len(data["results"]) == 2
    assert [r["verdicts"][0]["status"] for r in data["results"]] == ["native", "unsupported"]
    assert proc.returncode == data["exit_code"] == 1  # the worst of the two
    lone = qcheck("check", str(root / "tiny-llama-Q4_0.gguf"), mlx, matrix=False)
    assert lone.returncode == 2 and "several PATHs are judged each on the --engine/--gpu given" in lone.stderr


def test_symlinked_model_sub_folders_are_named_not_silently_skipped(tmp_path, shapes) -> None:
    only_links = tmp_path / "links"
    only_links.mkdir()
    (only_links / "awq").symlink_to(shapes["awq128"], target_is_directory=True)
    (only_links / "bf16").symlink_to(shapes["head512"], target_is_directory=True)
    proc = qcheck("check", str(only_links), "--gpu", "l40s", "--engine", "vllm", matrix=False)
    assert proc.returncode == 2
    assert "sub-folders that are symbolic links are not followed: awq/, bf16/" in proc.stderr
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copytree(shapes["awq128"], mixed / "awq")
    shutil.copytree(shapes["head320"], mixed / "bf16")
    (mixed / "swa").symlink_to(shapes["swa"], target_is_directory=True)
    table = qcheck("check", str(mixed), "--gpu", "l40s", "--engine", "vllm", matrix=False)
    assert table.returncode == 0, table.stderr
    assert "not followed: swa/ is a symbolic link (a link can lead anywhere); pass it as a PATH" in table.stdout


def test_tp_2_on_a_one_gpu_compose_service_is_told_to_reserve_2_gpus(tmp_path) -> None:
    root = Path(__file__).resolve().parents[1] / "examples"
    (tmp_path / ".git").mkdir()
    shutil.copytree(root / "tiny-llama-bf16", tmp_path / "models" / "bf16")
    (tmp_path / "compose.yaml").write_text(
        "services:\n  vllm:\n    image: vllm/vllm-openai:v0.33.0\n"
        '    command: ["--model", "/models/bf16", "--tensor-parallel-size", "2"]\n'
        "    deploy:\n      resources:\n        reservations:\n          devices:\n"
        "            - driver: nvidia\n              count: 1\n              capabilities: [gpu]\n", encoding="utf-8")
    (tmp_path / "qcheck.toml").write_text(
        'deployments = [{ file = "compose.yaml", models = { "/models/bf16" = "models/bf16" }, gpu = "h100" }]\n',
        encoding="utf-8")
    proc = qcheck("gate", "--json", cwd=tmp_path, matrix=False)
    assert proc.returncode == 1, proc.stderr
    (v,) = json.loads(proc.stdout)["models"][0]["verdicts"]
    assert "World size (2) is larger than the number of available GPUs (1)" in " ".join(v["reasons"])
    assert v["startup"]["outcome"] == "does-not-start"
    assert "(give the container 2 GPUs, or lower --tensor-parallel-size x --pipeline-parallel-size)" in \
        v["startup"]["message"]
    fix = ("reserve 2 GPUs for this container (compose: deploy.resources.reservations.devices count: 2; Kubernetes: "
           "nvidia.com/gpu: 2), or run it with -tp 1")
    assert v["suggestions"][0] == fix == v["startup"]["fix"]  # the fix on this container, before any other engine
    text = qcheck("gate", cwd=tmp_path, matrix=False).stdout
    assert "DOES NOT START  vllm 0.33.0 x h100  <- fails" in text and f"try: {fix}" in text
    pp = qcheck("check", str(tmp_path / "models" / "bf16"), "--gpu", "h100", "--json", "--", "vllm", "serve",
                "/m", "-tp", "2", "-pp", "2", matrix=False)  # a plain command: no GPU count, nothing to reserve
    assert json.loads(pp.stdout)["verdicts"][0]["startup"]["fix"] is None


# ------------------------------------------------------------------------------ 10. the gate's policy

def test_gate_explain_prints_every_policy_key_from_the_one_source() -> None:
    from qcheck.eval.gate import Thresholds
    from qcheck.knobs import KNOBS
    from qcheck.policy import DEPLOYMENT_KEYS, MEMORY_KEYS, MODEL_KEYS, QUALITY_KEYS, TARGET_KEYS, TOP_KEYS
    from qcheck.policy_format import POLICY_TOML

    proc = qcheck("gate", "--explain", matrix=False)
    assert proc.returncode == 0 and POLICY_TOML in proc.stdout
    tomllib.loads(POLICY_TOML)  # the reference is a TOML document
    keys = {*TOP_KEYS, *MODEL_KEYS, *TARGET_KEYS, *DEPLOYMENT_KEYS, *MEMORY_KEYS, *(k.policy_key for k in KNOBS),
            *QUALITY_KEYS, *(n.replace("_", "-") for n in Thresholds.names())}
    missing = sorted(k for k in keys if not re.search(rf"(?<![\w-]){re.escape(k)}(?![\w-])", POLICY_TOML))
    assert missing == []
    docs = (Path(__file__).resolve().parents[1] / "docs" / "ci.md").read_text(encoding="utf-8")
    assert f"```toml\n{POLICY_TOML}```" in docs  # docs/ci.md shows the same text
    assert "qcheck gate --explain" in " ".join(qcheck("gate", "--help", matrix=False).stdout.split())


def test_gate_init_names_deployments_above_the_targets(tmp_path) -> None:
    shutil.copy(Path(__file__).resolve().parents[1] / "examples" / "tiny-llama-Q4_0.gguf", tmp_path / "m.gguf")
    assert qcheck("gate", "--init", cwd=tmp_path, matrix=False).returncode == 0
    text = (tmp_path / "qcheck.toml").read_text()
    assert "# deployments = [" in text and text.index("# deployments = [") < text.index("\n[[targets]]\n")
    uncommented = text.replace("# deployments = [", "deployments = [").replace(
        '#   { file = "deploy/compose.yaml"', '  { file = "deploy/compose.yaml"').replace("\n# ]\n", "\n]\n")
    assert "deployments" in tomllib.loads(uncommented)  # uncommented where it stands, it is a top-level key


def test_a_top_level_key_after_targets_gets_the_hint_to_move_it_up(tmp_path) -> None:
    shutil.copy(Path(__file__).resolve().parents[1] / "examples" / "tiny-llama-Q4_0.gguf", tmp_path / "m.gguf")
    (tmp_path / "qcheck.toml").write_text('models = ["m.gguf"]\n[[targets]]\nengine = "llama.cpp"\ngpu = "cpu"\n'
                                          'lfs-pointers = "skip"\n', encoding="utf-8")
    proc = qcheck("gate", cwd=tmp_path, matrix=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "targets[0].lfs-pointers: unknown key here; it is a top-level key" in proc.stderr
    assert "move it above the first one" in proc.stderr


def test_the_markdown_report_keeps_the_memory_and_max_context_figures(llama8b) -> None:
    proc = qcheck("check", llama8b, "--engine", "llama.cpp", "--gpu", "rtx-4090", "--gpu", "rtx-4060",
                  "--context", "32768", "--format", "markdown", matrix=False)
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "llama.cpp" in line]
    assert "memory: needs 8.45 GiB, fits in 22.14 GiB usable, at context 32768, max context 131072" in rows[0]
    assert "does not fit in 6.33 GiB usable, at context 32768, max context 65536 on 2 GPUs" in rows[1]
    assert "-ngl 24 of 33" in rows[1]


def test_a_team_asking_about_vllm_gets_the_vllm_fix_before_another_engine() -> None:
    gguf = str(Path(__file__).resolve().parents[1] / "examples" / "tiny-llama-MXFP4.gguf")
    (v,) = json.loads(qcheck("check", gguf, "--engine", "vllm", "--gpu", "rtx-4090", "--json",
                             matrix=False).stdout)["verdicts"]
    assert v["status"] == "unknown"
    assert v["suggestions"][0] == ("vLLM >= 0.24 loads GGUF only through the out-of-tree plugin: pip install "
                                   "vllm-gguf-plugin")
    assert "--engine llama.cpp" in v["suggestions"][1]  # another engine only after the fix on theirs


@pytest.mark.parametrize(("labels", "gpu"), [
    ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}, "a100"),
    ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, "a100-80gb"),
    ({"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}, "a100"),
    ({"cloud.google.com/gke-accelerator": "nvidia-a100-80gb"}, "a100-80gb"),
    ({"nvidia.com/gpu.product": "NVIDIA-H100-NVL"}, "h100-nvl"),
    ({"nvidia.com/gpu.product": "NVIDIA-H100-PCIe"}, "h100-pcie"),
    ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "h100"),
    ({"node.kubernetes.io/instance-type": "p4d.24xlarge"}, "a100"),
    ({"node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4"}, "a100-80gb"),
])
def test_node_labels_name_the_configuration_a_cluster_runs(labels: dict, gpu: str) -> None:
    """A manifest's labels say which A100 / H100 it is: judged as that one, with no default to state."""
    from qcheck.deploy.manifests import gpu_from_labels
    from qcheck.matrix import load_matrix

    name, _, _ = gpu_from_labels(labels)
    target = load_matrix().gpus.lookup(name or "")
    assert (target.gpu, target.note) == (gpu, None)
