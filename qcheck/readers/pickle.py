"""Pickle checkpoints (``pytorch_model.bin``, ``.pt``, ``.pth``, ``.ckpt``): recognised, never loaded.

Unpickling runs code, and ``torch.load(weights_only=True)`` has had RCE bypasses (CVE-2025-32434), so
qcheck never calls ``pickle.load``/``torch.load``. Instead it walks the opcode stream with
``pickletools.genops`` (a parser, not an interpreter) over a bounded buffer, simulates the stack just
enough to resolve ``STACK_GLOBAL`` operands (including ones fetched from the memo, the trick that
evaded picklescan, GHSA-9gvj-pp9x-gcfr), and lists every global the pickle would import. Anything
outside the handful that PyTorch's own tensor rebuild needs is flagged as dangerous.

Torch's zip format is read with our own bounded zip reader, not ``zipfile``: PyTorch ignores CRC and
the encrypted flag bit, so a scanner that lets ``zipfile`` reject such entries can be bypassed; here
they are read anyway and reported as findings. The central directory is parsed streaming, keeping
only the records worth scanning, so a directory claiming millions of entries costs no memory.
"""

from __future__ import annotations

import io
import pickletools
import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Literal

from qcheck.errors import InputError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.model import Checkpoint, SourceFile
from qcheck.source import ByteSource

PickleFormat = Literal["zip", "legacy", "raw"]

ZIP_MAGIC = b"PK\x03\x04"
EMPTY_ZIP_MAGIC = b"PK\x05\x06"
#: torch.serialization's legacy format begins with a pickled LONG1 magic number 0x1950a86a20f9469cfc6c
LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19\x2e"
#: the legacy format is 5 pickles (magic, protocol, sys_info, object, storage keys), then raw storage bytes
LEGACY_PICKLES = 5
#: extensions that usually hold pickles in model repositories
PICKLE_EXTENSIONS = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
WARNING = "pickle checkpoint: not statically verifiable, never unpickled"

MAX_STACK = 1_000_000
#: first read of a legacy/raw pickle stream; grows x4 while the walk runs off its end
FIRST_PICKLE_READ = 1 << 20
#: opcodes walked per file, all its pickles, re-reads and zip entries together (~0.5-1 M/s): a state dict
#: needs ~32 per tensor, so this covers ~30k tensors and caps a hostile stream of cheap opcodes near a
#: second. (It was per pickle: a 200 KB zip of 20 deflated ``data.pkl`` entries then cost minutes.)
MAX_OPS = 1_000_000
#: opcodes ``looks_like_pickle`` walks looking for STOP before it calls a stream that parses a pickle
SNIFF_OPS = 65_536
MAX_GLOBALS = 10_000
#: zip entries that are not ``*.pkl`` but small enough to check for hidden pickle code; also the bytes
#: of all such entries of one file together (real torch side entries are a few bytes each)
MAX_SIDE_ENTRY = 1_000_000

_STORAGE = re.compile(r"[A-Za-z0-9_]*Storage")
_REBUILD = re.compile(r"_rebuild_[A-Za-z0-9_]+")
_DTYPE = re.compile(r"(b?float\d+(_e\d+m\d+[a-z0-9_]*)?|float4_e2m1fn_x2|u?int\d+|complex\d+|bool|q?u?int\d+(x\d+)?"
                    r"|bits\d+(x\d+)?|half|double|long|short|cfloat|cdouble)")
#: module renames the unpickler applies to protocol 0-2 pickles (``_compat_pickle.IMPORT_MAPPING``, the ones that matter)
_COMPAT = {"__builtin__": "builtins", "copy_reg": "copyreg", "cPickle": "pickle", "commands": "subprocess"}

_STRING_OPS = {"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
               "BINUNICODE8"}
_GET_OPS = {"GET", "BINGET", "LONG_BINGET"}
_PUT_OPS = {"PUT", "BINPUT", "LONG_BINPUT"}


class _Budget:
    """Opcodes left for one file's scan (shared by every walk of it)."""

    __slots__ = ("ops",)

    def __init__(self) -> None:
        self.ops = MAX_OPS


class _Unknown:
    __slots__ = ()


_UNKNOWN = _Unknown()
_MARK = pickletools.markobject


