"""A self-contained HTML report for ``qcheck eval --report out.html``.

One file, inline CSS and inline SVG (no scripts, fonts, images or links to fetch), so it opens offline and
can be attached to a CI run as an artefact. Rendered from the ``qcheck.eval/1`` JSON only.
"""

from __future__ import annotations

import html
from typing import Any

COLORS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7")
REF_COLOR = "#9c9c9c"

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em;color:#222;max-width:1100px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.9em;margin:.5em 0}th,td{border:1px solid #ddd;padding:4px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f4f4f4}
.pass{color:#1a7f37;font-weight:bold}.fail{color:#c62828;font-weight:bold}.muted{color:#777;font-size:.85em}
svg text{font-size:11px;fill:#333}.note{color:#555}
"""


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _num(x: Any, digits: int = 4) -> str:
    if x is None:
        return "–"
    x = float(x)
    if x != 0 and (abs(x) < 10 ** -(digits - 1) or abs(x) >= 1e5):
        return f"{x:.2e}"
    return f"{x:.{digits}f}"


def _pct(x: Any) -> str:
    return "–" if x is None else f"{100 * float(x):.1f}%"


def _ci(iv: dict[str, Any] | None, fmt: Any = _num) -> str:
    if not iv or iv.get("low") is None:
        return ""
    return f' <span class="muted">[{fmt(iv["low"])}, {fmt(iv["high"])}]</span>'


def kld_histogram_svg(candidates: list[dict[str, Any]], width: int = 720, height: int = 260) -> str:
    """Per-token KLD distribution: share of tokens per log-spaced bin, one bar series per candidate."""
    series = [(c["name"], c.get("distribution") or {}) for c in candidates]
    series = [(n, d) for n, d in series if d.get("counts")]
    if not series:
        return "<p class='muted'>No teacher-forced tokens were scored.</p>"
    edges = series[0][1]["edges"]
    nbins = len(edges)
    left, right, top, bottom = 50, 10, 20, 60
    plot_w, plot_h = width - left - right, height - top - bottom
    shares = []
    for _, d in series:
        total = max(1, sum(d["counts"]))
        shares.append([c / total for c in d["counts"]])
    ymax = max(max(s) for s in shares) or 1.0
    group_w = plot_w / nbins
    bar_w = max(1.0, group_w / (len(series) + 0.5))
    parts = [f'<svg role="img" aria-label="per-token KL divergence histogram" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}">']
    parts.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#999"/>')
    parts.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#999"/>')
    for frac in (0.0, 0.5, 1.0):
        y = top + plot_h - frac * plot_h
        parts.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{100 * frac * ymax:.0f}%</text>')
    for si, share in enumerate(shares):
        color = COLORS[si % len(COLORS)]
        for b, v in enumerate(share):
            if v <= 0:
                continue
            h = v / ymax * plot_h
            x = left + b * group_w + si * bar_w + bar_w * 0.25
            parts.append(f'<rect class="bar" x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w:.1f}" '
                         f'height="{h:.1f}" fill="{color}"><title>{_e(series[si][0])}: {100 * v:.1f}% of tokens, '
                         f'KLD ≥ {edges[b]:.2g}</title></rect>')
    for b in range(0, nbins, 4):
        x = left + b * group_w
        label = "0" if edges[b] == 0 else f"{edges[b]:.0e}".replace("e-0", "e-").replace("e+0", "e")
        parts.append(f'<text x="{x:.1f}" y="{top + plot_h + 14}" text-anchor="start">{label}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.0f}" y="{height - 28}" text-anchor="middle">per-token KL divergence '
                 '(nats, log-spaced bins; lower is better)</text>')
    parts.append(_legend([n for n, _ in series], left, height - 12))
    parts.append("</svg>")
    return "".join(parts)


def _legend(names: list[str], x0: int, y: int, with_reference: bool = False) -> str:
    out = []
    x = x0
    entries = ([("reference", REF_COLOR)] if with_reference else []) + [
        (n, COLORS[i % len(COLORS)]) for i, n in enumerate(names)]
    for name, color in entries:
        out.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{x + 14}" y="{y}">{_e(name)}</text>')
        x += 24 + 7 * len(name)
    return "".join(out)


def task_accuracy_svg(candidates: list[dict[str, Any]], width: int = 720) -> str:
    """Accuracy per task: the reference bar, then one bar per candidate."""
    tasks = sorted({t for c in candidates for t in c.get("per_task", {})})
    if not tasks:
        return "<p class='muted'>No choice or generate items were scored.</p>"
    left, right, top, bottom = 50, 10, 20, 70
    height = 260
    plot_w, plot_h = width - left - right, height - top - bottom
    group_w = plot_w / len(tasks)
    n_bars = len(candidates) + 1
    bar_w = max(2.0, group_w * 0.8 / n_bars)
    parts = [f'<svg role="img" aria-label="accuracy per task" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}">']
    parts.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#999"/>')
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = top + plot_h - frac * plot_h
        parts.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{100 * frac:.0f}%</text>')
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#eee"/>')
    for ti, task in enumerate(tasks):
        gx = left + ti * group_w + group_w * 0.1
        first = next(c["per_task"][task] for c in candidates if task in c.get("per_task", {}))
        values = [("reference", first["accuracy_reference"], REF_COLOR)] + [
            (c["name"], c.get("per_task", {}).get(task, {}).get("accuracy"), COLORS[i % len(COLORS)])
            for i, c in enumerate(candidates)]
        for bi, (name, v, color) in enumerate(values):
            if v is None:
                continue
            h = float(v) * plot_h
            x = gx + bi * bar_w
            parts.append(f'<rect class="bar" x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w * 0.9:.1f}" '
                         f'height="{h:.1f}" fill="{color}"><title>{_e(task)} · {_e(name)}: {100 * float(v):.1f}% '
                         f'(n={first["n"]})</title></rect>')
        label = task if len(task) <= 16 else task[:15] + "…"
        parts.append(f'<text x="{left + ti * group_w + group_w / 2:.1f}" y="{top + plot_h + 14}" '
                     f'text-anchor="middle">{_e(label)}</text>')
    parts.append(_legend([c["name"] for c in candidates], left, height - 12, with_reference=True))
    parts.append("</svg>")
    return "".join(parts)


def render_html(data: dict[str, Any]) -> str:
    """The whole report as one HTML string (``data`` is ``EvalResult.to_json()``)."""
    ref, tasks, cache, cands = data["reference"], data["tasks"], data["cache"], data["candidates"]
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           "<title>qcheck eval report</title>", f"<style>{_CSS}</style></head><body>"]
    verdict = "PASS" if data["exit_code"] == 0 else "FAIL"
    out.append(f'<h1>qcheck eval: <span class="{verdict.lower()}">{verdict}</span></h1>')
    out.append(f"<p>Reference <code>{_e(ref['path'])}</code> ({_e(ref.get('architecture'))}, {_e(ref.get('dtype'))}, "
               f"{_e(ref.get('device'))}); {tasks['items']} items from {len(tasks['files'])} task file(s); "
               f"reference log-probs {'reused from cache' if cache['hit'] else 'computed'} "
               f"(<code>{_e(cache['kind'])}</code>: {_e(cache.get('precision'))}).</p>")
    thr = {k: v for k, v in (data.get("thresholds") or {}).items() if k not in ("tier", "use_intervals")}
    if thr:
        out.append("<p>Thresholds: " + ", ".join(f"<code>{_e(k.replace('_', '-'))} {v:g}</code>" for k, v in thr.items())
                   + (f" (tier {_e(data['thresholds'].get('tier'))})" if data["thresholds"].get("tier") else "")
                   + "</p>")

    out.append("<h2>Summary</h2><table><tr><th>candidate</th><th>backend</th><th>mean KLD [95% CI]</th>"
               "<th>median KLD</th><th>p99 KLD</th><th>max KLD</th><th>top-1 agreement</th><th>PPL ratio</th>"
               "<th>RMS Δp</th><th>NLL corr.</th><th>accuracy ref → cand</th><th>recovery</th><th>flips C→I / I→C</th>"
               "<th>greedy agreement</th><th>gate</th></tr>")
    for c in cands:
        m, iv = c["metrics"], c["intervals"]
        lb = "≥ " if m.get("kld_kind") == "lower-bound" else ""
        acc = "–" if m.get("accuracy") is None else f"{_pct(m['accuracy_reference'])} → {_pct(m['accuracy'])}"
        flips = "–" if m.get("flips") is None else f"{m.get('flips_c_to_i_count')} / {m.get('flips_i_to_c_count')}"
        gate = '<span class="pass">PASS</span>' if c["gate"]["passed"] else '<span class="fail">FAIL</span>'
        out.append(f"<tr><td>{_e(c['name'])}</td><td>{_e(c['backend'])}</td>"
                   f"<td>{lb}{_num(m.get('kld_mean'))}{_ci(iv.get('kld_mean'))}</td><td>{_num(m.get('kld_median'))}</td>"
                   f"<td>{_num(m.get('kld_p99'))}</td><td>{_num(m.get('kld_max'))}</td>"
                   f"<td>{_pct(m.get('top1_agreement'))}{_ci(iv.get('top1_agreement'), _pct)}</td>"
                   f"<td>{_num(m.get('ppl_ratio'))}{_ci(iv.get('ppl_ratio'))}</td><td>{_pct(m.get('delta_p_rms'))}</td>"
                   f"<td>{_num(m.get('nll_correlation'))}</td><td>{acc}</td><td>{_num(m.get('recovery'), 3)}"
                   f"{_ci(iv.get('recovery'), lambda x: _num(x, 3))}</td><td>{flips}</td>"
                   f"<td>{_pct(m.get('greedy_agreement'))}</td><td>{gate}</td></tr>")
    out.append("</table>")

    out.append("<h2>Per-token KL divergence</h2>")
    out.append(kld_histogram_svg(cands))
    out.append("<h2>Accuracy per task</h2>")
    out.append(task_accuracy_svg(cands))

    for c in cands:
        blocks = []
        for f in c["gate"]["failures"]:
            blocks.append(f'<li class="fail">{_e(f["message"])}</li>')
        for w in c.get("warnings", []):
            blocks.append(f"<li>warning: {_e(w)}</li>")
        for n in c.get("notes", []):
            blocks.append(f'<li class="note">{_e(n)}</li>')
        flipped = c.get("flipped") or []
        if blocks or flipped:
            out.append(f"<h2>{_e(c['name'])}</h2>")
            if blocks:
                out.append("<ul>" + "".join(blocks) + "</ul>")
            if flipped:
                out.append("<table><tr><th>item</th><th>task</th><th>flip</th><th>reference answer</th>"
                           "<th>candidate answer</th></tr>")
                for f in flipped[:50]:
                    out.append(f"<tr><td>{_e(f['id'])}</td><td>{_e(f['task'])}</td><td>{_e(f['direction'])}</td>"
                               f"<td>{_e(_short(f.get('reference')))}</td><td>{_e(_short(f.get('candidate')))}</td></tr>")
                out.append("</table>")
    if data.get("notes"):
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in data["notes"]) + "</ul>")
    out.append('<p class="muted">Generated by qcheck eval (schema qcheck.eval/1). KL divergence is '
               "KL(reference ‖ candidate) per scored token in nats; intervals: per-document bootstrap (KLD, PPL), "
               "Wilson (agreement, flips), paired normal (accuracy delta), paired bootstrap (recovery).</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _short(text: Any, limit: int = 80) -> str:
    s = "" if text is None else " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"
