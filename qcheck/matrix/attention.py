"""The attention backend as a checked dimension: which attention kernel does this engine pick for this model's
attention type (MHA/GQA, MLA; learned sinks; sliding-window layers) on this GPU with this KV-cache dtype, and does
that backend run it?

vLLM walks a priority list per GPU family (``platforms/cuda.py`` ``_get_backend_priorities``) and takes the first
backend whose checks pass (KV dtype, head size, sinks, compute capability); some then refuse at start-up (the
Triton MLA backend's FP8 cache below sm89). SGLang picks a default per GPU and architecture
(``get_default_attn_backend``). That knowledge is data: ``[attention]`` and ``[[attention_rule]]`` in the engine
file, matched like every other rule (most specific wins). The model's attention type comes from the headers
(``inspection.shape.attention``: an MLA latent, sink tensors, window layers). The dimension speaks only where a rule
holds: a model without a shape record (a synthetic probe) or a combination no rule covers leaves the verdict to the
other dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from qcheck.model import Judgement, Source

if TYPE_CHECKING:
    from qcheck.matrix.deployment import Deployment
    from qcheck.model import Inspection

DIMENSION = "attention"


@dataclass(frozen=True)
class AttentionType:
    """What the headers say about a model's attention, as the engines' selectors ask it."""

    kind: str  # "standard" (MHA/GQA/MQA) or "mla"
    sinks: bool
    sliding: bool

    @property
    def label(self) -> str:
        parts = ["MLA" if self.kind == "mla" else "MHA/GQA"]
        if self.sinks:
            parts.append("attention sinks")
        if self.sliding:
            parts.append("sliding-window layers")
        return ", ".join(parts)


def attention_type(inspection: Inspection) -> AttentionType | None:
    """The model's attention type from its shape record, or None when the headers give none."""
    shape = inspection.shape
    if shape is None:
        return None
    lay = shape.attention
    if not (lay.full_layers or lay.window_layers or lay.mla_dim or lay.kv_lora_rank):
        return None
    mla = bool(lay.mla_dim or lay.kv_lora_rank)
    return AttentionType("mla" if mla else "standard", lay.sinks, lay.window_layers > 0)


def judge_attention(deployment: Deployment) -> Judgement | None:
    """The attention-backend judgement, or None when the engine has no data or the model no attention facts."""
    from qcheck.matrix.kvcache import UNQUANTISED, requested_kv
    from qcheck.matrix.rules import decide, fill, matching_rules, pick_backend, placeholders

    engine = deployment.request.engine
    if engine.attention is None or not engine.attention_rules or deployment.inspection.adapter is not None:
        return None
    kind = attention_type(deployment.inspection)
    if kind is None:
        return None
    asked = requested_kv(deployment)
    kv = "auto" if asked is None or asked.k in UNQUANTISED else asked.k
    pool = [r.rule for r in engine.attention_rules if r.kind == kind.kind
            and (r.sinks is None or r.sinks == kind.sinks) and (r.sliding is None or r.sliding == kind.sliding)
            and (r.kv_dtypes is None or kv in r.kv_dtypes)]
    backend, _ = pick_backend(engine, deployment.request.backend, deployment.target)
    winners = decide(engine, matching_rules(engine, deployment.inspection, deployment.at, deployment.target,
                                            backend, pool))
    if not winners:
        return None
    rule = winners[0][0]
    values = placeholders(deployment.inspection, engine, deployment.version, deployment.target,
                          backend.name if backend else None, [])
    values.update(k=kv, v=kv)
    lead = f"{kind.label}, KV cache {kv}: {engine.name} picks {fill(rule.kernel, values) if rule.kernel else '?'}"
    reasons = [lead] + [fill(r, values) for r in rule.reasons]
    sources = []
    for spec in [s for r, _ in winners for s in r.sources]:
        src = Source(ref=spec.ref, version=spec.version, note=spec.note)
        if src not in sources:
            sources.append(src)
    return Judgement(DIMENSION, rule.status, reasons, sources, [],  # type: ignore[arg-type]
                     [fill(r, values) for r in rule.requires], [fill(w, values) for w in rule.warnings],
                     rule_id=rule.id)
