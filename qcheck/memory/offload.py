"""llama.cpp's partial offload when a model does not fit one GPU: ``-ngl`` layers, or ``--n-cpu-moe``."""

from __future__ import annotations

from qcheck.memory.records import GIB, OffloadPlan, Part
from qcheck.model import ModelShape


def plan_offload(shape: ModelShape, scale: float, kv: int, over: list[Part], usable: int) -> OffloadPlan | None:
    """llama.cpp's partial offload when the whole model does not fit one GPU: how many repeating layers
    (``-ngl``), or for MoE how many layers' experts stay in RAM (``--n-cpu-moe``), and the GPU/RAM split.

    ``-ngl N`` puts the last N repeating layers (their weights and KV cache) on the GPU, and the output layer
    when N exceeds the layer count (llama-model.cpp ``i_gpu_start``); ``--n-cpu-moe N`` keeps the expert tensors
    of the first N layers in RAM (common/arg.cpp, ``blk.N.ffn_(up|down|gate)_exps`` overrides).
    """
    n = len(shape.layer_bytes)
    if not n:
        return None
    layers = [int(b * scale) for b in shape.layer_bytes]
    experts = [int(b * scale) for b in shape.expert_bytes] or [0] * n
    kv_layer = kv / n
    buffers = sum(p.bytes for p in over)
    output = int((shape.output_bytes + shape.other_bytes + (shape.embed_bytes if shape.tied_output else 0)) * scale)
    total_weights = (sum(layers) + output + int(shape.embed_bytes * scale * (0 if shape.tied_output else 1))
                     + int(shape.vision_bytes * scale))
    best = 0
    for k in range(n, -1, -1):
        gpu = sum(layers[n - k:]) + kv_layer * k + buffers
        if gpu <= usable:
            best = k
            break
    gpu_dense = int(sum(layers[n - best:]) + kv_layer * best + buffers)
    plan = OffloadPlan(n_layers=n, ngl=best, gpu_bytes=gpu_dense,
                       ram_bytes=total_weights - sum(layers[n - best:]) + int(kv_layer * (n - best)))
    plan.summary = (f"offload {best} of {n} layers: -ngl {best} ({gpu_dense / GIB:.1f} GiB on the GPU, "
                    f"{plan.ram_bytes / GIB:.1f} GiB in RAM)") if best else \
        "not even one layer fits the GPU beside the buffers"
    if shape.moe and any(experts):
        dense_part = sum(layers) - sum(experts) + output + kv + buffers
        for cpu_layers in range(0, n + 1):
            gpu = dense_part + sum(experts[cpu_layers:])
            if gpu <= usable:
                ram = total_weights - (sum(layers) - sum(experts)) - output - sum(experts[cpu_layers:])
                layers_re = "|".join(str(i) for i in range(cpu_layers))
                plan.n_cpu_moe, plan.moe_gpu_bytes, plan.moe_ram_bytes = cpu_layers, int(gpu), int(ram)
                plan.override_tensor = (f"blk\\.({layers_re})\\.ffn_(up|down|gate)_exps\\.=CPU" if cpu_layers
                                        else None)
                plan.summary = (f"MoE: -ngl {n + 1} --n-cpu-moe {cpu_layers} keeps the experts of {cpu_layers} "
                                f"of {n} layers in RAM ({gpu / GIB:.1f} GiB on the GPU, {ram / GIB:.1f} GiB in "
                                "RAM)")
                break
    return plan
