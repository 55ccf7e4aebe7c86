"""The front end for ``qcheck check --gpu G -- ENGINE-COMMAND...``: the engine command line becomes the
``CheckRequest`` (engine, model, context, KV cache, parallel layout, knobs, what the engine refuses), answered
by the same pipeline as qcheck's own flags."""

from __future__ import annotations

from collections.abc import Sequence

from qcheck.errors import UsageError
from qcheck.limits import Limits
from qcheck.request import CheckRequest, Deploy

__all__ = ["request_from_command"]


def _engine_spec(cmd_engine: str, engines: Sequence[str]) -> tuple[str, ...]:
    """``--engine`` may pin the command's engine version (``--engine vllm==0.10.2``), never name another."""
    if not engines:
        return (cmd_engine,)
    from qcheck.matrix import load_matrix, parse_engine_spec

    matrix = load_matrix()
    for text in engines:
        if parse_engine_spec(text, matrix).engine.id != cmd_engine:
            raise UsageError(f"--engine {text}: the engine command runs {cmd_engine}; --engine may only give its "
                             f"version (e.g. --engine {cmd_engine}==X)")
    return tuple(engines)


def request_from_command(words: Sequence[str], *, target: str | None, engines: Sequence[str], gpus: Sequence[str],
                         flags: Deploy, require_native: bool, allow_unknown: bool, limits: Limits,
                         gpu_memory_gib: tuple[tuple[str, float], ...] = (), notes: Sequence[str] = ()) -> CheckRequest:
    """The request an engine command line deploys. ``target`` (qcheck's PATH) replaces the command's model (a
    container path, an Ollama library name); ``flags`` are qcheck's own deploy flags, of which only ``--batch``
    may be given beside a command (the command's own settings are the deployment)."""
    from qcheck.deploy.cmdline import parse_command

    if flags.replace_batch() != Deploy():
        raise UsageError("give the deployment's settings in the engine command, not also as qcheck flags "
                         "(--context, --kv-cache-dtype, -ctk/-ctv, --tp/--pp/--ep); --batch may be added")
    cmd = parse_command(words)
    model = target or cmd.target()
    if not model:
        raise UsageError(f"the {cmd.program} command names no model qcheck can read ({cmd.model or 'none'}): give "
                         "the model file, directory or Hub id as PATH: qcheck check PATH --gpu G -- COMMAND")
    deploy = Deploy(context=cmd.deploy.context, batch=flags.batch, kv_cache=cmd.deploy.kv_cache,
                    parallel=cmd.deploy.parallel, knobs=cmd.deploy.knobs, findings=cmd.deploy.findings)
    memory = (deploy.context is not None or deploy.kv_cache.given or deploy.batch > 1 or bool(deploy.knobs.given())
              or bool(gpu_memory_gib))
    return CheckRequest(model, _engine_spec(cmd.engine, engines), tuple(gpus), deploy, require_native=require_native,
                        allow_unknown=allow_unknown, memory=memory, gpu_memory_gib=gpu_memory_gib,
                        notes=(*notes, *cmd.notes), limits=limits, origin=cmd.origin)
