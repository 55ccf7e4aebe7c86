"""Engine versions and version specifiers, for both PEP 440 engines and llama.cpp-style build numbers.

Rules carry specifiers such as ``>=0.24.0`` (vLLM) or ``>=b8000`` (llama.cpp builds); the user names a
version with ``--engine vllm==0.20.0`` or ``--engine llama.cpp==b10488``. ``packaging`` does the
comparison; build numbers are mapped onto plain integers so the same machinery applies.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet

SCHEMES = ("pep440", "build")

_BUILD_VERSION = re.compile(r"^[bB]?(\d{1,9})$")
_BUILD_IN_SPEC = re.compile(r"(?<![0-9A-Za-z.])[bB](\d+)")


def parse_version(text: str, scheme: str = "pep440") -> Version:
    """Parse an engine version; raises ValueError with the offending text."""
    return _parse_version(text, scheme)


@functools.lru_cache(maxsize=4096)
def _parse_version(text: str, scheme: str) -> Version:
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


def parse_ordered(versions: list[str], scheme: str = "pep440") -> list[Version]:
    """A list of versions, parsed and strictly increasing (oldest first); raises ValueError naming the problem."""
    parsed = [parse_version(v, scheme) for v in versions]
    if any(b <= a for a, b in itertools.pairwise(parsed)):
        raise ValueError(f"versions must be strictly increasing, oldest first: {versions}")
    return parsed


def contains(spec: SpecifierSet, version: Version) -> bool:
    """Whether ``version`` satisfies ``spec`` (pre-releases included: engines ship rc builds)."""
    return spec.contains(version, prereleases=True)


def parse_cc(text: str) -> Version:
    """A compute capability '8.9' as a comparable Version."""
    return Version(text)


@dataclass(frozen=True)
class Verified:
    """The releases a rule was read at (its ``verified`` key): exact versions and closed ranges.

    A rule answers only where this covers the version asked (matrices/SCHEMA.md §2.3, "verified"): a rule read at
    0.33.0 says nothing about 0.14.0, however its ``versions`` range reads. A closed range (``">=0.14.0,<=0.28.0"``)
    states that the reader checked the rule's facts over the whole range (both ends read, the code in between
    judged the same); an exact version covers that release only.
    """

    #: the items as written in the data file, for messages
    items: tuple[str, ...]
    exact: frozenset[Version]
    ranges: tuple[SpecifierSet, ...]

    def covers(self, version: Version) -> bool:
        return version in self.exact or any(contains(spec, version) for spec in self.ranges)

    @property
    def label(self) -> str:
        """``0.33.0, 0.34.0`` or ``0.14.0-0.28.0``: what "read at ..." names."""
        return ", ".join(_range_label(item) for item in self.items)


_LOWER = (">=", ">")
_UPPER = ("<=", "<")


def parse_verified(value: object, scheme: str = "pep440") -> Verified:
    """A ``verified`` value: one string or a list of strings, each an exact version (``"0.33.0"``, ``"b11312"``) or
    a closed specifier range (``">=0.14.0,<=0.28.0"``); an open-ended range is refused (ValueError), since nobody
    has read the releases it would cover."""
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(item, str) and item.strip() for item in items):
        raise ValueError("verified must be a version, a closed range such as '>=0.14.0,<=0.28.0', or a non-empty "
                         f"list of them, not {value!r}")
    return _parse_verified(tuple(str(i) for i in items), scheme)


@functools.lru_cache(maxsize=1024)
def _parse_verified(items: tuple[str, ...], scheme: str) -> Verified:
    """``parse_verified`` once per distinct value: a file repeats a few ranges over its rules (a Verified is frozen)."""
    exact: set[Version] = set()
    ranges: list[SpecifierSet] = []
    for item in items:
        text = str(item).strip()
        if text[0] in "<>=!~":
            spec = parse_specifier(text, scheme)
            ops = [s.operator for s in spec]
            if not (ops == ["=="] or (any(o in _LOWER for o in ops) and any(o in _UPPER for o in ops))):
                raise ValueError(f"verified range {text!r} is open-ended: give both ends of the releases read "
                                 "(e.g. '>=0.14.0,<=0.28.0') or list the exact versions")
            ranges.append(spec)
        else:
            exact.add(parse_version(text, scheme))
    return Verified(tuple(str(i).strip() for i in items), frozenset(exact), tuple(ranges))


def _range_label(item: str) -> str:
    """``>=0.14.0,<=0.28.0`` -> ``0.14.0-0.28.0``; anything else as written."""
    parts = [p.strip() for p in item.split(",")]
    if len(parts) == 2:
        low = next((p[2:] for p in parts if p.startswith(">=")), None)
        high = next((p[2:] for p in parts if p.startswith("<=")), None)
        if low and high:
            return f"{low.strip()}-{high.strip()}"
    return item
