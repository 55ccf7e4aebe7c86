"""Pickle checkpoints are scanned statically and never executed; Git LFS pointers are recognised.

Every malicious fixture here is live: ``test_fixtures_are_live_exploits`` unpickles each one in a
throwaway subprocess and sees the marker file appear. The scanner then reads the same bytes and the
marker must NOT appear, while the dangerous global is listed.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest
import torch

from qcheck.errors import InputError, LfsPointerError
from qcheck.limits import Limits
from qcheck.readers import load_checkpoint, sniff
from qcheck.readers.lfs import is_lfs_pointer, parse_lfs_pointer
from qcheck.readers.pickle import LEGACY_MAGIC, WARNING, is_dangerous_global, scan_pickle
from qcheck.source import LocalFileSource
from support.pickles import (
    MALICIOUS,
    POINTER,
    builtin_exec,
    central_entry,
    system_via_global,
    system_via_stack_global_memo,
    torch_zip_with,
)

REPO = Path(__file__).resolve().parents[1]


def touch(marker: Path) -> str:
    return f"touch {marker}"


def test_fixtures_are_live_exploits(tmp_path):
    """Control: each payload really runs code when unpickled (in a throwaway interpreter)."""
    for name, (build, _) in MALICIOUS.items():
        marker = tmp_path / f"ran-{name}"
        payload = tmp_path / f"{name}.pkl"
        payload.write_bytes(build(touch(marker)))
        subprocess.run([sys.executable, "-c", "import pickle,sys; pickle.loads(open(sys.argv[1],'rb').read())",
                        str(payload)], check=True, timeout=180)
        assert marker.exists(), name


@pytest.mark.parametrize("name", sorted(MALICIOUS))
def test_raw_malicious_pickle_is_listed_never_run(tmp_path, name):
    build, expected = MALICIOUS[name]
    marker = tmp_path / "ran"
    path = tmp_path / "weights.txt"  # recognised by content, whatever the extension
    path.write_bytes(build(touch(marker)))
    ck = load_checkpoint(str(path))
    assert ck.container == "pickle"
    assert expected in ck.pickle_globals
    assert ck.warnings[0] == WARNING
    assert any(f"pickle would import {expected}" in w for w in ck.warnings)
    assert not marker.exists()
    scan = scan_pickle(LocalFileSource(path))
    assert scan.format == "raw" and scan.dangerous == [expected] and scan.complete


def test_builtins_rename_and_reduce_of_real_object(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "a.pkl"
    path.write_bytes(builtin_exec(f"open({str(marker)!r}, 'w')"))
    assert scan_pickle(LocalFileSource(path)).dangerous == ["builtins.exec"]

    class Evil:
        def __reduce__(self):
            return (os.system, (touch(marker),))

    import pickle

    for protocol in range(0, pickle.HIGHEST_PROTOCOL + 1):
        path.write_bytes(pickle.dumps(Evil(), protocol=protocol))
        scan = scan_pickle(LocalFileSource(path))
        assert scan.dangerous == [f"{os.system.__module__}.system"], protocol
    assert not marker.exists()


def test_unresolvable_stack_global_and_extension_codes_are_dangerous(tmp_path):
    path = tmp_path / "x.pkl"
    path.write_bytes(b"\x80\x04NN\x93.")
    assert scan_pickle(LocalFileSource(path)).dangerous == ["<unresolved STACK_GLOBAL>"]
    path.write_bytes(b"\x80\x02\x82\x07.")
    assert scan_pickle(LocalFileSource(path)).dangerous == ["<copyreg extension 7>"]


@pytest.mark.parametrize("legacy", [False, True])
def test_real_torch_save_files(tmp_path, legacy):
    path = tmp_path / "pytorch_model.bin"
    state = {"w": torch.zeros(3, 4, dtype=torch.bfloat16), "b": torch.ones(4), "step": torch.tensor(3)}
    torch.save(state, path, _use_new_zipfile_serialization=not legacy)
    scan = scan_pickle(LocalFileSource(path))
    assert scan.format == ("legacy" if legacy else "zip")
    assert set(scan.globals) == {"torch._utils._rebuild_tensor_v2", "collections.OrderedDict",
                                 "torch.BFloat16Storage", "torch.FloatStorage", "torch.LongStorage"}
    assert scan.dangerous == [] and scan.problems == [] and scan.complete
    ck = load_checkpoint(str(path))
    assert ck.container == "pickle"
    assert ck.warnings == [WARNING]
    assert [(f.name, f.kind, f.size_bytes) for f in ck.files] == [("pytorch_model.bin", "pickle",
                                                                   path.stat().st_size)]


def test_malicious_data_pkl_in_torch_zip(tmp_path):
    marker = tmp_path / "ran"
    path = torch_zip_with(tmp_path, system_via_stack_global_memo(touch(marker)))
    ck = load_checkpoint(str(path))
    assert ck.container == "pickle"
    assert "os.system" in ck.pickle_globals
    assert not marker.exists()


def test_zip_crc_mismatch_is_a_finding_and_still_scanned(tmp_path):
    path = torch_zip_with(tmp_path, system_via_global("true"))
    raw = bytearray(path.read_bytes())
    cd = central_entry(bytes(raw), b"orig/data.pkl")
    struct.pack_into("<I", raw, cd + 16, zlib.crc32(b"something else"))
    path.write_bytes(bytes(raw))
    with zipfile.ZipFile(path) as z, pytest.raises(zipfile.BadZipFile):
        z.read("orig/data.pkl")  # what a zipfile-based scanner hits
    scan = scan_pickle(LocalFileSource(path))
    assert scan.dangerous == ["os.system"]
    assert any("CRC-32 mismatch" in p for p in scan.problems)


def test_zip_encrypted_flag_is_a_finding_and_still_scanned(tmp_path):
    path = torch_zip_with(tmp_path, system_via_global("true"))
    raw = bytearray(path.read_bytes())
    cd = central_entry(bytes(raw), b"orig/data.pkl")
    flags = struct.unpack_from("<H", raw, cd + 8)[0]
    struct.pack_into("<H", raw, cd + 8, flags | 1)
    path.write_bytes(bytes(raw))
    scan = scan_pickle(LocalFileSource(path))
    assert scan.dangerous == ["os.system"]
    assert any("encrypted flag set" in p for p in scan.problems)
    assert any("local header and central directory disagree" in p for p in scan.problems)


def test_zip_local_name_differs_from_central_directory(tmp_path):
    path = torch_zip_with(tmp_path, system_via_global("true"))
    raw = path.read_bytes()
    first_local = raw.index(b"orig/data.pkl")  # the local header's copy comes first
    raw = raw[:first_local] + b"orig/data.pkX" + raw[first_local + 13:]
    path.write_bytes(raw)
    scan = scan_pickle(LocalFileSource(path))
    assert scan.dangerous == ["os.system"]
    assert any("local header names b'orig/data.pkX'" in p for p in scan.problems)


def test_protocol0_pickle_hidden_in_text_entry(tmp_path):
    benign = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, benign)
    with zipfile.ZipFile(io.BytesIO(benign.getvalue())) as z:
        good_pkl = z.read("archive/data.pkl")
    path = torch_zip_with(tmp_path, good_pkl, extra={"orig/notes.txt": system_via_global("true")})
    scan = scan_pickle(LocalFileSource(path))
    assert "os.system" in scan.dangerous
    assert any("entry 'orig/notes.txt' is not a .pkl but holds pickle code importing os.system" in p
               for p in scan.problems)


def test_zip_bomb_is_refused_without_inflating(tmp_path):
    bomb = b"(" + b"N" * (8 * 1024 * 1024) + b"t."  # 8 MB that deflates to a few kB
    path = torch_zip_with(tmp_path, bomb, compress=zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 200_000
    scan = scan_pickle(LocalFileSource(path), Limits(max_pickle_bytes=1024 * 1024))
    assert not scan.complete
    assert any("uncompressed size 8388611 is over the 1048576-byte limit" in p for p in scan.problems)
    # and when the directory lies about the size, inflation stops at the limit
    raw = bytearray(path.read_bytes())
    cd = central_entry(bytes(raw), b"orig/data.pkl")
    struct.pack_into("<I", raw, cd + 24, 100)
    path.write_bytes(bytes(raw))
    scan = scan_pickle(LocalFileSource(path), Limits(max_pickle_bytes=1024 * 1024))
    assert any("inflates past 1048576 bytes" in p for p in scan.problems)


def test_zip_without_data_pkl_is_not_a_checkpoint(tmp_path):
    path = tmp_path / "x.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("readme.txt", "hi")
    with pytest.raises(InputError, match=r"zip archive without data.pkl"):
        load_checkpoint(str(path))


def test_truncated_zip_is_an_input_error(tmp_path):
    path = torch_zip_with(tmp_path, system_via_global("true"))
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(InputError, match=r"unreadable zip archive"):
        load_checkpoint(str(path))


def test_legacy_format_with_malicious_object(tmp_path):
    marker = tmp_path / "ran"
    import pickle

    stream = (LEGACY_MAGIC + pickle.dumps(1001, protocol=2) + pickle.dumps({"little_endian": True}, protocol=2)
              + system_via_stack_global_memo(touch(marker)) + pickle.dumps(["0"], protocol=2) + b"\0" * 64)
    path = tmp_path / "old.pth"
    path.write_bytes(stream)
    scan = scan_pickle(LocalFileSource(path))
    assert scan.format == "legacy"
    assert scan.dangerous == ["os.system"]
    assert not marker.exists()


def test_truncated_pickle_is_reported_incomplete(tmp_path):
    path = tmp_path / "t.pkl"
    path.write_bytes(system_via_global("true")[:-3])
    ck = load_checkpoint(str(path)) if sniff(path.read_bytes()[:64]) == "pickle" else None
    scan = scan_pickle(LocalFileSource(path))
    assert not scan.complete
    assert scan.dangerous == ["os.system"]  # what was seen before the cut is still listed
    assert ck is None or any("scan incomplete" in w for w in ck.warnings)


def test_oversized_pickle_is_reported_incomplete(tmp_path):
    path = tmp_path / "big.pkl"
    path.write_bytes(b"\x80\x02(" + b"K\x01" * 5000 + b"tcos\nsystem\n.")
    scan = scan_pickle(LocalFileSource(path), Limits(max_pickle_bytes=1000))
    assert not scan.complete
    assert any("longer than the 1000-byte scan limit" in p for p in scan.problems)


@pytest.mark.parametrize(("name", "dangerous"), [
    ("torch._utils._rebuild_tensor_v2", False), ("torch._utils._rebuild_parameter", False),
    ("torch.BFloat16Storage", False), ("torch.float8_e4m3fn", False), ("torch.bfloat16", False),
    ("torch.storage.UntypedStorage", False), ("collections.OrderedDict", False), ("torch.Size", False),
    ("os.system", True), ("posix.system", True), ("subprocess.Popen", True), ("builtins.eval", True),
    ("builtins.exec", True), ("importlib.import_module", True), ("marshal.loads", True), ("runpy._run_code", True),
    ("torch._utils._rebuild_tensor_v2.__globals__", True), ("torch.load", True), ("collections.deque", True),
    ("torch.storage._load_from_bytes", True), ("numpy.core.multiarray._reconstruct", True),
])
def test_allowlist(name, dangerous):
    assert is_dangerous_global(name) is dangerous


# --- Git LFS pointers --------------------------------------------------------------------------------


def test_lfs_pointer_parse():
    assert is_lfs_pointer(POINTER.encode())
    assert is_lfs_pointer(POINTER.replace("\n", "\r\n").encode())
    assert not is_lfs_pointer(b"version 2\n")
    pointer = parse_lfs_pointer(POINTER.encode())
    assert pointer.size == 16060522496
    assert pointer.oid.startswith("sha256:4d7a2146")


@pytest.mark.parametrize("name", ["model.gguf", "model.safetensors", "pytorch_model.bin", "weights"])
def test_lfs_pointer_file_is_reported(tmp_path, name):
    path = tmp_path / name
    path.write_text(POINTER)
    with pytest.raises(LfsPointerError) as info:
        load_checkpoint(str(path))
    assert str(info.value) == (f"{path}: Git LFS pointer (16060522496 bytes of weights not pulled): "
                               "run git lfs pull")


def test_lfs_pointer_shard_in_directory(tmp_path):
    (tmp_path / "model.safetensors").write_text(POINTER)
    with pytest.raises(LfsPointerError, match=r"model.safetensors: Git LFS pointer"):
        load_checkpoint(str(tmp_path))


@pytest.mark.parametrize(("text", "pattern"), [
    (POINTER.replace("oid sha256:4d7a", "oid md5:4d7a"), r"no valid 'oid sha256"),
    (POINTER.replace("size 16060522496", "size -1"), r"no valid 'size"),
    (POINTER.replace("size 16060522496\n", "") + "x" * 2000, r"pointers are under 1024 bytes"),
    (POINTER + "garbage-without-space\n", r"line 4 is not 'key value'"),
])
def test_malformed_lfs_pointer(tmp_path, text, pattern):
    path = tmp_path / "model.gguf"
    path.write_text(text)
    with pytest.raises(InputError, match=pattern) as info:
        load_checkpoint(str(path))
    assert not isinstance(info.value, LfsPointerError)


@pytest.mark.parametrize("kind", ["pickle", "lfs"])
def test_cli_inspect_pickle_and_pointer_exit_2(tmp_path, kind):
    marker = tmp_path / "ran"
    path = tmp_path / "pytorch_model.bin"
    if kind == "pickle":
        path.write_bytes(system_via_stack_global_memo(touch(marker)))
    else:
        path.write_text(POINTER)
    env = {k: v for k, v in os.environ.items() if k != "QCHECK_DEBUG"}
    proc = subprocess.run([sys.executable, "-m", "qcheck", "inspect", str(path)], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert ("os.system" in lines[0] or "pickle" in lines[0]) if kind == "pickle" else "git lfs pull" in lines[0]
    assert not marker.exists()


# --- zip structure bounds ----------------------------------------------------------------------------


def test_zip64_records_are_followed(tmp_path):
    path = tmp_path / "z64.pt"
    with zipfile.ZipFile(path, "w") as z:
        with z.open("archive/data.pkl", "w", force_zip64=True) as f:
            f.write(system_via_global("true"))
        z.writestr("archive/version", "3\n")
    scan = scan_pickle(LocalFileSource(path))
    assert scan.dangerous == ["os.system"] and scan.complete


def test_central_directory_over_the_limit_is_refused(tmp_path):
    path = torch_zip_with(tmp_path, system_via_global("true"))
    with pytest.raises(InputError, match=r"zip central directory of \d+ bytes is over the 100-byte limit"):
        load_checkpoint(str(path), Limits(max_pickle_bytes=100))


def test_entry_count_lie_is_refused(tmp_path):
    path = torch_zip_with(tmp_path, system_via_global("true"))
    raw = bytearray(path.read_bytes())
    eocd = raw.rindex(b"PK\x05\x06")
    struct.pack_into("<HH", raw, eocd + 8, 60000, 60000)
    path.write_bytes(bytes(raw))
    with pytest.raises(InputError, match=r"end record says 60000 entries, the directory holds 7"):
        load_checkpoint(str(path))


def test_empty_zip_is_not_a_checkpoint(tmp_path):
    path = tmp_path / "empty.pt"
    with zipfile.ZipFile(path, "w"):
        pass
    assert path.read_bytes()[:4] == b"PK\x05\x06"
    with pytest.raises(InputError, match=r"zip archive without data.pkl"):
        load_checkpoint(str(path))


def test_opcode_budget(tmp_path, monkeypatch):
    import qcheck.readers.pickle as pickle_reader

    monkeypatch.setattr(pickle_reader, "MAX_OPS", 1000)
    path = tmp_path / "spin.pkl"
    path.write_bytes(b"\x80\x02" + b"N0" * 5000 + b"cos\nsystem\n.")
    scan = scan_pickle(LocalFileSource(path))
    assert not scan.complete
    assert any("more than 1000 opcodes" in p for p in scan.problems)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux")
@pytest.mark.parametrize("case", ["mark-flood", "bomb", "big-binbytes"])
def test_hostile_pickles_in_bounded_memory(tmp_path, case):
    from support.safetensors_cases import run_bounded

    if case == "mark-flood":  # a million MARKs: the simulated stack is capped
        data = b"\x80\x02" + b"(" * 2_000_000 + b"."
    elif case == "bomb":
        data = torch_zip_with(tmp_path, b"(" + b"N" * (32 * 1024 * 1024) + b"t.",
                              compress=zipfile.ZIP_DEFLATED).read_bytes()
    else:  # a BINBYTES8 length far past the end of the file
        data = b"\x80\x04\x8e" + struct.pack("<Q", 2**62) + b"x" * 100
    path = tmp_path / f"{case}.bin"
    path.write_bytes(data)
    result = run_bounded(path)
    assert result["outcome"] == "ok", result  # a pickle checkpoint record, never an unpickle
    assert result["tensors"] == 0


@pytest.mark.parametrize("name", ["model-Q4_K_M.gguf", "pytorch_model.bin"])
def test_lfs_pointer_gguf_or_pickle_in_directory(tmp_path, name):
    (tmp_path / name).write_text(POINTER)
    with pytest.raises(LfsPointerError, match=rf"{name}: Git LFS pointer \(16060522496 bytes"):
        load_checkpoint(str(tmp_path))


def test_legacy_stream_is_read_in_growing_pieces(tmp_path):
    """Pickles of ~2.5 MB in front of 40 MB of storage bytes: read 1 MB, then 4 MB, never the storage."""
    import pickle

    big_keys = [f"storage-{i:07d}" for i in range(100_000)]  # ~2.5 MB of pickled strings
    stream = (LEGACY_MAGIC + pickle.dumps(1001, protocol=2) + pickle.dumps({"little_endian": True}, protocol=2)
              + system_via_global("true") + pickle.dumps(big_keys, protocol=2))
    path = tmp_path / "legacy.bin"
    path.write_bytes(stream + b"\0" * (40 << 20))

    class Counting(LocalFileSource):
        largest = 0

        def read_at(self, offset, length):
            Counting.largest = max(Counting.largest, length)
            return super().read_at(offset, length)

    scan = scan_pickle(Counting(path))
    assert scan.format == "legacy" and scan.complete, scan.problems
    assert scan.dangerous == ["os.system"]
    assert 1 << 20 < len(stream) < 4 << 20
    assert Counting.largest == 4 << 20


# --- fuzzing: mutated torch files never raise anything but InputError ---------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _torch_bytes(legacy: bool) -> bytes:
    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(2, 3, dtype=torch.float16), "n": torch.tensor(1)}, buffer,
               _use_new_zipfile_serialization=not legacy)
    return buffer.getvalue()


SEEDS = {"zip": _torch_bytes(False), "legacy": _torch_bytes(True), "raw": system_via_stack_global_memo("true")}


class _Bytes:
    def __init__(self, data: bytes):
        self.data, self.name, self.size = data, "fuzz.bin", len(data)

    def read_at(self, offset: int, length: int) -> bytes:
        return self.data[offset:offset + length]

    def close(self) -> None:
        pass


@st.composite
def mutated_pickles(draw) -> bytes:
    data = bytearray(SEEDS[draw(st.sampled_from(sorted(SEEDS)))])
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "u32"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[pos] = draw(st.integers(0, 255))
        elif kind == "cut":
            del data[pos:pos + draw(st.integers(1, 64))]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif len(data) >= pos + 4:  # a size/offset/count field set to an extreme
            data[pos:pos + 4] = struct.pack("<I", draw(st.sampled_from([0, 1, 0xFFFF, 0xFFFFFFFF, len(data)])))
    return bytes(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_pickles())
def test_mutated_pickles_scan_without_crashing(data):
    scan = scan_pickle(_Bytes(data), Limits(max_pickle_bytes=1 << 20))
    assert scan.format in ("zip", "legacy", "raw")
    assert all(isinstance(g, str) for g in scan.globals)
    assert set(scan.dangerous) <= set(scan.globals)
    if "os.system" in scan.globals:
        assert "os.system" in scan.dangerous


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_pickles(), st.sampled_from(["pytorch_model.bin", "model.pt", "weights.dat"]))
def test_mutated_pickles_load_or_input_error(data, name):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        try:
            ck = load_checkpoint(str(path), Limits(max_pickle_bytes=1 << 20))
        except InputError:
            return
        assert ck.container in ("pickle", "safetensors", "gguf")
        if ck.container == "pickle":
            assert ck.warnings[0] == WARNING
