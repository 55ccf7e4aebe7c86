"""Tensor, pipeline and expert parallelism as a checked dimension (``--tp``, ``--pp``, ``--ep``).

Engines split each projection across ``tp`` ranks at load and refuse shapes that do not divide: attention
heads, KV heads (replicated when there are fewer than ranks), an FP8 block or an AWQ/GPTQ group that would
straddle two ranks. Which layouts an engine has and which of these checks it enforces is data
(``[parallel]`` in the engine file, with sources); the arithmetic is here. An engine without ``[parallel]``,
or a layout of 1, leaves the verdict alone; a number the checkpoint does not state is not guessed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qcheck.model import Judgement, Source

if TYPE_CHECKING:
    from qcheck.matrix.deployment import Deployment
    from qcheck.matrix.schema import ParallelSpec
    from qcheck.model import Inspection

DIMENSION = "parallelism"
LAYOUTS = {"tp": "tensor parallelism", "pp": "pipeline parallelism", "ep": "expert parallelism"}
CHECKS = ("attention-heads", "kv-heads", "kv-heads-split", "mlp-divides", "mlp-128", "fp8-block", "group-size",
          "pp-layers", "ep-moe", "ep-experts")


def judge_parallel(deployment: Deployment) -> Judgement | None:
    """``unsupported`` with the engine's own message when the layout cannot load this checkpoint."""
    engine = deployment.request.engine
    spec = engine.parallel
    asked = {k: v for k, v in deployment.deploy.parallel.sizes().items() if v > 1}
    if spec is None or not asked:
        return None
    problems: list[str] = []
    for layout in asked:
        if layout not in spec.layouts:
            problems.append(f"{engine.name} has no {LAYOUTS[layout]} (--{layout})")
    ins = deployment.inspection
    checks = set(spec.checks)
    tp = asked.get("tp", 1)
    if tp > 1:
        problems += _tensor_parallel(ins, tp, checks)
    pp = asked.get("pp", 1)
    if pp > 1 and "pp-layers" in checks and ins.num_layers is not None and pp > ins.num_layers:
        problems.append(f"--pp {pp} needs at least one layer per stage; the model has {ins.num_layers}")
    if asked.get("ep", 1) > 1 and "ep-moe" in checks and not ins.moe:
        problems.append("Number of experts in the model must be greater than 0 when expert parallelism is enabled.")
    ep = asked.get("ep", 1)
    if ep > 1 and "ep-experts" in checks and ins.num_experts and ins.num_experts % ep:
        problems.append(f"Cannot evenly shard {ins.num_experts} experts across {ep} expert-parallel ranks.")
    sources = [Source(ref=s.ref, version=s.version, note=s.note) for s in spec.sources]
    if problems:
        return Judgement(DIMENSION, "unsupported", problems, sources)
    layout = ", ".join(f"{k} {v}" for k, v in asked.items())
    what = (f"the shapes divide ({', '.join(c for c in CHECKS if c in checks)} checked)" if checks
            else f"{engine.name} checks no shape divisibility at load")
    return Judgement(DIMENSION, "native", [f"{layout}: {what}"], sources,
                     warnings=[f"--{k} {v}: {engine.name} {spec.flags[k]}" for k, v in asked.items() if k in spec.flags])


def tp_problems(ins: Inspection, tp: int, spec: ParallelSpec | None) -> list[str]:
    """Why ``--tp tp`` cannot load this checkpoint on an engine with this ``[parallel]`` data (empty: it can,
    or there is no data). The memory estimate uses it to propose only GPU counts the engine accepts."""
    if spec is None or tp <= 1 or "tp" not in spec.layouts:
        return []
    return _tensor_parallel(ins, tp, set(spec.checks))


def _tensor_parallel(ins: Inspection, tp: int, checks: set[str]) -> list[str]:
    out: list[str] = []
    heads, kv, head_dim = ins.num_attention_heads, ins.num_kv_heads or ins.num_attention_heads, ins.head_dim
    if "attention-heads" in checks and heads and heads % tp:
        out.append(f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp}).")
    if "kv-heads" in checks and kv:
        if tp >= kv and tp % kv:
            out.append(f"{tp} is not divisible by {kv}: with fewer KV heads ({kv}) than ranks each KV head is "
                       f"replicated, so --tp must be a multiple of {kv}")
        elif tp < kv and kv % tp:
            out.append(f"{kv} is not divisible by {tp}: the {kv} KV heads must split evenly over --tp {tp}")
    if "kv-heads-split" in checks and kv and kv % tp:
        out.append(f"the {kv} KV heads must split evenly over --tp {tp} (this engine divides them by the rank "
                   "count and never replicates a KV head)")
    if out or not heads or not head_dim:
        return out
    q = ins.quantization
    per_rank_heads = heads // tp
    kv_rank = max(1, kv // tp) if kv else None
    inter = ins.intermediate_size // tp if ins.intermediate_size and ins.intermediate_size % tp == 0 else None
    columns = {"q_proj": per_rank_heads * head_dim}
    if kv_rank:
        columns["k_proj/v_proj"] = kv_rank * head_dim
    rows = {"o_proj": per_rank_heads * head_dim}
    if inter:
        columns["gate_proj/up_proj"] = inter
        rows["down_proj"] = inter
    if "mlp-divides" in checks and ins.intermediate_size and ins.intermediate_size % tp:
        out.append(f"the MLP width ({ins.intermediate_size}) is not divisible by --tp {tp}")
    if "mlp-128" in checks and ins.intermediate_size and ins.intermediate_size % 128:
        out.append(f"Model intermediate size must be divisible by 128 (it is {ins.intermediate_size})")
    if "fp8-block" in checks and q.method == "fp8" and q.scale_granularity == "block" and q.block_size \
            and len(q.block_size) == 2 and all(isinstance(b, int) and b > 0 for b in q.block_size):
        block_n, block_k = q.block_size
        for name, size in columns.items():
            if size % block_n:
                out.append(f"{name}: Weight output_partition_size = {size} is not divisible by weight "
                           f"quantization block_n = {block_n}.")
        for name, size in rows.items():
            if size % block_k:
                out.append(f"{name}: Weight input_size_per_partition = {size} is not divisible by weight "
                           f"quantization block_k = {block_k}.")
    if "group-size" in checks and q.method in ("awq", "gptq", "int4") and q.group_size and q.group_size > 0:
        for name, size in rows.items():
            if size % q.group_size:
                out.append(f"{name}: input_size_per_partition = {size} is not divisible by group_size = "
                           f"{q.group_size}: a quantisation group would straddle two ranks")
    return out
