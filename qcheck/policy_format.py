"""The policy format of ``qcheck gate``, once: ``qcheck gate --explain`` prints it and docs/ci.md shows the same text
(tests/test_platform_engineer.py checks both against it, and that every key the policy parser accepts is in it), so
an installed qcheck, which ships no docs, still says what a policy may contain.
"""

from __future__ import annotations

#: an annotated policy naming every key (``qcheck.policy``'s TOP_KEYS, MODEL_KEYS, TARGET_KEYS, DEPLOYMENT_KEYS,
#: MEMORY_KEYS with the engine settings of ``qcheck.knobs``, QUALITY_KEYS with the eval thresholds)
POLICY_TOML = """\
# qcheck.toml
models = [
  "models/*.gguf",                              # globs, relative to this file
  "checkpoints/llama-8b-fp8",                   # a model directory (config.json + safetensors)
  { path = "org/Llama-3.1-8B-FP8@main", name = "llama-fp8-hub" },   # a Hub repo id, with a display name
]
require-native = false   # default for every target: a fallback kernel fails the gate when true
allow-unknown = false    # default for every target: a combination with no sourced answer passes when true
require-kv-scales = false  # default for every target: a quantised KV cache running with default scales of 1.0
                           # (the checkpoint ships no k_scale/v_scale) fails the gate when true
kernels-only = false     # default for every target: the engine's start-up with [memory] is reported, not judged
lfs-pointers = "error"   # "skip": Git LFS pointer files are reported as skipped (exit 0), not as errors
allow-nothing-judged = false  # a run that judged no combination (every model skipped) fails unless true
deployments = [          # optional: the manifests that ship, each inference container judged as deployed
  { file = "deploy/compose.yaml", models = { "/models/tiny.gguf" = "models/tiny.gguf" }, gpu = "rtx-4090" },
  { file = "deploy/vllm.yaml", model = "org/Llama-3.1-8B-FP8" },   # model: when the command names none
]                        # file: compose / Kubernetes / Helm output; models: container path = repository path;
                         # gpu: when no node label names it (a qcheck GPU name or a GPU feature-discovery name)

[[targets]]
engine = "vllm==0.11.0"          # a name, name==version, name:backend; a string or a list
gpu = ["h100", "l4"]             # products, architectures (hopper) or compute capabilities (sm90)
require-native = true            # overrides the default for this target

[[targets]]
engine = ["llama.cpp", "ollama"]
gpu = "cpu"
models = ["*.gguf"]              # optional: globs of model names this target applies to

[memory]                         # optional: the deployment's settings; a model must start with them
context = 8192
batch = 1
kv-cache-dtype = "fp8"           # optional; default: the model's own, else the engine's default
tp = 1                           # optional: tensor- (tp), pipeline- (pp), expert-parallel (ep) size, as --tp/--pp/--ep
enforce = true                   # false: report the start-up, do not fail on it (as kernels-only = true)
gpu-memory-utilization = 0.9     # engine settings, named as qcheck check's flags (docs/memory.md): vLLM
max-num-seqs = 256               # max-num-seqs, max-num-batched-tokens, enforce-eager, kv-cache-memory;
n-gpu-layers = 30                # SGLang mem-fraction-static, chunked-prefill-size; llama.cpp n-gpu-layers,
                                 # parallel, ubatch-size, batch-size, flash-attn, no-mmap, fit, n-cpu-moe;
                                 # vLLM and SGLang allow-long-context (a context above the model's own)

[quality]                        # optional: quantisation loss against the unquantised reference
reference = "../bf16-model"      # the unquantised model: a transformers directory or an F32/F16/BF16 GGUF
tasks = ["arithmetic", "my-tasks.jsonl"]   # bundled set names or JSONL files (default: all bundled)
tier = "good"                    # near-lossless | good | acceptable, and/or explicit thresholds:
max-kld = 0.03                   # max-kld, max-kld-p99, max-kld-max, min-top1, max-ppl-ratio,
min-top1 = 0.92                  # max-delta-p-rms, max-accuracy-drop, min-recovery, max-flips,
                                 # max-flips-c-to-i, min-greedy-agreement, min-answer-agreement,
                                 # max-kld-kv-only (the KV cache's cost alone, with a KV cache type)
max-termination-drop = 0.05      # generation behaviour (generate items, docs/eval.md): min-length-ratio,
max-repetition-increase = 0.05   # max-length-ratio, max-termination-drop, max-repetition-increase,
min-json-valid = 1.0             # min-json-valid, max-json-validity-drop
min-coverage = 0.95              # share of items and tokens the candidate was measured on
use-intervals = false            # gate on the unfavourable end of each 95 % interval
backend = "simulated"            # simulated: dequantised weights in transformers; llamacpp: real GGUF kernels
simulate-engine = "auto"         # auto | llama.cpp | vllm | sglang | weights (docs/eval.md "How candidates run")
kv-cache-dtype = "q8_0"          # optional: the KV cache the candidates run with ("K,V" for two types; or
                                 # cache-type-k / cache-type-v); default: each engine's own
kv-split = true                  # with a KV cache type: also measure the weights alone and the cache alone
models = ["models/q4.gguf"]      # optional: which policy models to evaluate (default: every local one)
max-items = 200
max-length = 512                 # tokens per window; longer text items are scored in windows
stride = 256                     # optional: sliding-window step (default max-length / 2)
windows = "sliding"              # sliding | chunks (llama-perplexity's windows, see docs/eval.md)
reference-dtype = "float32"      # float32 | bfloat16 | float16
device = "cpu"                   # cpu | cuda | auto
cache-dir = ".qcheck-cache"      # reference log-probs are cached here (default ~/.cache/qcheck)
"""

EXPLAIN = f"""\
qcheck gate reads ./qcheck.toml, else [tool.qcheck] in ./pyproject.toml (the same keys under [tool.qcheck],
[[tool.qcheck.targets]], [tool.qcheck.memory] and [tool.qcheck.quality]), or --policy FILE. qcheck gate --init
writes a starter for the models in the current directory. Every key:

{POLICY_TOML}
Every key and value is checked: an unknown key or a bad value is one line naming the file and the key, exit 2.
TOML puts a key written after a [[targets]], [memory] or [quality] header into that table: top-level keys
(models, require-native, allow-unknown, require-kv-scales, kernels-only, lfs-pointers, allow-nothing-judged,
deployments) go above the first one.
A glob that matches nothing, a missing path, a model listed twice and a model no target applies to are errors.
Local paths must stay inside the policy's repository (--allow-outside lifts this for a policy you trust).
"""