@dataclass
class PickleScan:
    """What a static walk of a pickle checkpoint found."""

    format: PickleFormat
    globals: list[str] = field(default_factory=list)  # "module.name", in order of first use
    dangerous: list[str] = field(default_factory=list)  # the globals outside the allowlist
    problems: list[str] = field(default_factory=list)  # findings: CRC/flag mismatches, truncation, hidden code
    complete: bool = True  # False when part of the stream could not be walked

    @property
    def safe_looking(self) -> bool:
        """Only allowlisted globals and a complete walk. Still never a reason to load it."""
        return self.complete and not self.dangerous


def is_dangerous_global(qualified: str) -> bool:
    """True unless ``module.name`` is one of the globals a plain PyTorch state dict needs."""
    module, _, name = qualified.rpartition(".")
    if module == "collections":
        return name != "OrderedDict"
    if module == "torch._utils":
        return not _REBUILD.fullmatch(name)
    if module == "torch":
        return not (_STORAGE.fullmatch(name) or _DTYPE.fullmatch(name) or name in ("Size", "device"))
    if module == "torch.storage":
        return name not in ("UntypedStorage", "TypedStorage")
    return True


def looks_like_pickle(head: bytes) -> bool:
    """A raw pickle by content: a PROTO opcode (protocol 2-5), or protocol 0/1 opcodes that parse to STOP."""
    if len(head) >= 2 and head[0] == 0x80:
        return head[1] <= 5
    if not head or chr(head[0]) not in _FIRST_OPCODES:
        return False
    try:
        for count, (opcode, _arg, _pos) in enumerate(pickletools.genops(io.BytesIO(head))):
            if opcode.name == "STOP" or count >= SNIFF_OPS:  # that many well-formed opcodes: a pickle
                return True
    except Exception:
        return False
    return False


_FIRST_OPCODES = {op.code for op in pickletools.opcodes if op.proto <= 1 and op.name != "STOP"}


def scan_pickle(source: ByteSource, limits: Limits = DEFAULT_LIMITS) -> PickleScan:
    """Statically scan a pickle checkpoint (torch zip, torch legacy, or a raw pickle); never unpickles.

    A legacy file is a few small pickles in front of gigabytes of raw storage bytes, so the stream is
    read in growing pieces (1 MB, 4 MB, ... up to ``max_pickle_bytes``) until the walk no longer runs
    off the end: a remote file costs what its pickles weigh, not the limit.
    """
    head = source.read_at(0, 16)
    if head.startswith((ZIP_MAGIC, EMPTY_ZIP_MAGIC)):
        return _scan_zip(source, limits)
    legacy = head.startswith(LEGACY_MAGIC)
    budget = _Budget()
    want = min(FIRST_PICKLE_READ, limits.max_pickle_bytes)
    while True:
        data = source.read_at(0, want)
        at_end = len(data) < want or (source.size is not None and len(data) >= source.size)
        scan = PickleScan(format="legacy" if legacy else "raw")
        ran_out = _walk_stream(data, scan, max_pickles=LEGACY_PICKLES if legacy else 16, where=source.name,
                               strict=legacy, budget=budget)
        if not ran_out or at_end:
            return scan
        if want >= limits.max_pickle_bytes:
            scan.problems.append(f"{source.name}: pickle longer than the {want}-byte scan limit "
                                 "(limit max_pickle_bytes); the rest was not checked")
            scan.complete = False
            return scan
        want = min(want * 4, limits.max_pickle_bytes)


# --- opcode walk -------------------------------------------------------------------------------------


def _walk_stream(data: bytes, scan: PickleScan, *, max_pickles: int, where: str, strict: bool,
                 budget: _Budget | None = None) -> bool:
    """Walk consecutive pickles in ``data``. ``strict``: the first ``max_pickles`` must all be there.

    Returns True when a walk stopped at the end of ``data`` (more bytes might complete it).
    """
    stream = io.BytesIO(data)
    budget = budget or _Budget()
    for index in range(max_pickles):
        if stream.tell() >= len(data):
            if strict:
                scan.problems.append(f"{where}: stream ends after {index} of {max_pickles} pickles")
                scan.complete = False
            return strict
        start = stream.tell()
        ok = _walk_one(stream, scan, where=f"{where} (pickle {index + 1} at byte {start})", quiet=index > 0
                       and not strict, budget=budget)
        if not ok:
            if index == 0 or strict:
                scan.complete = False
            return stream.tell() >= len(data) - 1
    return False


