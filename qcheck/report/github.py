"""GitHub Actions output (``--format github`` / ``--github``): workflow-command annotations on stdout and a
Markdown summary appended to ``$GITHUB_STEP_SUMMARY``.

GitHub shows at most 10 error, 10 warning and 10 notice annotations per step and drops the rest silently
(docs/research/peers.md §4.3), so the most severe findings go first, each level is capped at 10, and a last
notice says how many more are in the step summary. Escaping follows the workflow-command rules
(actions/toolkit ``command.ts``): message data escapes ``%``, CR and LF; property values also ``:`` and ``,``.
"""

from __future__ import annotations

import os
from typing import Any

from qcheck.report.findings import Finding, findings_of, result_data

#: annotations GitHub keeps per level and step
MAX_PER_LEVEL = 10
#: the step summary is capped at 1 MiB per step; stay well below it
MAX_SUMMARY_BYTES = 512 * 1024
_COMMAND = {"error": "error", "warning": "warning", "note": "notice"}


def escape_data(text: str) -> str:
    """Escape a workflow-command message (``::error::<data>``)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow-command property value (``file=``, ``title=``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _file_property(path: str) -> str:
    """Annotations attach to repository-relative paths: relative to ``$GITHUB_WORKSPACE`` when it is set
    (the Action's ``working-directory`` makes the current directory a subfolder of it), else to the
    current directory. A path outside the workspace stays as it is."""
    workspace = os.environ.get("GITHUB_WORKSPACE")
    if workspace or os.path.isabs(path):
        root = os.path.abspath(workspace or os.getcwd())
        absolute = os.path.abspath(path)  # as named: a symlink keeps its own path
        rel = os.path.relpath(absolute, root)
        if rel != ".." and not rel.startswith(".." + os.sep):
            path = rel
    return path.replace(os.sep, "/").removeprefix("./")


def annotation(f: Finding) -> str:
    """One workflow command line for a finding."""
    props = []
    if f.artifact:
        props.append(f"file={escape_property(_file_property(f.artifact))}")
    title = f"qcheck {f.rule.id} {f.title or f.rule.short}"
    props.append(f"title={escape_property(title[:200])}")
    message = f.message if not f.logical else f"{f.message} [{f.logical}]"
    return f"::{_COMMAND[f.level]} {','.join(props)}::{escape_data(message[:4000])}"


def workflow_annotations(findings: list[Finding]) -> list[str]:
    """At most 10 annotations per level, most severe first, plus a notice of what was left out."""
    by_level: dict[str, list[Finding]] = {"error": [], "warning": [], "note": []}
    for f in sorted(findings, key=lambda x: x.sort_key):
        by_level[f.level].append(f)
    lines: list[str] = []
    dropped = 0
    for level in ("error", "warning", "note"):
        items = by_level[level]
        cap = MAX_PER_LEVEL if level != "note" else MAX_PER_LEVEL - 1  # keep room for the closing notice
        lines.extend(annotation(f) for f in items[:cap])
        dropped += max(0, len(items) - cap)
    if dropped:
        lines.append(f"::notice title=qcheck::{escape_data(f'{dropped} more finding(s) not annotated: see the step summary or the JSON/SARIF report')}")
    return lines


def render(result: Any) -> str:
    data, kind = result_data(result)
    findings = findings_of(data, kind)
    lines = workflow_annotations(findings)
    lines.append(f"qcheck {kind}: exit {data.get('exit_code', 0)}, {len(findings)} finding(s)")
    return "\n".join(lines) + "\n"


def summary(result: Any) -> str:
    """The Markdown for ``$GITHUB_STEP_SUMMARY`` (bounded)."""
    from qcheck.report.markdown import render as markdown

    text = markdown(result)
    raw = text.encode("utf-8")
    if len(raw) > MAX_SUMMARY_BYTES:
        text = raw[:MAX_SUMMARY_BYTES].decode("utf-8", "ignore").rsplit("\n", 1)[0]
        text += "\n\n… summary truncated: see the JSON report\n"
    return text


def write_step_summary(result: Any, env: dict[str, str] | None = None) -> str | None:
    """Append the summary to ``$GITHUB_STEP_SUMMARY`` when it is set; returns the file written, if any."""
    path = (env if env is not None else os.environ).get("GITHUB_STEP_SUMMARY")
    if not path:
        return None
    text = summary(result)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text + "\n")
    return path
