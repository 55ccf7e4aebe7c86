#!/usr/bin/env python3
"""Give every rule of an engine file the releases it was read at (``verified``), mechanically, and make the file strict.

    python matrices/tools/migrate_verified.py matrices/engines/llama.cpp.toml [--dry-run]

For each ``[[rule]]``, ``[[kv_rule]]``, ``[[attention_rule]]`` and ``[[kv_scale_rule]]`` without ``verified``, the
versions its own sources name (``[sources] x.version``) that parse as engine versions and lie inside the rule's
``versions`` become ``verified = [...]``: the honest default (a rule read at 0.33.0 was verified at 0.33.0, nothing
more). The line is inserted after the rule's ``id`` line, so the rest of the file is untouched; ``[engine]`` gets
``rules_verified = true``. A rule whose sources name no such version is listed and left alone: a human reads it
(the file then fails ``qcheck matrix --validate`` with ``missing-verified`` until that is done). Widen a rule's
range only after reading the code at the releases it should cover (matrices/SCHEMA.md §2.3).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))

from qcheck.matrix.versions import contains, parse_specifier, parse_version  # noqa: E402

KINDS = ("rule", "kv_rule", "attention_rule", "kv_scale_rule")
_HEADER = re.compile(r"^\s*\[\[(\w+)\]\]\s*(#.*)?$")
_TABLE = re.compile(r"^\s*\[")
_ID = re.compile(r"^\s*id\s*=")


def read_versions(rule: dict[str, object], sources: dict[str, dict[str, str]], scheme: str) -> list[str]:
    """The versions a rule's sources were read at that parse and lie inside its ``versions``, oldest first."""
    spec = parse_specifier(str(rule["versions"]), scheme) if "versions" in rule else None
    found: dict[object, str] = {}
    for name in rule.get("sources", []) or []:  # type: ignore[union-attr]
        text = str(sources.get(str(name), {}).get("version", ""))
        try:
            parsed = parse_version(text, scheme)
        except ValueError:
            continue
        if spec is None or contains(spec, parsed):
            found.setdefault(parsed, text)
    return [found[k] for k in sorted(found)]  # type: ignore[type-var]


def migrate(text: str) -> tuple[str, list[str]]:
    """(the file with ``verified`` added, the rules left for a human)."""
    data = tomllib.loads(text)
    head = data.get("engine", {})
    scheme = head.get("version_scheme", "pep440")
    sources = data.get("sources", {})
    todo: dict[tuple[str, int], list[str] | None] = {}
    left = []
    for kind in KINDS:
        for index, rule in enumerate(data.get(kind, [])):
            if "verified" in rule:
                continue
            found = read_versions(rule, sources, scheme)
            todo[(kind, index)] = found or None
            if not found:
                left.append(f"{kind} '{rule.get('id')}': no source names a version inside its range")
    out: list[str] = []
    counts: dict[str, int] = {}
    current: tuple[str, int] | None = None
    in_engine = False
    for line in text.splitlines(keepends=True):
        header = _HEADER.match(line)
        if header:
            kind = header.group(1)
            counts[kind] = counts.get(kind, -1) + 1
            current = (kind, counts[kind]) if kind in KINDS else None
            in_engine = False
        elif _TABLE.match(line):
            current = None
            in_engine = line.strip() == "[engine]"
        out.append(line)
        if in_engine and re.match(r"^\s*versions\s*=", line) and "rules_verified" not in text:
            out.append("rules_verified = true\n")
        if current is not None and _ID.match(line):
            found = todo.pop(current, None)
            if found:
                out.append("verified = [" + ", ".join(f'"{v}"' for v in found) + "]\n")
            current = None
    return "".join(out), left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    for path in args.files:
        new, left = migrate(path.read_text())
        if not args.dry_run:
            path.write_text(new)
        for line in left:
            print(f"{path}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
