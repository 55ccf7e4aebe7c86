"""The distribution name and every documented install line: `qcheck` on PyPI is an unrelated project, so no
line may install it; qcheck installs from a checkout or a git URL as `qcheck-llm`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from qcheck.errors import DependencyError
from qcheck.install import DISTRIBUTION, install_hint

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "action.yml", *sorted((ROOT / "docs").glob("*.md"))]


def test_distribution_name_is_not_the_unrelated_pypi_project():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION == "qcheck-llm"
    assert project["scripts"] == {"qcheck": "qcheck.cli:main"}  # the command keeps its name


def _pip_lines():
    for doc in DOCS:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            for m in re.finditer(r"pip install ([^`\n]*)", line):
                yield f"{doc.name}:{n}", m.group(1)


def test_documented_install_lines_never_name_pypi_qcheck():
    lines = list(_pip_lines())
    assert len(lines) > 5
    for where, args in lines:
        args = args.split(" #", 1)[0]
        for word in args.split():
            name = re.split(r"[\[=<>]", word.strip("'\""), maxsplit=1)[0]
            assert name.lower() != "qcheck", (where, args)  # PyPI's qcheck is another project
            if name == DISTRIBUTION:
                assert "@ git+" in args, (where, args)  # not published yet: only a git URL works


def test_hint_names_this_checkout_and_the_extra():
    assert install_hint("eval") == f"pip install '{ROOT}[eval]'"
    assert install_hint() == f"pip install '{ROOT}'"
    message = str(DependencyError("torch", "eval", "qcheck eval"))
    assert message == f"qcheck eval needs torch; install qcheck's 'eval' extra: pip install '{ROOT}[eval]'"
