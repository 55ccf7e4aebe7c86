"""Where the data files shipped with qcheck live: ``matrices/`` and ``evals/``.

In a wheel they are inside the package (``qcheck/_data/``); in a source checkout or an editable
install they are the top-level folders of the repository.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The directory of shipped data ``name`` ("matrices" or "evals")."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"qcheck data folder {name!r} is missing from this installation")
