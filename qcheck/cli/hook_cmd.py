"""``qcheck hook FILE...``: the pre-commit entry point (``.pre-commit-hooks.yaml``).

Each staged ``*.gguf`` / ``*.safetensors`` / ``*.safetensors.index.json`` file is read header-only and
classified; with ``--engine``/``--gpu`` (hook ``args``) it is also judged. Git LFS pointer files are what
a clone without ``git lfs pull`` holds: they are reported as skipped, not as malformed. One line per
file. Exit code: 2 when a file could not be judged, else 1 when a combination fails, else 0.
"""

from __future__ import annotations

import os

import click

from qcheck.cli.common import deploy_options, limit_options, strictness_options
from qcheck.limits import Limits
from qcheck.outcome import StrictnessFlags
from qcheck.request import Deploy


def _lfs_note(path: str) -> str | None:
    """'Git LFS pointer (N bytes not pulled)' when ``path`` is a pointer file, else None."""
    from qcheck.errors import InputError
    from qcheck.readers.lfs import MAX_POINTER_BYTES, is_lfs_pointer, parse_lfs_pointer

    try:
        with open(path, "rb") as fh:
            head = fh.read(MAX_POINTER_BYTES)
    except OSError:
        return None
    if not is_lfs_pointer(head):
        return None
    try:
        pointer = parse_lfs_pointer(head, path=path)
    except InputError:
        return None  # starts like a pointer but is not one: the readers say what is wrong
    return f"Git LFS pointer ({pointer.size} bytes of weights not pulled)"


@click.command("hook")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=True), metavar="FILE...")
@click.option("--engine", "-e", "engines", multiple=True, metavar="ENGINE",
              help="Also judge each file on this engine (repeatable, as for `qcheck check`).")
@click.option("--gpu", "-g", "gpus", multiple=True, metavar="GPU", help="... on this GPU (repeatable).")
@strictness_options
@click.option("--quiet", "-q", is_flag=True, help="Print only files that fail or were not judged.")
@deploy_options
@limit_options
def command(files: tuple[str, ...], engines: tuple[str, ...], gpus: tuple[str, ...], strictness: StrictnessFlags,
            quiet: bool, deploy: Deploy, memory_asked: bool, host_bandwidth_gbs: float | None, limits: Limits) -> int:
    """Check staged checkpoint files, headers only (the pre-commit hook).

    With deployment settings (--context, --batch, --kv-cache-dtype, --tp, an engine setting) a file the engine
    would not start with them fails too (the same judgement `qcheck check` and `qcheck gate` give; --kernels-only
    reports it without failing).

    \b
    Exit codes: 0 every file is a readable checkpoint (and runs on every
      --engine x --gpu, and starts with the settings asked); 1 a combination
      fails; 2 a file is malformed, hostile, a pickle, or not a checkpoint.
      Git LFS pointers are skipped.
    """
    from qcheck.doors import Asked, build_request
    from qcheck.errors import LfsPointerError, QcheckError
    from qcheck.pipeline import inspect, judge, plan
    from qcheck.report.text_check import describe

    judging = bool(engines or gpus)
    asked = Asked(tuple(engines), tuple(gpus), deploy, memory_asked, limits=limits,
                  host_bandwidth_gbs=host_bandwidth_gbs).judged_by(strictness)
    if judging:
        plan(build_request(asked, "-"))  # usage errors before any file is read
    worst = 0
    counts = {"ok": 0, "failed": 0, "skipped": 0, "error": 0}
    for path in files:
        if path.endswith(".json") and not path.endswith(".safetensors.index.json"):
            continue
        if _links_out(path):  # a committed symlink to a file elsewhere on the machine (a token, a key)
            counts["error"] += 1
            worst = 2
            _say(f"{path}: error: a symlink out of the repository; not read")
            continue
        note = _lfs_note(path) if os.path.isfile(path) else None
        if note is not None:
            counts["skipped"] += 1
            if not quiet:
                _say(f"{path}: skipped: {note}")
            continue
        request = build_request(asked, path)
        try:
            inspection = inspect(request)[0]
        except LfsPointerError as exc:
            counts["skipped"] += 1
            if not quiet:
                _say(f"{path}: skipped: {_strip(str(exc), path)}")
            continue
        except QcheckError as exc:
            counts["error"] += 1
            worst = 2
            _say(f"{path}: error: {_strip(' '.join(str(exc).split()), path)}")
            continue
        line = f"{path}: {describe(inspection)}"
        if not judging:
            counts["ok"] += 1
            if not quiet:
                _say(f"{line}: ok")
            continue
        from qcheck.report.text_check import engine_label, target_label

        result = judge(inspection, request)
        failing = [(v, result.outcome(v)) for v in result.verdicts]
        failing = [(v, o) for v, o in failing if o.fails]
        if failing:
            counts["failed"] += 1
            worst = max(worst, 1)
            _say(f"{line}: fails")
            for v, decided in failing:
                word = "does not start" if "does-not-start" in decided.because else v.status
                reason = f": {decided.reasons[0]}" if decided.reasons else ""
                _say(f"  {word} on {engine_label(v)} x {target_label(v)}{reason}")
        else:
            counts["ok"] += 1
            if not quiet:
                _say(f"{line}: runs on all {len(result.verdicts)} combination(s)")
    if not quiet or worst:
        _say(f"qcheck hook: {counts['ok']} ok, {counts['failed']} failing, {counts['error']} not judged, "
                   f"{counts['skipped']} skipped (LFS pointers)")
    return worst


def _links_out(path: str) -> bool:
    """Whether ``path`` is (or sits in) a symlink that resolves outside the working directory, the
    repository pre-commit runs in: its bytes are someone else's file, and error lines would show them."""
    root = os.path.realpath(os.getcwd())
    real = os.path.realpath(path)
    return os.path.realpath(os.path.abspath(path)) != os.path.abspath(path) and not (
        real == root or real.startswith(root.rstrip(os.sep) + os.sep))


def _strip(message: str, path: str) -> str:
    """The reader's message without the path we already print first."""
    for prefix in (f"{path}: ", f"{os.path.abspath(path)}: "):
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


def _say(line: str) -> None:
    """One output line: file names and messages come from the files, so it goes out inert."""
    from qcheck.report.sanitize import safe_line

    click.echo(safe_line(line))
