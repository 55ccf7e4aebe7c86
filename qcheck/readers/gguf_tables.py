"""gguf-py's GGUF/ggml tables, loaded without numpy, plus llama.cpp's file-type naming and guess.

``import gguf`` (and even ``import gguf.constants``) runs ``gguf/__init__.py``, which imports numpy
(~150 ms). ``gguf/constants.py`` itself only imports ``enum`` and ``typing``, so it is loaded here
standalone, under a private module name, from the installed package. The tables are not copied:
a newer gguf release brings new tensor and file types with it. The few tables qcheck reads (tensor type sizes,
file types, value types) are kept as plain data in the data cache (``qcheck.datacache``) under the SHA-256 of
that constants.py's bytes, so a run normally reads the file and a small JSON entry instead of executing it.

Two small things are not in gguf-py and are written here with their source:
- llama.cpp's display names for file types (``llama_ftype_name``) and its guess of the file type
  when ``general.file_type`` is absent (``llama_model_loader`` constructor), both read in
  llama.cpp @0c1e570 (vendored by llama-cpp-python 0.3.36), ``src/llama-model-loader.cpp``;
- ids newer than the installed gguf-py (``_NEWER_TENSOR_TYPES``, ``_NEWER_FILE_TYPES``), used only
  when the installed package does not know them (ggml ``include/ggml.h``: ``GGML_TYPE_Q2_0 = 42``,
  ``QK2_0 = 64``, ``block_q2_0 = {ggml_half d; uint8_t qs[16]}``; ``LLAMA_FTYPE_MOSTLY_Q2_0 = 41``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from qcheck.errors import QcheckError

_PRIVATE_NAME = "qcheck._gguf_constants"
#: the datacache kind of the plain tables below (bump the number when their layout changes)
_CACHE_KIND = "gguf-constants-1"


def _constants_path() -> str:
    """gguf/constants.py of the installed package, found without importing the package."""
    spec = importlib.util.find_spec("gguf")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        from qcheck.install import install_hint

        raise QcheckError(f"the 'gguf' package is not installed; reinstall qcheck ({install_hint()})")
    for location in spec.submodule_search_locations:
        path = os.path.join(location, "constants.py")
        if os.path.isfile(path):
            return path
    raise QcheckError("the installed 'gguf' package has no constants.py; reinstall gguf")


def _exec_constants(path: str) -> ModuleType:
    """gguf/constants.py as a module, without running gguf/__init__ (which imports numpy)."""
    cached = sys.modules.get(_PRIVATE_NAME)
    if cached is not None:
        return cached
    file_spec = importlib.util.spec_from_file_location(_PRIVATE_NAME, path)
    if file_spec is None or file_spec.loader is None:  # pragma: no cover - defensive
        raise QcheckError(f"cannot load {path}")
    module = importlib.util.module_from_spec(file_spec)
    sys.modules[_PRIVATE_NAME] = module
    try:
        file_spec.loader.exec_module(module)
    except Exception:
        sys.modules.pop(_PRIVATE_NAME, None)
        raise
    return module


def _tables_of(constants: Any) -> dict[str, Any]:
    """The few tables qcheck reads from gguf-py's constants, as plain data (JSON-safe: cached by the file's bytes)."""
    quant = []
    for qtype in constants.GGMLQuantizationType:
        sizes = constants.GGML_QUANT_SIZES.get(qtype)
        if sizes is not None and sizes[0] > 0 and sizes[1] > 0:
            quant.append([int(qtype), qtype.name, int(sizes[0]), int(sizes[1])])
    return {"quant": quant,
            "file_types": [[int(ft), ft.name] for ft in constants.LlamaFileType],
            "value_types": [[int(vt), vt.name] for vt in constants.GGUFValueType],
            "version": int(constants.GGUF_VERSION), "alignment": int(constants.GGUF_DEFAULT_ALIGNMENT)}


def _well_formed(tables: Any) -> bool:
    """A cached entry has the shape ``_tables_of`` writes (anything else is parsed again)."""
    def rows(key: str, shape: tuple[type, ...]) -> bool:
        value = tables.get(key)
        return isinstance(value, list) and bool(value) and all(
            isinstance(r, list) and len(r) == len(shape) and all(type(x) is t for x, t in zip(r, shape, strict=True))
            for r in value)

    return (isinstance(tables, dict) and rows("quant", (int, str, int, int)) and rows("file_types", (int, str))
            and rows("value_types", (int, str)) and type(tables.get("version")) is int
            and type(tables.get("alignment")) is int)


def _load_tables() -> dict[str, Any]:
    """gguf-py's tables: from its constants module when gguf is already imported, else from the data cache keyed
    on constants.py's bytes (executing that module, a hundred enums, costs more than the rest of an inspect)."""
    already = sys.modules.get("gguf.constants")
    if already is not None:  # gguf was imported by someone else: read its enums
        return _tables_of(already)
    from qcheck.datacache import cached_parse

    path = _constants_path()
    with open(path, "rb") as fh:
        data = fh.read()
    tables = cached_parse(_CACHE_KIND, data, lambda _raw: _tables_of(_exec_constants(path)))
    return tables if _well_formed(tables) else _tables_of(_exec_constants(path))


