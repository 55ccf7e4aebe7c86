"""``qcheck inspect`` end to end: the bundled examples through the real readers and the CLI (text and
JSON), the public JSON contract, pickles and LFS pointers (exit 2, one line), and no heavy imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qcheck.cli import main
from support import builders as b
from support.contract import validate

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
VOCAB_GGUF = ROOT / "tests" / "data" / "ggml-vocab-llama-spm.gguf"
TINY_LLAMA_PARAMS = 2 * 256 * 128 + 2 * (128 * 128 * 2 + 64 * 128 * 2 + 3 * 256 * 128) + 5 * 128

#: example -> fields asserted in its JSON
EXPECTED = {
    "tiny-llama-bf16": dict(method="none", producer=None, weight_bits=None, weight_dtype="bfloat16"),
    "tiny-llama-fp8-channel": dict(method="fp8", producer="compressed-tensors", weight_bits=8, group_size=-1,
                                   activation_dtype="float8_e4m3", weight_dtype="float8_e4m3",
                                   excluded=["lm_head"]),
    "tiny-llama-fp8-block": dict(method="fp8", producer="deepseek", weight_bits=8, group_size=None,
                                 block_size=[128, 128], scale_dtype="float32", activation_dtype="float8_e4m3"),
    "tiny-llama-nvfp4": dict(method="nvfp4", producer="modelopt", weight_bits=4, group_size=16,
                             scale_dtype="float8_e4m3", activation_dtype="fp4_e2m1", excluded=["lm_head"]),
    "tiny-llama-awq": dict(method="awq", producer="autoawq", weight_bits=4, group_size=128, zero_point=True),
    "tiny-llama-gptq": dict(method="gptq", weight_bits=4, group_size=128, act_order=True, zero_point=False),
    "tiny-llama-mlx-4bit": dict(method="mlx", producer="mlx-lm", weight_bits=4, group_size=64, format="affine"),
    "tiny-gpt-oss-mxfp4": dict(method="mxfp4", producer="gpt-oss", weight_bits=4, group_size=32,
                               bits_per_weight=4.25, scale_dtype="e8m0"),
    "tiny-llama-Q8_0.gguf": dict(method="gguf", producer="llama.cpp", gguf_file_type="Q8_0", weight_bits=8,
                                 tensor_types={"Q8_0": 16, "F32": 5}),
    "tiny-llama-Q4_0.gguf": dict(method="gguf", gguf_file_type="Q4_0", weight_bits=4,
                                 tensor_types={"Q4_0": 15, "F32": 5, "Q8_0": 1}),
    "tiny-llama-MXFP4.gguf": dict(method="gguf", gguf_file_type="MXFP4_MOE", weight_bits=4,
                                  tensor_types={"MXFP4": 15, "F32": 5, "Q8_0": 1}),
}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_examples_json(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "inspect", str(EXAMPLES / name), "--json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    validate(data, "inspection")
    assert data["exit_code"] == 0
    q = data["quantization"]
    assert {k: q[k] for k in EXPECTED[name]} == EXPECTED[name]
    assert data["findings"] == []
    if name.startswith("tiny-llama"):
        assert data["parameters"] == TINY_LLAMA_PARAMS
        assert data["context_length"] == 2048
        assert (data["num_layers"], data["hidden_size"], data["num_attention_heads"], data["num_kv_heads"]) == \
            (2, 128, 4, 2)
    files = [EXAMPLES / name] if name.endswith(".gguf") else list((EXAMPLES / name).glob("*.safetensors"))
    assert data["size_bytes"] == sum(f.stat().st_size for f in files)


def test_gguf_bits_per_weight_is_whole_file(capsys: pytest.CaptureFixture[str]) -> None:
    """Q8_0 is 34 bytes per 32 weights; F32 norms 4 bytes: bpw = all tensor bytes x 8 / all elements."""
    data = json.loads(run(capsys, "inspect", str(EXAMPLES / "tiny-llama-Q8_0.gguf"), "--json")[1])
    quantised = TINY_LLAMA_PARAMS - 5 * 128
    expected = (quantised // 32 * 34 + 5 * 128 * 4) * 8 / TINY_LLAMA_PARAMS
    assert data["quantization"]["bits_per_weight"] == round(expected, 4)


def test_example_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "inspect", str(EXAMPLES / "tiny-llama-Q4_0.gguf"))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "llama 361.1K params, GGUF Q4_0 (4.91 bits/weight), 229.47 kB"
    assert "  file type     Q4_0" in lines
    assert "Tensor types:" in lines
    table = lines[lines.index("Tensor types:") + 1:]
    assert table[0].split() == ["type", "tensors", "elements", "bytes", "share"]
    assert table[1].split() == ["Q4_0", "15", "327,680", "184,320", "83.1%"]
    assert "\x1b[" not in out  # no colour codes when piped


def test_text_summary_lines_of_all_examples(capsys: pytest.CaptureFixture[str]) -> None:
    firsts = {}
    for name in EXPECTED:
        code, out, _ = run(capsys, "inspect", str(EXAMPLES / name))
        assert code == 0
        firsts[name] = out.splitlines()[0]
    assert firsts["tiny-llama-fp8-channel"] == (
        "LlamaForCausalLM 361.1K params, FP8 W8A8 (float8_e4m3, per-channel weights, dynamic per-token float8_e4m3 "
        "activations), compressed-tensors, 435.12 kB")
    assert firsts["tiny-llama-nvfp4"].startswith("LlamaForCausalLM 361.1K params, NVFP4 W4A4 (fp4_e2m1, group 16,")
    assert firsts["tiny-llama-gptq"].startswith("LlamaForCausalLM 361.1K params, GPTQ W4A16 (int4, group 128, "
                                                "act-order)")
    assert firsts["tiny-llama-bf16"] == "LlamaForCausalLM 361.1K params, BF16 (unquantised), 724.37 kB"


def test_output_file_and_format_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "inspect.json"
    code, out, _ = run(capsys, "inspect", str(EXAMPLES / "tiny-llama-awq"), "--format", "json", "-o", str(target))
    assert (code, out) == (0, "")
    assert json.loads(target.read_text())["quantization"]["method"] == "awq"


def test_vocab_only_gguf_from_llama_cpp(capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp's own models/ggml-vocab-llama-spm.gguf: KV header, 32000-token vocabulary, no tensors."""
    code, out, _ = run(capsys, "inspect", str(VOCAB_GGUF), "--json")
    assert code == 0
    data = json.loads(out)
    validate(data, "inspection")
    assert (data["architecture"], data["name"], data["vocab_size"], data["context_length"]) == \
        ("llama", "llama-spm", 32000, 4096)
    assert (data["num_layers"], data["hidden_size"], data["num_attention_heads"], data["head_dim"]) == \
        (32, 4096, 32, 128)
    q = data["quantization"]
    assert (q["method"], q["gguf_file_type"], q["tensor_types"]) == ("gguf", "F16", {})
    assert data["parameters"] is None and data["tensor_count"] == 0
    assert "the file has no tensors (a vocabulary-only GGUF): nothing to run" in data["warnings"]