def _walk_one(stream: io.BytesIO, scan: PickleScan, *, where: str, quiet: bool, budget: _Budget) -> bool:
    """Walk one pickle to its STOP, recording globals. False if it could not be walked to the end."""
    stack: list[Any] = []
    memo: dict[int, Any] = {}
    memo_count = 0
    found: list[str] = []
    arg: Any  # the opcode's argument: an int for the memo opcodes, a str for GLOBAL
    try:
        for opcode, arg, _pos in pickletools.genops(stream):
            if budget.ops <= 0:
                raise ValueError(f"more than {MAX_OPS} opcodes in this file; the rest was not walked")
            budget.ops -= 1
            name = opcode.name
            if name in ("GLOBAL", "INST"):
                module, _, attr = str(arg).partition(" ")
                found.append(_qualify(module, attr))
            elif name == "STACK_GLOBAL":
                top = stack.pop() if stack else _UNKNOWN
                below = stack.pop() if stack else _UNKNOWN
                if isinstance(below, str) and isinstance(top, str):
                    found.append(_qualify(below, top))
                else:
                    found.append("<unresolved STACK_GLOBAL>")
                stack.append(_UNKNOWN)
                continue
            elif name in ("EXT1", "EXT2", "EXT4"):
                found.append(f"<copyreg extension {arg}>")
            if name in _PUT_OPS:
                memo[int(arg)] = stack[-1] if stack and isinstance(stack[-1], str) else _UNKNOWN
                continue
            if name == "MEMOIZE":
                memo[memo_count] = stack[-1] if stack and isinstance(stack[-1], str) else _UNKNOWN
                memo_count += 1
                continue
            if name in _GET_OPS:
                stack.append(memo.get(int(arg), _UNKNOWN))
                continue
            _simulate(opcode, stack)
            if name in _STRING_OPS and stack:
                stack[-1] = arg if isinstance(arg, str) else _UNKNOWN
            if len(stack) > MAX_STACK:
                raise ValueError(f"pickle stack deeper than {MAX_STACK}")
            if name == "STOP":
                _record(scan, found)
                return True
    except Exception as exc:  # genops raises ValueError and friends on malformed streams
        _record(scan, found)
        if not quiet:
            scan.problems.append(f"{where}: cannot walk the pickle: {_short(exc)}")
        return False
    _record(scan, found)
    if not quiet:
        scan.problems.append(f"{where}: pickle ends without STOP")
    return False


def _simulate(opcode: pickletools.OpcodeInfo, stack: list[Any]) -> None:
    """Apply an opcode's stack effect (as ``pickletools.dis`` does) with unknown values."""
    before, after = opcode.stack_before, opcode.stack_after
    numtopop = len(before)
    if _MARK in before or (opcode.name == "POP" and stack and stack[-1] is _MARK):
        while stack and stack[-1] is not _MARK:
            stack.pop()
        if not stack:
            raise ValueError(f"{opcode.name} without a MARK")
        stack.pop()
        numtopop = before.index(_MARK) if _MARK in before else 0
    if numtopop:
        if len(stack) < numtopop:
            raise ValueError(f"{opcode.name} pops more than the stack holds")
        del stack[-numtopop:]
    for item in after:
        stack.append(_MARK if item is _MARK else _UNKNOWN)


def _qualify(module: str, name: str) -> str:
    module = _COMPAT.get(module, module)
    return f"{module}.{name}"


def _record(scan: PickleScan, found: list[str]) -> None:
    for qualified in found:
        if qualified in scan.globals:
            continue
        if len(scan.globals) >= MAX_GLOBALS:
            scan.problems.append(f"more than {MAX_GLOBALS} distinct globals; the rest not listed")
            scan.complete = False
            return
        scan.globals.append(qualified)
        if is_dangerous_global(qualified):
            scan.dangerous.append(qualified)


# --- torch zip format ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZipEntry:
    """One central-directory record (the fields PyTorch's reader and ours use)."""

    filename: str
    orig_filename: str
    flag_bits: int
    compress_type: int
    CRC: int
    compress_size: int
    file_size: int
    header_offset: int


ZIP_STORED = 0
ZIP_DEFLATED = 8
_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"
_CENTRAL = b"PK\x01\x02"
_MAX_COMMENT = 65535
#: side entries (not ``*.pkl``, not tensor storage) kept for the hidden-pickle check
MAX_SIDE_ENTRIES = 10_000


