"""The engine x GPU x format matrix: data in ``matrices/``, a generic matcher here.

Public entry points: ``load_matrix()`` (validated data, cached), ``parse_engine_spec()`` (``--engine``
values), ``Matrix.gpus.lookup()`` (``--gpu`` values) and ``resolve()`` (Inspection -> Verdicts).
``Matrix`` and ``load_matrix`` are imported on first use: reading a checkpoint's headers (which consults one
architecture file) does not import the loader and its validators.
"""

from typing import TYPE_CHECKING, Any

from qcheck.matrix.resolve import EngineRequest, parse_engine_spec, resolve_one
from qcheck.matrix.schema import MatrixDataError, Target
from qcheck.matrix.verdicts import resolve

if TYPE_CHECKING:
    from qcheck.matrix.loader import Matrix, load_matrix

__all__ = ["EngineRequest", "Matrix", "MatrixDataError", "Target", "load_matrix", "parse_engine_spec", "resolve",
           "resolve_one"]


def __getattr__(name: str) -> Any:
    if name in ("Matrix", "load_matrix"):
        from qcheck.matrix import loader

        return getattr(loader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
