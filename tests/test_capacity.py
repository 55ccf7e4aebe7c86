"""``qcheck check ... --capacity``: concurrent sequences at 4k/8k/32k/128k for each KV type the engine accepts on
the GPU, with vLLM's own "maximum concurrency" (qcheck.memory.capacity).

Through the real CLI, on header-only checkpoints of real shapes (sparse safetensors, a GGUF header): each cell must
be the very figure the headline estimate gives for that deployment (one home for memory), vLLM's figure must match
a published start-up log, and the JSON must fit the contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qcheck.cli import main
from support.builders import Fixture, Shape, llama_config, model_tensors, plain
from support.contract import validate
from support.gate_helpers import qcheck
from support.memory_validation import load_runs

#: Llama-3.1-8B and -70B in BF16, as their safetensors headers and config.json hold them (the CLI subprocesses run
#: on the repository's matrix: ``matrix=False``)
LLAMA_8B = Shape(hidden=4096, intermediate=14336, layers=32, vocab=128256, heads=32, kv_heads=8)
LLAMA_70B = Shape(hidden=8192, intermediate=28672, layers=80, vocab=128256, heads=64, kv_heads=8)


def _model(tmp_path: Path, shape: Shape, name: str) -> Path:
    cfg = llama_config(shape, max_position_embeddings=131072)
    return Fixture(model_tensors(shape, plain()), {"config.json": cfg}).write(tmp_path / name)


def _check(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> dict:
    with pytest.raises(SystemExit) as exc:
        main(["check", *args, "--json"])
    assert exc.value.code == code
    return json.loads(capsys.readouterr().out)


def test_vllm_capacity_is_the_headline_estimate_and_vllms_own_figure(tmp_path, capsys):
    """Llama-3.1-8B BF16 on one H100, vLLM 0.19 at gpu_memory_utilization 0.95: the llm-d-planner log of that run
    prints "GPU KV cache size: 476,016 tokens" and "Maximum concurrency for 16,384 tokens per request: 29.05x"."""
    model = _model(tmp_path, LLAMA_8B, "llama-8b")
    proc = qcheck("check", str(model), "--engine", "vllm==0.19.0", "--gpu", "h100", "--gpu-memory-utilization",
                  "0.95", "--context", "16384", "--capacity", "--json", matrix=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    validate(data, "check")
    table = data["verdicts"][0]["memory"]["concurrency"]
    default = table["rows"][0]
    assert default["asked"] == "auto" and default["kv_cache_dtype"] == "bfloat16" and default["status"] == "native"
    assert [c["context"] for c in default["cells"]] == [4096, 8192, 16384, 32768, 131072]  # --context joins them
    run = next(r for r in load_runs() if r["id"] == "vllm-019-llama31-8b")
    logged = run["measured"]
    at_16k = next(c for c in default["cells"] if c["context"] == 16384)
    assert at_16k["kv_pool_tokens"] == pytest.approx(logged["tokens"], rel=0.05)
    assert at_16k["engine_concurrency"] == pytest.approx(logged["concurrency"], rel=0.05)
    # vLLM's pool does not depend on the context: its figure is the pool's tokens over each context
    for cell in default["cells"]:
        assert cell["kv_pool_tokens"] == at_16k["kv_pool_tokens"] and cell["gpus"] == 1
        assert cell["engine_concurrency"] == pytest.approx(cell["kv_pool_tokens"] / cell["context"])
        assert cell["sequences"] == int(cell["engine_concurrency"])  # whole sequences: full attention, one pool
    # every cell is what the headline says for that deployment (context, KV type): one home for memory
    for row in table["rows"]:
        kv = [] if row["asked"] == "auto" else ["--kv-cache-dtype", row["asked"]]
        for cell in row["cells"][:2]:
            one = _check(capsys, str(model), "--engine", "vllm==0.19.0", "--gpu", "h100", "--gpu-memory-utilization",
                         "0.95", "--context", str(cell["context"]), *kv)["verdicts"][0]["memory"]
            assert (one["max_batch"], one["kv_available_tokens"]) == (cell["sequences"], cell["kv_pool_tokens"])
    # no KV type appears twice, and what is left out says why
    shown = [row["asked"] for row in table["rows"]] + [t for row in table["rows"] for t in row["same_as"]]
    assert len(shown) == len(set(shown))
    assert all(entry.endswith(("(unsupported)", "(unknown)")) for entry in table["left_out"])
    assert not {entry.split(" ")[0] for entry in table["left_out"]} & set(shown)


def test_a_model_that_needs_several_gpus_is_tabled_at_that_count(tmp_path, capsys):
    """Llama-3.3-70B BF16 needs 4 H100s at vLLM 0.19's 0.9: every cell holds at 4 GPUs, as ``--tp 4`` would."""
    model = _model(tmp_path, LLAMA_70B, "llama-70b")
    # on one H100 vLLM does not start (the run fails), and the table says what 4 GPUs hold
    data = _check(capsys, str(model), "--engine", "vllm==0.19.0", "--gpu", "h100", "--capacity", code=1)
    assert data["verdicts"][0]["startup"]["outcome"] == "does-not-start"
    memory = data["verdicts"][0]["memory"]
    assert memory["fits"] is False and memory["gpus_needed"] == 4
    cells = memory["concurrency"]["rows"][0]["cells"]
    assert {c["gpus"] for c in cells} == {4}
    at_tp4 = _check(capsys, str(model), "--engine", "vllm==0.19.0", "--gpu", "h100", "--tp", "4", "--context",
                    "4096")["verdicts"][0]["memory"]
    assert cells[0]["sequences"] == at_tp4["max_batch"] > 0
    assert cells[0]["engine_concurrency"] == pytest.approx(at_tp4["kv_available_tokens"] / 4096)


