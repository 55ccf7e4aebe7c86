"""An unquantised GGUF as the reference of ``qcheck eval``: many llama.cpp users have only GGUF files.

An F32, F16 or BF16 GGUF holds the model's weights unrounded (F16/BF16 exactly as the original release stored them),
so it is a valid reference. transformers loads GGUF files by dequantising them; qcheck does that the way it does for
simulated candidates (``qcheck.eval.gguf_convert``: its bounded header reader, each tensor read at its validated
offset, transformers' own per-architecture conversion) and writes the result once as the transformers directory the
reference path reads: ``config.json`` and the tokenizer from transformers' GGUF conversion, ``model.safetensors``
in the file's own float type. The directory is kept in the eval cache, keyed by the file's identity, so the next run
reuses it (and the reference's cached log-probs, whose key includes it). Like a llama.cpp candidate, the file is
vetted first (``qcheck.eval.native``): a GGUF ``qcheck inspect`` refuses, or one changed since, never reaches
transformers' GGUF loader.

A quantised GGUF is refused: it is what gets measured, not what it is measured against; the message names the three
ways to give a reference.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qcheck.errors import InputError
from qcheck.eval.safe_load import REFERENCE_OPTIONS
from qcheck.limits import DEFAULT_LIMITS, Limits

if TYPE_CHECKING:
    from qcheck.eval.native import Vetted

#: GGUF tensor types that hold unquantised weights, and the dtype the reference is written in
FLOAT_TYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def gguf_file_of(path: str) -> Path | None:
    """The GGUF file a ``--reference`` names (a ``.gguf`` file, or a directory holding one GGUF and no
    ``config.json``), else None: a model directory or a URL."""
    p = Path(path)
    if p.is_file() and p.suffix.lower() == ".gguf":
        return p
    if p.is_dir() and not (p / "config.json").is_file():
        ggufs = sorted(f for f in p.glob("*.gguf") if f.is_file())
        if len(ggufs) > 1:
            raise InputError(f"{len(ggufs)} GGUF files here ({', '.join(f.name for f in ggufs[:3])}): name the "
                             "unquantised one as --reference FILE.gguf", path=path)
        return ggufs[0] if ggufs else None
    return None


def check_gguf_reference(gguf_file: Path, limits: Limits = DEFAULT_LIMITS) -> Any:
    """Read the GGUF's header (bounded, no weights) and refuse it unless every tensor is F32, F16 or BF16; returns
    the checkpoint (its header)."""
    from qcheck.readers import load_checkpoint

    checkpoint = load_checkpoint(str(gguf_file), limits)
    if checkpoint.container != "gguf":
        raise InputError(f"not a GGUF file: {REFERENCE_OPTIONS}", path=str(gguf_file))
    if sum(1 for f in checkpoint.files if f.kind == "gguf") != 1:
        raise InputError("a split GGUF must be merged (llama-gguf-split --merge) before it can be the reference",
                         path=str(gguf_file))
    types = {info.dtype for info in checkpoint.tensors.values()}
    quantised = sorted(types - set(FLOAT_TYPES))
    if quantised or not types:
        what = ", ".join(quantised[:4]) or "no tensors"
        raise InputError(f"a quantised GGUF ({what}) cannot be the reference: it is what gets measured, not what it "
                         f"is measured against; {REFERENCE_OPTIONS}", path=str(gguf_file))
    return checkpoint


def materialise(reference: str, limits: Limits, cache_dir: str | None, use_cache: bool) -> tuple[str, str] | None:
    """For a GGUF ``reference``: its transformers directory (made once, then reused) and a note for the report; None
    for anything else (a model directory; ``qcheck.eval.run`` skips a served reference)."""
    gguf_file = gguf_file_of(reference)
    if gguf_file is None:
        return None
    from qcheck.eval.native import vet

    vetted = vet(str(gguf_file), limits)  # inspected as qcheck inspect does before any GGUF loader sees it
    checkpoint = check_gguf_reference(gguf_file, limits)
    target = _directory(gguf_file, checkpoint, cache_dir, use_cache)
    if not (target / "model.safetensors").is_file():
        _write(vetted, checkpoint, target)
    kinds = "/".join(t for t in FLOAT_TYPES if any(i.dtype == t for i in checkpoint.tensors.values()))
    return str(target), (f"reference: {gguf_file.name}, an unquantised GGUF ({kinds}), converted by transformers' "
                         f"GGUF conversion into {target} (config.json, tokenizer, model.safetensors, each tensor in "
                         "its GGUF type), made once and reused")


def _directory(gguf_file: Path, checkpoint: Any, cache_dir: str | None, use_cache: bool) -> Path:
    """Where the directory lives: the eval cache, under the file's identity (name, size, time, tensor table) and the
    transformers release that converts it; a temporary directory removed at exit with ``--no-cache``."""
    import transformers

    if not use_cache:
        tmp = Path(tempfile.mkdtemp(prefix="qcheck-gguf-reference-"))
        import atexit

        atexit.register(shutil.rmtree, tmp, True)
        return tmp
    from qcheck.eval.cache import default_cache_dir

    st = gguf_file.stat()
    h = hashlib.sha256(f"{gguf_file.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{transformers.__version__}".encode())
    for info in checkpoint.tensors.values():
        h.update(f"{info.name}\0{info.dtype}\0{info.shape}\0{info.offset}\n".encode())
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    return root / "eval" / "gguf-reference" / h.hexdigest()[:32]


def _write(vetted: Vetted, checkpoint: Any, target: Path) -> None:
    """Write config.json, the tokenizer and model.safetensors into ``target`` (built beside it, renamed into
    place: a reader sees a whole directory or none). transformers' GGUF loader (gguf-py's ``GGUFReader``) gets the
    file only after ``still_vetted``: the file qcheck inspected, unchanged since."""
    import torch
    import transformers
    from safetensors.torch import save_file

    from qcheck.eval.native import still_vetted
    from qcheck.eval.safe_load import NO_CODE
    from qcheck.eval.simulate import gguf_state

    gguf_file = Path(still_vetted(vetted))
    folder, name = str(gguf_file.parent), gguf_file.name
    try:
        ref_config = transformers.AutoConfig.from_pretrained(folder, gguf_file=name, **NO_CODE)
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name, **NO_CODE)
    except (OSError, ValueError, KeyError, NotImplementedError) as exc:
        raise InputError(f"transformers cannot read this GGUF's config or tokenizer ({str(exc).splitlines()[0]}); "
                         f"{REFERENCE_OPTIONS}", path=str(gguf_file)) from None
    types: dict[str, str] = {}
    state, _ = gguf_state(gguf_file, checkpoint, ref_config, types)
    # each parameter in its GGUF type: exact (F16/BF16 values are what the file holds), half the size of float32
    tensors = {k: v.to(getattr(torch, FLOAT_TYPES.get(types.get(k, "F32"), "float32"))).contiguous().clone()
               for k, v in state.items()}
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        ref_config.save_pretrained(building)
        tokenizer.save_pretrained(building)
        save_file(tensors, str(building / "model.safetensors"), metadata={"format": "pt"})
        if target.exists():  # an interrupted earlier build: replaced
            shutil.rmtree(target)
        os.replace(building, target)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
