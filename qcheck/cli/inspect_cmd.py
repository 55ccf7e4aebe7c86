"""``qcheck inspect PATH``: what a checkpoint is, from its headers (no torch, no numpy, no weights)."""

from __future__ import annotations

import click

from qcheck.cli.common import OutputSpec, finish, limit_options, output_options
from qcheck.limits import Limits


@click.command("inspect")
@click.argument("target", metavar="PATH")
@output_options
@limit_options
def command(target: str, output_spec: OutputSpec, limits: Limits) -> int:
    """Describe PATH: format, quantisation method, bits, group size, dtypes, excluded modules, KV cache,
    parameters, context length, experts, and a per-type table.

    PATH is a .gguf file (or the first shard of a split GGUF), a .safetensors file, a model directory
    or a Hub repo id (org/name[@revision][:file.gguf]). Only headers and small JSON side files are
    read. Pickle checkpoints (.bin/.pt) are never unpickled: they are reported and exit with 2.

    \b
    Exit codes: 0 inspected; 2 the input could not be judged (unreadable, malformed, hostile file,
      unsafe pickle, Git LFS pointer, usage error).
    """
    from qcheck.errors import UnsafeFileError
    from qcheck.inspect import InspectResult, inspect_path

    result = InspectResult(inspect_path(target, limits))
    if result.unsafe and output_spec.fmt != "json":
        raise UnsafeFileError(result.error_line())
    return finish(result, output_spec)
