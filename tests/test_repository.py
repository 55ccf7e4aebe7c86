"""Repository hygiene the suite enforces: test modules never import each other (shared code lives in
``tests/support/``)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_test_modules_never_import_each_other() -> None:
    offenders = []
    for path in sorted(TESTS.glob("test_*.py")) + sorted((TESTS / "support").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}:{node.lineno} imports {n}" for n in names
                          if n.split(".")[-1].startswith("test_") or n.startswith("tests.")]
    assert offenders == []
