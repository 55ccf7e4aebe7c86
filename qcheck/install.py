"""How to install qcheck (or one of its extras) from where this copy came from.

qcheck is not on PyPI yet, and the name ``qcheck`` there belongs to an unrelated project, so a hint such as
``pip install 'qcheck[eval]'`` would fail (Python >= 3.10) or install the wrong package. The distribution is
named ``qcheck-llm``; until it is published, an install hint names the checkout or URL this copy was
installed from (pip records it in ``direct_url.json``), or a checkout in general.
"""

from __future__ import annotations

import json
from pathlib import Path

DISTRIBUTION = "qcheck-llm"
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@+%~")


def _source() -> str | None:
    """The checkout directory or VCS URL this copy was installed from, if pip recorded one."""
    here = Path(__file__).resolve().parent.parent
    if (here / "pyproject.toml").is_file() and (here / "qcheck" / "install.py").is_file():
        return str(here)  # running from a checkout (editable install or PYTHONPATH)
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        text = distribution(DISTRIBUTION).read_text("direct_url.json")
    except (PackageNotFoundError, OSError, ValueError):
        return None
    if not text:
        return None
    try:
        info = json.loads(text)
    except ValueError:
        return None
    url = info.get("url") if isinstance(info, dict) else None
    if not isinstance(url, str) or not url or not set(url) <= _SAFE:
        return None
    if url.startswith("file://"):
        return url[len("file://"):]
    vcs = info.get("vcs_info")
    if isinstance(vcs, dict) and vcs.get("vcs") == "git":
        commit = vcs.get("commit_id")
        suffix = f"@{commit}" if isinstance(commit, str) and commit.isalnum() else ""
        return f"{DISTRIBUTION}{{extra}} @ git+{url}{suffix}"
    return None


def install_hint(extra: str | None = None) -> str:
    """A pip command line that installs qcheck (with ``extra``) from where this copy came from."""
    bracket = f"[{extra}]" if extra else ""
    source = _source()
    if source is None:
        return f"pip install '/path/to/qcheck-checkout{bracket}' (qcheck is not on PyPI yet)"
    if "{extra}" in source:
        return f"pip install '{source.format(extra=bracket)}'"
    return f"pip install '{source}{bracket}'"