_tables = _load_tables()
GGUF_VERSION: int = _tables["version"]
GGUF_DEFAULT_ALIGNMENT: int = _tables["alignment"]

#: ggml's limits (include/ggml.h): GGML_MAX_DIMS, GGML_MAX_NAME
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64

# ---------------------------------------------------------------------------------- tensor types
#: ids that ggml has and the installed gguf-py may not: id -> (name, block size, type size)
_NEWER_TENSOR_TYPES: dict[int, tuple[str, int, int]] = {42: ("Q2_0", 64, 18)}
#: ids ggml removed (include/ggml.h enum comments): a file using them needs requantising
REMOVED_TENSOR_TYPES: dict[int, str] = {
    4: "Q4_2", 5: "Q4_3", 31: "Q4_0_4_4", 32: "Q4_0_4_8", 33: "Q4_0_8_8",
    36: "IQ4_NL_4_4", 37: "IQ4_NL_4_8", 38: "IQ4_NL_8_8",
}


def _build_tensor_types() -> dict[int, tuple[str, int, int]]:
    table: dict[int, tuple[str, int, int]] = {tid: (name, block, size) for tid, name, block, size in _tables["quant"]}
    for tid, entry in _NEWER_TENSOR_TYPES.items():
        table.setdefault(tid, entry)
    return table


#: ggml tensor type id -> (name, elements per block, bytes per block)
TENSOR_TYPES: dict[int, tuple[str, int, int]] = _build_tensor_types()
TENSOR_TYPE_IDS: dict[str, int] = {name: tid for tid, (name, _, _) in TENSOR_TYPES.items()}


def tensor_type_name(type_id: int) -> str:
    """``Q4_K`` for a known id, the old name for a removed one (``Q4_0_4_4``), ``unknown(N)`` otherwise."""
    entry = TENSOR_TYPES.get(type_id)
    if entry:
        return entry[0]
    return REMOVED_TENSOR_TYPES.get(type_id) or f"unknown({type_id})"


def tensor_type_sizes(type_id: int) -> tuple[int, int] | None:
    """(elements per block, bytes per block) for a known id, else None."""
    entry = TENSOR_TYPES.get(type_id)
    return (entry[1], entry[2]) if entry else None


def bits_per_element(type_name: str) -> float | None:
    """Storage bits per weight of a tensor type (``Q4_K`` -> 4.5), None for unknown types."""
    tid = TENSOR_TYPE_IDS.get(type_name)
    if tid is None:
        return None
    _, block, size = TENSOR_TYPES[tid]
    return 8.0 * size / block


# ----------------------------------------------------------------------------------- value types
#: GGUF value type id -> (name, struct format letter or None for STRING/ARRAY, byte size or None)
VALUE_TYPES: dict[int, tuple[str, str | None, int | None]] = {}
_FORMATS = {"UINT8": "B", "INT8": "b", "UINT16": "H", "INT16": "h", "UINT32": "I", "INT32": "i",
            "FLOAT32": "f", "BOOL": "?", "UINT64": "Q", "INT64": "q", "FLOAT64": "d"}
