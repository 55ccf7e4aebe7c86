"""Shared builders for the eval tests: one tiny Llama per test process, its GGUF exports, a task file.

Built once (lru_cache) because several test modules use them and building costs a few seconds on 2 cores.
hidden/intermediate sizes are multiples of 256 so TQ2_0 (256-element blocks) really quantises every matrix.
"""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from pathlib import Path

GGUF_TYPES = ("F32", "Q8_0", "Q4_0", "TQ2_0")

#: The stated tolerance between llama.cpp's kernels and the simulated candidate on the same GGUF (docs/engines.md):
#: |KLD_llama.cpp - KLD_simulated| <= REL * KLD_simulated + ABS nats/token. It holds for the dequantised weights alone
#: too (--simulate-engine weights), where llama.cpp's Q8_0 activation blocks are missing; with llama.cpp's arithmetic
#: emulated (the default) the two agree within 3 % (tests/test_engine_llamacpp.py).
REL, ABS = 0.10, 0.005

TASK_LINES = [
    {"id": "t-en", "kind": "text", "text": "The quick brown fox jumps over the lazy dog. Quantisation maps weights "
                                          "to fewer bits; the loss is measured as KL divergence per token."},
    {"id": "t-fr", "kind": "text", "text": "Le renard brun rapide saute par-dessus le chien paresseux. Où est la "
                                          "bibliothèque ?"},
    {"id": "t-code", "kind": "text", "text": "def add(a, b):\n    return a + b\n\nprint(add(2, 3))  # 5"},
    {"id": "c-sum", "kind": "choice", "task": "quiz", "context": "Question: What is 12 + 30? Answer:",
     "choices": ["42", "24", "12"], "answer": 0},
    {"id": "c-planet", "kind": "choice", "task": "quiz", "context": "Which planet is red?",
     "choices": ["Mars", "Venus", "Jupiter"], "answer": 0},
    {"id": "c-json", "kind": "choice", "task": "quiz", "context": '{"name": "qcheck", "bits":',
     "choices": ["4", "true", "\"x\""], "answer": 0},
    {"id": "g-code", "kind": "generate", "task": "gen", "prompt": "def add(a, b):", "expected": "return",
     "match": "contains", "max_new_tokens": 6},
    {"id": "g-num", "kind": "generate", "task": "gen", "prompt": "Question: What is 12 + 30? Answer:",
     "expected": r"\d+", "match": "regex", "max_new_tokens": 4},
]


@functools.lru_cache(maxsize=1)
def workdir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="qcheck-eval-tests-"))
    atexit.register(shutil.rmtree, path, True)  # removed when the test process ends
    return path


@functools.lru_cache(maxsize=1)
def tiny_reference() -> Path:
    from support.tiny_llama import make_tiny_llama

    return make_tiny_llama(workdir() / "ref", seed=0, hidden_size=256, intermediate=512, layers=2, heads=4,
                           kv_heads=2, vocab_size=512)


@functools.lru_cache(maxsize=1)
def tiny_reference_without_bos() -> Path:
    """The tiny reference with its BOS post-processor removed: the tokenizer adds no BOS (as Qwen's does
    not), so its GGUF says tokenizer.ggml.add_bos_token = false."""
    ref = workdir() / "ref-nobos"
    if not ref.exists():
        shutil.copytree(tiny_reference(), ref)
        tj = json.loads((ref / "tokenizer.json").read_text())
        tj["post_processor"] = None
        (ref / "tokenizer.json").write_text(json.dumps(tj))
        cfg = json.loads((ref / "tokenizer_config.json").read_text())
        cfg["add_bos_token"] = False
        (ref / "tokenizer_config.json").write_text(json.dumps(cfg))
    return ref


@functools.lru_cache(maxsize=8)
def tiny_gguf(tensor_type: str) -> Path:
    from support.gguf_export import export_gguf

    return export_gguf(tiny_reference(), workdir() / f"tiny-{tensor_type}.gguf", tensor_type)


@functools.lru_cache(maxsize=1)
def task_file() -> Path:
    path = workdir() / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(line, ensure_ascii=False) for line in TASK_LINES) + "\n", encoding="utf-8")
    return path
