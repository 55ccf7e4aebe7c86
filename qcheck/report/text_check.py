"""Human text for ``qcheck check``: one line for the checkpoint, then one block per (engine, GPU) verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qcheck.report.text_inspect import describe as describe_inspection

if TYPE_CHECKING:
    from qcheck.check import CheckResult
    from qcheck.model import Inspection, Verdict
    from qcheck.request import Origin

_WORDS = {"native": "NATIVE", "fallback": "FALLBACK", "unsupported": "UNSUPPORTED", "unknown": "UNKNOWN"}
_LABEL_WIDTH = 11


def describe(inspection: Inspection) -> str:
    """The checkpoint line: the same one-liner ``qcheck inspect`` prints, so both commands name it alike."""
    return describe_inspection(inspection)


def target_label(v: Verdict) -> str:
    """'h100 (hopper, sm90)', 'hopper (sm90)', 'cpu-x86', or 'hosted' for providers."""
    if v.arch is None:
        return "hosted"
    sm = f"sm{v.compute_capability.replace('.', '')}" if v.compute_capability else None
    if v.gpu:
        inner = ", ".join(x for x in (v.arch, sm) if x)
        return f"{v.gpu} ({inner})"
    return f"{v.arch} ({sm})" if sm else v.arch


def engine_label(v: Verdict) -> str:
    """'vllm 0.33.0' or 'llama.cpp b11312 [vulkan]': the version judged, and the backend if one was picked."""
    backend = f" [{v.backend}]" if v.backend else ""
    return f"{v.engine} {v.engine_version}{backend}"


def status_word(v: Verdict) -> str:
    """The status as the block's first word: ``DOES NOT START`` when the engine's start-up with the settings asked
    decided an unsupported verdict, ``START UNKNOWN`` an unknown one, else the status."""
    if startup_decided(v):
        return "DOES NOT START" if v.status == "unsupported" else "START UNKNOWN"
    return _WORDS.get(v.status, v.status.upper())


def startup_decided(v: Verdict) -> bool:
    """Whether the ``start-up`` dimension alone set a failing status (unsupported or unknown)."""
    if v.status not in ("unsupported", "unknown"):
        return False
    deciding = {d.dimension for d in v.dimensions if d.status == v.status}
    return deciding == {"start-up"}


def render_verdict(v: Verdict, failing: bool | None = None) -> list[str]:
    """One verdict block: status, engine x target (``<- fails`` when ``failing``), then labelled details."""
    mark = "" if failing is None else ("  <- fails" if failing else "")
    if failing and v.status in ("native", "fallback") and any(r.kind == "kv-scales" for r in v.risks):
        mark += " (--require-kv-scales: it runs with default KV-cache scales)"
    lines = [f"{status_word(v):<{_LABEL_WIDTH}}  {engine_label(v)} x {target_label(v)}{mark}"]

    def field(label: str, items: list[str]) -> None:
        for i, item in enumerate(items):
            lines.append(f"  {(label + ':') if i == 0 else '':<{_LABEL_WIDTH}}{item}")

    if v.kernel and not _does_not_load(v):
        field("kernel", [v.kernel])
    field("attention", [d.reasons[0] for d in v.dimensions if d.dimension == "attention" and d.status == "native"
                        and d.reasons][:1])
    field("requires", v.requires)
    if v.startup is not None:
        field("start-up", [v.startup.message + ("" if v.startup.judged else " (not judged: --kernels-only)")])
    field("why", [r for r in v.reasons if v.startup is None or not r.startswith("start-up: ")])
    field("warning", v.warnings)
    field("try", v.suggestions)
    if v.memory is not None:
        field("memory", [v.memory.summary()])
        if v.memory.speed is not None and v.memory.speed.summary:
            field("speed", [v.memory.speed.summary])
        if v.memory.concurrency is not None:
            from qcheck.report.capacity import text_lines

            field("capacity", text_lines(v.memory.to_json()["concurrency"]))
    field("sources", [_short_source(s.ref, s.version) for s in v.sources])
    return lines


def _does_not_load(v: Verdict) -> bool:
    """The engine refuses the model's architecture while its weight format alone would run: no kernel is reached,
    so the text shows none (JSON keeps ``kernel``: the weight format's kernel, with ``dimensions`` saying why)."""
    status = {d.dimension: d.status for d in v.dimensions}
    return v.status == "unsupported" and status.get("architecture") == "unsupported" and \
        status.get("weights") != "unsupported"


def _short_source(ref: str, version: str | None, limit: int = 100) -> str:
    """The source, shortened at a word boundary (never mid-word; a URL or path is kept whole)."""
    text = ref
    if len(ref) > limit:
        cut = ref.rfind(" ", 0, limit - 3)
        if cut <= limit // 2:  # one long token (a path): keep it whole, cut after it
            cut = ref.find(" ", limit - 3)
        if cut > 0:
            text = ref[:cut].rstrip(" ,;:(") + " ..."
    return f"{text} @ {version}" if version else text


def render(result: CheckResult) -> str:
    """``qcheck check`` text: checkpoint line, warnings, a block per verdict, a summary with the exit code."""
    insp = result.inspection
    lines = [f"{insp.path}: {describe(insp)}"]
    for warning in [*insp.warnings, *result.warnings]:
        lines.append(f"  warning: {warning}")
    origin = result.request.origin if result.request is not None else None
    if origin is not None:
        lines.extend(deployment_lines(origin))
    for v in result.verdicts:
        lines.append("")
        lines.extend(render_verdict(v, None if result.explore else result.fails(v)))
    lines.append("")
    counts: dict[str, int] = {}
    for v in result.verdicts:
        word = status_word(v).lower() if startup_decided(v) else v.status
        counts[word] = counts.get(word, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in counts.items())
    total = plural(len(result.verdicts), "combination")
    if result.explore:
        runs = [engine_label(v) for v in result.verdicts if not result.fails(v)]
        verdict = (f"runs on {', '.join(dict.fromkeys(runs))}" if runs else "no engine runs it")
        lines.append(f"explored {total}: {summary}; {verdict} (exit {result.exit_code}; name --engine to gate)")
        return "\n".join(lines) + "\n"
    failing = sum(1 for v in result.verdicts if result.fails(v))
    starts = result.request is not None and result.request.judges_startup
    if failing == 0:
        if len(result.verdicts) == 1:
            verdict = "it runs" + (" and starts with the settings asked" if starts else "")
        else:
            verdict = "all combinations run it" + (" and start with the settings asked" if starts else "")
    else:
        verdict = f"{failing} of {len(result.verdicts)} fail{'s' if failing == 1 else ''}"
    lines.append(f"{total}: {summary}; {verdict} (exit {result.exit_code})")
    return "\n".join(lines) + "\n"


def deployment_lines(origin: Origin) -> list[str]:
    """The engine command or manifest the request was read from: what was judged and what was not."""
    where = f" ({origin.file}:{origin.line})" if origin.file else ""
    lines = [f"  deployment: {origin.command}{where}"]
    judged = [f"{s.flag}{'' if s.value is None else ' ' + s.value} -> {s.judged_as}" for s in origin.settings
              if s.judged_as is not None]
    if judged:
        lines.append(f"  judged:     {'; '.join(judged)}")
    skipped = [f"{s.flag}{'' if s.value is None else ' ' + s.value}" for s in origin.not_judged]
    lines.append(f"  not judged: {'; '.join(skipped) if skipped else 'none'}")
    lines.append(f"  flags read: {origin.flags_source}")
    return lines


def plural(n: int, word: str) -> str:
    """'1 combination', '4 combinations'."""
    return f"{n} {word}{'' if n == 1 else 's'}"