def test_header_only_fixtures_through_readers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The classifier sees the same Checkpoint through the real readers as built directly."""
    for build in (b.nvfp4_ct_fixture, b.bnb_nf4_fixture, b.exl3_fixture, b.torchao_fixture, b.quark_mxfp4_fixture):
        fx = build()
        d = fx.write(tmp_path / build.__name__)
        code, out, _ = run(capsys, "inspect", str(d), "--json")
        assert code == 0, build.__name__
        data = json.loads(out)
        validate(data, "inspection")
        from qcheck.classify import classify

        direct = classify(fx.checkpoint(str(d))).to_json()
        assert data["quantization"] == direct["quantization"], build.__name__
        assert data["parameters"] == direct["parameters"] == b.DEFAULT.logical_parameters()


# ------------------------------------------------------------------------------------------ exit 2 cases

#: a protocol-2 pickle that would call posix.system("ls") if it were ever loaded (it never is)
EVIL_PICKLE = b"\x80\x02cposix\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02Rq\x03."


def test_pickle_text_mode_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(EVIL_PICKLE)
    code, out, err = run(capsys, "inspect", str(path))
    assert code == 2 and out == ""
    assert err == (f"qcheck: error: {path}: pickle checkpoint: not statically verifiable, never unpickled "
                   "(imports: posix.system); convert it to safetensors\n")


def test_pickle_json_mode_prints_inspection_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(EVIL_PICKLE)
    code, out, err = run(capsys, "inspect", str(path), "--json")
    assert code == 2 and err == ""
    data = json.loads(out)
    validate(data, "inspection")
    assert data["exit_code"] == 2
    assert (data["container"], data["quantization"]["method"]) == ("pickle", "unknown")
    assert data["pickle_globals"] == ["posix.system"]
    assert data["findings"][0]["kind"] == "unsafe-pickle"


def test_lfs_pointer_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "model.safetensors"
    path.write_text("version https://git-lfs.github.com/spec/v1\n"
                    "oid sha256:" + "ab" * 32 + "\nsize 16060522880\n")
    code, out, err = run(capsys, "inspect", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("qcheck: error: ")
    assert "LFS" in err or "lfs" in err


def test_missing_path_is_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run(capsys, "inspect", str(tmp_path / "nope.gguf"))
    assert code == 2 and out == ""
    assert err.startswith("qcheck: error: ") and "no such file" in err


def test_no_heavy_imports() -> None:
    """inspect must not import torch, transformers, numpy or safetensors (checked in a fresh interpreter)."""
    code = (
        "import sys\n"
        "from qcheck.cli import main\n"
        "try:\n"
        "    main(['inspect', sys.argv[1], '--json'])\n"
        "except SystemExit as e:\n"
        "    assert (e.code or 0) == 0, e.code\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'transformers', 'numpy', 'safetensors'))\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy))\n"
    )
    for target in (EXAMPLES / "tiny-llama-Q4_0.gguf", EXAMPLES / "tiny-llama-nvfp4"):
        proc = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.strip().endswith("HEAVY="), proc.stderr
        assert json.loads(proc.stdout)["path"] == str(target)


def test_examples_are_reproducible_and_readme_is_real(capsys: pytest.CaptureFixture[str]) -> None:
    """make_examples.py --check rebuilds everything and compares hashes; the README's table shows what
    ``qcheck inspect`` prints today."""
    proc = subprocess.run([sys.executable, str(EXAMPLES / "make_examples.py"), "--check"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    readme = (EXAMPLES / "README.md").read_text()
    for name in EXPECTED:
        _, out, _ = run(capsys, "inspect", str(EXAMPLES / name))
        assert f"| `{out.splitlines()[0]}` |" in readme, name
    total = sum(p.stat().st_size for p in EXAMPLES.rglob("*") if p.is_file())
    assert total < 4_500_000


def test_sharded_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A sharded model (index + 3 shards) is one checkpoint: every shard's tensors, all shards' bytes."""
    fx = b.awq_fixture()
    d = fx.write_sharded(tmp_path / "sharded", shards=3)
    code, out, _ = run(capsys, "inspect", str(d), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["parameters"] == b.DEFAULT.logical_parameters()
    assert data["tensor_count"] == len(fx.tensors)
    assert data["size_bytes"] == sum(p.stat().st_size for p in d.glob("*.safetensors"))
    q = data["quantization"]
    assert (q["method"], q["weight_bits"], q["group_size"], q["producer"]) == ("awq", 4, 128, "autoawq")


def test_text_shows_findings_and_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fx = b.fp8_ct_channel()
    fx.configs["config.json"]["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    d = fx.write(tmp_path / "lying")
    code, out, _ = run(capsys, "inspect", str(d))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "LlamaForCausalLM 1.44M params, FP8 W8A16 (float8_e4m3, per-channel weights), 1.72 MB"
    findings = lines[lines.index("Findings:") + 1]
    assert findings.startswith("  [config-mismatch] config.json quantization_config: config says gptq, but the "
                               "tensors are fp8")
    assert "Warnings:" in lines


def test_one_line_is_describe() -> None:
    from qcheck.inspect import inspect_path
    from qcheck.report.text import describe_inspection
    from qcheck.report.text_check import describe as check_line
    from qcheck.report.text_inspect import describe

    insp = inspect_path(str(EXAMPLES / "tiny-llama-awq"))
    assert describe_inspection(insp) == check_line(insp) == describe(insp) == \
        "LlamaForCausalLM 361.1K params, AWQ W4A16 (int4, group 128, zero point), autoawq, 290.59 kB"


def test_limit_option_bounds_the_reader(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "inspect", str(EXAMPLES / "tiny-llama-awq"), "--limit", "max_tensors=5")
    assert code == 2 and out == ""
    assert err.startswith("qcheck: error: ") and err.count("\n") == 1 and "limit" in err
    code, _, err = run(capsys, "inspect", str(EXAMPLES / "tiny-llama-awq"), "--limit", "nope=5")
    assert code == 2 and "unknown limit 'nope'" in err
