"""SARIF 2.1.0 for code scanning (``--format sarif`` / ``--sarif FILE``).

One run, every qcheck rule listed in a fixed order (so ``ruleIndex`` and ``ruleId`` are stable across runs),
one result per finding. A model file has no lines, so the physical location is the model file (a model
directory's ``config.json``) and the tensor or metadata key goes in ``logicalLocations``
(docs/research/peers.md §4.2). ``partialFingerprints`` keeps alerts from being duplicated between runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from qcheck import __version__
from qcheck.report.findings import RULES, Finding, findings_of, result_data

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
_RULE_ORDER = list(RULES)
_SRCROOT = "%SRCROOT%"


def _rule(rule_id: str) -> dict[str, Any]:
    r = RULES[rule_id]
    return {
        "id": r.id,
        "name": r.name,
        "shortDescription": {"text": r.short},
        "fullDescription": {"text": r.full},
        "defaultConfiguration": {"level": r.level},
        "help": {"text": r.full, "markdown": f"**{r.short}**\n\n{r.full}\n\nSee docs/ci.md for the rule list."},
        "properties": {"tags": ["quantization", "deployment"], "problem.severity": _severity(r.level)},
    }


def _severity(level: str) -> str:
    return {"error": "error", "warning": "warning"}.get(level, "recommendation")


def artifact_location(path: str) -> dict[str, Any]:
    """A relative path stays relative to %SRCROOT% (the checkout); an absolute one becomes a file URI,
    made relative when it lies under the current directory."""
    p = Path(path)
    if p.is_absolute():
        try:
            p = p.resolve().relative_to(Path.cwd().resolve())
        except ValueError:
            return {"uri": p.as_uri()}
    posix = PurePosixPath(*p.parts).as_posix() if p.parts else "."
    posix = posix.removeprefix("./")
    return {"uri": quote(posix, safe="/"), "uriBaseId": _SRCROOT}


def _logical(f: Finding) -> list[dict[str, Any]]:
    if not f.logical:
        return []
    kind = "property" if ("." in f.logical and " " not in f.logical and not f.logical.endswith(".weight")) \
        or ":" in f.logical else "object"
    return [{"name": f.logical, "fullyQualifiedName": f"{f.model}::{f.logical}", "kind": kind}]


def _result(f: Finding) -> dict[str, Any]:
    location: dict[str, Any] = {}
    if f.artifact:
        location["physicalLocation"] = {"artifactLocation": artifact_location(f.artifact)}
    logical = _logical(f)
    if logical:
        location["logicalLocations"] = logical
    if not location:  # a Hub repo without a tensor: name the repo itself
        location["logicalLocations"] = [{"name": f.model, "kind": "module"}]
    props = {k: v for k, v in f.properties.items() if v is not None}
    props["model"] = f.model
    return {
        "ruleId": f.rule.id,
        "ruleIndex": _RULE_ORDER.index(f.rule.id),
        "level": f.level,
        "message": {"text": f.message},
        "locations": [location],
        "partialFingerprints": {"qcheckFinding/v1": f.fingerprint()},
        "properties": props,
    }


def build(result: Any) -> dict[str, Any]:
    """The SARIF log as a dict (``render`` serialises it)."""
    data, kind = result_data(result)
    findings = findings_of(data, kind)
    run: dict[str, Any] = {
        "tool": {"driver": {"name": "qcheck", "version": __version__, "semanticVersion": __version__,
                            "rules": [_rule(r) for r in _RULE_ORDER]}},
        "originalUriBaseIds": {_SRCROOT: {"uri": Path(os.getcwd()).as_uri().rstrip("/") + "/"}},
        "invocations": [{"executionSuccessful": True, "exitCode": int(data.get("exit_code", 0) or 0),
                         "properties": {"command": f"qcheck {kind}"}}],
        "results": [_result(f) for f in findings],
        "properties": {"schema": data.get("schema"), "exit_code": data.get("exit_code")},
    }
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def render(result: Any) -> str:
    return json.dumps(build(result), indent=2, ensure_ascii=False) + "\n"
