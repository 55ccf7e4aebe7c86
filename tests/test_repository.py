"""Repository hygiene the suite enforces: test modules never import each other (shared code lives in
``tests/support/``)."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in ``path``: import statements, and ``__import__("x")`` /
    ``importlib.import_module("x")`` with a literal name (a string import is still an import)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in ("__import__", "import_module"):
                out.append((node.lineno, node.args[0].value))
    return sorted(out)


def _test_module_imports(paths: list[Path]) -> list[str]:
    return [f"{path.parent.name}/{path.name}:{line} imports {name}" for path in paths
            for line, name in _imported_modules(path)
            if name.split(".")[-1].startswith("test_") or name == "tests" or name.startswith("tests.")]


def test_test_modules_never_import_each_other() -> None:
    assert _test_module_imports(sorted(TESTS.glob("test_*.py")) + sorted((TESTS / "support").glob("*.py"))) == []


def test_bench_scripts_import_no_test_module() -> None:
    """A bench script shares code with the suite through ``tests/support/``, never by importing a test module
    (which would run its module-level setup, and break when a test is renamed)."""
    scripts = sorted((TESTS.parent / "bench").glob("*.py"))
    assert scripts, "bench/ has scripts"
    assert _test_module_imports(scripts) == []


def test_the_import_guard_sees_every_form(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import test_a\nfrom tests.test_b import x\nfrom tests import support\n"
                   "m = __import__('test_c')\nimport importlib\nn = importlib.import_module('tests.test_d')\n"
                   "from support import builders\n")
    found = _test_module_imports([bad])
    assert [f.rsplit(" ", 1)[-1] for f in found] == ["test_a", "tests.test_b", "tests", "test_c", "tests.test_d"]


# ------------------------------------------------------------------------------------------ docs stand alone
ROOT = TESTS.parent
#: the research notes are copies of outside sources' facts; they cite other projects' paths, not ours
EXTERNAL_NOTES = ("docs/research/",)
#: bundled task data that is a snapshot of the repository's own texts (tests/support/long_context.py): the paths in
#: its prose are what those texts said then, not references to follow
SNAPSHOTS = ("evals/long_context.jsonl",)
#: a path of this repository named in a text (a file under one of our top-level folders)
OUR_PATH = re.compile(r"(?<![\w/.-])((?:qcheck|tests|examples|bench|evals|matrices|\.ci)/[\w./-]*[\w-]\.(?:md|py|toml|"
                      r"jsonl?|ya?ml|sh)|docs/(?:research/)?[\w-]+\.md)\b")
#: "owner/project: path" cites another project's file
OTHER_REPO = re.compile(r"[\w.-]+/[\w.-]+:\s*$")
#: places outside the repository that design-phase notes pointed at
OUTSIDE = re.compile(r"/work/shared|\.\./shared|shared/research|(?<![\w/.-])(?:research/)?(?:formats|peers|evals)\.md"
                     r"|(?<![\w/.-])research/(?:formats|matrix|evals|peers)\.md|DESIGN\.md")
SECTION_REF = re.compile(r"(docs/research/[\w-]+\.md|docs/design\.md)\s*§\s*(\d+(?:\.\d+)*)")


@functools.cache
def _tracked_texts() -> dict[str, str]:
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    texts = {}
    for name in listing.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file():
            continue
        try:
            texts[name] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary fixtures
    return texts


def test_no_file_points_outside_the_repository() -> None:
    """Code, data and docs cite the design notes and research in docs/ (design.md, research/*.md), never files
    that only existed beside the repository while it was written."""
    outside = []
    for name, text in _tracked_texts().items():
        if name.startswith(EXTERNAL_NOTES) or name == "tests/test_repository.py":
            continue
        for number, line in enumerate(text.splitlines(), 1):
            outside += [f"{name}:{number}: {m.group(0)!r}" for m in OUTSIDE.finditer(line)
                        if not line[:m.start()].endswith("docs/")]
    assert outside == []


def test_paths_named_in_the_repository_exist() -> None:
    """A file of this repository named in a doc, a comment or data exists (files move; references follow)."""
    missing = []
    for name, text in _tracked_texts().items():
        if name.startswith((*EXTERNAL_NOTES, *SNAPSHOTS, "tests/test_")):  # test code names made-up paths on purpose
            continue
        for number, line in enumerate(text.splitlines(), 1):
            missing += [f"{name}:{number}: {m.group(1)}" for m in OUR_PATH.finditer(line)
                        if not (ROOT / m.group(1)).exists() and not OTHER_REPO.search(line[:m.start()])]
    assert missing == []


def test_cited_sections_exist() -> None:
    """``docs/research/formats.md §4.8`` names a heading that exists in that file."""
    headings: dict[str, set[str]] = {}
    bad = []
    for name, text in _tracked_texts().items():
        for number, line in enumerate(text.splitlines(), 1):
            for m in SECTION_REF.finditer(line):
                doc, section = m.group(1), m.group(2)
                if doc not in headings:
                    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines() if (ROOT / doc).exists() else []
                    headings[doc] = {h.group(1) for h in (re.match(r"#+\s+(\d+(?:\.\d+)*)\b", x) for x in lines) if h}
                if section not in headings[doc]:
                    bad.append(f"{name}:{number}: {doc} §{section}")
    assert bad == []
