"""Builders for real GGUF bytes, shared by the GGUF reader, hostile-file and fuzz tests.

``write_gguf`` uses gguf-py's own ``GGUFWriter`` (and ``gguf.quants.quantize`` where it implements
the type), so the files are what the ecosystem produces. ``RawGGUF`` writes the format field by
field so the tests can put any value anywhere, which ``GGUFWriter`` refuses to do.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

Q = GGMLQuantizationType


def tensor_bytes(shape: tuple[int, ...], qtype: GGMLQuantizationType, seed: int = 0) -> np.ndarray:
    """Data for a tensor of row-major ``shape`` in ``qtype``: quantised by gguf-py when it can, else raw bytes."""
    rng = np.random.default_rng(seed)
    if qtype in (Q.F32, Q.F16):
        values = rng.standard_normal(shape).astype(np.float32)
        return values.astype(np.float16) if qtype == Q.F16 else values
    if qtype == Q.I32:
        return rng.integers(-5, 5, size=shape, dtype=np.int32)
    try:
        return gguf.quants.quantize(rng.standard_normal(shape).astype(np.float32), qtype)
    except NotImplementedError:
        block, size = GGML_QUANT_SIZES[qtype]
        byte_shape = (*shape[:-1], shape[-1] // block * size)
        return rng.integers(0, 256, size=byte_shape, dtype=np.uint8)


def write_gguf(
    path: Path | str,
    tensors: list[tuple[str, tuple[int, ...], GGMLQuantizationType]] = (),
    *,
    arch: str = "llama",
    kv: dict | None = None,
    file_type: int | None = None,
    split_max_tensors: int = 0,
    vocab: int = 0,
    context_length: int | None = 4096,
) -> list[Path]:
    """Write a GGUF file (or split set) with gguf-py's GGUFWriter; returns the written paths.

    ``tensors`` is ``(name, row-major shape, ggml type)``. ``kv`` adds extra keys: values are
    ``(GGUFValueType, value)`` or plain python values. ``vocab`` adds a tokenizer of that size.
    """
    path = Path(path)
    writer = gguf.GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    writer.add_name("test-model")
    if context_length is not None:
        writer.add_context_length(context_length)
    writer.add_block_count(2)
    if file_type is not None:
        writer.add_file_type(file_type)
    quantized = any(q not in (Q.F32, Q.F16, Q.BF16) for _, _, q in tensors)
    if quantized:
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    if vocab:
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list([f"tok{i}" for i in range(vocab)])
        writer.add_token_types([1] * vocab)
        writer.add_token_merges([f"t o{i}" for i in range(vocab // 2)])
    for key, value in (kv or {}).items():
        if isinstance(value, tuple):
            vtype, val = value
            if vtype == GGUFValueType.ARRAY:
                writer.add_array(key, val)
            else:
                writer.add_key_value(key, val, vtype)
        elif isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, list):
            writer.add_array(key, value)
        else:  # pragma: no cover - test helper misuse
            raise TypeError(value)
    for i, (name, shape, qtype) in enumerate(tensors):
        data = tensor_bytes(shape, qtype, seed=i)
        raw_dtype = None if qtype in (Q.F32, Q.F16, Q.I32) else qtype
        writer.add_tensor(name, data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if split_max_tensors:
        total = len(writer.tensors)
        return [path.with_name(f"{path.stem}-{k:05d}-of-{total:05d}.gguf") for k in range(1, total + 1)]
    return [path]


# ------------------------------------------------------------------------------ raw byte builder
def gguf_string(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack("<Q", len(raw)) + raw


_FMT = {GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b", GGUFValueType.UINT16: "H",
        GGUFValueType.INT16: "h", GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i",
        GGUFValueType.FLOAT32: "f", GGUFValueType.BOOL: "B", GGUFValueType.UINT64: "Q",
        GGUFValueType.INT64: "q", GGUFValueType.FLOAT64: "d"}


def kv_scalar(key: str | bytes, vtype: int, value) -> bytes:
    """One KV entry with a scalar value (``value`` may be raw bytes to write verbatim)."""
    if isinstance(value, bytes):
        body = value
    elif vtype == GGUFValueType.STRING:
        body = gguf_string(value)
    else:
        body = struct.pack("<" + _FMT[GGUFValueType(vtype)], value)
    return gguf_string(key) + struct.pack("<I", vtype) + body


def kv_array(key: str | bytes, etype: int, values: list, count: int | None = None) -> bytes:
    """One KV entry holding an array; ``count`` overrides the declared length."""
    n = len(values) if count is None else count
    if etype == GGUFValueType.STRING:
        body = b"".join(gguf_string(v) for v in values)
    else:
        body = b"".join(struct.pack("<" + _FMT[GGUFValueType(etype)], v) for v in values)
    return gguf_string(key) + struct.pack("<IIQ", GGUFValueType.ARRAY, etype, n) + body


def tensor_info(name: str | bytes, ne: list[int], ggml_type: int, offset: int, n_dims: int | None = None) -> bytes:
    """One tensor info with ggml-order dims ``ne`` (innermost first)."""
    nd = len(ne) if n_dims is None else n_dims
    return (gguf_string(name) + struct.pack("<I", nd) + b"".join(struct.pack("<Q", d % 2**64) for d in ne)
            + struct.pack("<IQ", ggml_type, offset))


@dataclass
class RawGGUF:
    """A GGUF file assembled from parts; every field can be set to anything."""

    kvs: list[bytes] = field(default_factory=list)
    tensors: list[bytes] = field(default_factory=list)
    version: int = 3
    magic: bytes = b"GGUF"
    n_kv: int | None = None
    n_tensors: int | None = None
    alignment: int = 32
    data: bytes = b""
    pad_data: bool = True

    def header(self) -> bytes:
        n_kv = len(self.kvs) if self.n_kv is None else self.n_kv
        n_t = len(self.tensors) if self.n_tensors is None else self.n_tensors
        return (self.magic + struct.pack("<I", self.version % 2**32) + struct.pack("<Q", n_t % 2**64)
                + struct.pack("<Q", n_kv % 2**64) + b"".join(self.kvs) + b"".join(self.tensors))

    def build(self) -> bytes:
        head = self.header()
        if not self.pad_data:
            return head + self.data
        pad = (self.alignment - len(head) % self.alignment) % self.alignment
        return head + b"\0" * pad + self.data


def valid_raw(n_tensors: int = 2) -> RawGGUF:
    """A small valid file: two F32 tensors of 4x8 (128 bytes each), data present."""
    raw = RawGGUF(kvs=[kv_scalar("general.architecture", GGUFValueType.STRING, "llama"),
                       kv_scalar("llama.context_length", GGUFValueType.UINT32, 2048)])
    off = 0
    for i in range(n_tensors):
        raw.tensors.append(tensor_info(f"t{i}.weight", [8, 4], Q.F32, off))
        off += 128
    raw.data = b"\x01" * off
    return raw


class BytesSource:
    """An in-memory ByteSource (``size=None`` models a stream whose length is not known)."""

    def __init__(self, data: bytes, name: str = "memory.gguf", size_known: bool = True):
        self.data = data
        self.name = name
        self.size: int | None = len(data) if size_known else None

    def read_at(self, offset: int, length: int) -> bytes:
        return self.data[offset: offset + length]

    def close(self) -> None:
        pass
