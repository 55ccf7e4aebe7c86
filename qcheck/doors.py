"""Every door builds its question here: one function from what the user asked (qcheck's flags, or a gate policy's
target) and the door's input (a model path, an engine command line, a manifest's container) to the
``CheckRequest`` the pipeline answers.

The doors are ``qcheck check`` (PATH and flags, or ``-- ENGINE-COMMAND``), ``qcheck hook`` (each staged file),
``qcheck gate`` (each model on each ``[[targets]]`` entry, and each container of each ``deployments`` manifest), the
which-quant-fits table (each row is the table's request for another target) and the Python API (``Asked`` and
``build_request``, or a ``CheckRequest`` built by hand). None of them sets a request field on its own, so the same
question asked through two doors is the same request, and gets the same answer (tests/test_one_answer.py).

What a door's input fixes, the rest cannot change: an engine command line (or a manifest) is the deployment, so
qcheck's deploy flags other than ``--batch`` are refused beside it; a manifest names its engine version, GPU and GPU
count. A deployment read from a command line or manifest always asks what the engine does at start-up with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from qcheck.errors import UsageError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.request import CheckRequest, Deploy, Origin

if TYPE_CHECKING:
    from qcheck.deploy.paths import PathRule
    from qcheck.outcome import Strictness

__all__ = ["Asked", "ManifestEntry", "build_request"]

#: vLLM options that run a world across nodes: the node's GPU count no longer bounds TP x PP
_MULTI_NODE = frozenset({"--distributed-executor-backend", "--nnodes"})


@dataclass(frozen=True)
class Asked:
    """What the user asked beside the door's input, from qcheck's flags or a gate policy: where (engines, GPUs), how
    it is deployed (``deploy``; ``settings_named``: a memory question was asked), how strictly it is judged, and the
    run's limits. ``require_native`` ... ``kernels_only`` are read by ``qcheck.outcome`` (an Asked is a
    ``Strictness`` too, for a manifest entry that never became a request)."""

    engines: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    deploy: Deploy = field(default_factory=Deploy)
    settings_named: bool = False
    require_native: bool = False
    allow_unknown: bool = False
    require_kv_scales: bool = False
    kernels_only: bool = False
    #: per GPU id, the memory to judge against (``--gpu auto``: what is free)
    gpu_memory_gib: tuple[tuple[str, float], ...] = ()
    notes: tuple[str, ...] = ()
    limits: Limits = DEFAULT_LIMITS
    host_bandwidth_gbs: float | None = None
    #: add the capacity table (``--capacity``): concurrent sequences per context and KV type
    capacity: bool = False

    def judged_by(self, strictness: Strictness) -> Asked:
        """The same question judged under ``strictness`` (qcheck's --require-native ... --kernels-only flags)."""
        return replace(self, require_native=strictness.require_native, allow_unknown=strictness.allow_unknown,
                       require_kv_scales=strictness.require_kv_scales, kernels_only=strictness.kernels_only)


@dataclass(frozen=True)
class ManifestEntry:
    """A container of a deployment manifest, as the gate hands it to ``build_request``: its command words, the engine
    and release its image names, the GPU and GPU count it gets, where it is written, and how the policy maps the
    model paths inside the container to models qcheck can read."""

    words: tuple[str, ...]
    engine: str
    version: str | None
    gpu: str | None
    gpu_count: int | None
    file: str
    line: int
    image: str
    notes: tuple[str, ...] = ()
    #: container path -> model path or Hub id (the policy's ``deployments[i].models``)
    models: Mapping[str, str] = field(default_factory=dict)
    #: the model when the command names none qcheck can read (the policy's ``deployments[i].model``)
    model: str | None = None
    key: str = "deployments"
    #: where the local files the command names may lead (the policy's repository unless --allow-outside)
    paths: PathRule | None = None


def build_request(asked: Asked, target: str | None = None, *, command: Sequence[str] | None = None,
                  entry: ManifestEntry | None = None, all_models: bool = False) -> CheckRequest:
    """The ``CheckRequest`` one door asks: ``target`` alone (a path, Hub id or saved inspection), an engine
    ``command`` (``target``, when given, replaces the command's model), or a manifest ``entry``."""
    if entry is not None:
        return _from_entry(asked, entry)
    if command is not None:
        return _from_command(asked, command, target)
    if target is None:
        raise UsageError("no model given: a .gguf or .safetensors file, a model directory or a Hub repo id")
    memory = asked.settings_named or asked.deploy.named or bool(asked.gpu_memory_gib)
    return _request(asked, target, asked.engines, asked.gpus, asked.deploy, memory, all_models=all_models)


def _request(asked: Asked, target: str, engines: tuple[str, ...], gpus: tuple[str, ...], deploy: Deploy,
             memory: bool, **more: object) -> CheckRequest:
    more.setdefault("notes", asked.notes)
    return CheckRequest(target, engines, gpus, deploy, require_native=asked.require_native,
                        allow_unknown=asked.allow_unknown, require_kv_scales=asked.require_kv_scales,
                        kernels_only=asked.kernels_only, memory=memory, gpu_memory_gib=asked.gpu_memory_gib,
                        limits=asked.limits, host_bandwidth_gbs=asked.host_bandwidth_gbs, capacity=asked.capacity,
                        **more)  # type: ignore[arg-type]


def _command_engines(cmd_engine: str, engines: Sequence[str]) -> tuple[str, ...]:
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


def _command_deploy(cmd_deploy: Deploy, batch: int, gpus: int | None, multi_node: bool) -> Deploy:
    """The command's deployment with the load (``--batch``) beside it and the GPUs its node has."""
    return replace(cmd_deploy, batch=batch, gpus_available=None if multi_node else gpus)


def _from_command(asked: Asked, words: Sequence[str], target: str | None) -> CheckRequest:
    from qcheck.deploy.cmdline import parse_command

    if replace(asked.deploy, gpus_available=None).replace_batch() != Deploy():
        raise UsageError("give the deployment's settings in the engine command, not also as qcheck flags "
                         "(--context, --kv-cache-dtype, -ctk/-ctv, --tp/--pp/--ep, engine settings); --batch may be "
                         "added")
    cmd = parse_command(words)
    model = target or cmd.target()
    if not model:
        raise UsageError(f"the {cmd.program} command names no model qcheck can read ({cmd.model or 'none'}): give "
                         "the model file, directory or Hub id as PATH: qcheck check PATH --gpu G -- COMMAND")
    deploy = _command_deploy(cmd.deploy, asked.deploy.batch, asked.deploy.gpus_available,
                             _multi_node(cmd.origin.settings))
    origin = _judged_origin(cmd.origin if asked.engines else _newest_release(cmd.origin))
    return _request(asked, model, _command_engines(cmd.engine, asked.engines), asked.gpus, deploy, True,
                    notes=(*asked.notes, *cmd.notes), origin=origin)


def _newest_release(origin: Origin) -> Origin:
    """A command names no release: it is judged as the newest the data knows, and the answer says so."""
    from qcheck.matrix import load_matrix

    engine = load_matrix().engine(origin.engine)
    return replace(origin, release=(
        f"{engine.id} {engine.newest}, the newest {engine.name} release qcheck has data for: a command line does not "
        f"say which release runs it; add --engine {engine.id}==VERSION to judge the one you run (the data has "
        f"{engine.id} {engine.oldest} to {engine.newest})"))


def _from_entry(asked: Asked, entry: ManifestEntry) -> CheckRequest:
    """A manifest's container: its engine release (the image tag), GPU, GPU count and command line."""
    from qcheck.deploy.cmdline import parse_command

    try:
        cmd = parse_command(entry.words, paths=entry.paths)
    except UsageError as exc:  # e.g. a shell script around the engine: not a command line qcheck reads
        raise EntryGap(str(exc)) from None
    model = entry.models.get(cmd.model or "") or cmd.target() or entry.model or ""
    if not model:
        raise EntryGap(f"the command names no model qcheck can read ({cmd.model or 'none'}); map it under "
                       f"{entry.key}.models, or give {entry.key}.model")
    engine = f"{entry.engine}=={entry.version}" if entry.version else entry.engine
    deploy = _command_deploy(cmd.deploy, asked.deploy.batch, entry.gpu_count, _multi_node(cmd.origin.settings))
    origin = replace(_judged_origin(cmd.origin), kind="manifest", file=entry.file, line=entry.line,
                     image=entry.image)
    notes = [*entry.notes, *cmd.notes] + ([] if entry.version else [f"image {entry.image}: the tag names no release; "
                                                                    "judged at the newest the matrix knows"])
    return _request(asked, model, (engine,), (entry.gpu,) if entry.gpu else (), deploy, True, notes=tuple(notes),
                    origin=origin)


class EntryGap(UsageError):
    """A manifest container qcheck cannot turn into a request (reported as an unknown verdict, not an error)."""


def _judged_origin(origin: Origin) -> Origin:
    """The command's settings, with an engine setting the engine's memory model does not read moved to "not judged"
    (it changes no figure: qcheck.knobs ``formulas``)."""
    from qcheck.errors import UsageError as _Usage
    from qcheck.knobs import KNOBS
    from qcheck.matrix import load_matrix

    try:
        memory = load_matrix().engine(origin.engine).memory
    except _Usage:
        return origin
    formula = memory.formula if memory is not None else None
    by_field = {f"knobs.{k.field}": k for k in KNOBS}
    settings = tuple(replace(s, judged_as=None) if s.judged_as in by_field and formula not in
                     by_field[s.judged_as].formulas else s for s in origin.settings)
    return replace(origin, settings=settings)


def _multi_node(settings: Sequence[object]) -> bool:
    flags = {str(getattr(s, "flag", "")).split("=")[0].replace("_", "-") for s in settings}
    return bool(flags & _MULTI_NODE)
