"""What ``qcheck inspect`` and ``qcheck check`` import on a local GGUF file: only what the request needs (no other
format's reader, no Hub client, no TOML parser once the data cache is warm, never gguf-py, numpy or rich). The
time these cost is measured by bench/bench_startup.py; here only the module lists are asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GGUF = ROOT / "examples" / "tiny-llama-Q4_0.gguf"

CHILD = """
import json, sys
from qcheck.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("MODULES=" + json.dumps(sorted(sys.modules)), file=sys.stderr)
"""

NEVER = ("gguf", "numpy", "torch", "transformers", "rich", "qcheck.readers.pickle", "qcheck.readers.safetensors",
         "qcheck.hub", "qcheck.eval", "tomllib", "tomli",
         # only when a file or cache entry is written, a name is misspelt, or another kind of result is rendered
         "tempfile", "shutil", "difflib", "qcheck.report.text_eval", "qcheck.report.text_gate",
         "qcheck.report.text_probe")


def modules_of(tmp_path: Path, *args: str) -> set[str]:
    env = {**os.environ, "QCHECK_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("QCHECK_MATRICES", None)
    env.pop("QCHECK_CACHE", None)  # the data cache on, as for a user
    for _ in range(2):  # the first run fills the data cache; the second is what a user's next run imports
        proc = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, env=env,
                              timeout=300)
    line = next(x for x in proc.stderr.splitlines() if x.startswith("MODULES="))
    return set(json.loads(line[len("MODULES="):]))


def loaded(modules: set[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


@pytest.mark.parametrize("args", [("inspect",), ("inspect", "--json"),
                                  ("check", "--engine", "vllm", "--gpu", "hopper")], ids=" ".join)
def test_a_local_gguf_imports_only_what_it_needs(tmp_path: Path, args: tuple[str, ...]) -> None:
    modules = modules_of(tmp_path, args[0], str(GGUF), *args[1:])
    assert "qcheck.readers.gguf" in modules
    # check's command asks the Hub target parser whether the path names branches (qcheck/cli/check_cmd.py)
    allowed = ("qcheck.hub",) if args[0] == "check" else ()
    assert [name for name in NEVER if loaded(modules, name) and name not in allowed] == []


def test_inspect_does_not_load_the_matrix(tmp_path: Path) -> None:
    """Inspect consults llama.cpp's architecture list (one data file), not the engine matrix, its validators and
    records, the matcher or the request."""
    modules = modules_of(tmp_path, "inspect", str(GGUF))
    assert "qcheck.matrix.architectures" in modules
    assert not {"qcheck.matrix.loader", "qcheck.matrix.conditions", "qcheck.matrix.gpus", "qcheck.matrix.schema",
                "qcheck.matrix.resolve", "qcheck.request"} & modules
