"""``qcheck inspect PATH``: what a checkpoint is, from its headers (no torch, no numpy, no weights)."""

from __future__ import annotations

import click

from qcheck.cli.common import OutputSpec, finish, limit_options, output_options
from qcheck.limits import Limits


@click.command("inspect")
@click.argument("target", metavar="PATH")
@click.option("--all", "all_models", is_flag=True,
              help="Inspect every GGUF model of a directory or Hub repo (files or split sets) instead of "
                   "asking for one; the JSON is then a qcheck.inspection-set/1 object.")
@output_options
@limit_options
def command(target: str, all_models: bool, output_spec: OutputSpec, limits: Limits) -> int:
    """Describe PATH: format, quantisation method, bits, group size, dtypes, excluded modules, KV cache,
    parameters, context length, experts, and a per-type table.

    PATH is a .gguf file (or the first shard of a split GGUF), a .safetensors file, a model directory
    or a Hub repo id (org/name[@revision][:file.gguf|:QUANT], or a pasted huggingface.co link). A
    directory or repo holding several GGUF models is a usage error listing them unless --all is given:
    then each model is described in turn. Only headers and small JSON side files are read. Pickle
    checkpoints (.bin/.pt) are never unpickled: they are reported and exit with 2.

    Exit codes: 0 inspected; 2 the input could not be judged (unreadable, malformed, hostile file,
    unsafe pickle, Git LFS pointer, usage error). With --all: the worst over the models.
    """
    return run_inspect(target, all_models, output_spec, limits)


def run_inspect(target: str, all_models: bool, output_spec: OutputSpec, limits: Limits) -> int:
    """``qcheck inspect`` (also what ``qcheck PATH`` does when given no engine and no GPU)."""
    from qcheck.errors import UnsafeFileError
    from qcheck.inspect import InspectResult, inspect_path

    if not all_models:
        result = InspectResult(inspect_path(target, limits))
        if result.unsafe and output_spec.fmt != "json":
            raise UnsafeFileError(result.error_line())
        return finish(result, output_spec)
    from qcheck.check import INSPECTION_SET_SCHEMA, ResultSet
    from qcheck.classify import classify
    from qcheck.readers import load_checkpoints

    results = [InspectResult(classify(ck)) for ck in load_checkpoints(target, limits, all_models=True)]
    unsafe = next((r for r in results if r.unsafe), None)
    if unsafe is not None and output_spec.fmt != "json":
        raise UnsafeFileError(unsafe.error_line())
    return finish(ResultSet(target, list(results), kind="inspect-set", schema=INSPECTION_SET_SCHEMA), output_spec)
