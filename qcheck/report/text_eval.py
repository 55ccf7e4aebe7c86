"""Human text for ``qcheck eval``: a header, one summary row per candidate, then failures, warnings, notes.

Rendered from ``result.to_json()`` only, so the text and the JSON can never disagree.
"""

from __future__ import annotations

from typing import Any

from qcheck.report.terminal import width


def _num(x: Any, digits: int = 4) -> str:
    if x is None:
        return "-"
    x = float(x)
    if x != 0 and (abs(x) < 10 ** -(digits - 1) or abs(x) >= 10**5):
        return f"{x:.2e}"
    return f"{x:.{digits}f}"


def _pct(x: Any, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * float(x):.{digits}f}%"


def _ci(iv: dict[str, Any] | None, fmt: Any = _num) -> str:
    if not iv or iv.get("low") is None or iv.get("high") is None:
        return ""
    return f" [{fmt(iv['low'])}, {fmt(iv['high'])}]"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        out.append("  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(r))
                   .rstrip())
    return out


def _fitted(rows: list[list[str]]) -> list[str]:
    """The candidate table, or on a terminal too narrow for it one block per candidate (metric: value)."""
    table = _table(rows)
    columns = width()
    if columns is None or max(len(line) for line in table) <= columns:
        return table
    header, out = rows[0], []
    for row in rows[1:]:
        out.append(f"{row[0]}:")
        out.extend("  " + line for line in _table([[h, v] for h, v in zip(header[1:], row[1:], strict=True)]))
    return out


def short_cache_path(path: str) -> str:
    """The cache entry as a reader needs it: ``~`` for the home directory and the key's first 12 hex digits
    (the full path is in the JSON); the key depends on the reference, tasks and library versions."""
    import os
    import re

    home = os.path.expanduser("~")
    if home and home != "~" and path.startswith(home + os.sep):
        path = "~" + path[len(home):]
    return re.sub(r"(ref-[0-9a-f]{12})[0-9a-f]{20,}", r"\1…", path)


def _summary_row(c: dict[str, Any], gate: str) -> list[str]:
    """One row of the summary table, for a candidate or the noise floor."""
    m, iv = c["metrics"], c["intervals"]
    kld = _num(m.get("kld_mean")) + _ci(iv.get("kld_mean"))
    if m.get("kld_kind") == "lower-bound":
        kld = "≥" + kld
    acc = "-" if m.get("accuracy") is None else f"{_pct(m.get('accuracy_reference'))}→{_pct(m.get('accuracy'))}"
    flips = "-" if m.get("flips") is None else f"{m.get('flips_c_to_i_count', 0)}/{m.get('flips_i_to_c_count', 0)}"
    return [c["name"], kld, _num(m.get("kld_p99")), _pct(m.get("top1_agreement")), _num(m.get("ppl_ratio")),
            _pct(m.get("delta_p_rms"), 2), acc, flips, _pct(m.get("greedy_agreement"), 0), gate]


def _simulation(c: dict[str, Any]) -> list[str]:
    """What engine arithmetic a simulated candidate reproduced, and what its number leaves out."""
    sim = c.get("simulation")
    if not sim:
        return []
    lines = [f"  simulated as {sim['engine']} computes: activations {sim['activations']}"]
    kv = sim.get("kv_cache") or {}
    if kv.get("description"):
        lines.append(f"  KV cache: {kv['description']}")
    if sim.get("effects_left_out"):
        lines.append("  the number leaves out: " + "; ".join(sim["effects_left_out"]))
    return lines


def _kv_split(c: dict[str, Any]) -> list[str]:
    """The KV cache's cost apart from the weights' (weights alone, KV alone, both)."""
    split = (c.get("kv_cache") or {}).get("split")
    if not split:
        return []
    lines = ["  cost split (mean KLD [95% CI], top-1):"]
    for key, name in (("weights", "weights alone"), ("kv", "KV cache alone"), ("both", "both")):
        part = split.get(key) or {}
        if part.get("kld_mean") is not None:
            value = (_num(part["kld_mean"]) + _ci(part.get("kld_mean_interval")) + f", {_pct(part.get('top1_agreement'))}")
        else:
            value = f"not measured: {part.get('unavailable') or part.get('error') or 'no tokens'}"
        lines.append(f"    {name:15s} {value}  ({part.get('label', '')})")
    return lines


