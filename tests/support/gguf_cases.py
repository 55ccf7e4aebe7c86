"""Hostile GGUF files (the hostile-input checklist, cases 1-16, in docs/security.md), each built byte by byte,
with the message the reader must give. Shared by the GGUF reader tests and the hostile-input checklist."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from gguf.constants import GGUFValueType as V

from support.gguf_helpers import Q, RawGGUF, gguf_string, kv_array, kv_scalar, tensor_info, valid_raw


@dataclass
class Case:
    id: str
    data: bytes
    pattern: str  # regex the InputError message must match (it names the problem and where)
    limits: dict[str, int] = field(default_factory=dict)
    #: where the CLI answers before the GGUF reader runs (the reader dispatch sniffs the first bytes)
    cli_pattern: str | None = None


def _raw(**changes) -> RawGGUF:
    raw = valid_raw()
    for key, value in changes.items():
        setattr(raw, key, value)
    return raw


def _with_kvs(*extra: bytes, tensors: bool = True) -> bytes:
    raw = valid_raw(2 if tensors else 0)
    raw.kvs += list(extra)
    return raw.build()


def _with_tensors(*infos: bytes, data: int = 256) -> bytes:
    raw = valid_raw(0)
    raw.tensors = list(infos)
    raw.data = b"\0" * data
    return raw.build()


def _nested(depth: int) -> bytes:
    body = b"".join(struct.pack("<IQ", V.ARRAY, 1) for _ in range(depth - 1)) + struct.pack("<IQ", V.UINT8, 0)
    return gguf_string("deep") + struct.pack("<I", V.ARRAY) + body


VALID = valid_raw().build()


HEADER_LEN = len(valid_raw().header())


TOKENS5 = kv_array("tokenizer.ggml.tokens", V.STRING, ["a", "b", "c", "d", "e"])

CASES = [
    # 1. truncation
    Case("empty", b"", r"the file is empty", cli_pattern=r"empty\.gguf: empty file"),
    Case("3-bytes", b"GGU", r"offset 0: GGUF magic needs 4 bytes but only 3 remain"),
    Case("20-bytes", VALID[:20], r"offset 16: metadata key/value count needs 8 bytes but only 4 remain"),
    Case("cut-mid-kv", VALID[:40], r"offset 24: 2 metadata entries and 2 tensor infos needs 76 bytes but only 16"),
    Case("cut-mid-tensor-infos", VALID[: HEADER_LEN - 10], r"offset \d+: type of tensor 't1.weight' needs 4 bytes "
                                                             r"but only 2 remain"),
    Case("cut-in-data", VALID[:-10], r"tensor 't1.weight': data \[\d+, \d+\) extends past the end of the file"),
    # 2. magic and version
    Case("png-magic", b"\x89PNG\r\n\x1a\n" + b"\0" * 32, r"offset 0: not a GGUF file: it starts with bytes 89 50 4e 47"),
    Case("big-endian-magic", _raw(magic=b"FUGG").build(), r"offset 0: big-endian GGUF is not supported"),
    Case("ggjt-magic", _raw(magic=b"tjgg").build(), r"offset 0: this is a pre-GGUF GGJT file"),
    Case("version-0", _raw(version=0).build(), r"offset 4: invalid GGUF version 0"),
    Case("version-1", _raw(version=1).build(), r"offset 4: GGUF v1 is not supported \(pre-2023 format\); convert "
                                               r"with llama.cpp"),
    Case("version-4", _raw(version=4).build(), r"offset 4: GGUF version 4 is newer"),
    Case("version-byte-swapped", _raw(version=0x03000000).build(), r"offset 4: .*version 3 byte-swapped.*big-endian"),
    # 3. counts
    Case("n-tensors-2^63", _raw(n_tensors=2**63).build(), r"offset 8: tensor count 9223372036854775808 is over "
                                                           r"the limit"),
    Case("n-tensors-2^64-1", _raw(n_tensors=2**64 - 1).build(), r"offset 8: tensor count 18446744073709551615"),
    Case("n-kv-2^64-1", _raw(n_kv=2**64 - 1).build(), r"offset 16: metadata key/value count 18446744073709551615 "
                                                       r"is over the limit"),
    Case("n-kv-vs-remaining", _raw(n_kv=1000).build(), r"offset 24: 1000 metadata entries and 2 tensor infos needs "
                                                        r"14048 bytes but only \d+ remain"),
    Case("n-tensors-vs-remaining", _raw(n_tensors=300_000).build(), r"offset 24: .*300000 tensor infos needs"),
    # 4. string lengths
    Case("key-longer-than-file", _with_kvs(struct.pack("<Q", 100_000) + b"abc"),
         r"offset \d+: key of metadata entry 2 needs 100000 bytes but only \d+ remain"),
    Case("key-length-2^64-1", _with_kvs(struct.pack("<Q", 2**64 - 1) + b"abc"),
         r"key of metadata entry 2 declares 18446744073709551615 bytes, over the 16777216-byte limit"),
    Case("value-length-2^64-1", _with_kvs(gguf_string("general.name") + struct.pack("<IQ", V.STRING, 2**64 - 1)),
         r"offset \d+: value of 'general.name' declares 18446744073709551615 bytes"),
    # 5. arrays
    Case("array-bytes-vs-remaining", _with_kvs(gguf_string("x") + struct.pack("<IIQ", V.ARRAY, V.UINT32, 1000)),
         r"array 'x' of 1000 UINT32 elements needs 4000 bytes but only \d+ remain"),
    Case("scores-1Gi-in-519-bytes", (_with_kvs(TOKENS5, gguf_string("tokenizer.ggml.scores")
                                               + struct.pack("<IIQ", V.ARRAY, V.FLOAT32, 2**30), tensors=False)),
         r"offset \d+: array 'tokenizer.ggml.scores' declares 1073741824 elements, over the limit of 16000000"),
    Case("scores-1Gi-limit-raised", (_with_kvs(TOKENS5, gguf_string("tokenizer.ggml.scores")
                                               + struct.pack("<IIQ", V.ARRAY, V.FLOAT32, 2**30), tensors=False)),
         r"array 'tokenizer.ggml.scores' of 1073741824 FLOAT32 elements needs 4294967296 bytes but only",
         limits={"max_array_elements": 2**31}),
    Case("string-array-vs-remaining", _with_kvs(gguf_string("s") + struct.pack("<IIQ", V.ARRAY, V.STRING, 10**6)),
         r"array 's' of 1000000 STRING elements needs 8000000 bytes"),
    Case("string-in-array-too-long", _with_kvs(gguf_string("s") + struct.pack("<IIQ", V.ARRAY, V.STRING, 2)
                                               + gguf_string("ok") + struct.pack("<Q", 2**62)),
         r"offset \d+: array 's'\[1\] declares 4611686018427387904 bytes"),
    # 6. nesting and unknown types
    Case("nested-100-deep", _with_kvs(_nested(100)), r"offset \d+: array 'deep' is nested 9 deep, over the limit of 8"),
    Case("value-type-14", _with_kvs(gguf_string("x") + struct.pack("<I", 14)),
         r"offset \d+: key 'x' has unknown value type 14; the rest of the file cannot be followed"),
    Case("value-type-ffffffff", _with_kvs(gguf_string("x") + struct.pack("<I", 0xFFFFFFFF)),
         r"key 'x' has unknown value type 4294967295"),
    Case("array-element-type-13", _with_kvs(gguf_string("x") + struct.pack("<IIQ", V.ARRAY, 13, 1)),
         r"offset \d+: array 'x' has unknown element type 13"),
    # 7. keys and strings
    Case("empty-key", _with_kvs(kv_scalar("", V.UINT8, 1)), r"offset \d+: metadata entry 2 has an empty key"),
    Case("duplicate-key", _with_kvs(kv_scalar("general.architecture", V.STRING, "gpt2")),
         r"offset \d+: duplicate metadata key 'general.architecture' \(entry 2\)"),
    Case("non-utf8-key", _with_kvs(kv_scalar(b"\xff\xfekey", V.UINT8, 1)),
         r"offset \d+: key of metadata entry 2 is not valid UTF-8"),
    Case("non-utf8-value", _with_kvs(kv_scalar("general.name", V.STRING, gguf_string(b"bad \xc3("))),
         r"offset \d+: value of 'general.name' is not valid UTF-8"),
    Case("bool-7", _with_kvs(kv_scalar("flag", V.BOOL, 7)), r"offset \d+: value of 'flag' is 7, not a bool"),
    # 8. alignment
    Case("alignment-string", _with_kvs(kv_scalar("general.alignment", V.STRING, "32")),
         r"key 'general.alignment': must be a UINT32, not STRING"),
    Case("alignment-u64", _with_kvs(kv_scalar("general.alignment", V.UINT64, 32)),
         r"key 'general.alignment': must be a UINT32, not UINT64"),
    Case("alignment-0", _with_kvs(kv_scalar("general.alignment", V.UINT32, 0)),
         r"key 'general.alignment': alignment 0 is not a non-zero power of two"),
    Case("alignment-48", _with_kvs(kv_scalar("general.alignment", V.UINT32, 48)),
         r"key 'general.alignment': alignment 48 is not a non-zero power of two"),
    Case("alignment-2^31", _with_kvs(kv_scalar("general.alignment", V.UINT32, 0x80000000)),
         r"key 'general.alignment': alignment 2147483648 is implausibly large"),
    # 9. typed-consumer confusion
    Case("scores-as-int8", _with_kvs(TOKENS5, kv_array("tokenizer.ggml.scores", V.INT8, [0] * 5)),
         r"key 'tokenizer.ggml.scores': must be an ARRAY\[FLOAT32\], not ARRAY\[INT8\]"),
    Case("token-type-as-float", _with_kvs(TOKENS5, kv_array("tokenizer.ggml.token_type", V.FLOAT32, [1.0] * 5)),
         r"key 'tokenizer.ggml.token_type': must be an ARRAY\[INT32\], not ARRAY\[FLOAT32\]"),
    Case("scores-shorter-than-vocab", _with_kvs(TOKENS5, kv_array("tokenizer.ggml.scores", V.FLOAT32, [0.0] * 3)),
         r"key 'tokenizer.ggml.scores': has 3 entries but tokenizer.ggml.tokens has 5"),
    Case("tokens-as-string", _with_kvs(kv_scalar("tokenizer.ggml.tokens", V.STRING, "abc")),
         r"key 'tokenizer.ggml.tokens': must be an ARRAY\[STRING\], not STRING"),
    Case("architecture-as-u32", RawGGUF(kvs=[kv_scalar("general.architecture", V.UINT32, 7)]).build(),
         r"key 'general.architecture': must be a STRING, not UINT32"),
    Case("context-length-as-string", RawGGUF(kvs=[kv_scalar("general.architecture", V.STRING, "llama"),
                                                  kv_scalar("llama.context_length", V.STRING, "4096")]).build(),
         r"key 'llama.context_length': must be an integer, not STRING"),
    Case("file-type-as-float", _with_kvs(kv_scalar("general.file_type", V.FLOAT32, 15.0)),
         r"key 'general.file_type': must be an integer, not FLOAT32"),
    Case("split-count-negative", _with_kvs(kv_scalar("split.count", V.INT32, -1)),
         r"key 'split.count': must not be negative \(-1\)"),
    # 10. n_dims
    Case("n-dims-5", _with_tensors(tensor_info("t", [1, 1, 1, 1, 8], Q.F32, 0)),
         r"tensor 't' \(offset \d+\): has 5 dimensions; ggml allows at most 4"),
    Case("n-dims-1e6", _with_tensors(tensor_info("t", [8], Q.F32, 0, n_dims=1_000_000)),
         r"tensor 't' \(offset \d+\): has 1000000 dimensions"),
    Case("n-dims-ffffffff", _with_tensors(tensor_info("t", [8], Q.F32, 0, n_dims=0xFFFFFFFF)),
         r"has 4294967295 dimensions"),
    # 11. dimensions
    Case("ne-negative", _with_tensors(tensor_info("t", [8, 2**64 - 1], Q.F32, 0)),
         r"tensor 't' \(offset \d+\): dimension 1 is negative \(-1\)"),
    Case("ne1-zero", _with_tensors(tensor_info("t", [8, 0], Q.F32, 0)), r"tensor 't' \(offset \d+\): dimension 1 is 0"),
    Case("ne-product-wraps", _with_tensors(tensor_info("t", [4194305, 4194305, 211106198978564], Q.F32, 0)),
         r"tensor 't' \(offset \d+\): has \d+ elements \(4194305 x 4194305 x 211106198978564\), over the limit"),
    # 12. sizes that overflow only in bytes
    Case("ne0-2^62-f32", _with_tensors(tensor_info("t", [2**62], Q.F32, 0)),
         r"tensor 't' \(offset \d+\): has 4611686018427387904 elements"),
    Case("nbytes-2^63", _with_tensors(tensor_info("t", [2**61], Q.F32, 0)),
         r"tensor 't': needs 9223372036854775808 bytes, more than a file can hold",
         limits={"max_tensor_elements": 2**62}),
    # 13. types and blocks
    Case("row-not-multiple-of-block", _with_tensors(tensor_info("t", [100, 2], Q.Q4_K, 0)),
         r"tensor 't': row length 100 is not a multiple of the Q4_K block size 256"),
    Case("type-negative", _with_tensors(tensor_info("t", [8], 0xFFFFFFFF, 0)),
         r"tensor 't' \(offset \d+\): has a negative ggml type id \(-1\)"),
    Case("scalar-of-block-type", _with_tensors(tensor_info("t", [], Q.Q8_0, 0)),
         r"tensor 't': is a scalar of block type Q8_0"),
    # 14. names
    Case("name-64-bytes", _with_tensors(tensor_info("n" * 64, [8], Q.F32, 0)),
         r"offset \d+: tensor 0 has a 64-byte name; ggml allows at most 63"),
    Case("duplicate-tensor", _with_tensors(tensor_info("t", [8, 4], Q.F32, 0), tensor_info("t", [8, 4], Q.F32, 128)),
         r"tensor 't' \(offset \d+\): duplicate tensor name"),
    Case("non-utf8-tensor-name", _with_tensors(tensor_info(b"w\xff", [8], Q.F32, 0)),
         r"offset \d+: name of tensor 0 is not valid UTF-8"),
    # 15. offsets and the data section
    Case("offset-unaligned", _with_tensors(tensor_info("t", [8], Q.F32, 16)),
         r"tensor 't': data offset 16 is not a multiple of the alignment 32"),
    Case("offset-overlap", _with_tensors(tensor_info("a", [8, 4], Q.F32, 0), tensor_info("b", [8, 4], Q.F32, 0)),
         r"tensor 'b': data offset 0 overlaps the previous tensor \(expected 128\)"),
    Case("offset-hole", _with_tensors(tensor_info("a", [8, 4], Q.F32, 0), tensor_info("b", [8, 4], Q.F32, 256),
                                      data=512),
         r"tensor 'b': data offset 256 leaves a hole after the previous tensor \(expected 128"),
    Case("offset-past-int64", _with_tensors(tensor_info("a", [32], 77, 0), tensor_info("b", [8], Q.F32, 2**64 - 32)),
         r"tensor 'b': data at offset \d+ lies beyond any possible file size"),
    Case("data-past-file-end", _with_tensors(tensor_info("a", [8, 4], Q.F32, 0), tensor_info("b", [8, 1024], Q.F32, 128)),
         r"tensor 'b': data \[\d+, \d+\) extends past the end of the file"),
    Case("unknown-type-past-file-end", _with_tensors(tensor_info("a", [32], 77, 0), data=0),
         r"tensor 'a': data \[\d+, \d+\) extends past the end of the file"),
    # header budget
    Case("header-over-budget", _with_kvs(kv_array("big", V.UINT8, [0] * 5000)),
         r"needs \d+ bytes, past the 4096-byte header limit \(raise it with --limit max_header_bytes=N\)",
         limits={"max_header_bytes": 4096}),
]

