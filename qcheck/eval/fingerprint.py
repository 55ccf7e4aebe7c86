"""What identifies a local reference model in the cache key: every file transformers may read from its folder.

Why every file: the cached rows stand for the model that produced them, so anything that can change the reference's
numbers must change the key. transformers reads config.json, generation_config.json, the weights
(``model.safetensors``, or the index and every shard it names, in subfolders too), the tokenizer's files (whose
names vary by tokenizer: tokenizer.json, tokenizer.model, vocab.json, merges.txt, added_tokens.json, chat templates
...) and, with an adapter, adapter_config.json and adapter_model.safetensors. So the key covers every regular file at
the top of the folder plus every shard an index names, wherever it is:

- a ``*.safetensors`` file by its name, header, size and modification time (its data is what the header describes;
  reading gigabytes of weights on every run would cost more than most evaluations);
- any other file up to ``CONTENT_BYTES`` by its bytes (configs, tokenizers, templates, indexes);
- a larger one (a GGUF, or a pickle beside the model, never loaded) by its first ``CONTENT_BYTES``, size and
  modification time. A reference given as one file (a GGUF) is fingerprinted the same way.

Anything at the top of the folder that is not a regular file or a directory (a FIFO, a device, a broken link) is an
``InputError``: transformers would read it, or hang on it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from qcheck.errors import InputError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.source import LocalFileSet, regular_file

#: files up to this size are identified by their bytes
CONTENT_BYTES = 64 * 1024 * 1024
INDEX_SUFFIX = ".safetensors.index.json"


def model_fingerprint(path: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """SHA-256 over every file the loader may read from the model folder ``path`` (see the module docstring)."""
    root = Path(path)
    h = hashlib.sha256()
    single = not root.is_dir()  # one file (a GGUF reference): identified as a large file of a folder is
    if single:
        root = root.parent
    fileset = LocalFileSet(root)
    try:
        names = [Path(path).name] if single else _top_level(root)
        for index in [n for n in names if n.endswith(INDEX_SUFFIX)]:
            names.extend(_shards(fileset, index, limits))
        for name in sorted(set(names)):
            full = root / name
            regular_file(full, display=str(full))
            h.update(name.encode("utf-8", "surrogateescape") + b"\0")
            h.update(_identity(fileset, name, full, limits))
    except OSError as exc:
        raise InputError(f"cannot read the reference model files: {exc.strerror or exc}", path=path) from None
    return h.hexdigest()


def _top_level(root: Path) -> list[str]:
    """The names of the folder's entries the loader may read: all but directories (each checked later)."""
    return [child.name for child in root.iterdir() if not child.is_dir()]


def _shards(fileset: LocalFileSet, index: str, limits: Limits) -> list[str]:
    """The shard paths an index names (relative to the folder; one climbing out of it is an ``InputError``)."""
    from qcheck.readers.jsonfile import loads_document

    data = loads_document(fileset.read_small(index, limits.max_json_bytes), name=index, limits=limits,
                          path=str(fileset.path / index))
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    shards = sorted({v for v in weight_map.values() if isinstance(v, str)}) if isinstance(weight_map, dict) else []
    if len(shards) > limits.max_shards:
        raise InputError(f"{index} names {len(shards)} shards, over the limit of {limits.max_shards}",
                         path=str(fileset.path))
    for shard in shards:
        fileset.exists(shard)  # an absolute path or ".." is refused here; so is a FIFO or a link loop
    return shards


def _identity(fileset: LocalFileSet, name: str, full: Path, limits: Limits) -> bytes:
    """What stands for one file's contents (module docstring)."""
    st = os.stat(full)
    if name.endswith(".safetensors"):
        with fileset.open(name) as src:
            raw = src.read_at(0, 8)
            n = int.from_bytes(raw, "little") if len(raw) == 8 else 0
            if not 0 < n <= limits.max_safetensors_header:
                raise InputError(f"safetensors header length {n} is out of bounds", path=str(full))
            header = src.read_at(8, n)
        return header + json.dumps([st.st_size, st.st_mtime_ns]).encode()
    with fileset.open(name) as src:  # a larger file: its first CONTENT_BYTES (a GGUF's header), size and time
        head = hashlib.sha256(src.read_at(0, CONTENT_BYTES)).digest()
    return head if st.st_size <= CONTENT_BYTES else head + json.dumps([st.st_size, st.st_mtime_ns]).encode()