def _by_position(c: dict[str, Any]) -> list[str]:
    """Mean KLD, top-1 and PPL ratio per position bucket, when more than one bucket was scored."""
    buckets = c.get("by_position") or []
    if len(buckets) < 2:
        return []
    rows = [["positions", "tokens", "KLD mean [95% CI]", "top-1", "PPL ratio [95% CI]"]]
    for b in buckets:
        span = f"{b['from']}-{b['to']}" if b.get("to") is not None else f"{b['from']}-{b['max_position'] + 1}"
        rows.append([span, f"{b['tokens']:,}", _num(b.get("kld_mean")) + _ci(b.get("kld_mean_interval")),
                     _pct(b.get("top1_agreement")), _num(b.get("ppl_ratio")) + _ci(b.get("ppl_ratio_interval"))])
    return ["  by position (tokens of context before the scored token):", *("    " + r for r in _table(rows))]


def _pair(m: dict[str, Any], key: str, fmt: Any = _pct) -> str:
    """``reference→candidate`` of a metric measured on both sides (``KEY_reference`` and ``KEY``)."""
    if m.get(key) is None:
        return "-"
    return f"{fmt(m.get(key + '_reference'))}→{fmt(m.get(key))}"


def _generation_table(candidates: list[dict[str, Any]]) -> list[str]:
    """Generation behaviour of generate items (``qcheck.eval.generation``), when any candidate generated."""
    shown = [c for c in candidates if c["metrics"].get("generate_items")]
    if not shown:
        return []
    rows = [["generation (reference→candidate)", "items", "length ratio [95% CI]", "ended (EOS)",
             "repetition (tail)", "JSON valid"]]
    for c in shown:
        m, iv = c["metrics"], c["intervals"]
        json_cell = "-" if not m.get("json_items") else f"{_pair(m, 'json_valid')} of {m['json_items']}"
        rows.append([c["name"], str(m["generate_items"]),
                     _num(m.get("length_ratio"), 3) + _ci(iv.get("length_ratio"), lambda x: _num(x, 3)),
                     _pair(m, "termination"), _pair(m, "repetition", lambda x: _num(x, 3)), json_cell])
    return ["", *_fitted(rows)]


#: generation regressions shown per candidate in the text report (the JSON lists up to 200)
SHOWN_REGRESSIONS = 5


def _clip(text: Any, limit: int = 40) -> str:
    text = "" if text is None else str(text)
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _regression_lines(c: dict[str, Any]) -> list[str]:
    """Generate items whose candidate output lost end-of-sequence, valid JSON, or turned repetitive."""
    found = c.get("generation_regressions") or []
    lines = [f"  lost on {g['id']} ({', '.join(g['lost'])}): reference {_clip(g.get('reference_output'))} → "
             f"candidate {_clip(g.get('candidate_output'))}" for g in found[:SHOWN_REGRESSIONS]]
    if len(found) > SHOWN_REGRESSIONS:
        lines.append(f"  ... and {len(found) - SHOWN_REGRESSIONS} more generate item(s) (generation_regressions in "
                     "the JSON)")
    return lines


def _mb(n: Any) -> str:
    return "-" if n is None else f"{n / 1e6:,.0f} MB"


def _phase(name: str, p: dict[str, Any]) -> str:
    load = p.get("load_seconds")
    rate = p.get("tokens_per_second")
    return (f"  {name}: {p.get('seconds') or 0:.1f} s" + (f" (load {load:.1f} s)" if load is not None else "")
            + f", {p.get('tokens', 0):,} tokens" + (f" at {rate:,.0f} tokens/s" if rate else "")
            + f", peak RSS {_mb(p.get('peak_rss_bytes'))}")


def _speed(data: dict[str, Any]) -> list[str]:
    """Wall time, tokens/s and peak RSS per phase (reference pass, each candidate, the noise floor)."""
    perf = data.get("performance") or {}
    if not perf:
        return []
    lines = [f"speed: {perf.get('wall_seconds') or 0:.1f} s wall, peak RSS {_mb(perf.get('peak_rss_bytes'))}"]
    if perf.get("reference"):
        lines.append(_phase("reference", perf["reference"]))
    for c in [*data["candidates"], *([data["noise_floor"]] if data.get("noise_floor") else [])]:
        if c.get("performance"):
            lines.append(_phase(c["name"], c["performance"]))
    return lines


