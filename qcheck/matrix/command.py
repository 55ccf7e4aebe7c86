"""The ``command-line`` dimension: what the engine does with the deployment as written (an engine command line
or a manifest's container args), before any weight is read.

- A setting the engine refuses (an unknown flag, a value its parser or config check rejects) is ``unsupported``,
  worded as the engine words it, with where that was read. When the judged engine version is newer than the
  release the flags were read at, the refusal is ``unknown`` instead (the newer release may accept it).
- A setting that changes the kernel path in a way the matrix does not model is ``unknown``: a quantisation
  override (``--quantization``) and a ``--dtype`` other than the checkpoint's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qcheck.model import Judgement, Source

if TYPE_CHECKING:
    from qcheck.matrix.deployment import Deployment
    from qcheck.request import CommandFinding

DIMENSION = "command-line"
_DTYPES = {"half": "float16", "float16": "float16", "fp16": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float": "float32", "float32": "float32", "fp32": "float32"}
#: vLLM refuses bfloat16 below sm80 and casts otherwise (platforms/cuda.py check_if_supports_dtype); SGLang the same
_DTYPE_SOURCE = Source("vllm-project/vllm: vllm/config/model.py _get_and_verify_dtype + vllm/platforms/cuda.py "
                       "check_if_supports_dtype ('Bfloat16 is only supported on GPUs with compute capability of at "
                       "least 8.0')", "0.34.0")
_QUANT_SOURCE = Source("vllm-project/vllm: vllm/config/model.py:1403-1490 ModelConfig._verify_quantization (the "
                       "method named by --quantization replaces the one detected from the checkpoint; 'gptq' skips "
                       "the Marlin override)", "0.34.0")


def _other_release(d: Deployment, finding: CommandFinding) -> bool:
    """Whether the judged version may parse differently from the release the flags were read at: a newer one
    (it may accept a value or flag), or for an unknown flag any other one (it may have had the flag)."""
    from qcheck.matrix.versions import parse_version

    try:
        read_at = parse_version(finding.version, d.request.engine.scheme)
        judged = parse_version(d.version, d.request.engine.scheme)
    except ValueError:
        return False
    return judged > read_at or (finding.unknown_flag and judged != read_at)


def judge_command(d: Deployment) -> Judgement | None:
    """The command-line judgement, or None when the deployment was not read from a command or says nothing."""
    reasons: list[str] = []
    sources: list[Source] = []
    status = None
    engine = d.request.engine
    for f in d.deploy.findings:
        if f.engine != engine.id:
            continue
        shown = f.flag + (f" {f.value}" if f.value is not None and f.value not in f.flag else "")
        if f.status == "unsupported" and not _other_release(d, f):
            reasons.append(f"{engine.name} refuses {shown}: {f.message}")
            status = "unsupported"
        else:
            later = (f" (read at {engine.name} {f.version}; {d.version} may differ)" if f.status == "unsupported"
                     else "")
            reasons.append(f"{shown}: {f.message}{later}")
            status = status or "unknown"
        sources.append(Source(f.source, f.version))
    status = _knobs(d, reasons, sources) or status
    if status is None:
        return None
    if any(f.status == "unsupported" and not _other_release(d, f) for f in d.deploy.findings
           if f.engine == engine.id):
        status = "unsupported"
    return Judgement(DIMENSION, status, reasons, sources)  # type: ignore[arg-type]


def _knobs(d: Deployment, reasons: list[str], sources: list[Source]) -> str | None:
    """``unknown`` for the knobs that change the kernel path in ways the matrix does not model."""
    knobs = d.deploy.knobs
    found = None
    if knobs.quantization is not None:
        method = d.inspection.quantization.method
        reasons.append(f"--quantization {knobs.quantization} replaces the method {d.request.engine.name} detects from "
                       f"the checkpoint ({method}); qcheck does not judge the override")
        sources.append(_QUANT_SOURCE)
        found = "unknown"
    if knobs.dtype is not None and knobs.dtype.lower() != "auto":
        asked = _DTYPES.get(knobs.dtype.lower(), knobs.dtype.lower())
        own = d.inspection.dtype
        if d.inspection.quantization.method not in ("none", None) or own is None or _DTYPES.get(own, own) != asked:
            reasons.append(f"--dtype {knobs.dtype}: the model runs in {asked} instead of its own "
                           f"{own or 'dtype'}; qcheck does not judge the cast")
            sources.append(_DTYPE_SOURCE)
            found = "unknown"
    return found
