"""Digits qcheck reads from a file, a server or the environment are ASCII digits: '²' (U+00B2), which
``str.isdigit`` accepts and ``int`` refuses, was an internal error wherever ``isdigit`` guarded an ``int``
(issue #27: a ``Content-Length: \\xb2``; also a Git LFS pointer's size and ``COLUMNS``). Now one line, exit 2, or
the default."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

QCHECK = Path(__file__).resolve().parent.parent / "qcheck"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tiny-llama-gptq"


def _qcheck(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "qcheck", *args], capture_output=True, text=True, env=full, timeout=120)


@pytest.mark.parametrize("size", ["\u00b2", "\u0662", "12\u00b3", "-1", "1e3", ""])
def test_an_lfs_pointer_with_a_size_that_is_not_ascii_digits_is_one_line(size, tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_text(f"version https://git-lfs.github.com/spec/v1\noid sha256:{'0' * 64}\nsize {size}\n",
                    encoding="utf-8")
    proc = _qcheck("inspect", str(path))
    assert proc.returncode == 2 and "internal error" not in proc.stderr
    assert proc.stderr.strip() == f"qcheck: error: {path}: Git LFS pointer has no valid 'size <bytes>' line"


@pytest.mark.parametrize("columns", ["\u00b2", "\u0668\u0660", "99999999999999999999999"])
def test_a_columns_value_that_is_not_a_width_is_ignored(columns):
    proc = _qcheck("inspect", str(EXAMPLE), COLUMNS=columns)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith("LlamaForCausalLM 361.1K params")


@pytest.mark.parametrize(("raw", "workers"), [("\u00b2", 64), ("8", 8), ("100000", 256), ("0", 1), ("x", 64)])
def test_the_hub_worker_count_reads_only_ascii_digits(raw, workers, monkeypatch):
    from qcheck.hub.fileset import _workers

    monkeypatch.setenv("QCHECK_HUB_WORKERS", raw)
    assert _workers() == workers


def test_no_isdigit_guards_an_int_without_isascii():
    """``str.isdigit`` is only used together with ``str.isascii`` (or not at all) in qcheck/."""
    bad = [f"{p.relative_to(QCHECK)}:{n}" for p in sorted(QCHECK.rglob("*.py"))
           for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
           if re.search(r"\.isdigit\(\)", line) and ".isascii()" not in line]
    assert bad == []