_SIZES = {"B": 1, "b": 1, "H": 2, "h": 2, "I": 4, "i": 4, "f": 4, "?": 1, "Q": 8, "q": 8, "d": 8}
for _vid, _vname in _tables["value_types"]:
    _fmt = _FORMATS.get(_vname)
    VALUE_TYPES[_vid] = (_vname, _fmt, _SIZES[_fmt] if _fmt else None)
_VALUE_TYPE_IDS = {name: vid for vid, (name, _, _) in VALUE_TYPES.items()}
VT_STRING = _VALUE_TYPE_IDS["STRING"]
VT_ARRAY = _VALUE_TYPE_IDS["ARRAY"]
INTEGER_VALUE_TYPES = frozenset(_VALUE_TYPE_IDS[n] for n in
                                ("UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64"))


def value_type_name(type_id: int) -> str:
    entry = VALUE_TYPES.get(type_id)
    return entry[0] if entry else f"unknown({type_id})"


# ------------------------------------------------------------------------------------ file types
_NEWER_FILE_TYPES: dict[int, str] = {41: "Q2_0"}
FILE_TYPE_GUESSED_FLAG = next(fid for fid, name in _tables["file_types"] if name == "GUESSED")


def _canonical(name: str) -> str:
    if name == "ALL_F32":
        return "F32"
    return name[len("MOSTLY_"):] if name.startswith("MOSTLY_") else name


def _build_file_types() -> dict[int, str]:
    table = {fid: _canonical(name) for fid, name in _tables["file_types"] if name != "GUESSED"}
    for fid, name in _NEWER_FILE_TYPES.items():
        table.setdefault(fid, name)
    return table


#: llama_ftype id -> our canonical name: LlamaFileType's name without ``MOSTLY_``; ALL_F32 -> F32
FILE_TYPE_NAMES: dict[int, str] = _build_file_types()
FILE_TYPE_IDS: dict[str, int] = {name: fid for fid, name in FILE_TYPE_NAMES.items()}

#: canonical name -> llama.cpp's display string (``llama_ftype_name``, llama.cpp @0c1e570)
FILE_TYPE_DISPLAY: dict[str, str] = {
    "F32": "all F32", "F16": "F16", "BF16": "BF16", "Q1_0": "Q1_0", "Q2_0": "Q2_0",
    "Q4_0": "Q4_0", "Q4_1": "Q4_1", "Q5_0": "Q5_0", "Q5_1": "Q5_1", "Q8_0": "Q8_0",
    "MXFP4_MOE": "MXFP4 MoE", "NVFP4": "NVFP4",
    "Q2_K": "Q2_K - Medium", "Q2_K_S": "Q2_K - Small",
    "Q3_K_S": "Q3_K - Small", "Q3_K_M": "Q3_K - Medium", "Q3_K_L": "Q3_K - Large",
    "Q4_K_S": "Q4_K - Small", "Q4_K_M": "Q4_K - Medium",
    "Q5_K_S": "Q5_K - Small", "Q5_K_M": "Q5_K - Medium", "Q6_K": "Q6_K",
    "TQ1_0": "TQ1_0 - 1.69 bpw ternary", "TQ2_0": "TQ2_0 - 2.06 bpw ternary",
    "IQ2_XXS": "IQ2_XXS - 2.0625 bpw", "IQ2_XS": "IQ2_XS - 2.3125 bpw", "IQ2_S": "IQ2_S - 2.5 bpw",
    "IQ2_M": "IQ2_M - 2.7 bpw", "IQ3_XS": "IQ3_XS - 3.3 bpw", "IQ3_XXS": "IQ3_XXS - 3.0625 bpw",
    "IQ1_S": "IQ1_S - 1.5625 bpw", "IQ1_M": "IQ1_M - 1.75 bpw", "IQ4_NL": "IQ4_NL - 4.5 bpw",
    "IQ4_XS": "IQ4_XS - 4.25 bpw", "IQ3_S": "IQ3_S - 3.4375 bpw", "IQ3_M": "IQ3_S mix - 3.66 bpw",
}


