"""What every matrix dimension judges: one engine request at a version on one GPU, the checkpoint and how it is
deployed (``Deployment``), and the ``--engine`` value it came from (``EngineRequest``). Records only, below the
dimensions that read them (``qcheck.matrix.dimensions`` and its modules) and the resolver that builds them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from qcheck.request import Deploy

if TYPE_CHECKING:
    from packaging.version import Version

    from qcheck.matrix.installed import InstalledEngine
    from qcheck.matrix.schema import Engine, Target
    from qcheck.model import Inspection, Judgement

__all__ = ["Deployment", "Dimension", "EngineRequest", "MatrixFiles"]


class MatrixFiles(Protocol):
    """What a dimension reads of the loaded matrix (``qcheck.matrix.loader.Matrix``): where its files are, and its
    engines by id."""

    @property
    def root(self) -> Path: ...

    @property
    def engines(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class EngineRequest:
    """One ``--engine`` value: ``name``, ``name==version``, ``name:backend`` or ``name:backend==version``."""

    engine: Engine
    version: str | None = None
    backend: str | None = None
    #: ``NAME=installed``: the engine found in this Python, with its own registry (qcheck.matrix.installed)
    installed: InstalledEngine | None = None

    @property
    def label(self) -> str:
        text = self.engine.id + (f":{self.backend}" if self.backend else "")
        if self.installed is not None:
            return text + "=installed"
        return text + (f"=={self.version}" if self.version else "")


@dataclass(frozen=True)
class Deployment:
    """What a dimension gets to judge: the checkpoint, the engine at a version, the GPU (None for a provider)."""

    matrix: MatrixFiles
    inspection: Inspection
    request: EngineRequest
    target: Target | None
    #: the engine version as reported (the request's, or the newest the data knows) and as evaluated
    version: str
    at: Version
    #: how it is deployed (KV-cache types, parallel sizes, engine knobs): the request's ``deploy``
    deploy: Deploy = field(default_factory=Deploy)


Dimension = Callable[[Deployment], "Judgement | None"]

