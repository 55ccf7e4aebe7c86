"""The KV-cache dtype as a checked dimension: does this engine, at this version, on this GPU and backend, run
the cache in the (K, V) types the user asked for (``--kv-cache-dtype``, llama.cpp ``--cache-type-k/-v``) or
the checkpoint declares (compressed-tensors ``kv_cache_scheme``, ModelOpt ``kv_cache_quant_algo``)?

Engine knowledge is data in the engine file: ``[kv_cache]`` lists what the engine's setting accepts at all,
whether K and V are set apart (``separate``) and the type of a side left unset (``default``); ``[[kv_rule]]``
entries judge the (K, V) pair per version, GPU, backend and engine knob (``flash_attn``), most specific first,
exactly like the weight-format rules. A pair the engine runs through a substitute path (llama.cpp converting K
and V to f16 on every attention call because no kernel was compiled for the pair) is ``fallback`` with the
engine's own log line; a value the engine refuses is ``unsupported`` with its message. An engine without
``[kv_cache]`` leaves the verdict alone; a quantised pair asked for that no rule speaks about on this GPU is
``unknown``, and so is a checkpoint's own quantised dtype on an engine that reads it (``reads_checkpoint``); an
unquantised pair is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qcheck.model import Judgement, Risk, Source

if TYPE_CHECKING:
    from qcheck.matrix.deployment import Deployment
    from qcheck.matrix.schema import Engine, KvCache, KvRule, SourceSpec
    from qcheck.request import EngineKnobs

DIMENSION = "kv-cache"

#: the checkpoint's KV dtype words (qcheck.classify) -> the engine-flag spellings rules may be written for, in
#: order of preference: the first one the engine's ``accepts`` lists is judged (SGLang spells FP8 ``fp8_e4m3``,
#: vLLM and TensorRT-LLM ``fp8``)
DECLARED: dict[str, tuple[str, ...]] = {
    "float8_e4m3": ("fp8", "fp8_e4m3"), "float8_e5m2": ("fp8_e5m2",), "fp4_e2m1": ("nvfp4", "fp4_e2m1"),
    "int8": ("int8",),
}


#: spellings of an unquantised cache: asking for one needs no rule (the engine's accepts list still applies)
UNQUANTISED = frozenset({"float16", "bfloat16", "float32", "fp16", "bf16", "fp32", "f16", "f32", "half", "float",
                         "auto"})


@dataclass(frozen=True)
class AskedKv:
    """The (K, V) cache types judged for one deployment, and where they come from ("flag" or "checkpoint")."""

    k: str
    v: str
    origin: str

    @property
    def label(self) -> str:
        return self.k if self.k == self.v else f"K {self.k}, V {self.v}"

    @property
    def quantised(self) -> bool:
        return self.k not in UNQUANTISED or self.v not in UNQUANTISED

    @property
    def quantised_v(self) -> bool:
        return self.v not in UNQUANTISED


def requested_kv(deployment: Deployment) -> AskedKv | None:
    """The (K, V) types for the deployment, or None when nothing but the default is asked for.

    A side the request leaves unset is the engine's ``default`` where K and V are set apart (llama.cpp: f16),
    else the other side (one setting covers both)."""
    asked = deployment.deploy.kv_cache
    spec = deployment.request.engine.kv_cache
    if asked.given:
        other = spec.default if spec is not None and spec.separate else None
        k = asked.k or other or asked.v
        v = asked.v or other or asked.k
        assert k is not None and v is not None
        return AskedKv(k, v, "flag")
    declared = deployment.inspection.quantization.kv_cache_dtype
    if declared and declared.lower() in DECLARED:
        spellings = DECLARED[declared.lower()]
        accepted = [s for s in spellings if spec is not None and s in spec.accepts]
        dtype = (accepted or spellings)[0]
        return AskedKv(dtype, dtype, "checkpoint")
    return None


def judge_kv_cache(deployment: Deployment) -> Judgement | None:
    """The KV-cache judgement, or None when the engine file or the dtype gives nothing to judge."""
    asked = requested_kv(deployment)
    engine = deployment.request.engine
    if asked is None or engine.kv_cache is None:
        return None
    kv = engine.kv_cache
    if asked.origin == "checkpoint" and not kv.reads_checkpoint:
        return None  # the engine caches in its own dtype whatever the checkpoint declares
    refused = _refused(engine, kv, asked)
    if refused is not None:
        return refused
    return _judge_pair(deployment, engine, kv, asked)


def _refused(engine: Engine, kv: KvCache, asked: AskedKv) -> Judgement | None:
    """The engine's own refusal of a value it does not take at all, or of K and V apart where it has one setting."""
    if asked.origin != "flag":
        return None
    for value in dict.fromkeys((asked.k, asked.v)):
        if value not in kv.accepts:
            return Judgement(DIMENSION, "unsupported",
                             [f"{engine.name} does not accept {kv.flag} {value} (it accepts: {', '.join(kv.accepts)})"],
                             _sources(kv.sources))
    if asked.k != asked.v and not kv.separate:
        return Judgement(DIMENSION, "unsupported",
                         [f"{engine.name} caches K and V in one type ({kv.flag}): K {asked.k} with V {asked.v} "
                          "cannot be set"], _sources(kv.sources))
    return None