def file_type_display(name: str | None, guessed: bool = False) -> str:
    """llama.cpp's wording for a canonical file type: ``Q4_K - Medium``, ``(guessed) all F32``."""
    text = FILE_TYPE_DISPLAY.get(name or "", "unknown, may not work")
    return f"(guessed) {text}" if guessed else text


#: the three K-quant tensor types llama.cpp guesses as the medium recipe
_GUESS_SPECIAL = {"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}


def guess_file_type(tensor_type: str) -> str:
    """llama.cpp's file-type guess from the most common tensor type.

    ``Q3_K/Q4_K/Q5_K`` -> the ``_M`` recipe; a type with a ``MOSTLY_<type>`` file type -> that;
    F32 and every other type (Q8_K, I32, MXFP4, unknown ...) -> ``F32`` (llama.cpp: ALL_F32).
    This derivation reproduces the ``switch (type_max)`` in llama.cpp's model loader exactly.
    """
    if tensor_type in _GUESS_SPECIAL:
        return _GUESS_SPECIAL[tensor_type]
    if tensor_type != "F32" and tensor_type in FILE_TYPE_IDS and tensor_type in TENSOR_TYPE_IDS:
        return tensor_type
    return "F32"


def file_type_name(file_type_id: int | None, type_counts: dict[str, int]) -> tuple[str | None, bool]:
    """The canonical file type and whether it was guessed.

    ``general.file_type`` wins when present (an unknown id gives ``unknown(N)``). Without it, the
    type with the largest count is taken (ties: the first key in ``type_counts`` order; use
    ``llama_type_counts`` to get llama.cpp's order) and mapped by ``guess_file_type``. With neither
    (no key, no tensors) the answer is ``(None, False)``.
    """
    if file_type_id is not None:
        # llama.cpp ORs LLAMA_FTYPE_GUESSED (1024) into a guessed type; honour it if a writer stored it
        guessed = bool(file_type_id & FILE_TYPE_GUESSED_FLAG)
        fid = file_type_id & ~FILE_TYPE_GUESSED_FLAG
        return FILE_TYPE_NAMES.get(fid, f"unknown({file_type_id})"), guessed
    best: str | None = None
    best_count = 0
    for name, count in type_counts.items():
        if count > best_count:
            best, best_count = name, count
    if best is None:
        return None, False
    return guess_file_type(best), True


_LAYER_RE = re.compile(r"blk\.\s*([+-]?\d+)")


def _llama_weight_order(name: str) -> tuple[int, bytes]:
    """llama.cpp's ``weight_name_comparer``: by ``sscanf("blk.%d.")`` layer (else -1), then by name."""
    layer = -1
    m = _LAYER_RE.match(name)
    if m:
        try:
            layer = int(m.group(1))
        except ValueError:  # pragma: no cover - the regex only matches digits
            layer = -1
        if not -(2**31) <= layer < 2**31:
            layer = -1
    return layer, name.encode("utf-8", "surrogatepass")


def llama_type_counts(tensors: Iterable[tuple[str, str]]) -> dict[str, int]:
    """Tensor counts per type, ordered so that ``file_type_name`` breaks ties as llama.cpp does.

    ``tensors`` yields ``(tensor name, type name)``. llama.cpp walks its weight map (sorted by
    layer, then name) and keeps the first type to reach the maximal count; ordering types by the
    step at which each reached its final count makes "first maximum in dict order" the same choice.
    """
    ordered = sorted(tensors, key=lambda item: _llama_weight_order(item[0]))
    counts: dict[str, int] = {}
    for _, dtype in ordered:
        counts[dtype] = counts.get(dtype, 0) + 1
    reached: dict[str, int] = {}
    running: dict[str, int] = {}
    for step, (_, dtype) in enumerate(ordered):
        running[dtype] = running.get(dtype, 0) + 1
        if running[dtype] == counts[dtype]:
            reached[dtype] = step
    return {dtype: counts[dtype] for dtype in sorted(counts, key=lambda d: reached[d])}