def test_llama_cpp_capacity_per_cache_type(tmp_path, capsys):
    """Llama-3.1-8B Q4_K_M (its real GGUF header) on an RTX 4090: each cache type llama.cpp accepts there gets
    a row, a q8_0 cache holds about twice the sequences of f16 and q4_0 more again; llama.cpp prints no
    concurrency figure of its own."""
    from support.model_headers import llama31_8b_q4_k_m, write_header

    path = tmp_path / "Llama-3.1-8B-Instruct-Q4_K_M.gguf"
    write_header(path, llama31_8b_q4_k_m())
    data = _check(capsys, str(path), "--engine", "llama.cpp", "--gpu", "rtx-4090", "--capacity")
    validate(data, "check")
    table = data["verdicts"][0]["memory"]["concurrency"]
    rows = {row["kv_cache_dtype"]: row for row in table["rows"]}
    assert rows["f16"]["asked"] == "auto" and {"q8_0", "q4_0"} <= set(rows)
    f16, q8, q4 = ([c["sequences"] for c in rows[t]["cells"]] for t in ("f16", "q8_0", "q4_0"))
    assert [c["context"] for c in rows["f16"]["cells"]] == [4096, 8192, 32768, 131072]
    for a, b, c in zip(f16, q8, q4, strict=True):
        assert a < b < c and b >= 1.8 * a
    assert all(c["engine_concurrency"] is None and c["gpus"] == 1 for r in table["rows"] for c in r["cells"])
    # the sequences at 32k are the headline's max batch at --context 32768 with that cache type
    one = _check(capsys, str(path), "--engine", "llama.cpp", "--gpu", "rtx-4090", "--context", "32768",
                 "--kv-cache-dtype", "q8_0")["verdicts"][0]["memory"]
    assert one["max_batch"] == q8[2]


def test_contexts_past_the_models_own_hold_none_in_text_and_markdown(tmp_path):
    """A tiny GGUF with a 4096-token context: 8k, 32k and 128k are past it ('-'), and at 4k it holds more
    sequences than the estimate searches ('>=4096'); every cache type shares those figures, so one row names them
    all."""
    from support.hubserver import gguf_bytes

    path = tmp_path / "tiny-Q8_0.gguf"
    gguf_bytes(str(path))
    text = qcheck("check", str(path), "--engine", "llama.cpp", "--gpu", "rtx-4090", "--capacity", matrix=False)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.lstrip().startswith("capacity:"))
    assert lines[head + 1].split() == ["KV", "cache", "4k", "8k", "32k", "128k"]
    assert lines[head + 2].split()[0] == "f16," and lines[head + 2].split()[-4:] == [">=4096", "-", "-", "-"]
    md = qcheck("check", str(path), "--engine", "llama.cpp", "--gpu", "rtx-4090", "--capacity", "--format",
                "markdown", matrix=False)
    assert "#### Capacity: llama.cpp b11312 \\[cuda\\] x rtx-4090" in md.stdout  # escaped as every cell is
    assert "| KV cache | 4k | 8k | 32k | 128k |" in md.stdout and "| &gt;=4096 | - | - | - |" in md.stdout


def test_without_the_flag_there_is_no_table(tmp_path, capsys):
    from support.hubserver import gguf_bytes

    path = tmp_path / "tiny-Q8_0.gguf"
    gguf_bytes(str(path))
    data = _check(capsys, str(path), "--engine", "llama.cpp", "--gpu", "rtx-4090", "--context", "1024")
    assert "concurrency" not in data["verdicts"][0]["memory"]