def render(result: Any) -> str:
    data = result.to_json() if hasattr(result, "to_json") else result
    ref = data["reference"]
    tasks = data["tasks"]
    cache = data["cache"]
    by_kind = ", ".join(f"{n} {k}" for k, n in tasks.get("by_kind", {}).items() if n)
    endpoint = ref.get("endpoint")
    how = f"{ref.get('dtype')}, {ref.get('device')}" if not endpoint else (
        f"endpoint {endpoint.get('flavour')}, model {endpoint.get('model')}; "
        + ("full-vocabulary log-probs" if endpoint.get("logprobs") == "full" else
           f"top-{endpoint.get('top_k')} approximation: KLD is a lower bound"))
    lines = [f"qcheck eval: reference {ref['path']} ({how}); "
             f"{tasks['items']} items ({by_kind}) from {len(tasks['files'])} task file(s)"]
    source = "reused from cache" if cache["hit"] else "computed" + (" and cached" if cache.get("persistent") else "")
    lines.append(f"reference log-probs: {source} [{cache['kind']}{'' if not cache.get('topk') else ' k=' + str(cache['topk'])}]"
                 + (f" {short_cache_path(cache['path'])}" if cache.get("persistent") and cache.get("path") else ""))
    thr = data.get("thresholds") or {}
    active = {k: v for k, v in thr.items() if k not in ("tier", "use_intervals")}
    if active:
        desc = ", ".join(f"{k.replace('_', '-')} {v:g}" for k, v in active.items())
        lines.append(f"gate: {desc}" + (f" (tier {thr['tier']})" if thr.get("tier") else "")
                     + (" on 95% interval bounds" if thr.get("use_intervals") else ""))
    else:
        lines.append("gate: no thresholds set (pass --tier or --max-kld ... to gate)")
    lines.append("")

    header = ["candidate", "KLD mean [95% CI]", "KLD p99", "top-1", "PPL ratio", "Δp RMS", "acc ref→cand",
              "flips C→I/I→C", "greedy", "gate"]
    rows = [header]
    for c in data["candidates"]:
        rows.append(_summary_row(c, "PASS" if c["gate"]["passed"] else "FAIL"))
    noise = data.get("noise_floor")
    if noise and noise.get("metrics"):
        rows.append(_summary_row(noise, "not gated"))
    lines.extend(_fitted(rows))
    if noise:
        lines.append("")
        if noise.get("error"):
            lines.append(f"noise floor: not measured: {noise['error']}")
        else:
            lines.append(f"noise floor: {noise['description']}. A KLD near this row is what a precision "
                         "change alone costs on these tasks.")

    lines.extend(_generation_table(data["candidates"]))
    tasks_seen = sorted({t for c in data["candidates"] for t in c.get("per_task", {})})
    if len(tasks_seen) > 1:
        lines.append("")
        lines.append("accuracy per task (reference → candidate):")
        trows = [["task", "n", *[c["name"] for c in data["candidates"]]]]
        for t in tasks_seen:
            first = next(c["per_task"][t] for c in data["candidates"] if t in c.get("per_task", {}))
            cells = [t, str(first["n"])]
            for c in data["candidates"]:
                pt = c.get("per_task", {}).get(t)
                cells.append("-" if pt is None else f"{_pct(pt['accuracy_reference'], 0)}→{_pct(pt['accuracy'], 0)}")
            trows.append(cells)
        lines.extend("  " + line for line in _table(trows))

    for c in data["candidates"]:
        extra = [*_simulation(c), *_kv_split(c), *_by_position(c)]
        for f in c["gate"]["failures"]:
            extra.append(f"  FAIL {f['message']}")
        extra.extend(_regression_lines(c))
        for w in c.get("warnings", []):
            extra.append(f"  warning: {w}")
        for n in c.get("notes", []):
            extra.append(f"  note: {n}")
        if extra:
            lines.append("")
            lines.append(f"{c['name']} ({c['backend']}):")
            lines.extend(extra)
    for n in data.get("notes", []):
        lines.append(f"note: {n}")
    speed = _speed(data)
    if speed:
        lines.append("")
        lines.extend(speed)
    lines.append("")
    passed = sum(1 for c in data["candidates"] if c["gate"]["passed"])
    lines.append(f"{passed}/{len(data['candidates'])} candidate(s) passed; exit code {data['exit_code']}")
    return "\n".join(lines) + "\n"
