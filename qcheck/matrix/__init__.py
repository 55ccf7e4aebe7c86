"""The engine x GPU x format matrix: data in ``matrices/``, a generic matcher here.

Public entry points: ``load_matrix()`` (validated data, cached), ``parse_engine_spec()`` (``--engine``
values), ``Matrix.gpus.lookup()`` (``--gpu`` values) and ``resolve()`` (Inspection -> Verdicts).
Each is imported on first use: reading a checkpoint's headers consults one architecture file
(``qcheck.matrix.architectures``) without importing the loader, the matcher and their records.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qcheck.matrix.loader import Matrix, load_matrix
    from qcheck.matrix.resolve import EngineRequest, parse_engine_spec, resolve_one
    from qcheck.matrix.schema import MatrixDataError, Target
    from qcheck.matrix.verdicts import resolve

__all__ = ["EngineRequest", "Matrix", "MatrixDataError", "Target", "load_matrix", "parse_engine_spec", "resolve",
           "resolve_one"]

_HOMES = {"Matrix": "loader", "load_matrix": "loader", "EngineRequest": "resolve", "parse_engine_spec": "resolve",
          "resolve_one": "resolve", "MatrixDataError": "schema", "Target": "schema", "resolve": "verdicts"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """``qcheck.matrix.resolve`` is both a submodule and the public function ``resolve`` (the verdicts of a
    checkpoint). Importing the submodule makes the import system set the package attribute to the module; the
    name stays the function (the submodule is in ``sys.modules``, where ``from qcheck.matrix.resolve import``
    finds it), as it was when this package imported everything eagerly."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "resolve" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
