"""Real-shaped checkpoints and deployments for the start-up tests: a published run of tests/data/memory_validation.toml
as a model directory (a real safetensors header with the run's shapes, data written sparse), the engine command line
it was served with, and the Kubernetes manifest that deploys it, so one run is asked through every door.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support import builders as b


def shape_of(config: dict[str, Any]) -> b.Shape:
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    return b.Shape(hidden=hidden, intermediate=int(config["intermediate_size"]),
                     layers=int(config["num_hidden_layers"]), vocab=int(config["vocab_size"]), heads=heads,
                     kv_heads=int(config.get("num_key_value_heads", heads)),
                     hd=int(config.get("head_dim") or hidden // heads))


def fixture_for(config: dict[str, Any], weights_bytes: int | None = None) -> b.Fixture:
    """A checkpoint with the config's shapes: BF16, or FP8 per-channel linears (compressed-tensors, as RedHatAI's
    FP8-dynamic checkpoints) when the run's weights are about half the BF16 size."""
    shape = shape_of(config)
    arch = {"qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM"}.get(config["model_type"], "LlamaForCausalLM")
    extra = {k: v for k, v in config.items() if k in ("max_position_embeddings", "tie_word_embeddings",
                                                      "model_type", "torch_dtype", "rope_scaling")}
    bf16 = b.Fixture(b.model_tensors(shape, b.plain("BF16")),
                     {"config.json": b.llama_config(shape, architectures=[arch], **extra)})
    if weights_bytes is None or abs(bf16.data_bytes - weights_bytes) <= 0.05 * weights_bytes:
        return bf16
    quant = b.ct_config({"group_0": b.scheme(b.qargs(8, "float", "channel"),
                                             b.qargs(8, "float", "token", dynamic=True))}, fmt="float-quantized")
    fp8 = b.Fixture(b.model_tensors(shape, b.fp8_channel, lm_head=b.plain("BF16")),
                    {"config.json": b.llama_config(shape, architectures=[arch], quantization_config=quant, **extra)})
    if abs(fp8.data_bytes - weights_bytes) > 0.05 * weights_bytes:
        raise NotImplementedError(f"no fixture of {weights_bytes} weight bytes for {config}: extend fixture_for")
    return fp8


def write_run(run: dict[str, Any], directory: Path) -> Path:
    """The run's model as a directory qcheck reads (sparse: no weight data on disk)."""
    return fixture_for(run["config"], run.get("weights_bytes")).write(directory)


def _flag(engine: str, name: str) -> str:
    return {("vllm", "context"): "--max-model-len", ("vllm", "tp"): "--tensor-parallel-size",
            ("vllm", "gpu_memory_utilization"): "--gpu-memory-utilization", ("vllm", "max_num_seqs"): "--max-num-seqs",
            ("sglang", "context"): "--context-length", ("sglang", "tp"): "--tp",
            ("sglang", "mem_fraction_static"): "--mem-fraction-static"}[(engine, name)]


def command_args(run: dict[str, Any], model: str) -> list[str]:
    """The run's settings as the engine's own command line (program and model first)."""
    engine, settings = run["engine"], run.get("settings", {})
    program = {"vllm": ["vllm", "serve", model],
               "sglang": ["python", "-m", "sglang.launch_server", "--model-path", model]}.get(engine)
    if program is None:
        raise NotImplementedError(f"{run['id']}: no command line for {engine}: extend command_args")
    words = list(program)
    for name in ("context", "tp"):
        if settings.get(name):
            words += [_flag(engine, name), str(settings[name])]
    for name, value in settings.get("knobs", {}).items():
        words += [_flag(engine, name), str(value)]
    return words


def manifest(run: dict[str, Any], container_model: str) -> str:
    """A Kubernetes Deployment serving the run: the engine's image at the run's release, the GPU by node label, as
    many GPUs as its tensor-parallel size."""
    images = {"vllm": "vllm/vllm-openai:v{v}", "sglang": "lmsysorg/sglang:v{v}-cu126"}
    labels = {"h100": "NVIDIA-H100-80GB-HBM3", "a100": "NVIDIA-A100-SXM4-80GB"}
    image = images[run["engine"]].format(v=run["version"])
    words = command_args(run, container_model)
    if run["engine"] == "vllm":
        words = words[2:]  # the image's entrypoint is `vllm serve`
    gpus = run.get("settings", {}).get("tp") or 1
    return (f"apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {run['id']}}}\nspec:\n  template:\n"
            f"    spec:\n      nodeSelector:\n        nvidia.com/gpu.product: {labels[run['gpu']]}\n"
            f"      containers:\n        - name: server\n          image: {image}\n"
            f"          args: {json.dumps(words)}\n"
            f"          resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}\n")
