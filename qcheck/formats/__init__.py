"""The format registry: one ``Format`` record per canonical quantisation method, in one ordered place.

Everything that enumerates methods iterates this registry instead of keeping its own list: the classifier
(tensor scanners in ``scan_rank`` order, config readers by ``quant_method``), the matrix schema (the
methods a rule may name), ``qcheck inspect`` text (labels and display traits), ``qcheck matrix`` (each
format's representative variants) and ``qcheck eval`` simulation (which formats it can dequantise and the
dequantiser of each stored layout). See docs/formats.md.

Adding a format is one module here plus its matrix rules and tests:

1. ``qcheck/formats/<method>.py`` defining ``FORMAT = Format(method=..., label=..., layouts=(...),
   families=(Family(<id>, quant_methods=(...), reader=..., scanner=..., scan_rank=...),), variants=(...))``.
   The scanner and config reader may live in that module (plain functions) or be ``Ref``s to code elsewhere;
   a simulated format names a dequantiser per layout (``Ref`` to a function under ``qcheck.eval``).
2. Its name in ``MODULES`` below (the position is the method's place in every list users see).
3. Rules naming the method in ``matrices/engines/*.toml``; tests with a fixture of its tensors.

A producer whose one config dialect covers several methods (compressed-tensors, ModelOpt, Quark) is a
module exporting ``FAMILIES`` only. ``REGISTRY.register`` adds a format at run time (tests, plugins).

This package imports no classifier, numpy or torch code: code is referenced by import path (``Ref``) and
imported on first use, so ``qcheck check`` and the matrix loader stay light.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager

from qcheck.formats.record import Family, Format, Layout, Ref, Variant

__all__ = ["MODULES", "REGISTRY", "Family", "Format", "Layout", "Ref", "Registry", "Variant"]

#: format modules in method order (the order of ``qcheck matrix --method`` help, docs/matrix.md, errors),
#: then producer families that read configs for several methods
MODULES = (
    "none", "gguf", "fp8", "nvfp4", "mxfp4", "mxfp6", "mxfp8", "awq", "gptq", "int8", "int4", "bitsandbytes",
    "mlx", "exl2", "exl3", "hqq", "torchao", "aqlm", "unknown",
    "compressed_tensors", "modelopt", "quark", "auto_round", "named",
)


class Registry:
    """Formats in order (iterate it), looked up by method id; families by id and by ``quant_method``."""

    def __init__(self) -> None:
        self._formats: dict[str, Format] = {}
        self._families: dict[str, Family] = {}

    # --- building
    def register(self, fmt: Format | None = None, families: tuple[Family, ...] = ()) -> None:
        """Add a format (with its families) and/or producer families; ids and quant_methods must be new.
        Nothing is added when anything clashes."""
        new = (*(fmt.families if fmt else ()), *families)
        if fmt is not None and fmt.method in self._formats:
            raise ValueError(f"format {fmt.method!r} is already registered")
        taken = {m: f.id for f in self._families.values() for m in f.quant_methods}
        ids = set(self._families)
        for fam in new:
            if fam.id in ids:
                raise ValueError(f"family {fam.id!r} is already registered")
            clash = [m for m in fam.quant_methods if m in taken]
            if clash:
                raise ValueError(f"family {fam.id!r}: quant_method {clash[0]!r} already read by {taken[clash[0]]!r}")
            ids.add(fam.id)
            taken.update((m, fam.id) for m in fam.quant_methods)
        if fmt is not None:
            self._formats[fmt.method] = fmt
        for fam in new:
            self._families[fam.id] = fam

    def unregister(self, method: str) -> None:
        """Remove a format and the families it brought (tests registering a temporary format)."""
        fmt = self._formats.pop(method)
        for fam in fmt.families:
            self._families.pop(fam.id, None)

    @contextmanager
    def temporarily(self, fmt: Format) -> Iterator[Format]:
        """Register ``fmt`` for the duration of a ``with`` block."""
        self.register(fmt)
        try:
            yield fmt
        finally:
            self.unregister(fmt.method)

    # --- formats
    def __iter__(self) -> Iterator[Format]:
        return iter(list(self._formats.values()))

    def __len__(self) -> int:
        return len(self._formats)

    def __contains__(self, method: object) -> bool:
        return method in self._formats

    def __getitem__(self, method: str) -> Format:
        return self._formats[method]

    def get(self, method: str | None) -> Format | None:
        return self._formats.get(method) if method is not None else None

    def methods(self) -> tuple[str, ...]:
        """Every canonical method id, in order (what ``quantization.method`` and matrix rules may say)."""
        return tuple(self._formats)

    def label(self, method: str) -> str:
        fmt = self._formats.get(method)
        return fmt.label if fmt else method

    def simulated(self) -> frozenset[str]:
        return frozenset(f.method for f in self._formats.values() if f.simulated)

    def layout(self, layout_id: str, method: str | None = None) -> Layout | None:
        """The registered layout a classifier ``QLinear.layout`` names (of ``method``'s format if given)."""
        pool = [self._formats[method]] if method in self._formats else [] if method else self._formats.values()
        for fmt in pool:
            found = fmt.layout(layout_id)
            if found is not None:
                return found
        return None

    # --- families
    def families(self) -> tuple[Family, ...]:
        return tuple(self._families.values())

    def family(self, family_id: str) -> Family | None:
        return self._families.get(family_id)

    def family_for(self, quant_method: str) -> Family | None:
        """The family whose reader understands ``quant_method`` (lower-case), or None."""
        return next((f for f in self._families.values() if quant_method in f.quant_methods), None)

    def scanners(self) -> tuple[Family, ...]:
        """Families with a tensor scanner, most specific first (``scan_rank``, then registration order)."""
        with_scanner = [f for f in self._families.values() if f.scanner is not None]
        return tuple(sorted(with_scanner, key=lambda f: f.scan_rank))


def _load() -> Registry:
    registry = Registry()
    for name in MODULES:
        module = importlib.import_module(f"qcheck.formats.{name}")
        registry.register(getattr(module, "FORMAT", None), tuple(getattr(module, "FAMILIES", ())))
    return registry


#: the registry every list of methods iterates
REGISTRY = _load()
