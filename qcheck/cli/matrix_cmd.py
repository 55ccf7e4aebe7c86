"""``qcheck matrix``: the engine x architecture table of statuses, for a method or a checkpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from qcheck.cli.common import OutputSpec, finish, limit_options, output_options_for
from qcheck.limits import Limits

if TYPE_CHECKING:
    from qcheck.matrix import Matrix


@click.command("matrix")
@click.argument("target", metavar="[PATH]", required=False)
@click.option("--method", "-m", "methods", multiple=True, metavar="METHOD",
              help="Canonical method (none, gguf, fp8, nvfp4, mxfp4, awq, gptq, ...), repeatable; default: an "
                   "overview of every method (text) or every table (json, markdown).")
@click.option("--engine", "-e", "engines", multiple=True, metavar="ENGINE",
              help="Rows: NAME, NAME==VERSION or NAME:BACKEND, repeatable (default: every engine, newest version).")
@click.option("--gpu", "-g", "gpus", multiple=True, metavar="GPU",
              help="Columns: products, architectures or compute capabilities (default: every architecture).")
@click.option("--all-versions", is_flag=True, help="One row per engine version the matrix knows.")
@click.option("--validate", is_flag=True,
              help="Check the matrix data: schema, then every method x engine x version x architecture.")
@click.option("--arch", "arch_name", default=None, metavar="NAME",
              help="Which engines and versions load a model architecture (LlamaForCausalLM, llama, qwen3 ...).")
@click.option("--list", "list_names", is_flag=True, help="List the engines and GPUs the matrix knows.")
@output_options_for(("text", "json", "markdown"), reports=False)
@limit_options
def command(target: str | None, methods: tuple[str, ...], engines: tuple[str, ...], gpus: tuple[str, ...],
            all_versions: bool, validate: bool, arch_name: str | None, list_names: bool, output_spec: OutputSpec,
            limits: Limits) -> int:
    """Show which engines run which quantisation formats on which architectures.

    \b
      qcheck matrix                          where each format variant runs
      qcheck matrix --method nvfp4           every NVFP4 variant's table
      qcheck matrix model.gguf -e llama.cpp  the table for one checkpoint
      qcheck matrix --format markdown -o docs/matrix.md
      qcheck matrix --validate               check matrices/ after an edit
      qcheck matrix --arch Qwen3ForCausalLM  which engines and versions load it
    """
    from qcheck.errors import UsageError
    from qcheck.matrix import load_matrix, parse_engine_spec
    from qcheck.matrix.table import build_matrix

    matrix = load_matrix()
    if validate:
        from qcheck.matrix.architectures import validate_all
        from qcheck.matrix.audit import audit

        matrix.validate()  # every engine file (a check reads only the engines it judges)
        report = audit(matrix)
        report.require_verified(matrix)
        click.echo(f"matrix data OK: {len(matrix.engines)} engines, "
                   f"{sum(len(e.rules) for e in matrix.engines.values())} rules, "
                   f"{len(matrix.gpus.archs)} architectures, {len(matrix.gpus.gpus)} GPUs; {report.summary()}")
        for line in report.notes():
            click.echo(line)
        click.echo(f"architecture data OK: {validate_all(matrix)}")
        return 0
    if arch_name is not None:
        return _arch(matrix, arch_name, engines, output_spec)
    if list_names:
        for engine in matrix.engines.values():
            backends = f"  backends: {', '.join(engine.backends)}" if engine.backends else ""
            click.echo(f"engine {engine.id:<14} {engine.kind:<15} versions: {', '.join(engine.versions)}{backends}")
        for arch in matrix.gpus.archs.values():
            ccs = ", ".join(f"sm{c.replace('.', '')}" for c in arch.ccs)
            products = ", ".join(g.id for g in matrix.gpus.gpus_of(arch.id))
            click.echo(f"arch   {arch.id:<20} {arch.vendor:<8} {ccs:<12} {products}")
        return 0
    if target and methods:
        raise UsageError("give either PATH or --method, not both")
    requests = [parse_engine_spec(e, matrix) for e in engines] or None
    inspection = None
    if target:
        from qcheck.check import inspect_target

        inspection = inspect_target(target, limits)
    wanted: list[str | None] = [*dict.fromkeys(methods)] or [None]
    result = build_matrix(matrix, method=wanted[0], inspection=inspection, requests=requests, gpus=list(gpus),
                          all_versions=all_versions)
    for method in wanted[1:]:  # --method given again: its tables follow, none is dropped
        result.tables.extend(build_matrix(matrix, method=method, requests=requests, gpus=list(gpus),
                                          all_versions=all_versions).tables)
    result.overview = not methods and not target and not engines and not gpus and not all_versions
    if output_spec.fmt == "markdown":
        from qcheck.report import write_output
        from qcheck.report.markdown_matrix import render

        text = render(result)
        if output_spec.path and output_spec.path != "-":
            write_output(output_spec.path, text)
        else:
            click.echo(text, nl=False)
        return 0
    return finish(result, output_spec)


def _arch(matrix: Matrix, name: str, engines: tuple[str, ...], output_spec: OutputSpec) -> int:
    """``qcheck matrix --arch NAME``: one line per engine list that holds the name (text or JSON)."""
    import json

    from qcheck.errors import UsageError
    from qcheck.matrix import parse_engine_spec
    from qcheck.matrix.architectures import arch_support

    if not name.strip():
        raise UsageError("--arch needs a name (e.g. LlamaForCausalLM, llama, qwen3)")
    if output_spec.fmt not in ("text", "json"):
        raise UsageError(f"qcheck matrix --arch writes text or json, not {output_spec.fmt}")
    ids = [parse_engine_spec(e, matrix).engine.id for e in engines] or list(matrix.engines)
    rows = arch_support(matrix.root, ids, name)
    if output_spec.fmt == "json":
        text = json.dumps({"schema": "qcheck.arch-support/1", "architecture": name,
                           "engines": [r.to_json() for r in rows]}, indent=2) + "\n"
    else:
        text = f"architecture {name}: which engines load it (from matrices/architectures/)\n"
        text += "".join(f"  {r.line()}\n" for r in rows)
    if output_spec.path and output_spec.path != "-":
        from qcheck.report import write_output

        write_output(output_spec.path, text)
    else:
        click.echo(text, nl=False)
    return 0
