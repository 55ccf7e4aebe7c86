"""Malformed and hostile safetensors files (cases 17-22 of the hostile-input checklist in docs/security.md): every one is refused
with an InputError naming the problem, in bounded memory (a subprocess under RLIMIT_AS), and through
the CLI as exit code 2 with one stderr line and no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from qcheck.errors import InputError, LfsPointerError
from qcheck.limits import Limits
from qcheck.readers import load_checkpoint
from support.safetensors_cases import CASES, bloat, entry, js, run_bounded

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(params=CASES, ids=[c[0] for c in CASES])
def hostile_file(request, tmp_path):
    case_id, data, limits, pattern = request.param
    path = tmp_path / f"{case_id}.safetensors"
    path.write_bytes(data)
    return path, limits, pattern


def test_hostile_case_is_an_input_error(hostile_file):
    path, limits, pattern = hostile_file
    with pytest.raises(InputError) as info:
        load_checkpoint(str(path), Limits(**limits))
    assert str(path) in str(info.value)
    assert __import__("re").search(pattern, str(info.value)), str(info.value)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux")
def test_hostile_case_in_bounded_memory(hostile_file):
    path, limits, pattern = hostile_file
    result = run_bounded(path, limits)
    assert result["outcome"] == "InputError", result
    assert __import__("re").search(pattern, result["message"]), result


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux")
def test_100k_entry_header_parses_in_bounded_memory(tmp_path):
    path = tmp_path / "bloat.safetensors"
    path.write_bytes(bloat(100_000))
    result = run_bounded(path)
    assert result == {**result, "outcome": "ok", "tensors": 100_000}


def test_unknown_dtype_is_not_an_error(tmp_path):
    path = tmp_path / "new.safetensors"
    path.write_bytes(js({"a": entry("F2_E1M0", [3], [0, 1])}, b"\0"))
    ck = load_checkpoint(str(path))
    assert ck.tensors["a"].dtype == "F2_E1M0"
    assert any("unknown dtype 'F2_E1M0'" in w for w in ck.warnings)


def test_lfs_pointer_named_safetensors(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_text("version https://git-lfs.github.com/spec/v1\n"
                    "oid sha256:" + "ab" * 32 + "\nsize 4976698672\n")
    with pytest.raises(LfsPointerError, match=r"Git LFS pointer \(4976698672 bytes of weights not pulled\): "
                                              r"run git lfs pull"):
        load_checkpoint(str(path))


def test_empty_file(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"")
    with pytest.raises(InputError, match=r"empty file"):
        load_checkpoint(str(path))


def test_not_a_checkpoint_never_echoes_its_bytes(tmp_path):
    """An unknown file may be a secret a symlink pointed at: it is named, its bytes are never shown."""
    path = tmp_path / "notes.txt"
    path.write_bytes(b"hf_SECRETTOKENabcdefgh, not weights")
    with pytest.raises(InputError, match=r"not a checkpoint: it looks like text$") as info:
        load_checkpoint(str(path))
    assert "SECRET" not in str(info.value) and "68 66" not in str(info.value)
    path.write_bytes(b"\x89PNG\r\n\x1a\nrest")
    with pytest.raises(InputError, match=r"not a checkpoint: it looks like a PNG image$"):
        load_checkpoint(str(path))


NOT_SHOWN = "it is not a GGUF, safetensors, PyTorch zip or pickle file (contents not shown)"


@pytest.mark.parametrize("head, said", [
    (b'  {"a": 1}', "it looks like JSON or text"), (b"[1, 2]", "it looks like JSON or text"),
    (b"plain words ~", "it looks like text"), (b"a\tb", "it looks like text"), (b"a\nb", "it looks like text"),
    (b"a\rb", "it looks like text"), (b"a\x7fb", NOT_SHOWN), (b"a\x1fb", NOT_SHOWN), (b"a\x0bb", NOT_SHOWN),
    (b"a\x0eb", NOT_SHOWN), (b"abc\x00", NOT_SHOWN),
    (b"a" * 64 + b"\x00", "it looks like text"),  # only the first 64 bytes are looked at
])
def test_what_an_unknown_file_looks_like_at_the_edges_of_text(tmp_path, head, said):
    """Printable ASCII (32..126) plus tab, newline and carriage return is text; DEL, other control bytes and NUL
    are not; a leading { or [ (after spaces) is JSON."""
    path = tmp_path / "unknown.bin"
    path.write_bytes(head)
    with pytest.raises(InputError) as info:
        load_checkpoint(str(path))
    assert str(info.value).endswith(f"not a checkpoint: {said}")


def test_a_protocol_0_pickle_is_recognised_within_its_first_mebibyte(tmp_path):
    """Protocol 0/1 pickles have no magic: qcheck parses the first 1 MiB to STOP. One ending exactly at 1 MiB is a
    pickle; one byte longer is not recognised (named as text, never unpickled)."""
    def text_pickle(total: int) -> bytes:
        return b"S'" + b"a" * (total - 5) + b"'\n."

    path = tmp_path / "model.bin"
    path.write_bytes(text_pickle(1 << 20))
    assert load_checkpoint(str(path)).container == "pickle"
    path.write_bytes(text_pickle((1 << 20) + 1))
    with pytest.raises(InputError, match=r"not a checkpoint: it looks like text$"):
        load_checkpoint(str(path))


def test_a_header_of_exactly_max_safetensors_header_bytes_is_read(tmp_path):
    import struct

    import torch
    from safetensors.torch import save_file

    path = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(4)}, str(path))
    (n,) = struct.unpack("<Q", path.read_bytes()[:8])
    assert load_checkpoint(str(path), Limits(max_safetensors_header=n)).tensors["w"].shape == (4,)
    with pytest.raises(InputError, match=f"header length {n} is over the {n - 1}-byte limit"):
        load_checkpoint(str(path), Limits(max_safetensors_header=n - 1))


CLI_CASES = ["17-length-2^64-1", "18-not-utf8", "19-duplicate-tensor", "21-appended-polyglot",
             "22-deep-nesting-in-shape", "21-shape-product-overflow"]


@pytest.mark.parametrize("case_id", CLI_CASES)
def test_cli_inspect_exit_2_one_line(case_id, tmp_path):
    data = next(c[1] for c in CASES if c[0] == case_id)
    path = tmp_path / "model.safetensors"
    path.write_bytes(data)
    env = {**os.environ}
    env.pop("QCHECK_DEBUG", None)
    proc = subprocess.run([sys.executable, "-m", "qcheck", "inspect", str(path)], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("qcheck: error:") and str(path) in lines[0]
    assert proc.stdout == ""


def test_huge_names_are_cut_in_messages(tmp_path):
    path = tmp_path / "long.safetensors"
    path.write_bytes(js({"n" * 1_000_000: entry("F32", [2], [0, 4])}, b"\0" * 4))
    with pytest.raises(InputError, match=r"tensor 'nnnn+\.\.\.': data_offsets \[0, 4\] hold 4 bytes") as info:
        load_checkpoint(str(path))
    assert len(str(info.value)) < 500
