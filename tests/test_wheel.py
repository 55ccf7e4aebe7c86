"""The wheel ships what a user needs and nothing of the tests: built offline with hatchling (in-process, the
project's own build backend), its file list is checked, and the unpacked wheel runs ``qcheck check`` on a
bundled example from a directory where no source checkout is importable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from support.contract import validate

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hatchling.builders.wheel import WheelBuilder

    out = tmp_path_factory.mktemp("dist")
    (built,) = list(WheelBuilder(str(ROOT)).build(directory=str(out), versions=["standard"]))
    return Path(built)


def _tracked(*folders: str) -> set[str]:
    files = subprocess.run(["git", "ls-files", *folders], cwd=ROOT, capture_output=True, text=True, check=True)
    return {line for line in files.stdout.splitlines() if line}


def test_wheel_contents(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    package = {n for n in names if ".dist-info/" not in n}
    # every module of the package, and no other Python module (the data folders are not modules)
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "qcheck").rglob("*.py")}
    assert {n for n in package if n.endswith(".py") and not n.startswith("qcheck/_data/")} == sources
    # the contract as files
    assert "qcheck/py.typed" in package
    schemas = {p.relative_to(ROOT).as_posix() for p in (ROOT / "qcheck" / "schemas").glob("*.schema.json")}
    assert schemas and schemas <= package
    # the data, under qcheck/_data/ where qcheck.data looks for it in an installation
    for folder in ("matrices", "evals"):
        tracked = {f"qcheck/_data/{f}" for f in _tracked(folder)}
        assert tracked and tracked <= package, sorted(tracked - package)[:5]
    assert "qcheck/_data/matrices/gpus.toml" in package
    # no test code, caches or checkout folders
    assert not [n for n in package if n.startswith(("tests/", "support/", "examples/", "bench/"))]
    assert "qcheck/packing.py" not in package and not [n for n in package if n.startswith("qcheck/testing/")]
    assert not [n for n in package if "__pycache__" in n or n.endswith(".pyc")]
    assert "qcheck = qcheck.cli:main" in entry_points


def test_unpacked_wheel_runs_check_on_its_own_data(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    code = ("import qcheck, sys; from qcheck.cli import main; print(qcheck.__file__, file=sys.stderr); "
            "main(sys.argv[1:])")
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("QCHECK_MATRICES", None)
    proc = subprocess.run([sys.executable, "-c", code, "check", str(ROOT / "examples" / "tiny-llama-fp8-block"),
                           "--engine", "vllm", "--gpu", "h100", "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.stderr.splitlines()[0] == str(site / "qcheck" / "__init__.py"), proc.stderr
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(proc.stdout)
    validate(data, "check")
    assert [(v["engine"], v["gpu"]) for v in data["verdicts"]] == [("vllm", "h100")]
    assert data["verdicts"][0]["status"] == "native"
