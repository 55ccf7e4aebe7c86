"""llama.cpp's partial offload: which layers ``-ngl N`` puts on the GPU at a build, and the GPU/RAM split of a
plan (the largest ``-ngl`` that fits, the smallest ``--n-cpu-moe``, or the one the user set).

``-ngl`` counts the output layer as one more layer (``n_layer + 1`` in all), and the input layer (token
embeddings) always stays on the CPU. Which N layers it means changed with PR #18148 (merged 2025-12-18; not in
b7347, in b7698), in ``load_tensors`` (src/llama-model.cpp)::

    output-first (b7698 on):  i_gpu_start = max(n_layer + 1 - N, 0)   # the output layer, then the last N-1
    output-last  (to b7347):  i_gpu_start = max(n_layer - N, 0)       # the last N; the output layer only at N > n_layer
    act_gpu_layers = min(N, n_layer + 1); layer il (0..n_layer, n_layer = output) is on the GPU when
    i_gpu_start <= il < i_gpu_start + act_gpu_layers

For a build between the two (``either``) a plan must fit both countings.
"""

from __future__ import annotations

from dataclasses import dataclass

from qcheck.memory.records import GIB, OffloadPlan, Part
from qcheck.model import ModelShape

RULES = ("output-first", "output-last")


def gpu_layers(ngl: int, n_layer: int, rule: str) -> tuple[list[int], bool]:
    """The repeating layers (indices) ``-ngl ngl`` puts on the GPU and whether the output layer goes too, as
    ``load_tensors`` decides at a build with this rule (``ngl < 0``: all)."""
    if rule not in RULES:
        raise ValueError(f"-ngl rule {rule!r}")
    if ngl < 0:
        ngl = n_layer + 1
    start = max(n_layer + 1 - ngl, 0) if rule == "output-first" else max(n_layer - ngl, 0)
    act = min(ngl, n_layer + 1)
    on = [il for il in range(n_layer + 1) if start <= il < start + act]
    return [il for il in on if il < n_layer], n_layer in on


@dataclass(frozen=True)
class _Split:
    """A model's bytes as llama.cpp places them: per repeating layer (with its KV cache), the output layer; and
    what one decode step reads of each (``active``: MoE layers read only their active experts)."""

    layers: list[int]
    kv_layer: float
    output: int
    buffers: int
    total_weights: int
    kv: int
    active: list[int]
    experts_active: list[int]  # per layer, the routed experts one token reads (0 for dense layers)

    def placed(self, ngl: int, rule: str, worse_for: str = "gpu") -> tuple[list[int], bool]:
        """The repeating layers on the GPU and whether the output layer is, as the build counts -ngl; for an unknown
        build, the counting that is worse for the GPU's memory (``worse_for`` "gpu": more on it) or for the speed
        ("speed": more read from RAM)."""
        if rule != "either":
            return gpu_layers(ngl, len(self.layers), rule)
        placements = [gpu_layers(ngl, len(self.layers), r) for r in RULES]
        if worse_for == "gpu":
            return max(placements, key=lambda got: self.gpu_weights(*got) + self.kv_layer * len(got[0]))
        return min(placements, key=lambda got: sum(self.active[i] for i in got[0]) + (self.output if got[1] else 0))

    def gpu_weights(self, on: list[int], out: bool) -> int:
        return sum(self.layers[i] for i in on) + (self.output if out else 0)

    def gpu(self, ngl: int, rule: str) -> int:
        if rule == "either":
            return max(self.gpu(ngl, r) for r in RULES)
        on, out = gpu_layers(ngl, len(self.layers), rule)
        return int(sum(self.layers[i] for i in on) + self.kv_layer * len(on) + (self.output if out else 0)
                   + self.buffers)


