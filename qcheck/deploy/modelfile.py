"""Ollama Modelfiles: ``FROM`` (the model) and ``PARAMETER name value`` (the runner options), read as Ollama's
parser reads them (ollama/ollama v0.33.0-rc2: parser/parser.go; api/types.go:568-595 for the options and
:1274-1340 ``FormatParams`` for their types and refusals: "unknown parameter", "invalid int value").

``PARAMETER num_ctx`` is the context, ``num_gpu`` the layers offloaded (llama.cpp's ``-ngl``), ``num_batch``
the batch (``-b``), ``use_mmap false`` no mmap; the sampling parameters are listed as not judged.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Protocol

from qcheck.errors import InputError, UsageError

if TYPE_CHECKING:
    from qcheck.deploy.paths import PathRule


class SettingsBuilder(Protocol):
    """What a Modelfile writes into: the settings ``qcheck.deploy.cmdline`` collects for a command line (its
    ``SettingsBuilder``), named here so this module does not import the command-line reader that calls it."""

    values: dict[str, object]
    #: where the Modelfile may be (a manifest's command: inside the policy's repository); None: anywhere
    paths: PathRule | None

    def refuse(self, flag: str, value: str | None, message: str, *, unknown_flag: bool = False,
               status: str = "unsupported") -> None: ...

    def note(self, flag: str, value: str | None, where: str, judged_as: str | None) -> None: ...


__all__ = ["MAX_MODELFILE_BYTES", "ModelfileLine", "apply_modelfile", "read_modelfile"]

MAX_MODELFILE_BYTES = 1 << 20

#: api/types.go Options + Runner json names and their Go types (FormatParams converts by them)
PARAMETERS = {
    "num_ctx": "int", "num_batch": "int", "num_gpu": "int", "main_gpu": "int", "use_mmap": "bool",
    "num_thread": "int", "draft_num_predict": "int", "num_keep": "int", "seed": "int", "num_predict": "int",
    "top_k": "int", "top_p": "float", "min_p": "float", "typical_p": "float", "repeat_last_n": "int",
    "temperature": "float", "repeat_penalty": "float", "presence_penalty": "float", "frequency_penalty": "float",
    "stop": "str",
}
#: the parameters that change the answer, and what they set
JUDGED = {"num_ctx": "context", "num_gpu": "knobs.n_gpu_layers", "num_batch": "knobs.n_batch",
          "use_mmap": "knobs.no_mmap"}
COMMANDS = ("from", "license", "template", "system", "adapter", "draft", "renderer", "parser", "parameter",
            "message", "requires")


class ModelfileLine:
    """One instruction: its command (lower case), its arguments, and its line number."""

    __slots__ = ("args", "command", "line")

    def __init__(self, command: str, args: str, line: int):
        self.command, self.args, self.line = command, args, line


def read_modelfile(text: str, name: str) -> list[ModelfileLine]:
    """The instructions of a Modelfile (``#`` comments, case-insensitive commands, quoted and triple-quoted
    values); an unknown command is Ollama's error."""
    out: list[ModelfileLine] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        raw = lines[i].strip()
        start = i + 1
        i += 1
        if not raw or raw.startswith("#"):
            continue
        command, _, args = raw.partition(" ")
        args = args.strip()
        if args.startswith('"""') and not (len(args) > 5 and args.endswith('"""')):
            while i < len(lines) and '"""' not in lines[i]:
                args += "\n" + lines[i]
                i += 1
            if i < len(lines):
                args += "\n" + lines[i]
                i += 1
        if command.lower() not in COMMANDS:
            raise UsageError(f"{name}:{start}: command must be one of \"from\", \"license\", \"template\", \"system\", "
                             "\"adapter\", \"draft\", \"renderer\", \"parser\", \"parameter\", \"message\", or "
                             "\"requires\" (Ollama's parser)")
        out.append(ModelfileLine(command.lower(), args.strip().strip('"'), start))
    return out


def _convert(name: str, value: str) -> object:
    kind = PARAMETERS[name]
    if kind == "int":
        if not re.fullmatch(r"[+-]?\d+", value):
            raise ValueError(f"invalid int value {value}")
        return int(value)
    if kind == "float":
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"invalid float value {value}") from None
    if kind == "bool":
        if value.lower() not in ("1", "t", "true", "0", "f", "false"):
            raise ValueError(f"invalid bool value {value}")
        return value.lower() in ("1", "t", "true")
    return value


def apply_modelfile(builder: SettingsBuilder, path: str) -> list[str]:
    """Read the Modelfile at ``path`` into ``builder`` (FROM and PARAMETERs); returns notes. Only a regular file
    of at most ``MAX_MODELFILE_BYTES`` is read (``-f /dev/zero`` or a FIFO is an InputError, not a hang), and only
    inside ``builder.paths`` when the command comes from a manifest."""
    from qcheck.source import read_regular_file

    if builder.paths is not None:
        from qcheck.deploy.paths import confine_path

        confine_path(builder.paths, path, "the Modelfile (ollama create -f)", walk=False)
    raw = read_regular_file(path, MAX_MODELFILE_BYTES, "Modelfile")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("the Modelfile is not UTF-8 text", path=path) from None
    apply_lines(builder, read_modelfile(text, path), path)
    return []


def apply_lines(builder: SettingsBuilder, lines: list[ModelfileLine], name: str) -> None:
    """FROM and PARAMETER lines into ``builder``; other instructions are listed as not judged."""
    base = os.path.dirname(name)
    for item in lines:
        where = f"{name}:{item.line}"
        if item.command == "from":
            model = item.args
            local = os.path.normpath(os.path.join(base, model)) if not os.path.isabs(model) else model
            if model.startswith((".", "/")) or model.endswith(".gguf"):
                model = local
            builder.values["model"] = model
            builder.note("FROM", item.args, where, "model")
            continue
        if item.command != "parameter":
            builder.note(item.command.upper(), item.args[:80], where, None)
            continue
        pname, _, value = item.args.partition(" ")
        pname, value = pname.lower(), value.strip().strip('"')
        flag = f"PARAMETER {pname}"
        if pname not in PARAMETERS:
            builder.refuse(flag, value, f"unknown parameter '{pname}'")
            continue
        try:
            converted = _convert(pname, value)
        except ValueError as exc:
            builder.refuse(flag, value, str(exc))
            continue
        target = JUDGED.get(pname)
        if target is None:
            builder.note(flag, value, where, None)
            continue
        if pname == "use_mmap":
            converted = not converted
        if pname == "num_gpu" and isinstance(converted, int) and converted < 0:
            converted = None  # Ollama's default: as many layers as fit
        builder.values[target] = converted
        builder.note(flag, value, where, target)
