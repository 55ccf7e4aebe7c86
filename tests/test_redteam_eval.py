"""The red team's eval and input findings (issue #34) as regression tests through the real CLI.

Each test builds the hostile input the finding describes (a GGUF that aborts llama.cpp's loader, a forged cache
entry, a ReDoS pattern, a FIFO where a file should be ...) and asserts the specific outcome: the exit code, the one
error line, the figure that must not change, the file that must not be read.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.eval_helpers import task_file, tiny_gguf, tiny_reference
from support.gate_helpers import qcheck

pytestmark = pytest.mark.slow


def _errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("qcheck: error:")]


def _one_error(done, *needles: str) -> str:
    """The run ended with exit 2 and exactly one error line holding every needle, no traceback."""
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    lines = _errors(done.stderr)
    assert len(lines) == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# --------------------------------------------------------------------- 1. hostile GGUFs never reach llama.cpp
def _aborting_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Q8_0 GGUF that llama.cpp's loader aborts on (``llama.expert_count`` 100000 > LLAMA_MAX_EXPERTS: a
    GGML_ASSERT, SIGABRT) and whose ``general.name`` holds a 0xff byte, which qcheck refuses."""
    import gguf

    from support.gguf_export import export_gguf

    add_vocab_size = gguf.GGUFWriter.add_vocab_size

    def with_experts(self, size):
        add_vocab_size(self, size)
        self.add_uint32("llama.expert_count", 100_000)

    monkeypatch.setattr(gguf.GGUFWriter, "add_vocab_size", with_experts)
    path = export_gguf(tiny_reference(), tmp_path / "hostile.gguf", "Q8_0")
    data = bytearray(path.read_bytes())
    key = data.index(b"general.name")
    data[key + len(b"general.name") + 4 + 8] = 0xFF  # first byte of the value (after its type and length)
    path.write_bytes(bytes(data))
    return path


@pytest.mark.llamacpp
def test_a_gguf_qcheck_refuses_never_reaches_llama_cpp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("llama_cpp")
    bad = _aborting_gguf(tmp_path, monkeypatch)
    inspected = qcheck("inspect", str(bad))
    assert inspected.returncode == 2 and "not valid UTF-8" in inspected.stderr
    done = qcheck("eval", "-r", str(tiny_reference()), "-c", f"t=llamacpp:{bad}", "--tasks", str(task_file()),
                  "--max-items", "1", "--cache-dir", str(tmp_path / "cache"), "--json")
    # had llama.cpp's loader seen the file, the process would have died of SIGABRT (return code -6), not exit 2
    _one_error(done, "general.name", "not valid UTF-8")
    assert done.stdout == ""


def test_a_vetted_gguf_changed_before_the_load_is_refused(tmp_path: Path) -> None:
    from qcheck.errors import InputError
    from qcheck.eval.native import still_vetted, vet

    path = tmp_path / "m.gguf"
    path.write_bytes(tiny_gguf("Q8_0").read_bytes())
    vetted = vet(str(path))
    assert still_vetted(vetted) == str(path)
    with open(path, "r+b") as fh:  # rewritten in place after the inspection: another inode state
        fh.seek(0, os.SEEK_END)
        fh.write(b"\0")
    with pytest.raises(InputError, match="changed after qcheck inspected it"):
        still_vetted(vetted)
    fifo = tmp_path / "fifo.gguf"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        vet(str(fifo))


#: calls that hand a GGUF to a loader qcheck does not control: llama-cpp-python, transformers' GGUF path (gguf-py's
#: GGUFReader, which memory-maps the file and trusts its counts)
NATIVE_LOADERS = ("llama_cpp.Llama(", ".Llama(model_path", "gguf_file=", "GGUFReader(", "load_gguf_checkpoint(")


def test_every_module_that_calls_a_gguf_loader_vets_the_file_first() -> None:
    package = Path(__file__).resolve().parents[1] / "qcheck"
    callers = {}
    for path in sorted(package.rglob("*.py")):
        code = "\n".join(line for line in path.read_text(encoding="utf-8").splitlines()
                         if not line.lstrip().startswith("#"))
        hits = [needle for needle in NATIVE_LOADERS if needle in code]
        if hits:
            callers[path.relative_to(package).as_posix()] = ("still_vetted(" in code, hits)
    assert "eval/runners/llamacpp.py" in callers  # the scan finds the one known caller
    assert {name: hits for name, (vetted, hits) in callers.items() if not vetted} == {}
