"""What the GGUF reader returns: a header (``GGUFHeader``) and the record of a skipped array (``ArraySummary``).

Apart from the reader (``qcheck.readers.gguf``) so that the header cache (``qcheck.readers.gguf_cache``), which
rebuilds these records, and the reader, which uses the cache, do not import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qcheck.model import TensorInfo

#: the largest ``general.alignment`` accepted (ggml only asks for a power of two; 2**31 is a known
#: overflow PoC, real files use 32); the reader and the header cache both check it
MAX_ALIGNMENT = 1 << 20


@dataclass(frozen=True)
class ArraySummary:
    """A metadata array that was validated and skipped, not materialised.

    ``offset`` is the absolute file offset of its first element, for a later targeted read.
    """

    element_type: str  # a GGUFValueType name: STRING, FLOAT32, INT32, ARRAY ...
    count: int
    offset: int

    def to_json(self) -> dict[str, Any]:
        return {"array_of": self.element_type, "count": self.count}

    def __str__(self) -> str:
        return f"[{self.element_type} x {self.count}]"


@dataclass
class GGUFHeader:
    """Everything before the tensor data of one GGUF file."""

    version: int
    #: key -> int/float/bool/str, a list for small or requested arrays, ArraySummary for large ones
    metadata: dict[str, Any]
    #: in file order; ``shape`` is row-major (ggml ``ne`` reversed); ``offset`` is absolute
    tensors: list[TensorInfo]
    alignment: int
    #: absolute offset where tensor data starts
    data_offset: int
    #: bytes of KV metadata + tensor infos (the end of the last tensor info)
    header_bytes: int
    file_size: int | None
    warnings: list[str] = field(default_factory=list)
    #: key -> GGUF value type: ``UINT32``, ``STRING``, ``ARRAY[STRING]`` ...
    value_types: dict[str, str] = field(default_factory=dict)

    @property
    def tensor_data_bytes(self) -> int | None:
        """Sum of tensor sizes, None when a tensor has an unknown type."""
        total = 0
        for t in self.tensors:
            if t.nbytes is None:
                return None
            total += t.nbytes
        return total
