"""Human text for ``qcheck gate``: one block per model (its verdicts, marked when they fail), the quality
gate, then one summary line with the exit code. Rendered from ``to_json()`` only."""

from __future__ import annotations

from typing import Any

from qcheck.report.findings import target_label
from qcheck.report.text_check import startup_line

_WORDS = {"native": "NATIVE", "fallback": "FALLBACK", "unsupported": "UNSUPPORTED", "unknown": "UNKNOWN"}


def render(result: Any) -> str:
    data = result.to_json() if hasattr(result, "to_json") else result
    policy = data.get("policy") or {}
    lines = [f"qcheck gate: policy {policy.get('file')}"]
    for m in data.get("models") or []:
        lines.append("")
        if m["status"] == "error":
            lines.append(f"{m['name']}: NOT JUDGED: {m.get('error')}")
            continue
        if m["status"] == "skipped":
            lines.append(f"{m['name']}: SKIPPED: {m.get('error')}")
            continue
        insp = m.get("inspection") or {}
        q = insp.get("quantization") or {}
        what = ", ".join(str(x) for x in (insp.get("architecture") or insp.get("model_type"), q.get("method"),
                                           q.get("gguf_file_type")) if x)
        lines.append(f"{m['name']}: {what}")
        for v in m.get("verdicts") or []:
            because = (v.get("outcome") or {}).get("because") or []
            word = ("DOES NOT START" if "does-not-start" in because else "START UNKNOWN" if "start-up-unknown" in
                    because else _WORDS.get(v.get("status"), str(v.get("status")).upper()))
            mark = "  <- fails" if v.get("fails") else ""
            lines.append(f"  {word:<11}  {target_label(v)}{mark}")
            startup = v.get("startup") or {}
            if startup.get("message"):
                lines.append(f"               start-up: {startup_line(startup)}")
            if v.get("fails") or v.get("status") != "native":
                shown = [r for r in v.get("reasons") or [] if not (startup and str(r).startswith("start-up: "))]
                for reason in shown[:2]:
                    lines.append(f"               why: {reason}")
            if v.get("fails") and v.get("suggestions"):  # the first way out (the fix on this engine leads)
                lines.append(f"               try: {v['suggestions'][0]}")
            for req in v.get("requires") or []:
                lines.append(f"               requires: {req}")
            memory = v.get("memory") or {}
            if memory.get("summary"):
                if v.get("gpu_note"):
                    lines.append(f"               gpu: {v['gpu_note']}")
                lines.append(f"               memory: {memory['summary']}")
            deployment = v.get("deployment") or {}
            if deployment:
                skipped = [f"{s['flag']}{'' if s.get('value') is None else ' ' + str(s['value'])}"
                           for s in deployment.get("not_judged") or []]
                lines.append(f"               deployment: {deployment.get('image')}: {deployment.get('command')}")
                lines.append(f"               not judged: {'; '.join(skipped) if skipped else 'none'}")
    quality = data.get("quality")
    if quality:
        lines.append("")
        if quality.get("error"):
            lines.append(f"quality: NOT MEASURED: {quality['error']}")
        elif quality.get("eval"):
            from qcheck.report.text_eval import render as render_eval

            lines.append("quality:")
            lines.extend("  " + line if line else "" for line in render_eval(quality["eval"]).splitlines())
    s = data.get("summary") or {}
    lines.append("")
    parts = [f"{s.get('models', 0)} model(s)", f"{s.get('verdicts', 0)} combination(s)",
             f"{s.get('failing', 0)} failing"]
    if s.get("errors"):
        parts.append(f"{s['errors']} not judged")
    if s.get("skipped"):
        parts.append(f"{s['skipped']} skipped")
    if s.get("nothing_judged"):
        parts.append("nothing judged")
    if quality:
        parts.append("quality " + ("not measured" if s.get("quality_error")
                                   else "FAILED" if s.get("quality_failed") else "passed"))
    verdict = {0: "gate passed", 1: "gate FAILED", 2: "gate could not judge everything"}.get(data["exit_code"], "")
    lines.append(f"{'; '.join(parts)}: {verdict} (exit {data['exit_code']})")
    return "\n".join(lines) + "\n"
