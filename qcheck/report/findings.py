"""One flat list of findings from any result (check, eval, gate, inspect), with stable rule ids.

SARIF, GitHub annotations, JUnit and Markdown all need the same thing: "what is wrong, how bad, where".
They get it from here, computed from ``result.to_json()`` only (the public contract), so every format
agrees with the JSON and with each other. Rule ids never change meaning once shipped: code scanning
tracks alerts by them (docs/research/peers.md §4.2).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Any

from qcheck.model import Origin

LEVELS = ("error", "warning", "note")


@dataclass(frozen=True)
class Rule:
    """A kind of finding: SARIF ``reportingDescriptor``, GitHub annotation title, JUnit failure type."""

    id: str
    name: str
    short: str
    full: str
    level: str  # default level
    rank: int  # lower = more severe, to order findings of the same level


RULES: dict[str, Rule] = {r.id: r for r in (
    Rule("QC100", "input-not-judged", "The model could not be judged",
         "The checkpoint is unreadable, malformed, hostile or not a checkpoint, so no engine or GPU could be "
         "judged for it (exit code 2).", "error", 0),
    Rule("QC101", "unsafe-pickle", "Pickle checkpoint: never loaded",
         "A pickle checkpoint (.bin/.pt/.pth) executes code when loaded; qcheck never unpickles it and cannot "
         "judge it from headers. Convert it to safetensors.", "error", 1),
    Rule("QC102", "lfs-pointer", "Git LFS pointer: weights not pulled",
         "A Git LFS pointer file stands where the checkpoint should be. It was skipped; run `git lfs pull` "
         "(or check out with LFS) to judge the real file.", "note", 20),
    Rule("QC110", "engine-unsupported", "The engine cannot run this checkpoint on this GPU",
         "The matrix says the engine refuses this quantisation format on this hardware, or has no kernel "
         "path for it.", "error", 2),
    Rule("QC111", "status-unknown", "No sourced answer for this engine and GPU",
         "The matrix has no sourced rule for this combination, so qcheck does not guess. It fails unless "
         "unknown combinations are allowed (--allow-unknown / allow-unknown = true).", "error", 4),
    Rule("QC112", "fallback-kernel", "Runs only through a slower fallback path",
         "The checkpoint runs, but through a substitute path (a weight-only kernel, emulation, CPU offload) "
         "rather than the format's own kernel. It fails when native kernels are required.", "warning", 5),
    Rule("QC113", "requirement", "Runs only with a plugin, flag or conversion",
         "The engine runs this checkpoint only when a condition holds: a plugin installed, a flag passed, "
         "shards merged.", "note", 15),
    Rule("QC114", "memory-does-not-fit", "Does not fit in the GPU's memory",
         "Weights, KV cache at the stated context and batch, activations and runtime overhead exceed the "
         "usable memory of one GPU.", "warning", 6),
    Rule("QC116", "does-not-start", "Does not start with the settings asked",
         "The engine refuses to start with the deployment's settings (its KV pool cannot hold one request at the "
         "context, no memory is left for the KV cache, a context above the model's maximum, a -ngl split that does "
         "not fit, more GPUs than the node has), or qcheck cannot tell whether it starts (no GPU product named, no "
         "memory data, a behaviour not read at this version). Judge the kernels only with --kernels-only / "
         "kernels-only = true.", "error", 2),
    Rule("QC115", "runtime-risk", "Runs, but with a known loss at run time",
         "The engine runs the checkpoint, but does something at run time that costs accuracy or speed: a quantised "
         "KV cache with default scales of 1.0 because the checkpoint ships no k_scale/v_scale (or q/prob scales), "
         "or a problem reported in the engine's tracker for this version and GPU. It fails when the policy "
         "requires calibrated KV scales (--require-kv-scales / require-kv-scales = true).", "warning", 7),
    Rule("QC120", "quality-threshold", "Quantisation loss over a quality threshold",
         "A quality metric measured against the unquantised reference (KL divergence, top-1 agreement, "
         "perplexity ratio, accuracy) crossed its threshold.", "error", 3),
    Rule("QC121", "quality-resolution", "The task set cannot resolve a threshold",
         "The confidence interval of a metric contains its threshold, or the task set is too small to "
         "detect the allowed accuracy drop: add items.", "warning", 10),
    Rule("QC122", "quality-not-measured", "The quality gate could not run",
         "The evaluation could not be run (bad task file, missing reference, missing the eval extra).", "error", 1),
    Rule("QC130", "config-mismatch", "Config and tensors disagree",
         "The checkpoint's config files and its tensor headers disagree (a quantisation config that does not "
         "match the stored tensors, a wrong shape).", "warning", 8),
    Rule("QC131", "inspection-warning", "Inspection warning",
         "Something about the checkpoint that deserves attention but does not stop it from running.", "note", 16),
)}


@dataclass
class Finding:
    """One thing to report: a rule, a level, a message, the model file and the tensor/key inside it."""

    rule: Rule
    level: str
    message: str
    model: str  # the model as named in the result (path, directory or Hub id)
    artifact: str | None = None  # the file to point at (None for a Hub repo)
    logical: str | None = None  # tensor name or metadata key
    title: str = ""
    properties: dict[str, Any] = field(default_factory=dict)

    @property
    def sort_key(self) -> tuple[int, int, str, str]:
        return LEVELS.index(self.level), self.rule.rank, self.model, self.message

    def fingerprint(self) -> str:
        """Stable across runs (no times, no absolute temp paths beyond what the user gave)."""
        parts = [self.rule.id, self.model, self.logical or "", self.title,
                 str(self.properties.get("engine", "")), str(self.properties.get("gpu", "")),
                 str(self.properties.get("threshold", ""))]
        return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


# ----------------------------------------------------------------------------------------- locations
_FILE_SUFFIXES = (".gguf", ".safetensors", ".json", ".bin", ".pt", ".pth", ".ckpt")


def origin_of(model: str) -> Origin:
    """``qcheck.hub.target.origin_of``, imported when a finding needs it (the Hub client is not loaded to print a
    local inspection)."""
    from qcheck.hub.target import origin_of as hub_origin_of

    return hub_origin_of(model)


def origin(inspection: dict[str, Any] | None, model: str) -> Origin:
    """Where ``model`` was read from: the inspection records it (a Hub checkpoint carries the commit it was read
    at as ``revision``, a local one never does); without one (a model that failed to load, an eval candidate),
    the rule the readers apply to the name (``qcheck.hub.target.origin_of``)."""
    if isinstance(inspection, dict) and "revision" in inspection:
        return "hub" if inspection["revision"] is not None else "local"
    return origin_of(model)


def artifact_of(inspection: dict[str, Any] | None, model: str) -> str | None:
    """The file a finding about ``model`` points at: the file itself, a directory's ``config.json``
    (or its index / first weight file), or None for a Hub repo."""
    if origin(inspection, model) == "hub":
        return None
    if model.lower().endswith(_FILE_SUFFIXES):
        return model
    names = [f.get("name") for f in (inspection or {}).get("files") or [] if isinstance(f, dict)]
    files = [f for f in names if isinstance(f, str)]
    for preferred in ("config.json", "model.safetensors.index.json"):
        if preferred in files:
            return os.path.join(model, preferred)
    weights = [f for f in files if f.endswith((".gguf", ".safetensors"))]
    if weights:
        return os.path.join(model, sorted(weights)[0])
    return model


def decision_key(inspection: dict[str, Any] | None) -> str | None:
    """The metadata key that declares the quantisation format, as the logical location of a verdict."""
    if not inspection:
        return None
    quant = inspection.get("quantization") or {}
    if inspection.get("container") == "gguf":
        return "general.file_type"
    if quant.get("config_method"):
        return "config.json:quantization_config"
    if quant.get("method") not in (None, "none", "unknown") and quant.get("tensor_types"):
        return "tensors:" + ",".join(sorted(quant["tensor_types"]))[:200]
    return None


# ----------------------------------------------------------------------------------------- flattening
def target_label(v: dict[str, Any]) -> str:
    """'vllm 0.11.0 x h100' / 'llama.cpp b6000 [cuda] x hopper' / 'groq x hosted'."""
    engine = " ".join(str(x) for x in (v.get("engine"), v.get("engine_version")) if x)
    if v.get("backend"):
        engine += f" [{v['backend']}]"
    where = v.get("gpu") or (f"sm{str(v['compute_capability']).replace('.', '')}" if v.get("compute_capability")
                             and not v.get("arch") else v.get("arch")) or "hosted"
    return f"{engine} x {where}"


def verdict_fails(v: dict[str, Any], policy: dict[str, Any] | None = None) -> bool:
    """Whether the verdict fails the run: ``fails`` as its producer stored it (``qcheck.outcome``, the one rule;
    every check and gate verdict carries it). ``policy`` is not consulted: the outcome was decided under it."""
    return bool(v.get("fails"))


def _because(v: dict[str, Any]) -> list[str]:
    """Why ``qcheck.outcome`` failed the verdict (``outcome.because``)."""
    outcome = v.get("outcome")
    return [str(b) for b in (outcome.get("because") or [])] if isinstance(outcome, dict) else []


def verdict_findings(v: dict[str, Any], policy: dict[str, Any], model: str,
                     inspection: dict[str, Any] | None) -> list[Finding]:
    """Findings for one verdict: its status (unless native), its requirements, its memory fit."""
    out: list[Finding] = []
    label = target_label(v)
    artifact = artifact_of(inspection, model)
    logical = decision_key(inspection)
    props = {"engine": v.get("engine"), "engine_version": v.get("engine_version"), "gpu": v.get("gpu"),
             "arch": v.get("arch"), "status": v.get("status")}
    because = _because(v)
    fails = bool(set(because) & {"unsupported", "does-not-start", "unknown", "start-up-unknown", "fallback"})
    reasons = "; ".join(str(r) for r in v.get("reasons") or [])
    status = v.get("status")
    startup: dict[str, Any] = v["startup"] if isinstance(v.get("startup"), dict) else {}
    rule_id = {"unsupported": "QC110", "unknown": "QC111", "fallback": "QC112"}.get(str(status))
    if "does-not-start" in because or "start-up-unknown" in because:  # the engine's start-up decided it
        rule_id = None
        out.append(Finding(RULES["QC116"], "error", f"{label}: start-up: {startup.get('message') or reasons}", model,
                           artifact, logical, title=f"{label}: does not start" if "does-not-start" in because
                           else f"{label}: start-up unknown", properties=props))
    if rule_id:
        rule = RULES[rule_id]
        level = "error" if fails else "warning"
        kernel = f" (via {v['kernel']})" if status == "fallback" and v.get("kernel") else ""
        message = f"{label}: {status}{kernel}" + (f": {reasons}" if reasons else "")
        suggestions = v.get("suggestions") or []
        if fails and suggestions:
            message += f". Try: {suggestions[0]}"
        out.append(Finding(rule, level, message, model, artifact, logical, title=f"{label}: {status}",
                           properties=props))
    for risk in v.get("risks") or []:
        if isinstance(risk, dict) and status in ("native", "fallback"):
            level = "error" if risk.get("kind") == "kv-scales" and "kv-scales" in because else "warning"
            out.append(Finding(RULES["QC115"], level, f"{label}: {risk.get('message', risk.get('id'))}", model,
                               artifact, logical, title=f"{label}: {risk.get('kind', 'risk')}",
                               properties={**props, "risk": risk.get("id")}))
    requires = [str(r) for r in v.get("requires") or []]
    if requires and status in ("native", "fallback"):
        out.append(Finding(RULES["QC113"], "note", f"{label} requires: {'; '.join(requires)}", model, artifact,
                           logical, title=f"{label}: requires", properties=props))
    memory = v.get("memory") or {}
    if isinstance(memory, dict) and memory.get("fits") is False and not v.get("memory_fails"):
        summary = memory.get("summary") or "does not fit"  # reported; the start-up, when judged, decides
        out.append(Finding(RULES["QC114"], "warning", f"{label}: memory: {summary}", model, artifact, logical,
                           title=f"{label}: memory", properties=props))
    return out


def inspection_findings(inspection: dict[str, Any], model: str) -> list[Finding]:
    """Findings the inspection itself carries: config/tensor mismatches, unsafe pickles, warnings."""
    out: list[Finding] = []
    artifact = artifact_of(inspection, model)
    for f in inspection.get("findings") or []:
        if not isinstance(f, dict):
            continue
        kind = f.get("kind")
        rule = RULES["QC101"] if kind == "unsafe-pickle" else RULES["QC130"]
        level = "error" if kind == "unsafe-pickle" else "warning"
        where = f.get("where")
        out.append(Finding(rule, level, str(f.get("message", kind)), model, artifact,
                           str(where) if where else None, title=rule.short, properties={"kind": kind}))
    for w in inspection.get("warnings") or []:
        out.append(Finding(RULES["QC131"], "note", str(w), model, artifact, None, title=RULES["QC131"].short))
    return out


def error_finding(model: str, message: str, *, kind: str | None = None, skipped: bool = False,
                  where: str | None = None) -> Finding:
    """A model that could not be judged (``kind`` "input", "unsafe-pickle", "lfs-pointer"); a skipped
    LFS pointer is a note, an LFS pointer the policy does not skip is an error."""
    artifact = None if origin_of(model) == "hub" else model
    rule = RULES[{"lfs-pointer": "QC102", "unsafe-pickle": "QC101"}.get(kind or "", "QC100")]
    return Finding(rule, "note" if skipped else "error", message, model, artifact, where, title=rule.short)


def eval_findings(data: dict[str, Any]) -> list[Finding]:
    """Quality-gate failures and resolution warnings of an eval record."""
    out: list[Finding] = []
    for c in data.get("candidates") or []:
        model = str(c.get("path") or c.get("name"))
        artifact = None if origin_of(model) == "hub" else model
        name = c.get("name")
        for failure in (c.get("gate") or {}).get("failures") or []:
            out.append(Finding(RULES["QC120"], "error", f"{name}: {failure.get('message')}", model, artifact,
                               failure.get("metric"), title=f"{name}: {failure.get('threshold')}",
                               properties={"candidate": name, "threshold": failure.get("threshold"),
                                           "value": failure.get("value"), "limit": failure.get("limit")}))
        for w in c.get("warnings") or []:
            out.append(Finding(RULES["QC121"], "warning", f"{name}: {w}", model, artifact, None,
                               title=f"{name}: resolution", properties={"candidate": name}))
    return out


def findings_of(data: dict[str, Any], kind: str) -> list[Finding]:
    """Every finding of a result's JSON, most severe first."""
    out: list[Finding] = []
    if kind.endswith("-set"):  # --all: every model's findings
        for item in data.get("results") or []:
            if isinstance(item, dict):
                out.extend(findings_of(item, kind.removesuffix("-set")))
    elif kind == "check":
        insp = data.get("inspection") or {}
        model = str(insp.get("path", "?"))
        out.extend(inspection_findings(insp, model))
        for v in data.get("verdicts") or []:
            out.extend(verdict_findings(v, data.get("policy") or {}, model, insp))
    elif kind == "inspect":
        out.extend(inspection_findings(data, str(data.get("path", "?"))))
    elif kind == "eval":
        out.extend(eval_findings(data))
    elif kind == "gate":
        for m in data.get("models") or []:
            model = str(m.get("path") or m.get("name"))
            if m.get("status") in ("error", "skipped"):
                out.append(error_finding(model, str(m.get("error") or m.get("status")), kind=m.get("error_kind"),
                                         skipped=m.get("status") == "skipped"))
                continue
            insp = m.get("inspection") or {}
            out.extend(inspection_findings(insp, model))
            for v in m.get("verdicts") or []:
                out.extend(verdict_findings(v, v.get("policy") or {}, model, insp))
        quality = data.get("quality") or {}
        if quality.get("error"):
            ref = str(quality.get("reference") or "quality")
            out.append(Finding(RULES["QC122"], "error", str(quality["error"]), ref,
                               None if origin_of(ref) == "hub" else ref, None, title=RULES["QC122"].short))
        if quality.get("eval"):
            out.extend(eval_findings(quality["eval"]))
    out.sort(key=lambda f: f.sort_key)
    return out


def result_data(result: Any) -> tuple[dict[str, Any], str]:
    """(JSON, kind) of a result object or of an already-rendered JSON dict."""
    if isinstance(result, dict):
        data = result
        kind = str(data.get("schema", "")).removeprefix("qcheck.").split("/")[0]
        return data, {"inspection": "inspect", "inspection-set": "inspect-set"}.get(kind, kind)
    return result.to_json(), result.kind
