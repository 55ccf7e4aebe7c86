"""Where the local files a deployment manifest names may lead: the model its engine command names, a Modelfile
(``ollama create -f``) and the Modelfile's ``FROM``. A manifest arrives in pull requests from strangers like the
policy does, so these paths follow the policy's one rule (``qcheck.policy.Confinement``: inside the policy's
repository after every symlink, unless ``qcheck gate --allow-outside``); a command line given to ``qcheck check``
by its user is not confined."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from qcheck.errors import InputError
from qcheck.report.sanitize import mask

__all__ = ["PathRule", "confine_path", "is_local"]


class PathRule(Protocol):
    """Where paths may lead (``qcheck.policy.Confinement``; a protocol here, so the deploy modules and the doors
    need not import the policy)."""

    def problem(self, text: str, local: Path, *, walk: bool = True) -> str | None: ...


def is_local(model: str) -> bool:
    """Whether a model name is a local path (not a Hub id or ``repo:QUANT``): absolute, ``~``, ``.``, ``..``
    inside, or a file or directory that exists."""
    return (os.path.isabs(model) or model.startswith(("~", ".")) or ".." in Path(model).parts
            or os.path.lexists(model))


def confine_path(paths: PathRule, path: str, what: str, *, walk: bool, hint: str = "") -> None:
    """Raise an InputError when ``path`` leaves ``paths``' root (worded the same whether or not it exists, so a
    refusal does not tell what is on the runner); ``walk`` also refuses a symlink out of a model directory."""
    problem = paths.problem(path, Path(os.path.expanduser(path) if path.startswith("~") else path), walk=walk)
    if problem:
        raise InputError(f"{what}: {mask(problem)}" + (f"; or {hint}" if hint else ""))
