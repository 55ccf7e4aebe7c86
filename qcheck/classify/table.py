"""The tensors of one checkpoint as columns, built once per classification.

A MoE checkpoint lists 10^5 tensors or more; the classifier asks about them a dozen times (every format
scanner, the plain dtype, the parameter count, the type table, the KV-cache scales). Looping over
``TensorInfo`` records with a function call per tensor each time cost ~8 us per tensor; here the columns
(names, upper-cased dtypes, shapes, element counts, side-tensor flags) are built with C-speed passes, and
selections by dtype and by last name component let a scanner visit only the tensors its layout could match.
Selections keep the checkpoint's tensor order, so every result is the one a full loop gives.
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, itemgetter

from qcheck.classify.side import is_side_tensor
from qcheck.model import TensorInfo, tensor_columns

_DTYPE = attrgetter("dtype")
_SHAPE = attrgetter("shape")
_NBYTES = attrgetter("nbytes")


@dataclass
class TensorTable:
    """Columns of ``tensors`` (in its order) and indexes over them; valid while ``tensors`` is unchanged."""

    tensors: Mapping[str, TensorInfo]
    names: list[str] = field(init=False)
    dtypes: list[str] = field(init=False)
    #: dtype.upper(): the scanners compare upper-cased dtypes (an unknown dtype string is kept as written)
    upper: list[str] = field(init=False)
    shapes: list[tuple[int, ...]] = field(init=False)
    ndims: list[int] = field(init=False)
    numels: list[int] = field(init=False)
    #: ``is_side_tensor`` of each name (scales, zeros, indices: never model parameters)
    side: list[bool] = field(init=False)
    _present_dtypes: set[str] | None = field(init=False, default=None)
    _present_keys: set[str] | None = field(init=False, default=None)
    #: answers computed from the columns, kept for a second caller (e.g. the plain dtype with nothing claimed)
    memo: dict[str, object] = field(init=False, default_factory=dict)
    _keys: list[str] | None = field(init=False, default=None)
    _infos: list[TensorInfo] | None = field(init=False, default=None)
    _nbytes: list[int | None] | None = field(init=False, default=None)
    _joined: str | None = field(init=False, default=None)
    _name_set: frozenset[str] | None = field(init=False, default=None)

    @property
    def infos(self) -> list[TensorInfo]:
        """The records, in tensor order (built from the columns on first use)."""
        if self._infos is None:
            self._infos = list(self.tensors.values())
        return self._infos

    def nbytes(self) -> list[int | None]:
        """Bytes of each tensor as its header says (None where the dtype's size is unknown)."""
        if self._nbytes is None:
            columns = tensor_columns(self.tensors)
            self._nbytes = list(columns.nbytes) if columns is not None else list(map(_NBYTES, self.infos))
        return self._nbytes

    def __post_init__(self) -> None:
        columns = tensor_columns(self.tensors)
        if columns is not None:  # the reader's columns: no record is built
            self.names, self.dtypes, self.shapes = list(columns.names), list(columns.dtypes), list(columns.shapes)
        else:
            self.names = list(self.tensors)
            self._infos = list(self.tensors.values())
            self.dtypes = list(map(_DTYPE, self._infos))
            self.shapes = list(map(_SHAPE, self._infos))
        uppers = {d: d.upper() for d in set(self.dtypes)}
        self.upper = list(map(uppers.__getitem__, self.dtypes))
        self.ndims = list(map(len, self.shapes))
        self.numels = list(map(math.prod, self.shapes))
        self.side = self._side_flags()

    def _side_flags(self) -> list[bool]:
        # is_side_tensor(name) decides from the last component (":scale" has no dot, so it ends the name iff it
        # ends the component) and from ".quant_state." anywhere in the name
        self._present_keys = set(self.keys())
        side_of = {key: is_side_tensor(f".{key}") for key in self._present_keys}
        flags = list(map(side_of.__getitem__, self.keys()))
        if ".quant_state." in self.joined():
            flags = [f or ".quant_state." in n for f, n in zip(flags, self.names, strict=True)]
        return flags

    def joined(self) -> str:
        """Every name, in order, joined by newlines: one C-speed substring search answers "does any name hold
        X" (a name may itself hold a newline: callers that split it into names check the count)."""
        if self._joined is None:
            self._joined = "\n".join(self.names)
        return self._joined

    def name_set(self) -> frozenset[str]:
        """Every name, for C-speed membership tests (``TensorMap.__contains__`` is a Python call per name)."""
        if self._name_set is None:
            self._name_set = frozenset(self.names)
        return self._name_set

    def keys(self) -> list[str]:
        """The last dot-separated component of each name (the whole name when it has no dot)."""
        if self._keys is None:
            self._keys = list(map(itemgetter(2), map(str.rpartition, self.names, repeat("."))))
        return self._keys

    def rows(self, column: list[str], value: str) -> list[int]:
        """Indexes (in tensor order) where ``column`` holds ``value``: one C-speed pass."""
        return list(compress(range(len(column)), map(value.__eq__, column)))

    def select(self, *, dtypes: tuple[str, ...] = (), lasts: tuple[str, ...] = (), contains: str = "") -> list[str]:
        """Names (in tensor order) whose upper-cased dtype is in ``dtypes``, whose last component is in
        ``lasts`` (a name ``X.qweight`` is found by ``lasts=("qweight",)``), or that contain ``contains``:
        a superset of what a scanner's own test accepts, which it still applies."""
        picked: list[int] = []
        if dtypes:
            if self._present_dtypes is None:
                self._present_dtypes = set(self.upper)
            for d in self._present_dtypes.intersection(dtypes):
                picked += self.rows(self.upper, d)
        if lasts:
            if self._present_keys is None:
                self._present_keys = set(self.keys())
            for last in self._present_keys.intersection(lasts):
                picked += self.rows(self.keys(), last)
        if contains and contains in self.joined():  # no name holds it unless the joined text does
            picked += [i for i, n in enumerate(self.names) if contains in n]
        names = self.names
        return [names[i] for i in sorted(set(picked))]


def ending(names: Iterable[str], suffixes: tuple[str, ...]) -> list[str]:
    """``names`` (in order) that end with one of ``suffixes``: one C-speed pass."""
    names = list(names)
    return list(compress(names, map(str.endswith, names, repeat(suffixes))))


def with_sibling(tensors: Mapping[str, TensorInfo], table: TensorTable | None, names: Iterable[str],
                 suffixes: tuple[str, ...], sibling: str) -> list[str]:
    """``names`` (in order) that end with one of ``suffixes`` and have a ``<prefix>.<sibling>`` tensor beside them
    (``X.weight`` with ``X.weight_scale``): C-speed passes, no record built. A scanner that needs a scale beside
    its weight visits only these (10^5 packed tensors without one cost nothing)."""
    picked = ending(names, suffixes)
    present: Container[str] = table.name_set() if table is not None and table.tensors is tensors else tensors
    prefixes = map(itemgetter(0), map(str.rpartition, picked, repeat(".")))
    return list(compress(picked, map(present.__contains__, map(str.__add__, prefixes, repeat("." + sibling)))))


def candidates(tensors: Mapping[str, TensorInfo], table: TensorTable | None, *, dtypes: tuple[str, ...] = (),
               lasts: tuple[str, ...] = (), contains: str = "") -> list[str] | Mapping[str, TensorInfo]:
    """What a scanner loops over: the table's selection when it describes ``tensors``, else every name."""
    if table is None or table.tensors is not tensors or len(table.names) != len(tensors):
        return tensors
    return table.select(dtypes=dtypes, lasts=lasts, contains=contains)
