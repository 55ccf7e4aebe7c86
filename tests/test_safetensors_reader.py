"""safetensors header reader on real files written by the ``safetensors`` library and by hand."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from qcheck.errors import InputError
from qcheck.limits import Limits
from qcheck.readers import load_checkpoint
from qcheck.readers.safetensors import DTYPE_BITS, read_safetensors_header
from qcheck.source import LocalFileSource


def st_bytes(header: dict | bytes, data: bytes = b"", pad_to: int = 8) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    raw += b" " * (-len(raw) % pad_to)
    return struct.pack("<Q", len(raw)) + raw + data


class MemorySource:
    """A ByteSource over bytes whose size may be hidden (as for a remote file of unknown length)."""

    def __init__(self, data: bytes, *, known_size: bool = True, name: str = "mem.safetensors"):
        self.data = data
        self.name = name
        self.size = len(data) if known_size else None
        self.reads: list[tuple[int, int]] = []

    def read_at(self, offset: int, length: int) -> bytes:
        self.reads.append((offset, length))
        return self.data[offset:offset + length]

    def close(self) -> None:
        pass


def test_library_written_file_matches_safe_open(tmp_path):
    tensors = {
        "model.embed_tokens.weight": torch.randn(16, 8).to(torch.bfloat16),
        "model.layers.0.mlp.down_proj.weight": torch.randn(8, 16).to(torch.float8_e4m3fn),
        "model.layers.0.mlp.down_proj.weight_scale": torch.ones(8, 1, dtype=torch.float32),
        "lm_head.weight": torch.randn(16, 8).half(),
        "scalar": torch.tensor(3, dtype=torch.int64),
        "empty": torch.zeros(0, 4, dtype=torch.uint8),
        "flags": torch.tensor([True, False]),
    }
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt", "producer": "test"})
    with LocalFileSource(path) as src:
        header = read_safetensors_header(src, file="model.safetensors")
    assert header.metadata == {"format": "pt", "producer": "test"}
    assert header.warnings == []
    assert header.data_offset == 8 + header.header_length
    assert header.data_length == path.stat().st_size - header.data_offset
    expected_dtype = {"model.embed_tokens.weight": "BF16", "model.layers.0.mlp.down_proj.weight": "F8_E4M3",
                      "model.layers.0.mlp.down_proj.weight_scale": "F32", "lm_head.weight": "F16",
                      "scalar": "I64", "empty": "U8", "flags": "BOOL"}
    assert {k: t.dtype for k, t in header.tensors.items()} == expected_dtype
    raw = path.read_bytes()
    with safe_open(str(path), "pt") as f:
        for name in f.keys():  # noqa: SIM118 - safe_open has no __iter__
            info = header.tensors[name]
            assert list(info.shape) == list(f.get_slice(name).get_shape())
            assert info.file == "model.safetensors"
            tensor = f.get_tensor(name)
            assert info.nbytes == tensor.numel() * tensor.element_size()
            # the absolute offset points at the tensor's own bytes
            assert raw[info.offset:info.offset + info.nbytes] == tensor.reshape(-1).view(torch.uint8).numpy().tobytes()


def test_checkpoint_record_from_single_file(tmp_path):
    path = tmp_path / "w.safetensors"
    save_file({"a": torch.zeros(4, 4), "b": torch.zeros(2, dtype=torch.int32)}, str(path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "text_config": {
        "quantization_config": {"quant_method": "fp8"}}}))
    ck = load_checkpoint(str(path))
    assert ck.container == "safetensors"
    assert ck.path == str(path)
    assert set(ck.tensors) == {"a", "b"}
    assert ck.configs["config.json"]["text_config"]["quantization_config"]["quant_method"] == "fp8"
    kinds = {f.name: f.kind for f in ck.files}
    assert kinds == {"w.safetensors": "safetensors", "config.json": "config"}
    assert ck.size_bytes == path.stat().st_size
    assert ck.dtype_histogram() == {"F32": 1, "I32": 1}


def test_subbyte_dtypes_sizes_by_hand():
    header = {
        "fp4": {"dtype": "F4", "shape": [4, 6], "data_offsets": [0, 12]},
        "fp6": {"dtype": "F6_E2M3", "shape": [8], "data_offsets": [12, 18]},
        "fp6b": {"dtype": "F6_E3M2", "shape": [4], "data_offsets": [18, 21]},
        "e8m0": {"dtype": "F8_E8M0", "shape": [3], "data_offsets": [21, 24]},
        "fnuz": {"dtype": "F8_E4M3FNUZ", "shape": [2], "data_offsets": [24, 26]},
        "c64": {"dtype": "C64", "shape": [1], "data_offsets": [26, 34]},
    }
    h = read_safetensors_header(MemorySource(st_bytes(header, b"\0" * 34)))
    assert {k: t.nbytes for k, t in h.tensors.items()} == {"fp4": 12, "fp6": 6, "fp6b": 3, "e8m0": 3,
                                                           "fnuz": 2, "c64": 8}
    assert h.tensors["fp4"].shape == (4, 6)  # logical element count kept as written


def test_dtype_table_matches_library():
    # every dtype safetensors 0.8 knows, by the error message it gives for an unknown one
    raw = st_bytes({"x": {"dtype": "X9", "shape": [1], "data_offsets": [0, 1]}}, b"\0")
    from safetensors import deserialize

    with pytest.raises(Exception) as info:
        deserialize(raw)
    import re

    listed = str(info.value).split("expected one of ")[1].split(" at line")[0]
    names = set(re.findall(r"[A-Z][A-Z0-9_]*", listed))
    assert names == set(DTYPE_BITS)


def test_unknown_dtype_is_kept_with_a_warning():
    header = {"a": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]},
              "b": {"dtype": "F3_NEW", "shape": [5], "data_offsets": [2, 4]},
              "c": {"dtype": "F3_NEW", "shape": [5], "data_offsets": [4, 6]}}
    h = read_safetensors_header(MemorySource(st_bytes(header, b"\0" * 6)))
    assert h.tensors["b"].dtype == "F3_NEW"
    assert h.tensors["b"].nbytes is None
    assert h.tensors["a"].nbytes == 2
    assert len(h.warnings) == 1
    assert "unknown dtype 'F3_NEW' in 2 tensor(s)" in h.warnings[0]


def test_unknown_dtype_still_needs_contiguous_offsets():
    header = {"a": {"dtype": "F3_NEW", "shape": [5], "data_offsets": [0, 2]},
              "b": {"dtype": "U8", "shape": [1], "data_offsets": [3, 4]}}
    with pytest.raises(InputError, match="gap of 1 bytes"):
        read_safetensors_header(MemorySource(st_bytes(header, b"\0" * 4)))


def test_offsets_may_be_listed_out_of_order_and_zero_size_tensors_share_a_boundary():
    header = {"z": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]},
              "empty": {"dtype": "F32", "shape": [0, 3], "data_offsets": [4, 4]},
              "a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}
    h = read_safetensors_header(MemorySource(st_bytes(header, b"\0" * 6)))
    assert h.data_length == 6
    assert h.tensors["z"].offset == h.data_offset + 4
    assert h.tensors["empty"].nbytes == 0


def test_unknown_size_source_skips_only_the_file_length_check():
    data = st_bytes({"a": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]}}, b"abc" + b"JUNK")
    h = read_safetensors_header(MemorySource(data, known_size=False))
    assert h.data_length == 3
    assert h.file_size is None
    with pytest.raises(InputError, match="4 bytes after the last tensor"):
        read_safetensors_header(MemorySource(data))


def test_large_header_is_read_in_two_requests():
    header = {f"t{i:05d}": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(3000)}
    data = st_bytes(header, b"\0" * 3000)
    src = MemorySource(data)
    h = read_safetensors_header(src)
    assert len(h.tensors) == 3000
    assert len(src.reads) == 2  # the first 100 kB, then the rest of the header: never tensor data
    assert sum(length for _, length in src.reads) <= h.data_offset


def test_small_header_is_one_request():
    src = MemorySource(st_bytes({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, b"x"))
    read_safetensors_header(src)
    assert len(src.reads) == 1


def test_metadata_only_header_and_empty_file_are_valid():
    h = read_safetensors_header(MemorySource(st_bytes({"__metadata__": {"format": "mlx"}})))
    assert h.tensors == {}
    assert h.metadata == {"format": "mlx"}
    assert h.data_length == 0


def test_padding_with_newline_is_accepted_with_a_warning():
    raw = b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}\n'
    h = read_safetensors_header(MemorySource(struct.pack("<Q", len(raw)) + raw + b"x"))
    assert h.warnings == ["header padded with tabs or newlines; the format allows only spaces"]


def test_max_tensors_limit_applies():
    header = {f"t{i}": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(50)}
    data = st_bytes(header, b"\0" * 50)
    read_safetensors_header(MemorySource(data), Limits(max_tensors=50))
    with pytest.raises(InputError, match="over the limit of 49"):
        read_safetensors_header(MemorySource(data), Limits(max_tensors=49))


def test_bin_extension_with_safetensors_content_is_recognised(tmp_path):
    path = tmp_path / "weights.bin"
    save_file({"a": torch.zeros(2)}, str(path))
    ck = load_checkpoint(str(path))
    assert ck.container == "safetensors"
    assert ck.tensors["a"].shape == (2,)


def test_names_with_json_punctuation_and_escapes():
    names = ['a"[{:', "b\\\\}]", "c:\u00e9\u4e2d", "d\U0001F600"]
    header = {n: {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i, n in enumerate(names)}
    h = read_safetensors_header(MemorySource(st_bytes(header, b"\0" * 4)))
    assert list(h.tensors) == names
    raw = json.dumps(header).encode()  # ASCII-escaped, emoji as a surrogate pair: valid
    assert b"\\ud83d\\ude00" in raw
    dup = raw[:-1] + b', "a\\"[{:": {"dtype": "U8", "shape": [0], "data_offsets": [4, 4]}}'
    with pytest.raises(InputError, match=r"duplicate key 'a\"\[\{:'"):
        read_safetensors_header(MemorySource(st_bytes(dup, b"\0" * 4)))
