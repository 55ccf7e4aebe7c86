"""Markdown (``--format markdown`` / ``--markdown FILE``): a compact table for a pull-request comment or
the GitHub step summary. Rendered from ``to_json()``; every cell is escaped (pipes, newlines, HTML) so a
hostile tensor name or reason cannot break the table or inject markup.
"""

from __future__ import annotations

import re
from typing import Any

from qcheck.report.findings import findings_of, result_data, target_label, verdict_fails

STATUS_ICONS = {"native": "✅ native", "fallback": "🟡 fallback", "unsupported": "❌ unsupported",
                "unknown": "❔ unknown"}
MAX_CELL = 160
MAX_ROWS = 500


#: Markdown punctuation a file-controlled string could use for markup, backslash-escaped: emphasis, code,
#: links and images, ``$math$``, ``~~strike~~``, ``#123`` references, table pipes
_MD_PUNCT = re.compile(r"([\\`*_\[\]$~#|!])")
#: tokens GitHub would turn into a link or a notification even when escaped (its autolinker and @mention
#: filter run on the rendered text): shown as code spans, which neither touches
_LINKISH = re.compile(r"\S*(?:@|://|www\.)\S*", re.IGNORECASE)


def _inert(text: str) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_PUNCT.sub(r"\\\1", text)


def cell(text: Any, limit: int = MAX_CELL) -> str:
    """One table cell: one line, control and format characters visible, no markup, HTML, links, mentions
    or math from the text, bounded length."""
    from qcheck.report.sanitize import visible

    s = visible(" ".join(str(text).split()))
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    out, pos = [], 0
    for m in _LINKISH.finditer(s):
        out.append(_inert(s[pos:m.start()]))
        out.append("`" + m.group(0).replace("`", "'").replace("|", "\\|") + "`")
        pos = m.end()
    out.append(_inert(s[pos:]))
    return "".join(out)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows[:MAX_ROWS]:
        lines.append("| " + " | ".join(row) + " |")
    if len(rows) > MAX_ROWS:
        lines.append(f"\n… {len(rows) - MAX_ROWS} more rows in the JSON report")
    return lines


def _verdict_row(model: str, v: dict[str, Any], policy: dict[str, Any]) -> list[str]:
    status = str(v.get("status"))
    icon = STATUS_ICONS.get(status, status)
    because = (v.get("outcome") or {}).get("because") or []
    if "does-not-start" in because:
        icon = "❌ does not start"
    elif "start-up-unknown" in because:
        icon = "❔ start-up unknown"
    fails = verdict_fails(v, policy)
    notes = []
    startup = v.get("startup") or {}
    if startup.get("message") and startup.get("outcome") != "starts":
        notes.append("start-up: " + str(startup["message"]))
    if v.get("requires"):
        notes.append("requires: " + "; ".join(map(str, v["requires"])))
    reasons = [str(r) for r in v.get("reasons") or [] if not (startup and str(r).startswith("start-up: "))]
    if reasons and status != "native":
        notes.append(reasons[0])
    memory = v.get("memory") or {}
    if isinstance(memory, dict) and memory.get("fits") is False:
        notes.append("memory: " + str(memory.get("summary", "does not fit")))
    label = target_label(v)
    engine, _, where = label.partition(" x ")
    return [cell(model, 60), cell(engine, 40), cell(where, 30), ("**FAIL** " if fails else "") + icon,
            cell("; ".join(notes)) or " "]


def _headline(kind: str, exit_code: int, detail: str) -> str:
    mark = {0: "✅ pass", 1: "❌ fail", 2: "⛔ not judged"}.get(exit_code, f"exit {exit_code}")
    return f"### qcheck {kind}: {mark}" + (f" — {detail}" if detail else "") + f" (exit {exit_code})"


def _inspection_line(insp: dict[str, Any]) -> str:
    q = insp.get("quantization") or {}
    parts = [insp.get("architecture") or insp.get("model_type") or insp.get("container"), q.get("method")]
    if q.get("gguf_file_type"):
        parts.append(q["gguf_file_type"])
    if q.get("bits_per_weight"):
        parts.append(f"{q['bits_per_weight']:.2f} bits/weight")
    return ", ".join(str(p) for p in parts if p)


def _check(data: dict[str, Any]) -> list[str]:
    insp = data.get("inspection") or {}
    model = str(insp.get("path", "?"))
    verdicts = data.get("verdicts") or []
    policy = data.get("policy") or {}
    failing = sum(1 for v in verdicts if verdict_fails(v, policy))
    detail = f"{failing} of {len(verdicts)} combinations fail" if failing else f"{len(verdicts)} combinations run it"
    lines = [_headline("check", int(data.get("exit_code", 0)), detail), "",
             f"**{cell(model, 200)}**: {cell(_inspection_line(insp), 200)}", ""]
    lines += _table(["Model", "Engine", "GPU", "Status", "Notes"], [_verdict_row(model, v, policy) for v in verdicts])
    from qcheck.report.capacity import markdown_lines

    return lines + markdown_lines(verdicts, target_label, cell)


def _num(x: Any, digits: int = 4) -> str:
    return "–" if x is None else f"{float(x):.{digits}g}"


def _pct(x: Any) -> str:
    return "–" if x is None else f"{100 * float(x):.1f}%"


