"""TOML parsing on every Python qcheck supports: the standard library's ``tomllib`` from 3.11, ``tomli`` (the same
API, a dependency on 3.10 only) before. One home for the switch, so each reader imports ``tomllib`` from here."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["tomllib"]
