"""The front end for ``qcheck check --gpu G -- ENGINE-COMMAND...``: the engine command line becomes the
``CheckRequest`` (engine, model, context, KV cache, parallel layout, knobs, what the engine refuses), answered
by the same pipeline as qcheck's own flags."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from qcheck.errors import UsageError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.request import CheckRequest, Deploy, Origin

__all__ = ["QcheckFlags", "request_from_command"]


@dataclass(frozen=True)
class QcheckFlags:
    """qcheck's own flags given beside an engine command (PATH replaces the command's model; ``deploy`` may only
    carry ``--batch``)."""

    target: str | None = None
    engines: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    deploy: Deploy = field(default_factory=Deploy)
    require_native: bool = False
    allow_unknown: bool = False
    limits: Limits = DEFAULT_LIMITS
    gpu_memory_gib: tuple[tuple[str, float], ...] = ()
    notes: tuple[str, ...] = ()
    require_kv_scales: bool = False


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


def request_from_command(words: Sequence[str], flags: QcheckFlags) -> CheckRequest:
    """The request an engine command line deploys. ``flags.target`` (qcheck's PATH) replaces the command's model
    (a container path, an Ollama library name); of qcheck's deploy flags only ``--batch`` may be given beside a
    command (the command's own settings are the deployment)."""
    from qcheck.deploy.cmdline import parse_command

    if flags.deploy.replace_batch() != Deploy():
        raise UsageError("give the deployment's settings in the engine command, not also as qcheck flags "
                         "(--context, --kv-cache-dtype, -ctk/-ctv, --tp/--pp/--ep); --batch may be added")
    cmd = parse_command(words)
    model = flags.target or cmd.target()
    if not model:
        raise UsageError(f"the {cmd.program} command names no model qcheck can read ({cmd.model or 'none'}): give "
                         "the model file, directory or Hub id as PATH: qcheck check PATH --gpu G -- COMMAND")
    deploy = Deploy(context=cmd.deploy.context, batch=flags.deploy.batch, kv_cache=cmd.deploy.kv_cache,
                    parallel=cmd.deploy.parallel, knobs=cmd.deploy.knobs, findings=cmd.deploy.findings)
    memory = (deploy.context is not None or deploy.kv_cache.given or deploy.batch > 1 or bool(deploy.knobs.given())
              or bool(flags.gpu_memory_gib))
    origin = cmd.origin if flags.engines else _newest_release(cmd.origin)
    return CheckRequest(model, _engine_spec(cmd.engine, flags.engines), flags.gpus, deploy,
                        require_native=flags.require_native, allow_unknown=flags.allow_unknown,
                        require_kv_scales=flags.require_kv_scales, memory=memory, gpu_memory_gib=flags.gpu_memory_gib,
                        notes=(*flags.notes, *cmd.notes), limits=flags.limits, origin=origin)


def _newest_release(origin: Origin) -> Origin:
    """A command names no release: it is judged as the newest the data knows, and the answer says so."""
    from dataclasses import replace

    from qcheck.matrix import load_matrix

    engine = load_matrix().engine(origin.engine)
    return replace(origin, release=(
        f"{engine.id} {engine.newest}, the newest {engine.name} release qcheck has data for: a command line does not "
        f"say which release runs it; add --engine {engine.id}==VERSION to judge the one you run (the data has "
        f"{engine.id} {engine.oldest} to {engine.newest})"))
