"""Errors that end a run with exit code 2 and one line on stderr.

Everything the user can cause (a bad file, a bad flag, a missing extra) is a ``QcheckError``; the CLI
prints ``qcheck: error: <message>`` and exits 2. Anything else is a bug in qcheck.
"""

from __future__ import annotations


class QcheckError(Exception):
    """Base class: the input could not be judged (exit code 2)."""

    exit_code = 2


class InputError(QcheckError):
    """A file is unreadable, malformed, hostile or not a checkpoint.

    ``where`` names the place (a byte offset, a key, a tensor, a file) so the message can say exactly what is wrong.
    """

    def __init__(self, message: str, *, path: str | None = None, where: str | None = None):
        self.path = path
        self.where = where
        self.detail = message
        parts = []
        if path:
            parts.append(str(path))
        if where:
            parts.append(where)
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class UnsafeFileError(InputError):
    """A pickle checkpoint: it executes code when loaded, so it is never loaded."""


class UsageError(QcheckError):
    """A command-line or policy value that qcheck cannot use."""


class AmbiguousTargetError(UsageError):
    """The repo holds several checkpoints and the target did not say which; the message lists them. (Here, not in
    ``qcheck.hub``, so a local check can catch it without importing the Hub client.)"""


class DependencyError(QcheckError):
    """An optional dependency (an extra such as ``eval``) is missing."""

    def __init__(self, package: str, extra: str, purpose: str):
        from qcheck.install import install_hint

        super().__init__(f"{purpose} needs {package}; install qcheck's '{extra}' extra: {install_hint(extra)}")


class RemoteError(QcheckError):
    """The Hub (or another HTTP source) refused or failed a request."""


def require(module: str, extra: str, purpose: str):
    """Import an optional module or raise a DependencyError that says which extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise DependencyError(module, extra, purpose) from exc


class LfsPointerError(InputError):
    """A Git LFS pointer file stands where a checkpoint should be: the weights were never pulled.

    Callers that scan a repository (the pre-commit hook, ``gate``) report it as skipped, not malformed.
    """
