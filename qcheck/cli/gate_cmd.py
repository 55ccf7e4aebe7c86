"""``qcheck gate [--policy FILE]``: the CI gate; ``qcheck gate --init`` writes a starter policy."""

from __future__ import annotations

from pathlib import Path

import click

from qcheck.cli.common import OutputSpec, finish, limit_options, output_options
from qcheck.limits import Limits


@click.command("gate")
@click.option("--policy", "-p", "policy_path", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Policy file (default: ./qcheck.toml, else [tool.qcheck] in ./pyproject.toml).")
@click.option("--init", "init", is_flag=True,
              help="Write a commented starter policy for the models in the current directory (to --policy FILE "
                   "or ./qcheck.toml) and exit.")
@click.option("--force", is_flag=True, help="With --init: overwrite an existing policy file.")
@click.option("--allow-outside", is_flag=True,
              help="Let policy paths (models, quality reference, tasks, cache-dir) lead outside the policy's "
                   "repository: absolute and ~ paths, .. and symlinks out of it. Off by default: a policy from "
                   "a pull request must not make the gate read other files on the runner.")
@output_options
@limit_options
def command(policy_path: str | None, init: bool, force: bool, allow_outside: bool, output_spec: OutputSpec,
            limits: Limits) -> int:
    """Run the policy: every model on every target, memory and quality limits, one exit code.

    \b
    Exit codes:
      0  every model runs on every target (and starts with the [memory]
         settings or the manifest's command line, and passes the quality gate)
      1  a model cannot run on a target, or the engine would not start with
         the settings (unless kernels-only), or its status is unknown (unless
         allow-unknown), or it needs a fallback when native is required,
         or a quality threshold failed
      2  a model or the policy could not be read (malformed or hostile file,
         unknown policy key, bad value), or the quality gate could not run

    \b
    Reports: --format text|json|junit|sarif|github|markdown and -o FILE, plus
    --junit FILE --sarif FILE --markdown FILE --github in the same run.
    docs/ci.md has the policy keys and GitHub Actions / GitLab CI examples.
    """
    from qcheck.errors import UsageError

    if init:
        from qcheck.policy import (
            POLICY_FILE,
            discover_models,
            parse_policy,
            starter_policy,
            tomllib,
            validate_targets,
        )
        from qcheck.report import write_output

        target = Path(policy_path or POLICY_FILE)
        if target.exists() and not force:
            raise UsageError(f"{target} already exists; pass --force to overwrite it")
        base = target.resolve().parent
        text = starter_policy(base)
        if discover_models(base):  # the starter must be a policy the gate accepts: check before writing
            validate_targets(parse_policy(tomllib.loads(text), str(target), base))
            note = "review the models and targets"
        else:
            note = "no model files were found here: list yours under models"
        try:
            write_output(str(target), text)
        except OSError as exc:
            raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None
        click.echo(f"wrote {target}: {note}, then run `qcheck gate" + (f" --policy {target}`" if policy_path else "`"))
        return 0
    if force:
        raise UsageError("--force only goes with --init")
    from qcheck.gate import run_gate
    from qcheck.policy import load_policy

    policy = load_policy(policy_path, allow_outside=allow_outside)
    result = run_gate(policy, limits)
    return finish(result, output_spec)
