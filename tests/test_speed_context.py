"""Decode speed at the context asked (issue 33 item 2): a decode step reads every cached token of a full-attention
layer and at most the window of a sliding-window layer (the memory estimate's rule), per GPU under tensor
parallelism; without --context the figure is given at a short context and at the deployment's own, both said.

Models are real-shaped GGUF headers (tests/support/model_headers.py: Llama-3.1-8B, gpt-oss-20b with a 128-token
window on every other layer, Gemma-3-12B with 5 of 6 layers on a 1024-token window) and an AWQ safetensors
checkpoint; engines llama.cpp and vLLM; GPUs RTX 4090 and H100."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from qcheck.cli import cli
from qcheck.pipeline import run
from qcheck.request import CheckRequest, Deploy, Parallel
from qcheck.speed import SHORT_CONTEXT
from support.model_headers import gemma3_12b_q4_k_m, gpt_oss_20b_mxfp4, light, llama31_8b, write_header
from support.startup_models import awq_qwen7b


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("speed-context")
    out = {}
    for name, model in (("llama", llama31_8b()), ("gpt-oss", gpt_oss_20b_mxfp4()), ("gemma", gemma3_12b_q4_k_m())):
        out[name] = d / f"{model.label}.gguf"
        write_header(out[name], light(model))
    return out


def _verdict(target: str, engine: str, gpu: str, deploy: Deploy):  # type: ignore[no-untyped-def]
    (v,) = run(CheckRequest(target, (engine,), (gpu,), deploy, memory=True)).verdicts
    assert v.memory is not None and v.memory.speed is not None
    return v


def _cli_json(*args: str) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_the_issue_command_says_which_context_its_decode_figure_is_for(ggufs: dict[str, Path]) -> None:
    """`check llama8b-Q4_K_M.gguf --engine llama.cpp --gpu rtx-4090 --batch 1` gave "decode <= 46 tok/s" for a full
    128k cache without saying so: now a short figure and the deployment's, each with its context."""
    result = CliRunner().invoke(cli, ["check", str(ggufs["llama"]), "--engine", "llama.cpp", "--gpu", "rtx-4090",
                                      "--batch", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    speed_line = next(line for line in result.stdout.splitlines() if line.lstrip().startswith("speed:"))
    assert "decode <= 196 tok/s at 4096 tokens of context, <= 46 at 131072" in speed_line
    assert "(no context asked: the model's own, the engine's default)" in speed_line
    assert "prefill <= " in speed_line and "for a 4096-token prompt" in speed_line
    data = _cli_json("check", str(ggufs["llama"]), "--engine", "llama.cpp", "--gpu", "rtx-4090", "--batch", "1")
    speed = data["verdicts"][0]["memory"]["speed"]
    assert [(p["context"], p["basis"]) for p in speed["decode_at"]] == [(SHORT_CONTEXT, "short"),
                                                                         (131072, "deployment")]
    # the KV part: 32 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes (F16) per token, times the context
    per_token = 32 * 8 * 128 * 2 * 2
    assert [p["kv_bytes_per_step"] for p in speed["decode_at"]] == [per_token * 4096, per_token * 131072]
    assert speed["context"] == 131072 and speed["decode_tokens_per_s"] == speed["decode_at"][-1]["decode_tokens_per_s"]


def test_a_context_asked_gives_one_figure_at_it(ggufs: dict[str, Path]) -> None:
    v = _verdict(str(ggufs["llama"]), "llama.cpp", "rtx-4090", Deploy(context=8192, batch=1))
    s = v.memory.speed
    assert [(p.context, p.basis) for p in s.decode_at] == [(8192, "asked")]
    assert s.kv_bytes_per_step == 32 * 8 * 128 * 2 * 2 * 8192
    assert "decode <= " in s.summary and "at 8192 tokens of context" in s.summary and "4096" not in s.summary.split(
        "prefill")[0]
    assert s.prefill_prompt_tokens == 8192


@pytest.mark.parametrize("model,full,window,size,per_layer", [
    # gpt-oss-20b: 12 full layers, 12 on a 128-token window, 8 KV heads x 64 x 2 x 2 bytes per layer per token
    ("gpt-oss", 12, 12, 128, 8 * 64 * 2 * 2),
    # Gemma-3-12B: 8 full layers, 40 on a 1024-token window, 8 KV heads x 256 x 2 x 2 bytes
    ("gemma", 8, 40, 1024, 8 * 256 * 2 * 2),
])
def test_sliding_window_layers_read_at_most_their_window(ggufs: dict[str, Path], model: str, full: int, window: int,
                                                         size: int, per_layer: int) -> None:
    """The issue: gpt-oss read 6.44 GB of cache per step at 128k where 3.22 GB is read; Gemma 0.85 where 0.14."""
    v = _verdict(str(ggufs[model]), "llama.cpp", "rtx-4090", Deploy(context=32768, batch=1))
    s = v.memory.speed
    assert s.kv_bytes_per_step == per_layer * (full * 32768 + window * size)
    assert s.kv_bytes_per_step < v.memory.kv_bytes_per_token * 32768  # the memory estimate counts it all cached
    assert f"{window} of {full + window} layers reading at most their {size}-token window" in s.summary
    # decode time is the bytes read over the bandwidth: a longer context costs only the full layers more
    longer = _verdict(str(ggufs[model]), "llama.cpp", "rtx-4090", Deploy(context=65536, batch=1)).memory.speed
    assert longer.kv_bytes_per_step - s.kv_bytes_per_step == per_layer * full * 32768


def test_tensor_parallelism_splits_what_each_gpu_reads(tmp_path: Path) -> None:
    model = awq_qwen7b(tmp_path / "st-awq-qwen7b")
    one = _verdict(str(model), "vllm", "h100", Deploy(context=32768, batch=1)).memory.speed
    two = _verdict(str(model), "vllm", "h100", Deploy(context=32768, batch=1, parallel=Parallel(tp=2))).memory.speed
    assert (one.gpus, two.gpus) == (1, 2)
    assert two.kv_bytes_per_step == one.kv_bytes_per_step // 2  # 4 KV heads: 2 on each rank
    assert two.bytes_per_step < one.bytes_per_step * 0.6
    assert two.bandwidth_tokens_per_s is not None and one.bandwidth_tokens_per_s is not None
    assert two.bandwidth_tokens_per_s > one.bandwidth_tokens_per_s * 1.6
    assert "all-reduces" in (two.parallel_assumption or "") and one.parallel_assumption is None


def test_layers_in_ram_decode_at_host_bandwidth_and_give_no_prefill_figure(ggufs: dict[str, Path]) -> None:
    v = _verdict(str(ggufs["llama"]), "llama.cpp", "rtx-2080", Deploy(context=32768, batch=1))
    s = v.memory.speed
    assert v.memory.offload is not None and s.ram_bytes_per_step > 0
    assert s.prefill_tokens_per_s is None and s.prefill_note and "not modelled" in s.prefill_note
    assert "prefill: not estimated" in s.summary and "in RAM at 89.6 GB/s host bandwidth" in s.summary
