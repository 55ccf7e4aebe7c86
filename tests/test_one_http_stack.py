"""qcheck speaks HTTP through one stack, qcheck.net (httpx2), and touches nothing private of huggingface_hub (issue
#27): checked on the source, so a second client or a patched private registry cannot come back unnoticed."""

from __future__ import annotations

import re
from pathlib import Path

QCHECK = Path(__file__).resolve().parent.parent / "qcheck"


def _python_files() -> list[Path]:
    return sorted(QCHECK.rglob("*.py"))


def test_one_http_client_library_in_qcheck():
    """httpx2 (and its httpcore2 pools) only, and only in qcheck/net: no urllib.request, http.client, requests,
    urllib3, aiohttp or socket code speaking HTTP anywhere in the package."""
    other = re.compile(r"^\s*(import|from)\s+(urllib\.request|urllib3|http\.client|requests|aiohttp|httpx\b|"
                       r"httpcore\b|pycurl)", re.M)
    found = [f"{p.relative_to(QCHECK)}" for p in _python_files() if other.search(p.read_text(encoding="utf-8"))]
    assert found == []
    stack = re.compile(r"^\s*(import|from)\s+(httpx2|httpcore2|socket)\b", re.M)
    users = sorted(str(p.relative_to(QCHECK)) for p in _python_files() if stack.search(p.read_text(encoding="utf-8")))
    assert users == ["net/client.py", "net/transport.py"], users


def test_no_private_huggingface_hub_name_is_used():
    """Only huggingface_hub's public API (constants, get_token): nothing of its private modules or registries."""
    private = re.compile(r"huggingface_hub(\.\w+)*\._|from\s+huggingface_hub[\w.]*\s+import\s+[^\n]*\b_\w+")
    found = [f"{p.relative_to(QCHECK)}" for p in _python_files() if private.search(p.read_text(encoding="utf-8"))]
    assert found == []
