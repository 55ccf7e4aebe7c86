"""Hostile GGUF files (cases 1-16 of the hostile-input checklist in docs/security.md), built byte by byte in
``tests/support/gguf_cases.py``.

Every case must end in ``InputError`` with a message that names the problem and where it is
(an offset, a key or a tensor), within bounded memory: the cases are also read in a child process
whose address space is capped at 200 MB (``RLIMIT_AS``), and each goes through the CLI in-process (exit 2,
one line on stderr, no traceback; tests/test_hostile_checklist.py runs them through a capped ``python -m
qcheck``). Timeouts are hang guards only, not speed assertions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gguf.constants import GGUFValueType as V

from qcheck.errors import InputError
from qcheck.limits import Limits
from qcheck.readers.gguf import load_gguf, read_gguf_file
from qcheck.source import LocalFileSet
from support.gguf_cases import CASES, VALID, Case
from support.gguf_helpers import Q, RawGGUF, kv_array, kv_scalar, tensor_info, valid_raw

MEMORY_CAP = 200 * 1024 * 1024
HANG_GUARD_S = 180  # a kill switch for a hang, far above the ~1 s a case takes even on a loaded machine
ROOT = Path(__file__).resolve().parents[1]


def test_cases_are_distinct_and_the_valid_base_reads(tmp_path: Path) -> None:
    assert len({c.id for c in CASES}) == len(CASES)
    path = tmp_path / "valid.gguf"
    path.write_bytes(VALID)
    header = read_gguf_file(path)
    assert [t.name for t in header.tensors] == ["t0.weight", "t1.weight"]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_reader_rejects(case: Case, tmp_path: Path) -> None:
    path = tmp_path / f"{case.id}.gguf"
    path.write_bytes(case.data)
    with pytest.raises(InputError) as info:
        read_gguf_file(path, Limits().replace(**case.limits))
    message = str(info.value)
    assert message.startswith(str(path) + ": ")
    assert _matches(case.pattern, message), message
    assert "\n" not in message


def _matches(pattern: str, message: str) -> bool:
    import re

    return re.search(pattern, message) is not None


CHILD = r"""
import json, resource, sys
cap = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
from qcheck.errors import InputError
from qcheck.limits import Limits
from qcheck.readers.gguf import read_gguf_file
for path, limits in json.loads(sys.argv[2]):
    try:
        read_gguf_file(path, Limits().replace(**limits))
    except InputError as exc:
        print("INPUT_ERROR", " ".join(str(exc).split()), flush=True)
    except MemoryError:
        print("MEMORY_ERROR", path, flush=True)
    else:
        print("ACCEPTED", path, flush=True)
"""


def test_bounded_memory(tmp_path: Path) -> None:
    """Under a 200 MB address-space cap every case still ends in InputError (no MemoryError, no crash).

    One child process reads all the cases in turn: its peak covers each case's peak.
    """
    jobs = []
    for case in CASES:
        path = tmp_path / f"{case.id}.gguf"
        path.write_bytes(case.data)
        jobs.append((str(path), case.limits))
    out = subprocess.run([sys.executable, "-c", CHILD, str(MEMORY_CAP), json.dumps(jobs)], capture_output=True,
                         text=True, timeout=HANG_GUARD_S, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == len(CASES), out.stdout + out.stderr
    for case, line in zip(CASES, lines, strict=True):
        assert line.startswith("INPUT_ERROR"), (case.id, line)
        assert _matches(case.pattern, line), (case.id, line)


def test_memory_cap_is_real(tmp_path: Path) -> None:
    """Control: the same child does hit the cap when asked to hold more than 200 MB, so the check can fail."""
    path = tmp_path / "v.gguf"
    raw = valid_raw(0)
    raw.kvs.append(kv_array("tokenizer.ggml.token_type", V.INT32, [1] * 3_000_000))
    path.write_bytes(raw.build())
    code = CHILD.replace("read_gguf_file(path, Limits().replace(**limits))",
                         "h = read_gguf_file(path, materialize=('tokenizer.ggml.token_type',)); "
                         "keep = [h.metadata['tokenizer.ggml.token_type'] * 10]")
    out = subprocess.run([sys.executable, "-c", code, str(MEMORY_CAP), json.dumps([[str(path), {}]])],
                         capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=ROOT)
    assert out.stdout.startswith("MEMORY_ERROR"), out.stdout + out.stderr


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """``qcheck inspect TARGET`` in-process (the memory cap is test_bounded_memory's job, and the hostile-input
    checklist runs the same cases through a capped ``python -m qcheck``): (exit code, stdout, stderr)."""
    from qcheck.cli import main

    def run(target: Path, case_limits: dict[str, int] | None = None) -> subprocess.CompletedProcess[str]:
        for name in [k for k in os.environ if k.startswith("QCHECK_")]:
            monkeypatch.delenv(name)
        for name, value in (case_limits or {}).items():
            monkeypatch.setenv(f"QCHECK_LIMIT_{name.upper()}", str(value))
        with pytest.raises(SystemExit) as exc:
            main(["inspect", str(target)])
        out = capsys.readouterr()
        return subprocess.CompletedProcess(["qcheck", "inspect", str(target)], exc.value.code, out.out, out.err)

    return run


def _assert_cli_rejects(out: subprocess.CompletedProcess[str], pattern: str) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr
    assert lines[0].startswith("qcheck: error: ")
    assert _matches(pattern, lines[0]), lines[0]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cli_rejects(case: Case, tmp_path: Path, cli) -> None:
    path = tmp_path / f"{case.id}.gguf"
    path.write_bytes(case.data)
    _assert_cli_rejects(cli(path, case.limits), case.cli_pattern or case.pattern)


# ------------------------------------------------------------------------------ 16. split sets
def _split_set(directory: Path, names: list[str], split_nos: list[int], count: int) -> None:
    for i, (name, no) in enumerate(zip(names, split_nos, strict=True)):
        raw = RawGGUF(kvs=[kv_scalar("general.architecture", V.STRING, "llama"),
                           kv_scalar("split.no", V.UINT16, no), kv_scalar("split.count", V.UINT16, count),
                           kv_scalar("split.tensors.count", V.INT32, count)])
        raw.tensors = [tensor_info(f"t{i}", [8, 4], Q.F32, 0)]
        raw.data = b"\0" * 128
        (directory / name).write_bytes(raw.build())


SPLIT_CASES = {
    "missing-shard": (["s-00001-of-00003.gguf", "s-00003-of-00003.gguf"], [0, 2], 3,
                      r"split GGUF of 3 shards is incomplete: missing s-00002-of-00003.gguf"),
    "wrong-split-no": (["s-00001-of-00002.gguf", "s-00002-of-00002.gguf"], [0, 0], 2,
                       r"s-00002-of-00002.gguf: split.no is 0, expected 1 for shard 2 of 2"),
    "wrong-split-count": (["s-00001-of-00002.gguf", "s-00002-of-00002.gguf"], [0, 1], 5,
                          r"s-00001-of-00002.gguf: split.count is 5, but the file name says 2 shards"),
}


@pytest.mark.parametrize("name", list(SPLIT_CASES))
def test_split_set_rejects(name: str, tmp_path: Path, cli) -> None:
    names, nos, count, pattern = SPLIT_CASES[name]
    _split_set(tmp_path, names, nos, count)
    with pytest.raises(InputError) as info:
        load_gguf(LocalFileSet(tmp_path), names[0])
    assert _matches(pattern, str(info.value)), str(info.value)
    _assert_cli_rejects(cli(tmp_path / names[0]), pattern)