def _split(shape: ModelShape, scale: float, kv: int, over: list[Part]) -> _Split | None:
    n = len(shape.layer_bytes)
    if not n:
        return None
    layers = [int(b * scale) for b in shape.layer_bytes]
    output = int((shape.output_bytes + shape.other_bytes + (shape.embed_bytes if shape.tied_output else 0)) * scale)
    total = (sum(layers) + output + int(shape.embed_bytes * scale * (0 if shape.tied_output else 1))
             + int(shape.vision_bytes * scale))
    experts = [int(b * scale) for b in shape.expert_bytes] if len(shape.expert_bytes) == n else [0] * n
    used = min(shape.n_expert_used, shape.n_expert) / shape.n_expert if shape.moe and shape.n_expert_used else 1.0
    experts_active = [int(e * used) for e in experts]
    active = [layer - e + a for layer, e, a in zip(layers, experts, experts_active, strict=True)]
    return _Split(layers, kv / n, output, sum(p.bytes for p in over), total, kv, active, experts_active)


def _ngl_parts(plan: OffloadPlan, split: _Split, ngl: int, rule: str) -> None:
    """The plan's parts under ``-ngl ngl``: weights and KV on the GPU, KV in RAM, and what a decode step reads
    from each (the layers in RAM run on the CPU, at host memory bandwidth)."""
    on, out = split.placed(ngl, rule, "gpu")
    n = len(split.layers)
    plan.gpu_weights_bytes = split.gpu_weights(on, out)
    plan.gpu_kv_bytes = int(split.kv_layer * len(on))
    plan.ram_kv_bytes = split.kv - plan.gpu_kv_bytes
    plan.gpu_bytes = plan.gpu_weights_bytes + plan.gpu_kv_bytes + split.buffers
    plan.ram_bytes = split.total_weights - plan.gpu_weights_bytes + plan.ram_kv_bytes
    on, out = split.placed(ngl, rule, "speed")
    plan.gpu_read_bytes = sum(split.active[i] for i in on) + (split.output if out else 0)
    plan.ram_read_bytes = sum(split.active) + split.output - plan.gpu_read_bytes
    plan.ram_kv_share = (n - len(on)) / n if n else 0.0


def _moe_parts(plan: OffloadPlan, split: _Split, cpu_layers: int) -> None:
    """The parts when every layer is on the GPU but the experts of the first ``cpu_layers`` are in RAM."""
    experts = [layer - active + moe for layer, active, moe in
               zip(split.layers, split.active, split.experts_active, strict=True)]
    in_ram = sum(experts[:cpu_layers])
    plan.gpu_weights_bytes = sum(split.layers) + split.output - in_ram
    plan.gpu_kv_bytes, plan.ram_kv_bytes, plan.ram_kv_share = split.kv, 0, 0.0
    plan.ram_read_bytes = sum(split.experts_active[:cpu_layers])
    plan.gpu_read_bytes = sum(split.active) + split.output - plan.ram_read_bytes


def _rule_text(rule: str) -> str:
    return {"output-first": "the output layer first", "output-last": "the last layers first",
            "either": "either counting"}[rule]


def _ngl_plan(split: _Split, ngl: int, rule: str, usable: int, *, user: bool) -> OffloadPlan:
    n = len(split.layers)
    shown = n + 1 if ngl < 0 or ngl > n + 1 else ngl
    plan = OffloadPlan(n_layers=n, ngl=shown, gpu_bytes=0, ram_bytes=0, rule=rule, user_set=user)
    _ngl_parts(plan, split, shown, rule)
    gpu, ram = plan.gpu_bytes, plan.ram_bytes
    plan.fits = gpu <= usable
    if rule != "either":
        plan.output_on_gpu = gpu_layers(shown, n, rule)[1]
    on_gpu = f"-ngl {shown} of {n + 1} ({_rule_text(rule)}): {gpu / GIB:.1f} GiB on the GPU, {ram / GIB:.1f} GiB in RAM"
    if user:
        plan.summary = on_gpu + ("" if plan.fits else "; does not fit: llama.cpp fails to load it")
    elif shown:
        plan.summary = f"offload {shown} of {n + 1} layers: {on_gpu}"
    else:
        plan.summary = "not even one layer fits the GPU beside the buffers"
    return plan


