"""The records the format registry is made of: a ``Format`` per canonical method, a ``Family`` per config
dialect / tensor layout family, ``Layout`` per stored layout, ``Variant`` per representative checkpoint.

They hold data and *references* to code (``Ref``: an import path resolved on first call), never imported
code: the registry is read by ``qcheck check`` and the matrix loader, which must not import numpy/torch
(the dequantisers do) nor the classifier (whose modules read the registry).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Ref:
    """A function named ``"package.module:function"``, imported only when first resolved or called."""

    target: str

    def resolve(self) -> Callable[..., Any]:
        module, _, name = self.target.partition(":")
        if not module or not name:
            raise ValueError(f"a Ref names 'package.module:function', not {self.target!r}")
        fn = getattr(importlib.import_module(module), name)
        if not callable(fn):
            raise TypeError(f"{self.target} is not callable")
        return fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)


#: a tensor scanner: (tensors, claimed names, hints) -> quantised weights found (``qcheck.classify.base``)
Scanner = Callable[..., list]
#: a config reader: (config view, draft, family id, method the tensors hold) -> None, filling the draft
ConfigReader = Callable[..., None]


@dataclass(frozen=True)
class Layout:
    """One way a format's weights are stored, as the classifier names it (``QLinear.layout``).

    ``id`` ending in ``*`` matches every layout with that prefix (``torchao-*``: one per tensor subclass).
    ``dequantiser`` turns one such weight into float (``qcheck.eval.simulate``); None: not simulated.
    """

    id: str
    dequantiser: Ref | None = None

    def matches(self, layout: str) -> bool:
        return layout.startswith(self.id[:-1]) if self.id.endswith("*") else layout == self.id


@dataclass(frozen=True)
class Family:
    """One producer's dialect: the ``quant_method`` strings whose config its ``reader`` understands, and/or
    the ``scanner`` that finds its weights from tensor names, dtypes and shapes.

    Scanners run by ascending ``scan_rank``, most specific first (a bitsandbytes ``quant_state`` beats a
    plain U8 weight, ``qweight`` beats ``weight``); each tensor belongs to the first weight that claims it.
    """

    id: str
    quant_methods: tuple[str, ...] = ()
    reader: Ref | Callable[..., None] | None = None
    scanner: Ref | Callable[..., list] | None = None
    scan_rank: int = 1000
    #: (config view) -> Hints: bits/group the scanners need where shapes are ambiguous, when this family's
    #: config is the checkpoint's (default: the generic bits/group_size keys)
    hints: Ref | Callable[..., Any] | None = None


@dataclass(frozen=True)
class Variant:
    """A representative checkpoint of a format (a matrix probe): the Quantization and Inspection field
    values the classifier produces for it. ``qcheck matrix`` and docs/matrix.md show one table each."""

    name: str
    quant: Mapping[str, Any] = field(default_factory=dict)
    inspection: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Format:
    """Everything qcheck knows about one canonical quantisation method, in one place.

    ``method`` is the id the JSON contract reports (``quantization.method``) and the matrix rules key on
    (``methods = [...]``, refined by ``match`` on the Quantization fields the variants show).
    """

    method: str
    #: human name in ``qcheck inspect`` text
    label: str
    #: how its weights are stored (classifier layout ids) and how each is dequantised
    layouts: tuple[Layout, ...] = ()
    #: the config dialects / tensor scanners this format brings (shared ones live in producer modules)
    families: tuple[Family, ...] = ()
    #: ``qcheck eval --simulate`` can dequantise it (its layouts with a dequantiser)
    simulated: bool = False
    #: representative checkpoints for ``qcheck matrix``
    variants: tuple[Variant, ...] = ()
    #: activations the tensors alone prove when a stored input scale is found: (dtype, scheme)
    activation_if_input_scale: tuple[str, str] | None = None
    #: activations a producer's layout alone proves: producer -> (dtype, scheme)
    activation_by_producer: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    #: bits differ per layer by design (EXL2/EXL3): one weight_bits only when every layer agrees
    bits_vary_per_layer: bool = False
    #: inspect text: shows a ``W<bits>A<bits>`` scheme (False: bits/weight is the meaningful figure)
    nominal_scheme: bool = True
    #: inspect text: shows bits/weight beside the label (mixed-width codebooks and trellises)
    shows_bits_per_weight: bool = False
    #: inspect text: names the scale dtype (microscaling formats, where it defines the format)
    shows_scale_dtype: bool = False
    #: inspect text: granularity reads "<g> weights" (W8A8 formats that also scale activations)
    granularity_of_weights: bool = False
    #: inspect text: the producer's own format name leads the details (MLX ``affine``/``mxfp4`` modes)
    format_first: bool = False
    #: the matrix-unit number format it computes in where it runs natively (fp4, fp8, int8: the speed estimate's
    #: TFLOPS column); None: its weights are multiplied in 16-bit
    tensor_cores: str | None = None

    @property
    def matrix_method(self) -> str:
        """The id matrix rules list in ``methods``."""
        return self.method

    def layout(self, layout_id: str) -> Layout | None:
        return next((x for x in self.layouts if x.matches(layout_id)), None)
