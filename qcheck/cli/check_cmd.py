"""``qcheck check PATH --engine E --gpu G``: will this checkpoint run there, and how?"""

from __future__ import annotations

import click

from qcheck.cli.common import OutputSpec, finish, limit_options, output_options
from qcheck.limits import Limits


@click.command("check")
@click.argument("target", metavar="PATH")
@click.option("--engine", "-e", "engines", multiple=True, metavar="ENGINE",
              help="Engine to judge against, repeatable: NAME, NAME==VERSION (default: newest version the matrix "
                   "knows), NAME:BACKEND to pick a compute backend (llama.cpp:vulkan; default: the backend "
                   "for the GPU's vendor).")
@click.option("--gpu", "-g", "gpus", multiple=True, metavar="GPU",
              help="GPU to judge on, repeatable: a product (h100, rtx-4090, mi300x, m3-max, cpu), an architecture "
                   "(ampere, hopper, cdna3, ...), a compute capability (sm90, 8.9), or auto: the GPUs of this "
                   "machine (nvidia-smi, rocm-smi, macOS sysctl), judged against their free memory.")
@click.option("--require-native", is_flag=True, help="Treat a fallback (slower substitute kernel) as a failure.")
@click.option("--allow-unknown", is_flag=True, help="Do not fail when the matrix has no sourced answer.")
@click.option("--require-kv-scales", is_flag=True,
              help="Fail a verdict whose quantised KV cache runs with default scales of 1.0 (the checkpoint ships "
                   "no k_scale/v_scale, or q/prob scales where FP8 attention needs them).")
@click.option("--context", type=click.IntRange(min=1), default=None, metavar="N",
              help="Estimate memory (weights + KV cache + overhead) for N tokens of context, per verdict "
                   "(docs/memory.md); default with --batch/--kv-cache-dtype: the model's maximum.")
@click.option("--batch", type=click.IntRange(min=1), default=None, metavar="B",
              help="Concurrent sequences for the memory estimate (default 1).")
@click.option("--kv-cache-dtype", default=None, metavar="D",
              help="KV cache dtype: judged per engine x GPU x version (a value the engine does not accept, or "
                   "cannot run on the GPU, fails the verdict) and used for the memory estimate: auto, bfloat16, fp8, "
                   "fp8_e4m3, nvfp4, f16, q8_0, q4_0 ... (default: what the checkpoint declares, else the model's "
                   "dtype; f16 for GGUF).")
@click.option("--tp", type=click.IntRange(min=1), default=None, metavar="N",
              help="Tensor-parallel size to judge: heads, KV heads, FP8 blocks and AWQ/GPTQ groups must divide "
                   "over N ranks where the engine checks them (vLLM, SGLang, TensorRT-LLM, MLX, ExLlamaV2; llama.cpp "
                   "and ExLlamaV3 split without shape checks; Ollama has no --tp).")
@click.option("--pp", type=click.IntRange(min=1), default=None, metavar="N", help="Pipeline-parallel size to judge.")
@click.option("--ep", type=click.IntRange(min=1), default=None, metavar="N",
              help="Expert-parallel size to judge (needs a MoE model).")
@click.option("--all", "all_models", is_flag=True,
              help="Judge every GGUF model of a directory or Hub repo (files or split sets) instead of asking "
                   "for one; the JSON is then a qcheck.check-set/1 object and the exit code the worst.")