def _moe_plan(shape: ModelShape, scale: float, split: _Split, cpu_layers: int) -> tuple[int, int]:
    """(GPU bytes, RAM bytes) with every layer on the GPU but the experts of the first ``cpu_layers`` in RAM."""
    n = len(split.layers)
    experts = [int(b * scale) for b in shape.expert_bytes] or [0] * n
    dense_part = sum(split.layers) - sum(experts) + split.output + split.kv + split.buffers
    gpu = dense_part + sum(experts[cpu_layers:])
    ram = split.total_weights - (sum(split.layers) - sum(experts)) - split.output - sum(experts[cpu_layers:])
    return int(gpu), int(ram)


def _with_moe(plan: OffloadPlan, shape: ModelShape, scale: float, split: _Split, cpu_layers: int) -> None:
    n = len(split.layers)
    gpu, ram = _moe_plan(shape, scale, split, cpu_layers)
    layers_re = "|".join(str(i) for i in range(cpu_layers))
    plan.n_cpu_moe, plan.moe_gpu_bytes, plan.moe_ram_bytes = cpu_layers, gpu, ram
    plan.override_tensor = f"blk\\.({layers_re})\\.ffn_(up|down|gate)_exps\\.=CPU" if cpu_layers else None
    plan.summary = (f"MoE: -ngl {n + 1} --n-cpu-moe {cpu_layers} keeps the experts of {cpu_layers} of {n} layers "
                    f"in RAM ({gpu / GIB:.1f} GiB on the GPU, {ram / GIB:.1f} GiB in RAM)")
    _moe_parts(plan, split, cpu_layers)


def plan_offload(shape: ModelShape, scale: float, kv: int, over: list[Part], usable: int,
                 rule: str = "output-first") -> OffloadPlan | None:
    """llama.cpp's partial offload when the whole model does not fit one GPU: the largest ``-ngl`` whose layers,
    KV cache and buffers fit (as this build counts -ngl), or for MoE the smallest ``--n-cpu-moe`` (the expert
    tensors of the first N layers in RAM, ``blk.N.ffn_(up|down|gate)_exps`` overrides, common/arg.cpp)."""
    split = _split(shape, scale, kv, over)
    if split is None:
        return None
    n = len(split.layers)
    best = next((k for k in range(n + 1, -1, -1) if split.gpu(k, rule) <= usable), 0)
    plan = _ngl_plan(split, best, rule, usable, user=False)
    if shape.moe and any(shape.expert_bytes):
        for cpu_layers in range(0, n + 1):
            if _moe_plan(shape, scale, split, cpu_layers)[0] <= usable:
                _with_moe(plan, shape, scale, split, cpu_layers)
                break
    return plan


def user_offload(shape: ModelShape, scale: float, kv: int, over: list[Part], usable: int, rule: str,
                 ngl: int | None, n_cpu_moe: int | None) -> OffloadPlan | None:
    """The split the user asked for (``-ngl N``, ``--n-cpu-moe N``): its GPU bytes and whether they fit."""
    split = _split(shape, scale, kv, over)
    if split is None:
        return None
    n = len(split.layers)
    if n_cpu_moe is not None and shape.moe:
        plan = _ngl_plan(split, n + 1 if ngl is None else ngl, rule, usable, user=True)
        cpu_layers = min(n_cpu_moe, n)
        _with_moe(plan, shape, scale, split, cpu_layers)
        plan.gpu_bytes, plan.ram_bytes = plan.moe_gpu_bytes or 0, plan.moe_ram_bytes or 0
        plan.fits = plan.gpu_bytes <= usable
        if not plan.fits:
            plan.summary += "; does not fit: llama.cpp fails to load it"
        return plan
    return _ngl_plan(split, n + 1 if ngl is None else ngl, rule, usable, user=True)
