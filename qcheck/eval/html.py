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
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em;color:#222;max-width:1100px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.9em;margin:.5em 0}th,td{border:1px solid #ddd;padding:4px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f4f4f4}
td,th{white-space:nowrap}td.wrap{white-space:normal;overflow-wrap:anywhere;text-align:left}
.scroll{overflow-x:auto;max-width:100%}
.pass{color:#1a7f37;font-weight:bold}.fail{color:#c62828;font-weight:bold}.muted{color:#777;font-size:.85em}
.neutral{color:#555;font-weight:bold}td.failed{background:#fde8e8;color:#c62828;font-weight:bold}
svg{max-width:100%;height:auto}svg text{font-size:11px;fill:#333}.note{color:#555}
table.meta td{text-align:left}table.meta{font-size:.85em}
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


def _pct_small(x: Any) -> str:
    """A percentage that stays readable when small (RMS Δp is often far below 0.1%): three significant digits."""
    if x is None:
        return "–"
    v = 100 * float(x)
    if v == 0 or abs(v) >= 1:
        return f"{v:.2f}%"
    return f"{v:.3g}%"


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
    for exp, pos in power_of_ten_ticks(edges):
        px = left + pos * group_w
        parts.append(f'<line x1="{px:.1f}" y1="{top + plot_h}" x2="{px:.1f}" y2="{top + plot_h + 4}" stroke="#999"/>')
        parts.append(f'<text x="{px:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{_power_label(exp)}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.0f}" y="{height - 28}" text-anchor="middle">per-token KL divergence '
                 '(nats, log-spaced bins; lower is better)</text>')
    parts.append(_legend([n for n, _ in series], left, height - 12))
    parts.append("</svg>")
    return "".join(parts)


def power_of_ten_ticks(edges: list[float]) -> list[tuple[int | None, float]]:
    """(exponent, position in bins) for every power of ten inside the log-spaced edges; the first edge may be 0
    (the bin of exact zeros), whose tick is labelled 0."""
    import itertools
    import math

    ticks: list[tuple[int | None, float]] = [(None, 0.0)] if edges and edges[0] == 0 else []
    positive = [(i, e) for i, e in enumerate(edges) if e > 0]
    if len(positive) < 2:
        return ticks
    for (i, lo), (_, hi) in itertools.pairwise(positive):
        llo, lhi = math.log10(lo), math.log10(hi)
        for exp in range(math.ceil(llo - 1e-9), math.floor(lhi + 1e-9) + 1):
            if ticks and ticks[-1][0] == exp:
                continue
            ticks.append((exp, i + (exp - llo) / (lhi - llo)))
    return ticks


def _power_label(exp: int | None) -> str:
    if exp is None:
        return "0"
    return {0: "1", 1: "10"}.get(exp, f"10<tspan dy='-5' font-size='8'>{exp}</tspan>")


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
            h = max(float(v) * plot_h, 1.5)  # 0%: a visible sliver and its label, not a gap
            x = gx + bi * bar_w
            parts.append(f'<rect class="bar" x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w * 0.9:.1f}" '
                         f'height="{h:.1f}" fill="{color}"><title>{_e(task)} · {_e(name)}: {100 * float(v):.1f}% '
                         f'(n={first["n"]})</title></rect>')
            if float(v) == 0:
                parts.append(f'<text class="zero" x="{x + bar_w * 0.45:.1f}" y="{top + plot_h - 4:.1f}" '
                             f'text-anchor="middle">0%</text>')
        label = task if len(task) <= 16 else task[:15] + "…"
        parts.append(f'<text x="{left + ti * group_w + group_w / 2:.1f}" y="{top + plot_h + 14}" '
                     f'text-anchor="middle">{_e(label)}</text>')
    parts.append(_legend([c["name"] for c in candidates], left, height - 12, with_reference=True))
    parts.append("</svg>")
    return "".join(parts)


def render_html(data: dict[str, Any], meta: dict[str, Any] | None = None) -> str:
    """The whole report as one HTML string (``data`` is ``EvalResult.to_json()``; ``meta`` what the JSON does
    not hold: ``command`` (argv), ``generated`` (ISO date) and ``versions`` (package -> version))."""
    from qcheck.report.sanitize import sanitized

    data, meta = sanitized(data), sanitized(meta or {})  # candidate names, paths, task names: made visible
    ref, tasks, cache, cands = data["reference"], data["tasks"], data["cache"], data["candidates"]
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           "<title>qcheck eval report</title>", f"<style>{_CSS}</style></head><body>"]
    thr = {k: v for k, v in (data.get("thresholds") or {}).items() if k not in ("tier", "use_intervals")}
    if not thr:
        out.append('<h1>qcheck eval: <span class="neutral">measured, not gated</span></h1>')
    else:
        verdict = "PASS" if data["exit_code"] == 0 else "FAIL"
        out.append(f'<h1>qcheck eval: <span class="{verdict.lower()}">{verdict}</span></h1>')
    endpoint = ref.get("endpoint")
    how = f"{_e(ref.get('dtype'))}, {_e(ref.get('device'))}" if not endpoint else (
        f"endpoint {_e(endpoint.get('flavour'))}, model <code>{_e(endpoint.get('model'))}</code>, "
        + ("full-vocabulary log-probs" if endpoint.get("logprobs") == "full" else
           f"<strong>top-{_e(endpoint.get('top_k'))} approximation</strong>: KLD is a lower bound"))
    out.append(f"<p>Reference <code>{_e(ref['path'])}</code> ({_e(ref.get('architecture'))}, {how}); "
               f"{tasks['items']} items from {len(tasks['files'])} task file(s); "
               f"reference log-probs {'reused from cache' if cache['hit'] else 'computed'} "
               f"(<code>{_e(cache['kind'])}</code>: {_e(cache.get('precision'))}).</p>")
    if thr:
        out.append("<p>Thresholds: " + ", ".join(f"<code>{_e(k.replace('_', '-'))} {v:g}</code>" for k, v in thr.items())
                   + (f" (tier {_e(data['thresholds'].get('tier'))})" if data["thresholds"].get("tier") else "")
                   + "</p>")
    else:
        out.append("<p>No thresholds were set (<code>--tier</code>, <code>--max-kld</code> ...): the numbers are "
                   "measurements, nothing was gated.</p>")
    noise = data.get("noise_floor") or {}
    out.append(_summary_table(cands, gated=bool(thr), noise=noise if noise.get("metrics") else None))
    if noise:
        said = f"not measured: {noise['error']}" if noise.get("error") else noise.get("description")
        out.append(f"<p>Noise floor: {_e(said)}. A KLD near it is what a precision change alone costs on these "
                   "tasks.</p>")
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
        details = _candidate_details(c)
        if blocks or flipped or details:
            out.append(f"<h2>{_e(c['name'])}</h2>")
            out.extend(details)
            if blocks:
                out.append("<ul>" + "".join(blocks) + "</ul>")
            if flipped:
                out.append("<table><tr><th>item</th><th>task</th><th>flip</th><th>reference answer</th>"
                           "<th>candidate answer</th></tr>")
                for f in flipped[:50]:
                    out.append(f"<tr><td>{_e(f['id'])}</td><td>{_e(f['task'])}</td><td>{_e(f['direction'])}</td>"
                               f"<td>{_e(_short(f.get('reference')))}</td><td>{_e(_short(f.get('candidate')))}</td></tr>")
                out.append("</table>")
            out.extend(_regressions_table(c.get("generation_regressions") or []))
    if data.get("notes"):
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in data["notes"]) + "</ul>")
    out.append(_provenance(data, meta))
    out.append('<p class="muted">Generated by qcheck eval (schema qcheck.eval/1). KL divergence is '
               "KL(reference ‖ candidate) per scored token in nats; intervals: per-document bootstrap (KLD, PPL), "
               "Wilson (agreement, flips), paired normal (accuracy delta), paired bootstrap (recovery).</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _candidate_details(c: dict[str, Any]) -> list[str]:
    """The engine arithmetic simulated, the KV cache's cost split and the loss by position of one candidate."""
    out: list[str] = []
    sim = c.get("simulation")
    if sim:
        kv = (sim.get("kv_cache") or {}).get("description")
        out.append(f"<p>Simulated as {_e(sim['engine'])} computes: activations {_e(sim['activations'])}"
                   + (f"; {_e(kv)}" if kv else "") + ".</p>")
        if sim.get("effects_left_out"):
            out.append("<p class='muted'>The number leaves out: " + _e("; ".join(sim["effects_left_out"])) + ".</p>")
    split = (c.get("kv_cache") or {}).get("split")
    if split:
        rows = ["<table><tr><th>KV cache cost split</th><th>mean KLD (95% CI)</th><th>top-1</th><th>what</th></tr>"]
        for key, name in (("weights", "weights alone"), ("kv", "KV cache alone"), ("both", "both")):
            part = split.get(key) or {}
            value = (_num(part["kld_mean"]) + _ci(part.get("kld_mean_interval"))) if part.get("kld_mean") is not None \
                else _e(part.get("unavailable") or part.get("error") or "-")
            rows.append(f"<tr><td>{name}</td><td>{value}</td><td>{_pct(part.get('top1_agreement'))}</td>"
                        f"<td>{_e(part.get('label', ''))}</td></tr>")
        out.append("".join(rows) + "</table>")
    buckets = c.get("by_position") or []
    if buckets:  # the loss by position the README promises, also when every token is in the first bucket
        rows = ["<table><tr><th>loss by position</th><th>tokens</th><th>mean KLD (95% CI)</th><th>top-1</th>"
                "<th>PPL ratio (95% CI)</th></tr>"]
        for b in buckets:
            span = f"{b['from']}-{b['to'] if b.get('to') is not None else b['max_position'] + 1}"
            rows.append(f"<tr><td>{span}</td><td>{b['tokens']:,}</td>"
                        f"<td>{_num(b.get('kld_mean'))}{_ci(b.get('kld_mean_interval'))}</td>"
                        f"<td>{_pct(b.get('top1_agreement'))}</td>"
                        f"<td>{_num(b.get('ppl_ratio'))}{_ci(b.get('ppl_ratio_interval'))}</td></tr>")
        out.append("".join(rows) + "</table>")
        if len(buckets) == 1:
            out.append("<p class='muted'>Every scored token is in the first bucket: tasks with longer items (--tasks "
                       "long_context) fill the later ones.</p>")
    return out


#: summary rows: (label, metric key, formatter, interval formatter or None)
_ROWS: list[tuple[str, str, Any, Any]] = [
    ("mean KLD (95% CI)", "kld_mean", _num, _num), ("median KLD", "kld_median", _num, None),
    ("p99 KLD", "kld_p99", _num, None), ("max KLD", "kld_max", _num, None),
    ("top-1 agreement", "top1_agreement", _pct, _pct), ("PPL ratio", "ppl_ratio", _num, _num),
    ("RMS Δp", "delta_p_rms", _pct_small, None), ("NLL correlation", "nll_correlation", _num, None),
    ("recovery", "recovery", lambda x: _num(x, 3), lambda x: _num(x, 3)),
    ("greedy agreement", "greedy_agreement", _pct, None),
]


def _summary_table(cands: list[dict[str, Any]], gated: bool, noise: dict[str, Any] | None = None) -> str:
    """Metrics down, candidates across (fits a narrow page); a metric that failed its threshold is marked.

    ``noise`` (the ``--noise-floor`` record) is a last, muted column that is never gated."""
    gated_count = len(cands)
    if noise is not None:
        cands = [*cands, {**noise, "gate": {"passed": True, "failures": []}}]
    muted = ' class="muted"'
    head = "".join(f"<th{muted if i >= gated_count else ''}>{_e(c['name'])}</th>" for i, c in enumerate(cands))
    rows = [f"<h2>Summary</h2><div class='scroll'><table class='summary'><tr><th>metric</th>{head}</tr>",
            "<tr><td>backend</td>" + "".join(f"<td>{_e(c['backend'])}</td>" for c in cands) + "</tr>"]
    for label, key, fmt, ci_fmt in _ROWS:
        cells = []
        for c in cands:
            m, iv = c["metrics"], c["intervals"]
            failed = any(f.get("metric") == key for f in c["gate"]["failures"])
            lb = "≥ " if key == "kld_mean" and m.get("kld_kind") == "lower-bound" else ""
            ci = _ci(iv.get(key), ci_fmt).replace(" <span", "<br><span", 1) if ci_fmt else ""
            cls = ' class="failed" title="fails its threshold"' if failed else ""
            cells.append(f"<td{cls}>{lb}{fmt(m.get(key))}{ci}</td>")
        rows.append(f"<tr><td>{_e(label)}</td>{''.join(cells)}</tr>")
    acc, flips = [], []
    for c in cands:
        m = c["metrics"]
        failed = any(f.get("metric") in ("accuracy", "accuracy_delta") for f in c["gate"]["failures"])
        cls = ' class="failed"' if failed else ""
        acc.append(f"<td{cls}>" + ("–" if m.get("accuracy") is None
                                    else f"{_pct(m['accuracy_reference'])} → {_pct(m['accuracy'])}") + "</td>")
        flips.append("<td>" + ("–" if m.get("flips") is None
                               else f"{m.get('flips_c_to_i_count')} / {m.get('flips_i_to_c_count')}") + "</td>")
    rows.append(f"<tr><td>accuracy ref → cand</td>{''.join(acc)}</tr>")
    rows.append(f"<tr><td>flips C→I / I→C</td>{''.join(flips)}</tr>")
    rows.extend(_generation_rows(cands))
    rows.append(_coverage_row(cands))
    if gated:
        gate = "".join('<td><span class="pass">PASS</span></td>' if c["gate"]["passed"]
                       else '<td><span class="fail">FAIL</span></td>' for c in cands[:gated_count])
    else:
        gate = "".join('<td><span class="muted">no threshold</span></td>' for _ in cands[:gated_count])
    gate += '<td><span class="muted">not gated</span></td>' * (len(cands) - gated_count)
    rows.append(f"<tr><td>gate</td>{gate}</tr></table></div>")
    return "".join(rows)


#: generation behaviour rows: (label, metric, the metrics a failure on which marks the cell, formatter)
_GENERATION_ROWS: list[tuple[str, str, tuple[str, ...], Any]] = [
    ("ended with EOS ref → cand", "termination", ("termination_drop",), _pct),
    ("repetition (tail) ref → cand", "repetition", ("repetition_increase",), lambda x: _num(x, 3)),
    ("JSON valid ref → cand", "json_valid", ("json_valid", "json_validity_drop"), _pct),
]


def _cell(c: dict[str, Any], metrics: tuple[str, ...], body: str) -> str:
    failed = any(f.get("metric") in metrics for f in c["gate"]["failures"])
    return f'<td class="failed" title="fails its threshold">{body}</td>' if failed else f"<td>{body}</td>"


def _generation_rows(cands: list[dict[str, Any]]) -> list[str]:
    """Generation behaviour of generate items (length ratio, EOS, repetition, JSON), when any were generated."""
    if not any(c["metrics"].get("generate_items") for c in cands):
        return []
    rows = []
    cells = []
    for c in cands:
        m, iv = c["metrics"], c["intervals"]
        ratio = _num(m.get("length_ratio"), 3) + _ci(iv.get("length_ratio"), lambda x: _num(x, 3)).replace(
            " <span", "<br><span", 1)
        cells.append(_cell(c, ("length_ratio",), ratio))
    rows.append(f"<tr><td>generated length ratio</td>{''.join(cells)}</tr>")
    for label, key, failing, fmt in _GENERATION_ROWS:
        cells = []
        for c in cands:
            m = c["metrics"]
            body = "–" if m.get(key) is None else f"{fmt(m.get(key + '_reference'))} → {fmt(m.get(key))}"
            cells.append(_cell(c, failing, body))
        rows.append(f"<tr><td>{_e(label)}</td>{''.join(cells)}</tr>")
    return rows


def _regressions_table(found: list[dict[str, Any]]) -> list[str]:
    """Generate items whose candidate output lost end-of-sequence, valid JSON, or turned repetitive."""
    if not found:
        return []
    rows = ["<table><tr><th>item</th><th>task</th><th>lost</th><th>reference output</th><th>candidate output</th>"
            "</tr>"]
    for g in found[:50]:
        rows.append(f"<tr><td>{_e(g['id'])}</td><td>{_e(g['task'])}</td><td>{_e(', '.join(g['lost']))}</td>"
                    f"<td>{_e(_short(g.get('reference_output')))}</td><td>{_e(_short(g.get('candidate_output')))}</td>"
                    "</tr>")
    return ["".join(rows) + "</table>"]


def _coverage_row(cands: list[dict[str, Any]]) -> str:
    """Items and tokens the candidate was measured on, of those in the task set."""
    cells = []
    for c in cands:
        cov = c.get("coverage")
        body = "–" if not cov else f"{cov['items']}/{cov['items_total']} items" + (
            f"<br>{cov['tokens']:,}/{cov['tokens_total']:,} tokens" if cov["tokens_total"] else "")
        cells.append(_cell(c, ("coverage",), body))
    return f"<tr><td>coverage</td>{''.join(cells)}</tr>"


def _provenance(data: dict[str, Any], meta: dict[str, Any]) -> str:
    """What a reader needs to reproduce the run: versions, date, command, every path and task."""
    ref, tasks = data["reference"], data["tasks"]
    rows: list[tuple[str, str]] = []
    if meta.get("generated"):
        rows.append(("generated", _e(meta["generated"])))
    versions = meta.get("versions") or {}
    if versions:
        rows.append(("versions", ", ".join(f"{_e(k)} {_e(v)}" for k, v in versions.items())))
    if meta.get("command"):
        import shlex

        rows.append(("command", f"<code>{_e(shlex.join(str(a) for a in meta['command']))}</code>"))
    rows.append(("reference", f"<code>{_e(ref.get('path'))}</code>"))
    for c in data["candidates"]:
        rows.append((f"candidate {_e(c['name'])}", f"<code>{_e(c.get('path'))}</code> ({_e(c.get('backend'))})"))
    rows.append(("task files", ", ".join(f"<code>{_e(f)}</code>" for f in tasks.get("files") or [])))
    by_task = tasks.get("by_task") or {}
    if by_task:
        rows.append(("tasks", ", ".join(f"{_e(t)} ({n})" for t, n in by_task.items())))
    settings = data.get("settings") or {}
    if settings:
        rows.append(("settings", ", ".join(f"{_e(k.replace('_', ' '))} {_setting(v)}" for k, v in settings.items())))
    body = "".join(f"<tr><td>{k}</td><td class='wrap'>{v}</td></tr>" for k, v in rows)
    return f"<h2>Run</h2><table class='meta'>{body}</table>"


def _setting(value: Any) -> str:
    """A run setting for people: a KV cache pair as 'K q8_0, V q8_0' ('default' when neither is set), a per-candidate
    table as 'name: value', none as '-', never a Python dict."""
    if isinstance(value, dict):
        if set(value) == {"k", "v"}:
            return "default" if value["k"] is None and value["v"] is None else \
                f"K {_e(value['k'] or 'default')}, V {_e(value['v'] or 'default')}"
        return "; ".join(f"{_e(k)}: {_setting(v)}" for k, v in value.items()) or "-"
    if value is None:
        return "-"
    return _e(value)


def _short(text: Any, limit: int = 80) -> str:
    s = "" if text is None else " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"