def _judge_pair(deployment: Deployment, engine: Engine, kv: KvCache, asked: AskedKv) -> Judgement | None:
    from qcheck.matrix.rules import decide, fill, matching_rules, pick_backend, placeholders

    what = f"{kv.flag} {asked.label}" if asked.origin == "flag" else f"the checkpoint's {asked.k} KV cache"
    rules = [r.rule for r in engine.kv_rules if r.pair.holds(asked.k, asked.v)
             and _knobs_hold(r, deployment.deploy.knobs)]
    backend, _ = pick_backend(engine, deployment.request.backend, deployment.target)
    winners = decide(engine, matching_rules(engine, deployment.inspection, deployment.at, deployment.target,
                                            backend, rules))
    if not winners:
        if asked.quantised:  # asked for, or declared by a checkpoint this engine reads it from
            where = deployment.target.arch.id if deployment.target else "the provider"
            return Judgement(DIMENSION, "unknown",
                             [f"{what}: no sourced rule for {engine.name} {deployment.version} with this KV-cache "
                              f"dtype on {where}"], _sources(kv.sources))
        return None
    rule = winners[0][0]
    values = placeholders(deployment.inspection, engine, deployment.version, deployment.target,
                          backend.name if backend else None, [])
    values.update(k=asked.k, v=asked.v)
    texts = rule.reasons or ((rule.kernel,) if rule.kernel else ())
    judgement = Judgement(DIMENSION, rule.status, [f"{what}: {fill(r, values)}" for r in texts],  # type: ignore[arg-type]
                          _sources([s for r, _ in winners for s in r.sources]), [],
                          [fill(r, values) for r in rule.requires], [fill(w, values) for w in rule.warnings],
                          rule_id=rule.id)
    if judgement.status in ("native", "fallback"):
        if kv.quantised_v_requires and asked.quantised_v and kv.quantised_v_requires not in judgement.requires:
            judgement.requires.append(kv.quantised_v_requires)
        _add_scale_risks(judgement, deployment, asked, values)
    return judgement


def _add_scale_risks(judgement: Judgement, deployment: Deployment, asked: AskedKv, values: dict[str, str]) -> None:
    """What the engine does with a quantised cache the checkpoint ships no (or too few) scales for: every
    ``[[kv_scale_rule]]`` that holds adds its message (the engine's log line) as a warning and a run-time risk."""
    from qcheck.matrix.rules import fill, matching_rules, pick_backend

    scales = deployment.inspection.quantization.kv_scales
    engine = deployment.request.engine
    if scales is None or not engine.kv_scale_rules:
        return  # GGUF and pickles carry no scale tensors to judge
    lacking = {"kv": not scales.kv_complete, "qp": not scales.qp_complete}
    pool = [r for r in engine.kv_scale_rules if asked.k in r.dtypes and lacking[r.missing]]
    backend, _ = pick_backend(engine, deployment.request.backend, deployment.target)
    held = {id(r) for r, _ in matching_rules(engine, deployment.inspection, deployment.at, deployment.target, backend,
                                             [r.rule for r in pool])}
    for scale_rule in (r for r in pool if id(r.rule) in held):
        kv_layers = min(scales.k_scales, scales.v_scales)
        qp_layers = min(scales.q_scales, scales.prob_scales)
        filled = {**values, "layers": str(scales.attention_layers or "?"),
                  "covered": str(kv_layers if scale_rule.missing == "kv" else qp_layers),
                  "example": f"{scales.missing[0]} has none" if scales.missing else "none has one"}
        for text in scale_rule.rule.reasons:
            message = fill(text, filled)
            judgement.warnings.append(message)
            judgement.risks.append(Risk(scale_rule.rule.id, "kv-scales", message))
        judgement.sources += [s for s in _sources(scale_rule.rule.sources) if s not in judgement.sources]


def _knobs_hold(rule: KvRule, knobs: EngineKnobs) -> bool:
    return all(getattr(knobs, name) == value for name, value in rule.knobs)


def _sources(specs: Iterable[SourceSpec]) -> list[Source]:
    out: list[Source] = []
    for s in specs:
        src = Source(ref=s.ref, version=s.version, note=s.note)
        if src not in out:
            out.append(src)
    return out