def zip_pickle_entries(source: ByteSource, limits: Limits) -> list[ZipEntry]:
    """The central directory's ``*.pkl`` entries (empty when the zip holds none); InputError if unreadable."""
    entries, _total = read_central_directory(source, limits)
    return [e for e in entries if e.filename.endswith(".pkl")]


def read_central_directory(source: ByteSource, limits: Limits) -> tuple[list[ZipEntry], int]:
    """Entries worth scanning (``*.pkl`` and small side entries) and the total entry count.

    Our own bounded parser rather than ``zipfile``: it never holds more than the directory bytes
    (capped by ``max_pickle_bytes``) and keeps only the records it needs, so a directory claiming
    millions of entries costs a count, not millions of objects.
    """
    name = source.name
    size = source.size
    if size is None:
        raise InputError("zip archive of unknown size cannot be scanned", path=name)
    tail_len = min(size, 22 + _MAX_COMMENT)
    tail = source.read_at(size - tail_len, tail_len)
    pos = tail.rfind(_EOCD)
    while pos >= 0 and pos + 22 <= len(tail):
        comment_len = struct.unpack_from("<H", tail, pos + 20)[0]
        if pos + 22 + comment_len == len(tail):
            break
        pos = tail.rfind(_EOCD, 0, pos)
    if pos < 0 or pos + 22 > len(tail):
        raise InputError("unreadable zip archive: no end-of-central-directory record", path=name)
    _sig, _disk, _cd_disk, _n_disk, total, cd_size, cd_offset, _clen = struct.unpack_from("<IHHHHIIH", tail, pos)
    eocd_at = size - tail_len + pos
    if 0xFFFF in (total,) or 0xFFFFFFFF in (cd_size, cd_offset):
        locator = source.read_at(eocd_at - 20, 20) if eocd_at >= 20 else b""
        if len(locator) == 20 and locator[:4] == _EOCD64_LOCATOR:
            (rec_at,) = struct.unpack_from("<Q", locator, 8)
            record = source.read_at(rec_at, 56)
            if len(record) < 56 or record[:4] != _EOCD64:
                raise InputError(f"unreadable zip archive: bad zip64 end record at offset {rec_at}", path=name)
            total, cd_size, cd_offset = struct.unpack_from("<QQQ", record, 32)
    if cd_size > limits.max_pickle_bytes:
        raise InputError(f"zip central directory of {cd_size} bytes is over the {limits.max_pickle_bytes}-byte "
                         "limit (limit max_pickle_bytes)", path=name)
    if cd_offset + cd_size > eocd_at:
        raise InputError(f"unreadable zip archive: central directory [{cd_offset}, {cd_offset + cd_size}) "
                         f"overlaps the end record at {eocd_at}", path=name)
    directory = source.read_at(cd_offset, cd_size)
    if len(directory) < cd_size:
        raise InputError("unreadable zip archive: central directory truncated", path=name)
    entries: list[ZipEntry] = []
    side = 0
    count = 0
    at = 0
    while at < len(directory):
        if directory[at:at + 4] != _CENTRAL or at + 46 > len(directory):
            raise InputError(f"unreadable zip archive: bad central directory record at offset {cd_offset + at}",
                             path=name)
        (_s, _made, _need, flags, method, _t, _d, crc, csize, usize, n_len, x_len, c_len, _disk2, _ia, _ea,
         offset) = struct.unpack_from("<IHHHHHHIIIHHHHHII", directory, at)
        raw_name = directory[at + 46:at + 46 + n_len]
        extra = directory[at + 46 + n_len:at + 46 + n_len + x_len]
        at += 46 + n_len + x_len + c_len
        if at > len(directory):
            raise InputError("unreadable zip archive: central directory record runs past its end", path=name)
        count += 1
        filename = raw_name.decode("utf-8" if flags & 0x800 else "cp437", "replace")
        usize, csize, offset = _zip64_sizes(extra, usize, csize, offset)
        is_pickle = filename.endswith(".pkl")
        is_side = not is_pickle and "/data/" not in f"/{filename}" and usize <= MAX_SIDE_ENTRY
        if is_side:
            side += 1
        if is_pickle or (is_side and side <= MAX_SIDE_ENTRIES):
            entries.append(ZipEntry(filename.replace("\\", "/"), filename, flags, method, crc, csize, usize, offset))
    if total not in (count, count & 0xFFFF):
        raise InputError(f"unreadable zip archive: end record says {total} entries, the directory holds {count}",
                         path=name)
    return entries, count


