"""What `qcheck check` offers as the way out must be something the user can act on."""

from __future__ import annotations

from pathlib import Path

from qcheck.pipeline import run
from qcheck.request import CheckRequest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_single_purpose_engines_are_never_suggested_for_a_generic_checkpoint():
    # FP8 on an A100 is a vLLM fallback; colibri (a per-model-family engine) used to be offered as the
    # native alternative for a plain Llama.
    result = run(CheckRequest(str(EXAMPLES / "tiny-llama-fp8-channel"), ["vllm", "tensorrt-llm"], ["a100"]))
    suggestions = [s for v in result.verdicts for s in v.suggestions]
    assert suggestions, "a fallback on Ampere must come with suggestions"
    assert not any(word in s.lower() for s in suggestions for word in ("colibri", "audio.cpp", "deepinfer"))
    assert any("ada" in s or "hopper" in s or "--gpu" in s for s in suggestions)
