"""Malformed and hostile safetensors files (the hostile-input checklist, cases 17-22, in docs/security.md) and
a runner that reads one in a fresh interpreter whose address space is capped. Shared by the safetensors reader
tests, the pickle tests and the hostile-input checklist."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

MEMORY_LIMIT = 200 * 1024 * 1024
REPO = Path(__file__).resolve().parents[2]


def hdr(raw: bytes, data: bytes = b"", n: int | None = None) -> bytes:
    return struct.pack("<Q", len(raw) if n is None else n) + raw + data


def js(obj: object, data: bytes = b"") -> bytes:
    return hdr(json.dumps(obj).encode(), data)


def entry(dtype: str = "U8", shape: list | None = None, offsets: list | None = None) -> dict:
    return {"dtype": dtype, "shape": [1] if shape is None else shape,
            "data_offsets": [0, 1] if offsets is None else offsets}


def deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def bloat(count: int) -> bytes:
    body = ",".join(f'"layers.{i}.w":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{i + 1}]}}'
                    for i in range(count))
    return hdr(("{" + body + "}").encode(), b"\0" * count)


# (case id, file bytes, limit overrides, regex the InputError message must match)
CASES: list[tuple[str, bytes, dict, str]] = [
    # 17: the length prefix
    ("17-shorter-than-8-bytes", b"\x05\x00\x00", {}, r"3 bytes, too short for the 8-byte header length"),
    ("17-length-2^64-1", hdr(b"{}", n=2**64 - 1), {}, r"header length 18446744073709551615 is over the 100000000-byte limit"),
    ("17-length-over-100MB", hdr(b"{}", n=100_000_001), {}, r"over the 100000000-byte limit"),
    ("17-length-past-eof", hdr(b"{}" + b" " * 30, n=1000), {}, r"header length 1000 runs past the end of the 40-byte file"),
    ("17-length-2^63", hdr(b"{}", n=2**63), {}, r"over the 100000000-byte limit"),
    ("17-length-zero", hdr(b"", n=0) + b"{}", {}, r"header length 0 is too small"),
    # 18: the JSON text
    ("18-not-utf8", hdr(b'{"\xff\xfe":1}'), {}, r"not valid UTF-8 at byte 2"),
    ("18-not-json", hdr(b"{not json}"), {}, r"invalid JSON"),
    ("18-leading-space", hdr(b' {"a":1}'), {}, r"does not start with '\{'"),
    ("18-array", hdr(b"[1,2,3]"), {}, r"does not start with '\{'"),
    ("18-trailing-garbage", hdr(b"{}  XYZ"), {}, r"non-space bytes after the JSON header at offset 12"),
    ("18-second-object", hdr(b"{} {}"), {}, r"non-space bytes after the JSON header"),
    ("18-truncated-json", hdr(b'{"a":{"dtype":'), {}, r"invalid JSON"),
    ("18-nul-padding", hdr(b"{}\x00\x00\x00\x00\x00\x00"), {}, r"non-space bytes after"),
    # 19: keys and metadata
    ("19-duplicate-tensor", hdr(b'{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                                b'"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4), {},
     r"duplicate key 'w'"),
    ("19-duplicate-field", hdr(b'{"w":{"dtype":"U8","dtype":"F32","shape":[1],"data_offsets":[0,1]}}', b"\0"), {},
     r"duplicate key 'dtype'"),
    ("19-metadata-int", js({"__metadata__": {"format": 1}}), {}, r"__metadata__ value for 'format' is not a string"),
    ("19-metadata-nested", js({"__metadata__": {"format": {"a": "b"}}}), {}, r"not a string"),
    ("19-metadata-list", js({"__metadata__": ["pt"]}), {}, r"__metadata__ must be an object"),
    ("19-lone-surrogate-name", hdr(b'{"\\ud800x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\0"), {},
     r"surrogate"),
    ("19-lone-surrogate-metadata", hdr(b'{"__metadata__":{"a":"\\udc00"}}'), {}, r"surrogate"),
    # 20: dtypes and sub-byte sizes
    ("20-f4-odd-count", js({"a": entry("F4", [3], [0, 2])}, b"\0\0"), {}, r"3 elements of F4 \(4 bits each\)"),
    ("20-f6-not-whole-bytes", js({"a": entry("F6_E3M2", [3], [0, 3])}, b"\0" * 3), {}, r"do not fill whole bytes"),
    ("20-dtype-not-string", js({"a": entry(7)}, b"\0"), {}, r"dtype must be a short string"),  # type: ignore[arg-type]
    ("20-dtype-empty", js({"a": entry("")}, b"\0"), {}, r"dtype must be a short string"),
    # 21: shapes and offsets
    ("21-shape-product-overflow", js({"a": entry("U8", [2**40, 2**40, 2**40], [0, 1])}, b"\0"), {},
     r"more than 1125899906842624 elements"),
    ("21-shape-wraps-u64", js({"a": entry("F32", [4194305, 4194305, 211106198978564], [0, 16])}, b"\0" * 16), {},
     r"elements"),
    ("21-dim-huge-beside-zero", js({"a": entry("U8", [0, 2**60], [0, 0])}), {}, r"dimension 1152921504606846976 is over"),
    ("21-end-before-begin", js({"a": entry("U8", [1], [5, 4])}, b"\0"), {}, r"end 4 is before begin 5"),
    ("21-first-offset-not-zero", js({"a": entry("U8", [1], [1, 2])}, b"\0\0"), {}, r"gap of 1 bytes"),
    ("21-gap", js({"a": entry("U8", [1], [0, 1]), "b": entry("U8", [1], [2, 3])}, b"\0" * 3), {},
     r"tensor 'b'.*gap of 1 bytes"),
    ("21-overlap", js({"a": entry("U8", [4], [0, 4]), "b": entry("U8", [2], [2, 4])}, b"\0" * 4), {},
     r"overlaps earlier tensor data"),
    ("21-overlap-dos-many-views", js({f"t{i}": entry("U8", [4], [0, 4]) for i in range(50)}, b"\0" * 4), {},
     r"overlaps"),
    ("21-zero-size-inside-another", js({"a": entry("U8", [4], [0, 4]), "z": entry("U8", [0], [2, 2])}, b"\0" * 4),
     {}, r"tensor 'z'.*overlaps"),
    ("21-appended-polyglot", js({"a": entry("U8", [1], [0, 1])}, b"\0" + b"\x80\x02cos\nsystem\n."), {},
     r"14 bytes after the last tensor at offset 69 .*polyglot"),
    ("21-truncated-data", js({"a": entry("U8", [8], [0, 8])}, b"\0" * 3), {}, r"\(truncated\)"),
    ("21-negative-offset", js({"a": entry("U8", [1], [-1, 0])}, b"\0"), {}, r"two non-negative integers"),
    ("21-float-offset", js({"a": entry("U8", [1], [0, 1.0])}, b"\0"), {}, r"two non-negative integers"),
    ("21-string-offset", js({"a": entry("U8", [1], ["0", "1"])}, b"\0"), {}, r"two non-negative integers"),
    ("21-three-offsets", js({"a": entry("U8", [1], [0, 1, 2])}, b"\0"), {}, r"two non-negative integers"),
    ("21-offset-over-u64", js({"a": entry("U8", [1], [0, 2**64])}, b"\0"), {}, r"does not fit in 64 bits"),
    ("21-bool-dimension", js({"a": entry("U8", [True], [0, 1])}, b"\0"), {}, r"not a non-negative integer"),
    ("21-negative-dimension", js({"a": entry("U8", [-1], [0, 1])}, b"\0"), {}, r"not a non-negative integer"),
    ("21-shape-not-list", js({"a": entry("U8", "4")}, b"\0"), {}, r"shape must be a list"),  # type: ignore[arg-type]
    ("21-too-many-dims", js({"a": entry("U8", [1] * 9)}, b"\0"), {}, r"9 dimensions, over the limit of 8"),
    ("21-size-mismatch", js({"a": entry("F32", [2], [0, 4])}, b"\0" * 4), {}, r"hold 4 bytes but shape \[2\] of F32 needs 8"),
    ("21-missing-shape", js({"a": {"dtype": "U8", "data_offsets": [0, 1]}}, b"\0"), {}, r"missing 'shape'"),
    ("21-entry-not-object", js({"a": 5}), {}, r"entry is not an object"),
    ("21-huge-integer", hdr(b'{"a":{"dtype":"U8","shape":[' + b"9" * 5000 + b'],"data_offsets":[0,1]}}', b"\0"), {},
     r"invalid JSON"),
    ("21-nan-dimension", hdr(b'{"a":{"dtype":"U8","shape":[NaN],"data_offsets":[0,1]}}', b"\0"), {},
     r"invalid JSON: non-standard JSON constant NaN"),
    ("21-infinity-offset", hdr(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,Infinity]}}', b"\0"), {},
     r"non-standard JSON constant Infinity"),
    # 22: header bloat
    ("22-deep-nesting-in-shape", hdr(b'{"a":{"dtype":"U8","shape":' + deep(100_000) + b',"data_offsets":[0,1]}}'),
     {}, r"nested deeper than 3 levels"),
    ("22-deep-nesting-in-metadata", hdr(b'{"__metadata__":{"a":' + b'{"b":' * 50_000 + b"1" + b"}" * 50_001 + b"}"),
     {}, r"nested deeper"),
    ("22-unbalanced-brackets", hdr(b"{" + b"[" * 1_000_000), {}, r"invalid JSON: brackets do not pair up"),
    ("22-too-many-entries", bloat(20_000), {"max_tensors": 1000}, r"JSON objects, over the limit of 1002"),
    ("22-header-over-lowered-limit", bloat(2000), {"max_safetensors_header": 4096}, r"over the 4096-byte limit"),
]


_RUNNER = r"""
import json, resource, sys, time
limit = int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from qcheck.errors import InputError
from qcheck.limits import Limits
from qcheck.readers import load_checkpoint
start = time.perf_counter()
try:
    ck = load_checkpoint(sys.argv[1], Limits(**json.loads(sys.argv[2])))
    result = {"outcome": "ok", "tensors": len(ck.tensors)}
except InputError as exc:
    result = {"outcome": type(exc).__name__, "message": str(exc)}
result["seconds"] = round(time.perf_counter() - start, 3)
peak = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmPeak")]
result["vm_peak_kb"] = int(peak[0]) if peak else None
print(json.dumps(result))
"""


def run_bounded(path: Path, limits: dict | None = None) -> dict:
    """Run the reader in a fresh interpreter whose address space is capped at 200 MB."""
    proc = subprocess.run([sys.executable, "-c", _RUNNER, str(path), json.dumps(limits or {}), str(MEMORY_LIMIT)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{path.name}: {result['seconds']} s, VmPeak {result['vm_peak_kb']} kB")  # bench data, not asserted
    return result
