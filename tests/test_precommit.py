"""The pre-commit hook: ``qcheck hook`` directly, then through ``pre-commit try-repo`` itself.

try-repo installs the hook the way users get it (``language: python``: pip installs this repository into
a fresh virtualenv), from a temporary git repository holding the current working tree's package files
(try-repo on the checkout itself would only see committed and tracked files). The repository under test
holds a real GGUF file, a real safetensors file, a malformed safetensors file, a Git LFS pointer and a
safetensors index.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support import builders
from support.gate_helpers import (
    PY,
    bf16_dir,
    env,
    fp8_dir,
    lfs_pointer,
    malformed_safetensors,
    q4_gguf,
    qcheck,
)

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_FILES = ("qcheck", "matrices", "evals", "pyproject.toml", "README.md", ".pre-commit-hooks.yaml")


def test_hook_exit_codes_and_lfs_pointers(tmp_path):
    good = q4_gguf(tmp_path / "good.gguf")
    pointer = lfs_pointer(tmp_path / "pointer.safetensors")
    bad = malformed_safetensors(tmp_path / "bad.safetensors")
    fp8 = fp8_dir(tmp_path / "fp8") / "model.safetensors"
    proc = qcheck("hook", str(good), str(pointer), str(fp8), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1] == f"{pointer}: skipped: Git LFS pointer (4920000000 bytes of weights not pulled)"
    assert lines[0].startswith(f"{good}: ") and lines[0].endswith(": ok")
    assert lines[-1] == "qcheck hook: 2 ok, 0 failing, 0 not judged, 1 skipped (LFS pointers)"
    proc = qcheck("hook", str(good), str(bad), str(pointer), cwd=tmp_path)
    assert proc.returncode == 2
    assert f"{bad}: error: offset 0: header length 4096 runs past the end" in proc.stdout
    # with targets: the FP8 checkpoint cannot run on tinycpp -> 1; the GGUF can
    proc = qcheck("hook", "--engine", "tinycpp", "--gpu", "cpu", str(good), str(fp8), cwd=tmp_path)
    assert proc.returncode == 1
    assert f"{fp8}: " in proc.stdout and "  unsupported on tinycpp b10488 [cpu] x cpu" in proc.stdout
    proc = qcheck("hook", "--engine", "nope", str(good), cwd=tmp_path)
    assert proc.returncode == 2 and "unknown engine" in proc.stderr


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.email=test@example.org", "-c", "user.name=test", "-c", "commit.gpgsign=false",
                    *args], cwd=cwd, check=True, capture_output=True)


def _hook_repo(dest: Path) -> Path:
    """A git repository with the package files of the current working tree, committed."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--",
                             *PACKAGE_FILES], cwd=ROOT, check=True, capture_output=True).stdout
    names = [n for n in listed.decode().split("\0") if n]
    assert ".pre-commit-hooks.yaml" in names and "pyproject.toml" in names
    for name in names:
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    _git("init", "-q", cwd=dest)
    _git("add", "-A", cwd=dest)
    _git("commit", "-q", "-m", "hook under test", cwd=dest)
    return dest


@pytest.fixture(scope="module")
def precommit(tmp_path_factory):
    pytest.importorskip("pre_commit")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    base = tmp_path_factory.mktemp("precommit")
    hook_repo = _hook_repo(base / "hook-repo")
    home = base / "pre-commit-home"

    def run(repo: Path, hook: str, *files: str) -> subprocess.CompletedProcess:
        e = env(PRE_COMMIT_HOME=str(home), PRE_COMMIT_COLOR="never")
        e.pop("QCHECK_MATRICES")
        e.pop("VIRTUAL_ENV", None)
        args = ["--files", *files] if files else ["--all-files"]
        return subprocess.run([PY, "-m", "pre_commit", "try-repo", str(hook_repo), hook, "--verbose", *args],
                              cwd=repo, env=e, capture_output=True, text=True, timeout=900)

    return run


@pytest.mark.slow
# pip installs the hook into a fresh virtualenv: 75 s alone here, 137 s in a full run on 2 busy cores, more with a
# cold pip cache; the suite's 240 s default would turn a slow machine into a failure (900 s: the hang guard of
# try-repo itself)
@pytest.mark.timeout(900)
def test_pre_commit_try_repo(precommit, tmp_path):
    repo = tmp_path / "models-repo"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    q4_gguf(repo / "good.gguf")
    (repo / "weights").mkdir()
    shutil.copy(bf16_dir(tmp_path / "bf16") / "model.safetensors", repo / "weights" / "model.safetensors")
    lfs_pointer(repo / "big.safetensors")
    malformed_safetensors(repo / "bad.safetensors")
    (repo / "notes.txt").write_text("not a model")
    _git("add", "-A", cwd=repo)

    proc = precommit(repo, "qcheck")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "qcheck (GGUF / safetensors headers)" in out and "Failed" in out
    assert "bad.safetensors: error: offset 0: header length 4096 runs past the end of the" in out
    assert "big.safetensors: skipped: Git LFS pointer (4920000000 bytes of weights not pulled)" in out
    assert "good.gguf: " in out and "weights/model.safetensors: " in out
    assert "notes.txt" not in out  # files: only *.gguf / *.safetensors reach the hook
    assert "qcheck hook: 2 ok, 0 failing, 1 not judged, 1 skipped (LFS pointers)" in out

    _git("rm", "-q", "--cached", "bad.safetensors", cwd=repo)
    os.remove(repo / "bad.safetensors")
    proc = precommit(repo, "qcheck")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Passed" in proc.stdout

    # the index hook: an index naming a shard that is an LFS pointer is skipped, not malformed
    shard = builders.bf16_llama()
    shard.write_sharded(repo / "sharded", shards=2)
    lfs_pointer(repo / "sharded" / "model-00002-of-00002.safetensors")
    _git("add", "-A", cwd=repo)
    proc = precommit(repo, "qcheck-index", "sharded/model.safetensors.index.json")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "sharded/model.safetensors.index.json: skipped: " in out and "Git LFS pointer" in out
    # and a real, complete sharded model passes the index hook
    (repo / "sharded" / "model-00002-of-00002.safetensors").unlink()
    shard.write_sharded(repo / "sharded", shards=2)
    json.loads((repo / "sharded" / "model.safetensors.index.json").read_text())
    _git("add", "-A", cwd=repo)
    proc = precommit(repo, "qcheck-index", "sharded/model.safetensors.index.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sharded/model.safetensors.index.json: " in proc.stdout and ": ok" in proc.stdout