def _eval_table(data: dict[str, Any]) -> list[str]:
    rows = []
    for c in data.get("candidates") or []:
        m = c.get("metrics") or {}
        gate = c.get("gate") or {}
        acc = "–" if m.get("accuracy") is None else f"{_pct(m.get('accuracy_reference'))} → {_pct(m.get('accuracy'))}"
        failures = "; ".join(str(f.get("message")) for f in gate.get("failures") or [])
        rows.append([cell(c.get("name"), 60), _num(m.get("kld_mean")), _pct(m.get("top1_agreement")),
                     _num(m.get("ppl_ratio")), acc, "✅ pass" if gate.get("passed") else "❌ **fail**",
                     cell(failures) or " "])
    return _table(["Candidate", "KLD mean", "Top-1", "PPL ratio", "Accuracy ref → cand", "Gate", "Failures"], rows)


def _eval(data: dict[str, Any]) -> list[str]:
    cands = data.get("candidates") or []
    failing = sum(1 for c in cands if not (c.get("gate") or {}).get("passed"))
    detail = f"{failing} of {len(cands)} candidates over a threshold" if failing else f"{len(cands)} candidate(s)"
    ref = (data.get("reference") or {}).get("path")
    lines = [_headline("eval", int(data.get("exit_code", 0)), detail), "",
             f"Reference **{cell(ref, 200)}**, {(data.get('tasks') or {}).get('items', '?')} task items.", ""]
    return lines + _eval_table(data)


def _gate(data: dict[str, Any]) -> list[str]:
    summary = data.get("summary") or {}
    detail = (f"{summary.get('models', 0)} model(s), {summary.get('failing', 0)} failing combination(s)"
              + (f", {summary.get('errors')} not judged" if summary.get("errors") else "")
              + (f", {summary.get('skipped')} skipped" if summary.get("skipped") else "")
              + (", quality gate failed" if summary.get("quality_failed") else ""))
    lines = [_headline("gate", int(data.get("exit_code", 0)), detail), ""]
    policy = (data.get("policy") or {}).get("file")
    if policy:
        lines += [f"Policy: **{cell(policy, 200)}**", ""]
    rows = []
    for m in data.get("models") or []:
        name = str(m.get("name") or m.get("path"))
        if m.get("status") in ("error", "skipped"):
            icon = "⛔ not judged" if m["status"] == "error" else "⏭️ skipped"
            rows.append([cell(name, 60), "–", "–", icon, cell(m.get("error") or "")])
            continue
        for v in m.get("verdicts") or []:
            rows.append(_verdict_row(name, v, v.get("policy") or {}))
    lines += _table(["Model", "Engine", "GPU", "Status", "Notes"], rows)
    quality = data.get("quality") or {}
    if quality.get("error"):
        lines += ["", f"**Quality gate not measured:** {cell(quality['error'], 400)}"]
    elif quality.get("eval"):
        lines += ["", "#### Quality", *_eval_table(quality["eval"])]
    return lines


def _inspect(data: dict[str, Any]) -> list[str]:
    q = data.get("quantization") or {}
    lines = [f"### qcheck inspect: {cell(data.get('path'), 200)}", ""]
    rows = [[k, cell(v)] for k, v in (
        ("container", data.get("container")), ("architecture", data.get("architecture")),
        ("parameters", data.get("parameters")), ("method", q.get("method")), ("producer", q.get("producer")),
        ("weight bits", q.get("weight_bits")), ("bits/weight", q.get("bits_per_weight")),
        ("group size", q.get("group_size")), ("activations", q.get("activation_dtype")),
        ("GGUF file type", q.get("gguf_file_type"))) if v is not None]
    lines += _table(["Field", "Value"], rows)
    notes = [f for f in findings_of(data, "inspect")]
    if notes:
        lines += ["", *[f"- {f.level}: {cell(f.message, 300)}" for f in notes[:20]]]
    return lines


def _probe(data: dict[str, Any]) -> list[str]:
    """``qcheck probe``: one row per capability."""
    missing = data.get("missing") or []
    lines = [_headline("probe", int(data.get("exit_code") or 0),
                       f"missing {', '.join(missing)}" if missing else f"{cell(data.get('url'), 120)}"), ""]
    rows = [[cell(c.get("id"), 40), cell(c.get("status"), 20), cell(c.get("detail"), 200),
             cell(c.get("server_message") or "", 200)] for c in data.get("capabilities") or [] if isinstance(c, dict)]
    return lines + _table(["Capability", "Status", "Detail", "Server"], rows)


def render(result: Any) -> str:
    data, kind = result_data(result)
    if kind == "matrix" and not isinstance(result, dict):
        from qcheck.report.markdown_matrix import render as render_matrix

        return render_matrix(result)
    builders = {"check": _check, "eval": _eval, "gate": _gate, "inspect": _inspect, "probe": _probe}
    if kind.endswith("-set") and kind.removesuffix("-set") in builders:  # --all: one section per model
        one = builders[kind.removesuffix("-set")]
        sections = ["\n".join(one(r)) for r in data.get("results") or [] if isinstance(r, dict)]
        return "\n\n".join(sections) + "\n"
    if kind not in builders:
        from qcheck.errors import UsageError

        raise UsageError(f"--format markdown is not available for qcheck {kind}")
    return "\n".join(builders[kind](data)) + "\n"