def _zip64_sizes(extra: bytes, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    """Apply a zip64 extended-information extra field (id 1): 8-byte values for the fields set to 0xFFFFFFFF."""
    at = 0
    while at + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, at)
        body = extra[at + 4:at + 4 + length]
        at += 4 + length
        if tag != 1:
            continue
        values = [struct.unpack_from("<Q", body, i)[0] for i in range(0, len(body) - 7, 8)]
        if usize == 0xFFFFFFFF and values:
            usize = values.pop(0)
        if csize == 0xFFFFFFFF and values:
            csize = values.pop(0)
        if offset == 0xFFFFFFFF and values:
            offset = values.pop(0)
    return usize, csize, offset


def _scan_zip(source: ByteSource, limits: Limits) -> PickleScan:
    scan = PickleScan(format="zip")
    try:
        infos, _total = read_central_directory(source, limits)
    except InputError as exc:
        scan.problems.append(str(exc))
        scan.complete = False
        return scan
    pickles = [i for i in infos if i.filename.endswith(".pkl")]
    if not any(i.filename == "data.pkl" or i.filename.endswith("/data.pkl") for i in pickles):
        scan.problems.append(f"{source.name}: zip archive has no data.pkl entry (not a PyTorch checkpoint)")
    seen: set[str] = set()
    for info in infos:
        if info.filename in seen:
            scan.problems.append(f"{source.name}: zip entry {info.filename!r} appears twice (readers disagree "
                                 "on which one is used)")
        seen.add(info.filename)
    budget = _Budget()
    pickle_bytes = limits.max_pickle_bytes  # for all the *.pkl entries together
    for done, info in enumerate(pickles):
        if budget.ops <= 0:  # nothing more can be walked: do not read or inflate the rest
            scan.problems.append(f"{source.name}: {len(pickles) - done} more .pkl entries not scanned (opcode "
                                 "budget spent)")
            scan.complete = False
            break
        if info.file_size > pickle_bytes and pickle_bytes < limits.max_pickle_bytes:
            scan.problems.append(f"{source.name}:{info.filename}: not scanned: the pickles of this file hold more "
                                 f"than {limits.max_pickle_bytes} bytes in all (limit max_pickle_bytes)")
            scan.complete = False
            continue
        data = _read_entry(source, info, scan, pickle_bytes)
        if data is None:
            scan.complete = False
            continue
        pickle_bytes -= len(data)
        _walk_stream(data, scan, max_pickles=1, where=f"{source.name}:{info.filename}", strict=True, budget=budget)
    side_bytes = MAX_SIDE_ENTRY  # for all the side entries together
    unchecked = 0
    for info in infos:
        if info.filename.endswith(".pkl"):
            continue
        if info.file_size > side_bytes:
            unchecked += 1
            continue
        side_bytes -= info.file_size  # the declared size bounds the read and the inflation
        data = _read_entry(source, info, PickleScan(format="zip"), info.file_size)
        if data and looks_like_pickle(data):
            hidden = PickleScan(format="zip")
            _walk_stream(data, hidden, max_pickles=1, where=info.filename, strict=False, budget=budget)
            if hidden.globals:
                scan.problems.append(f"{source.name}: entry {info.filename!r} is not a .pkl but holds pickle "
                                     f"code importing {', '.join(hidden.globals[:5])}")
                _record(scan, hidden.globals)
    if unchecked:
        scan.problems.append(f"{source.name}: {unchecked} zip entries not checked for hidden pickle code (over "
                             f"the {MAX_SIDE_ENTRY}-byte budget for side entries)")
        scan.complete = False
    return scan


