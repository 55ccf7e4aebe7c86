"""The ``qcheck`` command line: one module per command, loaded only when that command runs.

``qcheck PATH ...`` is short for ``qcheck check PATH ...``. Every ``QcheckError`` becomes one line on
stderr and exit code 2; nothing else reaches the user as a traceback unless ``QCHECK_DEBUG=1``.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys

import click

from qcheck import __version__
from qcheck.errors import QcheckError

#: command name -> module under qcheck.cli (each module defines ``command``)
COMMANDS = {
    "inspect": "inspect_cmd",
    "check": "check_cmd",
    "matrix": "matrix_cmd",
    "eval": "eval_cmd",
    "gate": "gate_cmd",
    "hook": "hook_cmd",
    "probe": "probe_cmd",
}
DEFAULT_COMMAND = "check"
#: commands that read headers and data files and are done in well under a second: the cyclic garbage collector
#: stays off while they run (loading allocates many long-lived containers and frees almost no cycles; the
#: collections it triggered were ~5% of a check's CPU time, bench/bench_startup.py). Every other command (eval,
#: probe, gate, hook: models, servers, many files) turns it back on before it starts.
SHORT_COMMANDS = frozenset({"inspect", "check", "matrix"})


class QcheckGroup(click.Group):
    """Loads command modules lazily and routes a bare PATH to ``check``."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = COMMANDS.get(name)
        if module is None:
            return None
        if name not in SHORT_COMMANDS:
            gc.enable()
        return importlib.import_module(f"qcheck.cli.{module}").command

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and args[0] not in COMMANDS and not args[0].startswith("-"):
            args = [DEFAULT_COMMAND, *args]
        return super().resolve_command(ctx, args)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # `qcheck --engine vllm model.gguf`: options before the path also mean `check`.
        if args and args[0].startswith("-") and args[0] not in ("--help", "-h", "--version"):
            args = [DEFAULT_COMMAND, *args]
        return super().parse_args(ctx, args)


@click.group(cls=QcheckGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="qcheck")
def cli() -> None:
    """Will this quantised checkpoint run on that engine and GPU, and what did quantisation cost?

    \b
      qcheck model.gguf --engine vllm --gpu hopper   (= qcheck check ...)
      qcheck inspect ./model-dir --json
      qcheck matrix --method nvfp4
      qcheck eval --reference ./bf16 --candidate ./fp8 --tasks mytasks.jsonl
      qcheck gate --policy qcheck.toml

    Exit codes: 0 runs / gate passed, 1 cannot run, unknown or gate failed, 2 input not judged.
    """


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    from qcheck.budget import end_run, start_run

    for stream in (sys.stdout, sys.stderr):  # an ASCII or Latin-1 terminal: escape, never crash after
        reconfigure = getattr(stream, "reconfigure", None)  # the report files were written
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    start_run()  # one network deadline and byte budget for the whole command
    collecting = gc.isenabled()
    gc.disable()  # until the command is known (SHORT_COMMANDS)
    try:
        _main(argv)
    finally:
        end_run()
        if collecting:  # main() called in-process (tests, an embedding program): leave the collector as found
            gc.enable()


def _main(argv: list[str] | None) -> None:
    try:
        rv = cli.main(args=argv, prog_name="qcheck", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("qcheck: aborted", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except QcheckError as exc:
        click.echo(f"qcheck: error: {_one_line(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("qcheck: interrupted", err=True)
        sys.exit(130)
    except MemoryError:  # anywhere: one line, exit 2, like every input that cannot be judged
        click.echo("qcheck: error: ran out of memory; lower the parsing limits (--limit, docs/limits.md) or give "
                   "the process more memory", err=True)
        sys.exit(2)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # a bug in qcheck: still one line, with a way to see more
        if os.environ.get("QCHECK_DEBUG"):
            raise
        click.echo(f"qcheck: internal error: {type(exc).__name__}: {_one_line(str(exc))} "
                   "(set QCHECK_DEBUG=1 for a traceback)", err=True)
        sys.exit(2)
    sys.exit(rv if isinstance(rv, int) else 0)


def _one_line(message: str, limit: int = 2000) -> str:
    """An error message as one inert line: file-controlled parts escaped and secrets masked
    (``qcheck.report.sanitize``)."""
    from qcheck.report.sanitize import mask, visible

    line = visible(mask(" ".join(message.split())))
    return line if len(line) <= limit else line[: limit - 3] + "..."
