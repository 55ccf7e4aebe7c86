"""Engine versions and version specifiers, for both PEP 440 engines and llama.cpp-style build numbers.

Rules carry specifiers such as ``>=0.24.0`` (vLLM) or ``>=b8000`` (llama.cpp builds); the user names a
version with ``--engine vllm==0.20.0`` or ``--engine llama.cpp==b10488``. ``packaging`` does the
comparison; build numbers are mapped onto plain integers so the same machinery applies.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet

SCHEMES = ("pep440", "build")

_BUILD_VERSION = re.compile(r"^[bB]?(\d{1,9})$")
_BUILD_IN_SPEC = re.compile(r"(?<![0-9A-Za-z.])[bB](\d+)")


def parse_version(text: str, scheme: str = "pep440") -> Version:
    """Parse an engine version; raises ValueError with the offending text."""
    raw = text.strip()
    if scheme == "build":
        m = _BUILD_VERSION.match(raw)
        if not m:
            raise ValueError(f"{text!r} is not a build number (expected e.g. 'b10488')")
        return Version(m.group(1))
    try:
        return Version(raw)
    except InvalidVersion:
        raise ValueError(f"{text!r} is not a PEP 440 version") from None


def parse_specifier(text: str, scheme: str = "pep440") -> SpecifierSet:
    """Parse a specifier set such as '>=0.5.5,<0.24.0' or '>=b8000'; raises ValueError."""
    return _parse_specifier(text, scheme)


@functools.lru_cache(maxsize=4096)
def _parse_specifier(text: str, scheme: str) -> SpecifierSet:
    """``parse_specifier``, once per distinct text: an engine file repeats a few dozen specifiers over its rules
    (vLLM: 183 for 54 distinct), and nothing changes a SpecifierSet after it is built."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet  # not needed to read a checkpoint

    raw = text.strip()
    if scheme == "build":
        raw = _BUILD_IN_SPEC.sub(r"\1", raw)
    if not raw:
        raise ValueError("empty version specifier")
    try:
        spec = SpecifierSet(raw)
    except InvalidSpecifier:
        raise ValueError(f"{text!r} is not a valid version specifier (e.g. '>=0.24.0' or '>=0.5,<0.9')") from None
    if not list(spec):
        raise ValueError(f"{text!r} is not a valid version specifier")
    return spec


def contains(spec: SpecifierSet, version: Version) -> bool:
    """Whether ``version`` satisfies ``spec`` (pre-releases included: engines ship rc builds)."""
    return spec.contains(version, prereleases=True)


def parse_cc(text: str) -> Version:
    """A compute capability '8.9' as a comparable Version."""
    return Version(text)
