"""The engine x GPU x format matrix: data in ``matrices/``, a generic matcher here.

Public entry points: ``load_matrix()`` (validated data, cached), ``parse_engine_spec()`` (``--engine``
values), ``Matrix.gpus.lookup()`` (``--gpu`` values) and ``resolve()`` (Inspection -> Verdicts).
"""

from qcheck.matrix.loader import Matrix, load_matrix
from qcheck.matrix.resolve import EngineRequest, parse_engine_spec, resolve_one
from qcheck.matrix.schema import MatrixDataError, Target
from qcheck.matrix.verdicts import resolve

__all__ = ["EngineRequest", "Matrix", "MatrixDataError", "Target", "load_matrix", "parse_engine_spec", "resolve",
           "resolve_one"]
