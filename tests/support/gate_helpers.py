"""Shared builders for the CI-gate and report tests: real model files, the test matrix, the CLI.

Models are real headers (safetensors written by tests/support/builders.py, GGUF by gguf-py through
tests/support/gguf_helpers.py); verdicts come from the small, stable test matrix in tests/data/matrices, where
tinycpp runs GGUF natively on cpu, fastserve runs BF16 natively and FP8 through Marlin on Ampere, and a
gpt-oss MXFP4 checkpoint has no sourced rule (unknown).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gguf.constants import GGMLQuantizationType as Q

from support import builders
from support.gguf_helpers import write_gguf

TEST_MATRIX = Path(__file__).resolve().parents[1] / "data" / "matrices"
SARIF_SCHEMA = Path(__file__).resolve().parents[1] / "data" / "sarif-schema-2.1.0.json"
PY = sys.executable
LFS_POINTER = ("version https://git-lfs.github.com/spec/v1\n"
               "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
               "size 4920000000\n")


def q4_gguf(path: Path) -> Path:
    """A real GGUF file (Q4_0 weights, F32 norms) written by gguf-py."""
    path.parent.mkdir(parents=True, exist_ok=True)
    [written] = write_gguf(path, [("token_embd.weight", (64, 32), Q.Q4_0), ("blk.0.attn_q.weight", (32, 32), Q.Q4_0),
                                  ("blk.0.attn_norm.weight", (32,), Q.F32)], file_type=2)
    return written


def bf16_dir(path: Path) -> Path:
    return builders.bf16_llama().write(path)


def fp8_dir(path: Path) -> Path:
    return builders.fp8_ct_channel().write(path)


def mxfp4_dir(path: Path) -> Path:
    return builders.gpt_oss_fixture().write(path)


def lfs_pointer(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(LFS_POINTER)
    return path


def malformed_safetensors(path: Path) -> Path:
    """A safetensors file whose header length runs past the end of the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((4096).to_bytes(8, "little") + b'{"a": {"dtype": "F16"')
    return path


def env(**extra: str) -> dict[str, str]:
    """The environment for a CLI subprocess: the test matrix, no GitHub variables leaking in."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    out["QCHECK_MATRICES"] = str(TEST_MATRIX)
    out.update(extra)
    return out


def qcheck(*args: str, cwd: Path | None = None, matrix: bool = True, **extra_env: str) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess."""
    e = env(**extra_env) if matrix else {k: v for k, v in env(**extra_env).items() if k != "QCHECK_MATRICES"}
    return subprocess.run([PY, "-m", "qcheck", *args], cwd=cwd, env=e, capture_output=True, text=True, timeout=300)