@output_options
@limit_options
def command(target: str, engines: tuple[str, ...], gpus: tuple[str, ...], require_native: bool,
            allow_unknown: bool, require_kv_scales: bool, context: int | None, batch: int | None, kv_cache_dtype: str | None,
            tp: int | None, pp: int | None, ep: int | None,
            all_models: bool, output_spec: OutputSpec, limits: Limits) -> int:
    """Judge PATH on every ENGINE x GPU combination, from headers only.

    PATH is a .gguf file (or the first shard of a split GGUF), a .safetensors file, a model directory,
    a Hub repo id (org/name[@revision][:file.gguf|:QUANT], or a pasted huggingface.co link) or a saved
    `qcheck inspect --json` record. A directory or repo holding several GGUF models is a usage error
    listing them, unless --all: then every model is judged (text: one block per model; JSON: a
    qcheck.check-set/1 object {schema, target, results: [one check object per model], exit_code}).

    \b
    Which combinations:
      --engine E --gpu G   the cross product of all --engine and --gpu values
      --gpu G only         every engine the matrix knows that runs on G's vendor,
                           what works first (to explore: exit 0 when any engine
                           runs it; name --engine for a CI gate)
      --engine E only      hosted providers only (GPU engines need --gpu)
      neither              the inspection (as qcheck inspect) and this hint

    \b
    Exit codes:
      0  every combination runs it (natively or through a fallback)
      1  a combination cannot run it, or its status is unknown (unless
         --allow-unknown), or it runs only through a fallback and
         --require-native is given
      2  the input could not be judged (unreadable or hostile file, usage error)
    With --all: the worst over the models (2 > 1 > 0).

    `qcheck matrix --list` shows the engines, versions, backends and GPUs the matrix knows.
    """
    from qcheck.check import check_paths

    if not engines and not gpus:  # nothing to judge against: say what PATH is, and how to judge it
        from qcheck.cli.inspect_cmd import run_inspect

        code = run_inspect(target, all_models, output_spec, limits)
        click.echo("qcheck: no --engine or --gpu given, so this is the inspection; to judge it add --gpu G "
                   "(every engine on that GPU, e.g. --gpu h100) or --engine E --gpu G", err=True)
        return code
    layout: dict[str, object] = {name: n for name, n in (("tp", tp), ("pp", pp), ("ep", ep)) if n is not None}
    if require_kv_scales:
        layout["require_kv_scales"] = True
    detected: dict[str, float] | None = None
    notes: list[str] = []
    if any(g.strip().lower() == "auto" for g in gpus):
        from qcheck.gpu_detect import auto_gpus
        from qcheck.matrix import load_matrix

        ids, detected, notes = auto_gpus(load_matrix().gpus)
        gpus = tuple([g for g in gpus if g.strip().lower() != "auto"] + ids)
    from qcheck.hub.select import AmbiguousTargetError
    from qcheck.memory import check_path_with_memory
    from qcheck.quant_table import QuantTable, branch_targets, variant_dirs
    from qcheck.readers.directory import SeveralModelsError

    branches = branch_targets(target, limits)
    variants = branches or (variant_dirs(target) if gpus else [])
    if variants:  # safetensors variants (local sub-directories, or every branch of a Hub repo with @*): one table
        from qcheck.check import CHECK_SET_SCHEMA, ResultSet
        from qcheck.errors import QcheckError, UsageError
        from qcheck.hub.errors import RateLimitedError

        results: list = []
        skipped: list[str] = []
        for v in variants:
            try:
                one = check_path_with_memory(v, engines, gpus, limits=limits, require_native=require_native,
                                             allow_unknown=allow_unknown, context=context, batch=batch or 1,
                                             kv_cache_dtype=kv_cache_dtype, gpu_memory=detected, notes=notes,
                                             options=layout, all_models=bool(branches))
            except QcheckError as exc:
                if not branches or isinstance(exc, RateLimitedError) or (
                        isinstance(exc, UsageError) and not isinstance(exc, AmbiguousTargetError)):
                    raise  # the command is wrong (e.g. no --gpu for an engine that needs one), not the branch
                skipped.append(f"{v}: {str(exc).splitlines()[0][:200]}")  # a branch without a model
                continue
            results.extend(getattr(one, "results", [one]))
        if not results:
            raise UsageError(f"{target}: no branch holds a checkpoint qcheck can read ({'; '.join(skipped[:3])})")
        variant_set = ResultSet(target, results, kind="check-set", schema=CHECK_SET_SCHEMA)
        notes_out = [f"skipped {s}" for s in skipped]
        return finish(variant_set if all_models else QuantTable.from_set(variant_set, notes_out), output_spec)

    try:
        if context is not None or batch is not None or kv_cache_dtype is not None or detected is not None:
            result = check_path_with_memory(target, engines, gpus, limits=limits, require_native=require_native,
                                            allow_unknown=allow_unknown, context=context, batch=batch or 1,
                                            kv_cache_dtype=kv_cache_dtype, all_models=all_models,
                                            gpu_memory=detected, notes=notes, options=layout)
        else:
            result = check_paths(target, engines, gpus, limits=limits, require_native=require_native,
                                 allow_unknown=allow_unknown, all_models=all_models, options=layout or None)
    except (AmbiguousTargetError, SeveralModelsError):
        if not gpus or all_models:
            raise
        # several models and a GPU: which quant fits, one table (--all keeps the per-model detail)
        result = QuantTable.from_set(check_path_with_memory(
            target, engines, gpus, limits=limits, require_native=require_native, allow_unknown=allow_unknown,
            context=context, batch=batch or 1, kv_cache_dtype=kv_cache_dtype, all_models=True,
            gpu_memory=detected, notes=notes, options=layout))
    return finish(result, output_spec)
