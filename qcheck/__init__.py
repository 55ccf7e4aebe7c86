"""qcheck: will this quantised checkpoint run on that engine and GPU, and what did quantisation cost?

The Python API is the pipeline every command uses::

    from qcheck import CheckRequest, Deploy, run
    result = run(CheckRequest("model.gguf", engines=("vllm",), gpus=("h100",), deploy=Deploy(context=32768),
                              memory=True))
    result.exit_code, [v.status for v in result.verdicts], result.verdicts[0].memory.fits
    result.verdicts[0].startup.outcome, result.outcome(result.verdicts[0]).fails

or, as ``qcheck check``'s flags ask it (the deployment's settings make it a memory question)::

    from qcheck import Asked, Deploy, answer, build_request
    result = answer(build_request(Asked(("vllm",), ("h100",), Deploy(context=32768)), "model.gguf"))

Names are imported on first use, so ``import qcheck`` stays as light as the header-only commands need.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_API = {
    "CheckRequest": "qcheck.request", "Deploy": "qcheck.request", "KVCacheTypes": "qcheck.request",
    "Parallel": "qcheck.request", "EngineKnobs": "qcheck.request",
    "run": "qcheck.pipeline", "judge": "qcheck.pipeline", "answer": "qcheck.pipeline",
    "CheckResult": "qcheck.check", "ResultSet": "qcheck.check",
    "Asked": "qcheck.doors", "build_request": "qcheck.doors",
}
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'qcheck' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
