"""``qcheck check PATH --engine E --gpu G``: will this checkpoint run there, and how?"""

from __future__ import annotations

import click

from qcheck.cli.common import (
    OutputSpec,
    deploy_options,
    finish,
    limit_options,
    output_options,
    strictness_options,
)
from qcheck.limits import Limits
from qcheck.outcome import StrictnessFlags
from qcheck.request import Deploy


class _CheckCommand(click.Command):
    """``qcheck check [PATH] --gpu G -- ENGINE-COMMAND...``: everything after the first ``--`` is the engine
    command line (qcheck.deploy), kept apart before click parses qcheck's own options."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta["qcheck.engine_command"] = args[cut + 1:]
            args = args[:cut]
        return super().parse_args(ctx, args)


@click.command("check", cls=_CheckCommand)
@click.argument("target", metavar="PATH", required=False)
@click.option("--engine", "-e", "engines", multiple=True, metavar="ENGINE",
              help="Engine to judge against, repeatable: NAME, NAME==VERSION (default: newest version the matrix "
                   "knows), NAME:BACKEND to pick a compute backend (llama.cpp:vulkan; default: the backend "
                   "for the GPU's vendor).")
@click.option("--gpu", "-g", "gpus", multiple=True, metavar="GPU",
              help="GPU to judge on, repeatable: a product (h100, rtx-4090, mi300x, m3-max, cpu), an architecture "
                   "(ampere, hopper, cdna3, ...), a compute capability (sm90, 8.9), or auto: the GPUs of this "
                   "machine (nvidia-smi, rocm-smi, macOS sysctl), judged against their free memory.")
@strictness_options
@deploy_options
@click.option("--capacity", is_flag=True,
              help="Add a capacity table to each verdict: concurrent sequences at 4k, 8k, 32k and 128k context "
                   "(and --context) for each KV cache type the engine accepts on the GPU, with vLLM's own "
                   "'maximum concurrency' figure (docs/memory.md).")
@click.option("--all", "all_models", is_flag=True,
              help="Judge every GGUF model of a directory or Hub repo (files or split sets) instead of asking "
                   "for one; the JSON is then a qcheck.check-set/1 object and the exit code the worst.")
@output_options
@limit_options
def command(target: str | None, engines: tuple[str, ...], gpus: tuple[str, ...], strictness: StrictnessFlags,
            deploy: Deploy, memory_asked: bool, capacity: bool, host_bandwidth_gbs: float | None, all_models: bool,
            output_spec: OutputSpec, limits: Limits) -> int:
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
      0  every combination runs it (natively or through a fallback), and
         when deployment settings are named (--context, --batch, a KV type,
         --tp, an engine setting, an engine command line) the engine starts
         with them
      1  a combination cannot run it, or the engine does not start with the
         settings asked (vLLM's KV check, SGLang's pool, llama.cpp -ngl ...),
         or its status is unknown (unless --allow-unknown), or it runs only
         through a fallback and --require-native is given
      2  the input could not be judged (unreadable or hostile file, usage error)
    With --all: the worst over the models (2 > 1 > 0). --kernels-only judges
    the kernels only: the start-up is reported, not part of the exit code.

    \b
    Engine command lines (docs/deploy.md):
      qcheck check --gpu h100 -- vllm serve org/model --max-model-len 32768 -tp 2
    judges exactly that command (vllm serve, python -m sglang.launch_server,
    llama-server, ollama run/create, trtllm-serve, mlx_lm.server, lms load);
    PATH, when given, replaces the command's model.

    `qcheck matrix --list` shows the engines, versions, backends and GPUs the matrix knows.
    """
    engine_command = click.get_current_context().meta.get("qcheck.engine_command")
    if target is None and engine_command is None:
        raise click.UsageError("Missing argument 'PATH'.")
    if not engines and not gpus and engine_command is None and target is not None:  # nothing to judge against: say what PATH is, and how to judge it
        from qcheck.cli.inspect_cmd import run_inspect

        code = run_inspect(target, all_models, output_spec, limits)
        click.echo("qcheck: no --engine or --gpu given, so this is the inspection; to judge it add --gpu G "
                   "(every engine on that GPU, e.g. --gpu h100) or --engine E --gpu G", err=True)
        return code
    from qcheck.doors import Asked, build_request
    from qcheck.pipeline import answer

    detected: tuple[tuple[str, float], ...] = ()
    notes: list[str] = []
    if any(g.strip().lower() == "auto" for g in gpus):
        from dataclasses import replace

        from qcheck.gpu_detect import auto_gpus
        from qcheck.matrix import load_matrix

        ids, free, notes = auto_gpus(load_matrix().gpus)
        gpus = tuple([g for g in gpus if g.strip().lower() != "auto"] + ids)
        detected = tuple(free.items())
        deploy = replace(deploy, gpus_available=len(ids) or None)
    asked = Asked(tuple(engines), tuple(gpus), deploy, memory_asked, gpu_memory_gib=detected,
                  notes=tuple(notes), limits=limits, host_bandwidth_gbs=host_bandwidth_gbs,
                  capacity=capacity).judged_by(strictness)
    request = build_request(asked, target, command=engine_command, all_models=all_models)
    return finish(answer(request), output_spec)
