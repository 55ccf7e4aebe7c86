"""The KV-cache dtype as a checked dimension: does this engine, at this version, on this GPU, run the cache
in the dtype the user asked for (``--kv-cache-dtype``) or the checkpoint declares (compressed-tensors
``kv_cache_scheme``, ModelOpt ``kv_cache_quant_algo``)?

Engine knowledge is data in the engine file: ``[kv_cache]`` lists what the engine's flag accepts at all, and
``[[kv_rule]]`` entries (rules with ``dtypes`` instead of ``methods``) judge an accepted dtype per version,
GPU and backend, most specific first, exactly like the weight-format rules. An engine without ``[kv_cache]``
leaves the verdict alone; a quantised dtype asked with ``--kv-cache-dtype`` that no rule speaks about for this GPU
is ``unknown``, and so is a checkpoint's own quantised dtype on an engine that reads it (``reads_checkpoint``);
an unquantised one is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from qcheck.model import Judgement, Source

if TYPE_CHECKING:
    from qcheck.matrix.dimensions import Deployment
    from qcheck.matrix.schema import SourceSpec

DIMENSION = "kv-cache"

#: the checkpoint's KV dtype words (qcheck.classify) -> the engine-flag spellings rules may be written for, in
#: order of preference: the first one the engine's ``accepts`` lists is judged (SGLang spells FP8 ``fp8_e4m3``,
#: vLLM and TensorRT-LLM ``fp8``)
DECLARED: dict[str, tuple[str, ...]] = {
    "float8_e4m3": ("fp8", "fp8_e4m3"), "float8_e5m2": ("fp8_e5m2",), "fp4_e2m1": ("nvfp4", "fp4_e2m1"),
    "int8": ("int8",),
}


#: spellings of an unquantised cache: asking for one needs no rule (the engine's accepts list still applies)
UNQUANTISED = frozenset({"float16", "bfloat16", "float32", "fp16", "bf16", "fp32", "f16", "f32", "half", "float"})


def requested_kv(deployment: Deployment) -> tuple[str, str] | None:
    """(dtype, where it comes from) for the deployment, or None when nothing but the default is asked for."""
    flag = deployment.deploy.kv_cache.k or deployment.deploy.kv_cache.v
    if flag is not None:
        return flag, "flag"
    declared = deployment.inspection.quantization.kv_cache_dtype
    if declared and declared.lower() in DECLARED:
        spellings = DECLARED[declared.lower()]
        kv = deployment.request.engine.kv_cache
        accepted = [s for s in spellings if kv is not None and s in kv.accepts]
        return (accepted or spellings)[0], "checkpoint"
    return None


def judge_kv_cache(deployment: Deployment) -> Judgement | None:
    """The KV-cache judgement, or None when the engine file or the dtype gives nothing to judge."""
    from qcheck.matrix.rules import decide, fill, matching_rules, pick_backend, placeholders

    asked = requested_kv(deployment)
    engine = deployment.request.engine
    if asked is None or engine.kv_cache is None:
        return None
    dtype, origin = asked
    kv = engine.kv_cache
    if origin == "checkpoint" and not kv.reads_checkpoint:
        return None  # the engine caches in its own dtype whatever the checkpoint declares
    what = f"{kv.flag} {dtype}" if origin == "flag" else f"the checkpoint's {dtype} KV cache"
    if origin == "flag" and dtype not in kv.accepts:
        return Judgement(DIMENSION, "unsupported",
                         [f"{engine.name} does not accept {kv.flag} {dtype} (it accepts: {', '.join(kv.accepts)})"],
                         _sources(kv.sources))
    rules = [rule for dtypes, rule in engine.kv_rules if dtype in dtypes]
    backend, _ = pick_backend(engine, deployment.request.backend, deployment.target)
    winners = decide(engine, matching_rules(engine, deployment.inspection, deployment.at, deployment.target,
                                            backend, rules))
    if not winners:
        if dtype not in UNQUANTISED:  # asked for, or declared by a checkpoint this engine reads it from
            where = deployment.target.arch.id if deployment.target else "the provider"
            return Judgement(DIMENSION, "unknown",
                             [f"{what}: no sourced rule for {engine.name} {deployment.version} with this KV-cache "
                              f"dtype on {where}"], _sources(kv.sources))
        return None
    rule = winners[0][0]
    values = placeholders(deployment.inspection, engine, deployment.version, deployment.target,
                          backend.name if backend else None, [])
    texts = rule.reasons or ((rule.kernel,) if rule.kernel else ())
    return Judgement(DIMENSION, rule.status, [f"{what}: {fill(r, values)}" for r in texts],  # type: ignore[arg-type]
                     _sources([s for r, _ in winners for s in r.sources]), [],
                     [fill(r, values) for r in rule.requires])


def _sources(specs: Iterable[SourceSpec]) -> list[Source]:
    out: list[Source] = []
    for s in specs:
        src = Source(ref=s.ref, version=s.version, note=s.note)
        if src not in out:
            out.append(src)
    return out
