"""The facts files beside ``matrices/generated/<engine>.toml``: what an extractor read from each released package.

The generated rules are derived from these facts by the extractor (``matrices/tools/extract_*.py``), whose ``--check``
re-derives and re-renders both files byte for byte; ``qcheck matrix --validate`` checks the facts file's shape here
(the releases read with their package hashes, every fact's history inside them, in order, without overlap), so a
hand edit that breaks it fails like any other data error (matrices/SCHEMA.md §2.3'').
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from qcheck.matrix import files
from qcheck.matrix.versions import parse_ordered
from qcheck.matrix.vocab import Where, check_keys, require_str

FACTS_KEYS = {"facts", "fact"}
FACTS_HEAD_KEYS = {"engine", "generated_by", "releases", "read", "note"}
READ_KEYS = {"file", "sha256", "sources_sha256", "note"}
FACT_KEYS = {"kind", "key", "file", "history", "note"}
STEP_KEYS = {"value", "from", "to", "file", "note"}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def validate_facts(root: Path, path: Path, engine_id: str, scheme: str) -> int:
    """Check one facts file; returns the number of facts. Raises MatrixDataError naming file, fact and problem."""
    display = files.display(root, path)
    data = files.read_toml(root, path)
    ctx = Where(display)
    check_keys(data, FACTS_KEYS, {"facts"}, ctx)
    head = data["facts"]
    hctx = Where(display, "[facts]")
    if not isinstance(head, dict):
        hctx.fail("bad-type", "[facts] must be a table")
    check_keys(head, FACTS_HEAD_KEYS, {"engine", "generated_by", "releases", "read"}, hctx)
    if head["engine"] != engine_id:
        hctx.fail("file-name-mismatch", f"engine {head['engine']!r} must be {engine_id!r}")
    releases = head["releases"]
    if not isinstance(releases, list) or not releases or not all(isinstance(r, str) for r in releases):
        hctx.fail("bad-type", "releases must be a non-empty list of versions")
    order = _order(releases, scheme, hctx)
    read = head["read"]
    if not isinstance(read, dict) or set(read) != set(releases):
        hctx.fail("missing-key", "read must name the package file of every release read, and only those")
    for version, entry in read.items():
        rctx = Where(display, f"[facts.read] {version}")
        if not isinstance(entry, dict):
            rctx.fail("bad-type", "each release read must be a table { file, sha256, sources_sha256 }")
        check_keys(entry, READ_KEYS, {"file", "sha256", "sources_sha256"}, rctx)
        require_str(entry, "file", rctx)
        for key in ("sha256", "sources_sha256"):
            if not isinstance(entry[key], str) or not _SHA256.match(entry[key]):
                rctx.fail("bad-value", f"{key} must be 64 lower-case hex digits")
    facts = data.get("fact", [])
    if not isinstance(facts, list):
        ctx.fail("bad-type", "[[fact]] must be an array of tables")
    seen: set[tuple[str, str]] = set()
    for index, fact in enumerate(facts):
        fctx = Where(display, f"fact #{index + 1}")
        if not isinstance(fact, dict):
            fctx.fail("bad-type", "each [[fact]] must be a table")
        check_keys(fact, FACT_KEYS, {"kind", "key", "history"}, fctx)
        ident = (require_str(fact, "kind", fctx), require_str(fact, "key", fctx))
        fctx = Where(display, f"fact #{index + 1} {ident[0]} {ident[1]!r}")
        if ident in seen:
            fctx.fail("duplicate-id", "the same kind and key twice")
        seen.add(ident)
        _check_history(fact["history"], order, fctx)
    return len(facts)


def _order(releases: list[str], scheme: str, ctx: Where) -> dict[str, int]:
    try:
        parse_ordered(releases, scheme)
    except ValueError as exc:
        ctx.fail("versions-order" if "increasing" in str(exc) else "bad-version", f"releases: {exc}")
    return {r: i for i, r in enumerate(releases)}


def _check_history(history: Any, order: dict[str, int], ctx: Where) -> None:
    """Steps ``{value, from, to}``: releases read, in order, not overlapping."""
    if not isinstance(history, list) or not history:
        ctx.fail("bad-type", "history must be a non-empty array of { value, from, to }")
    last = -1
    for step in history:
        if not isinstance(step, dict):
            ctx.fail("bad-type", "each history step must be a table { value, from, to }")
        check_keys(step, STEP_KEYS, {"value", "from", "to"}, ctx)
        first, end = step["from"], step["to"]
        if first not in order or end not in order:
            ctx.fail("bad-version", f"history step {first!r}..{end!r}: both ends must be releases read")
        if not last < order[first] <= order[end]:
            ctx.fail("versions-order", f"history step {first}..{end} overlaps or runs backwards")
        last = order[end]
