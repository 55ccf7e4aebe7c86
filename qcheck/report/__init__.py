"""The output layer: one renderer module per format, all driven by a result's ``to_json()``.

A result is anything with ``kind`` ("inspect", "check", "matrix", "eval", "gate"), ``exit_code`` and
``to_json()``. ``qcheck.report.<format>.render(result) -> str`` renders it; writing is atomic so a
failed run never leaves a half-written report
(``write_output``).
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Callable

from qcheck.result import Result

__all__ = ["FORMATS", "RENDERERS", "Result", "emit", "render", "write_output"]

FORMATS = ("text", "json", "junit", "sarif", "github", "markdown")


def render(result: Result, fmt: str) -> str:
    """``result`` in format ``fmt``. Every string a file controls is made inert here, for every format
    (``qcheck.report.sanitize``): renderers get a sanitised copy, no line of text output can start
    a GitHub workflow command, and no URL's userinfo or bearer value is shown (``mask``)."""
    from qcheck.report.sanitize import guard, json_text, mask, sanitized

    if fmt == "json":
        return mask(json_text(json.dumps(result.to_json(), indent=2, ensure_ascii=False)), keylike=False) + "\n"
    renderer = RENDERERS.get(fmt)
    if renderer is None:
        raise ValueError(f"unknown format {fmt!r}")
    text = mask(renderer(sanitized(result)), keylike=False)
    return text if fmt == "github" else guard(text)


# One function per format, importing its module only when that format is asked for (a text run never loads
# the SARIF or JUnit code): an explicit table, so the import graph is visible to readers and tools.
def _text(result: Result) -> str:
    from qcheck.report.text import render as text

    return text(result)


def _junit(result: Result) -> str:
    from qcheck.report.junit import render as junit

    return junit(result)


def _sarif(result: Result) -> str:
    from qcheck.report.sarif import render as sarif

    return sarif(result)


def _github(result: Result) -> str:
    from qcheck.report.github import render as github

    return github(result)


def _markdown(result: Result) -> str:
    from qcheck.report.markdown import render as markdown

    return markdown(result)


#: format -> renderer (``json`` is written by ``render`` itself)
RENDERERS: dict[str, Callable[[Result], str]] = {
    "text": _text, "junit": _junit, "sarif": _sarif, "github": _github, "markdown": _markdown,
}


#: names of this process's own streams: ``/dev/stdout`` may point at a regular file the shell opened
#: (``> out.txt``), which must be appended to, not replaced behind the shell's back
_OWN_STREAM = re.compile(r"^/(dev/(stdout|stderr|fd/\d+)|proc/(self|\d+)/fd/\d+)$")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _is_stream(path: str) -> bool:
    """Whether ``path`` must be written in place: ``-``, a device, a pipe or FIFO, a socket, or one of
    this process's stream names (``/dev/stdout``, ``/dev/fd/N``, ``/proc/self/fd/N``)."""
    if path == "-":
        return True
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return True
    return bool(_OWN_STREAM.match(os.path.abspath(path)))


def write_output(path: str, text: str) -> None:
    """Write an output file (``-o``, ``--junit``, ``--sarif``, ``--markdown``, ``--report``, ``gate --init``).

    - ``-``, devices, pipes, FIFOs and this process's stream names (``/dev/stdout``, ``/dev/fd/N``) are
      streamed: opened and written, never replaced (replacing ``/dev/null`` as root would turn the
      device into a file).
    - A symbolic link is written through: its target is updated, the link stays a link.
    - A regular file or a new path is written atomically (a temporary file in the same directory,
      renamed over the target), so a failed run never leaves half a report. The file gets the
      existing file's permission bits, or for a new file what ``open()`` would give (0666 minus the
      umask), never the temporary file's 0600.
    """
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    if _is_stream(path):
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
        return
    target = os.path.realpath(path) if os.path.islink(path) else path
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    directory = os.path.dirname(os.path.abspath(target))
    import tempfile  # only when writing a file (not on a check's path)

    fd, tmp = tempfile.mkstemp(prefix=".qcheck-", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def emit(result: Result, fmt: str, path: str | None = None) -> None:
    write_output(path or "-", render(result, fmt))