def _read_entry(source: ByteSource, info: ZipEntry, scan: PickleScan, max_bytes: int) -> bytes | None:
    """The uncompressed bytes of one entry, read the way PyTorch does (ignoring CRC and flags), bounded."""
    where = f"{source.name}:{info.filename}"
    if info.file_size > max_bytes:
        scan.problems.append(f"{where}: uncompressed size {info.file_size} is over the {max_bytes}-byte limit "
                             "(limit max_pickle_bytes); not scanned")
        return None
    if info.flag_bits & 0x1:
        scan.problems.append(f"{where}: encrypted flag set (PyTorch ignores it; scanners that honour it skip "
                             "the entry)")
    local = source.read_at(info.header_offset, 30)
    if len(local) < 30 or local[:4] != ZIP_MAGIC:
        scan.problems.append(f"{where}: no local file header at offset {info.header_offset}")
        return None
    (_sig, _ver, flags, method, _t, _d, _crc, _csize, _usize, name_len,
     extra_len) = struct.unpack("<IHHHHHIIIHH", local)
    local_name = source.read_at(info.header_offset + 30, name_len)
    cd_name = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace")
    if local_name != cd_name:
        scan.problems.append(f"{where}: local header names {local_name[:80]!r}, the central directory "
                             f"{info.orig_filename!r}")
    if method != info.compress_type or (flags & 0x1) != (info.flag_bits & 0x1):
        scan.problems.append(f"{where}: local header and central directory disagree (method {method} vs "
                             f"{info.compress_type}, flags {flags:#x} vs {info.flag_bits:#x})")
    start = info.header_offset + 30 + name_len + extra_len
    if info.compress_type == ZIP_STORED:
        if info.compress_size != info.file_size:
            scan.problems.append(f"{where}: stored entry with compressed size {info.compress_size} != size "
                                 f"{info.file_size}")
        data = source.read_at(start, min(info.compress_size, max_bytes))
        if len(data) < min(info.compress_size, max_bytes):
            scan.problems.append(f"{where}: entry data runs past the end of the file")
    elif info.compress_type == ZIP_DEFLATED:
        inflated = _inflate(source, start, info.compress_size, max_bytes, scan, where)
        if inflated is None:
            return None
        data = inflated
    else:
        scan.problems.append(f"{where}: compression method {info.compress_type} not scanned")
        return None
    if len(data) != info.file_size:
        scan.problems.append(f"{where}: {len(data)} bytes of data, the directory says {info.file_size}")
    if zlib.crc32(data) != info.CRC:
        scan.problems.append(f"{where}: CRC-32 mismatch (PyTorch does not check it; zipfile-based scanners "
                             "fail on it)")
    return data


def _inflate(source: ByteSource, start: int, compressed: int, max_bytes: int, scan: PickleScan,
             where: str) -> bytes | None:
    inflater = zlib.decompressobj(-15)
    out = bytearray()
    position, remaining = start, compressed
    try:
        while remaining > 0 and not inflater.eof:
            chunk = source.read_at(position, min(remaining, 1 << 20))
            if not chunk:
                break
            position += len(chunk)
            remaining -= len(chunk)
            out += inflater.decompress(chunk, max_bytes + 1 - len(out))
            if len(out) > max_bytes or inflater.unconsumed_tail:
                scan.problems.append(f"{where}: inflates past {max_bytes} bytes (a zip bomb?); not scanned")
                return None
    except zlib.error as exc:
        scan.problems.append(f"{where}: corrupt deflate data: {exc}")
        return None
    return bytes(out)


# --- checkpoint record -------------------------------------------------------------------------------


def pickle_checkpoint(path: str, scans: list[tuple[str, int | None, PickleScan]],
                      configs: dict[str, Any] | None = None,
                      extra_files: list[SourceFile] | None = None) -> Checkpoint:
    """The Checkpoint record for pickle files: globals and findings, no tensors (nothing was loaded)."""
    checkpoint = Checkpoint(path=path, container="pickle", configs=dict(configs or {}))
    checkpoint.warnings.append(WARNING)
    for name, size, scan in scans:
        checkpoint.files.append(SourceFile(name=name, size_bytes=size, kind="pickle"))
        for qualified in scan.globals:
            if qualified not in checkpoint.pickle_globals:
                checkpoint.pickle_globals.append(qualified)
        if scan.dangerous:
            checkpoint.warnings.append(f"{name}: pickle would import {', '.join(scan.dangerous[:10])}"
                                       f"{' ...' if len(scan.dangerous) > 10 else ''} (code execution on load)")
        checkpoint.warnings.extend(scan.problems)
        if not scan.complete:
            checkpoint.warnings.append(f"{name}: scan incomplete; globals listed may not be all")
    checkpoint.files.extend(extra_files or [])
    return checkpoint


def _short(exc: BaseException, limit: int = 160) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
