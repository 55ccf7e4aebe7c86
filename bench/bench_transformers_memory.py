"""qcheck's transformers memory formula against what transformers actually allocates, measured on this CPU.

    python bench/bench_transformers_memory.py [--quick]

For Llama-architecture models of three sizes (a tiny one, a SmolLM-135M-like and a Qwen2-0.5B-like shape,
randomly initialised in BF16: memory does not depend on the weights' values), each (model, context) runs in a
fresh interpreter: build the model, then reset the process's peak RSS (``/proc/self/clear_refs`` 5), run
``generate`` on a prompt of ``context`` tokens for one new token (the prefill transformers does: the whole
prompt in one forward pass, a DynamicCache, logits of the last position only) and read the new peak
(``VmHWM``). The growth over the loaded model is the KV cache plus the activations' peak; qcheck's estimate of
the same two terms is ``estimate_memory(engine="transformers")``'s KV + activations (its CUDA runtime term does
not apply to a CPU). Prints both and the error per row. oneDNN is kept off AMX (this VM advertises it but
faults on it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

MODELS = {
    "tiny": {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
             "intermediate_size": 688, "vocab_size": 32000},
    "smollm-135m-like": {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
                         "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152},
    "qwen2-0.5b-like": {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
                        "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936},
}
CONTEXTS = {"tiny": (512, 2048, 8192), "smollm-135m-like": (512, 2048, 4096), "qwen2-0.5b-like": (512, 2048)}

_CHILD = r"""
import json, os, sys, time
import torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
cfg = json.loads(sys.argv[1]); ctx = int(sys.argv[2])
config = LlamaConfig(max_position_embeddings=max(ctx + 16, 4096), tie_word_embeddings=False, **cfg)
torch.manual_seed(0)
model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
ids = torch.randint(3, cfg["vocab_size"], (1, ctx))
with torch.inference_mode():  # warm-up: kernels, allocator, lazy imports
    model.generate(ids[:, :16], max_new_tokens=1, do_sample=False, pad_token_id=0)

def kib(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])

with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset VmHWM to the current RSS
base = kib("VmRSS:")
t = time.perf_counter()
with torch.inference_mode():
    model.generate(ids, max_new_tokens=1, do_sample=False, pad_token_id=0)
print(json.dumps({"base_kib": base, "peak_kib": kib("VmHWM:"), "seconds": time.perf_counter() - t}))
"""


def measure(cfg: dict, ctx: int) -> dict:
    # a fixed mmap threshold: every tensor over 64 KiB is its own mapping, returned to the OS when freed, so the
    # peak RSS follows the live tensor bytes (glibc's dynamic threshold would keep freed activations in the heap)
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "OMP_NUM_THREADS": "1", "BENCH_THREADS": "1",
           "MALLOC_MMAP_THRESHOLD_": "65536"}
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cfg), str(ctx)], capture_output=True, text=True,
                          env=env, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def qcheck_terms(cfg: dict, ctx: int) -> tuple[int, int]:
    """qcheck's KV cache and activation bytes for the same model and context (transformers, BF16)."""
    from qcheck.memory import MemoryTarget, estimate_memory
    from qcheck.model import Inspection
    from qcheck.model_shape import shape_from
    from qcheck.request import Deploy

    params = (cfg["vocab_size"] * cfg["hidden_size"] * 2 + cfg["num_hidden_layers"]
              * (cfg["hidden_size"] ** 2 * (2 + 2 * cfg["num_key_value_heads"] / cfg["num_attention_heads"])
                 + 3 * cfg["hidden_size"] * cfg["intermediate_size"]))
    ins = Inspection(path="m", container="safetensors", size_bytes=int(params * 2), parameters=int(params),
                     num_layers=cfg["num_hidden_layers"], hidden_size=cfg["hidden_size"],
                     num_attention_heads=cfg["num_attention_heads"], num_kv_heads=cfg["num_key_value_heads"],
                     vocab_size=cfg["vocab_size"], context_length=1 << 20, dtype="bfloat16")
    config = {"model_type": "llama", "torch_dtype": "bfloat16", **cfg}
    ins.shape = shape_from(ins, config=config)
    est = estimate_memory(ins, Deploy(context=ctx), MemoryTarget.for_engine("transformers", device="RAM"))
    act = sum(p.bytes for p in est.parts if p.name == "activations")
    return int(est.kv_cache_bytes or 0), act


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the tiny model only")
    args = ap.parse_args()
    mib = 1024 * 1024
    print(f"{'model':18} {'ctx':>5}  {'measured MiB':>12}  {'qcheck KV+act MiB':>17}  {'(KV':>6} {'act)':>6}  "
          f"{'error':>7}  {'s':>5}")
    errors = []
    for name, cfg in MODELS.items():
        if args.quick and name != "tiny":
            continue
        for ctx in CONTEXTS[name]:
            m = measure(cfg, ctx)
            grown = (m["peak_kib"] - m["base_kib"]) * 1024
            kv, act = qcheck_terms(cfg, ctx)
            err = (kv + act) / grown - 1 if grown > 0 else float("nan")
            errors.append(err)
            print(f"{name:18} {ctx:5}  {grown / mib:12.1f}  {(kv + act) / mib:17.1f}  {kv / mib:6.1f} {act / mib:6.1f}  "
                  f"{err:+7.1%}  {m['seconds']:5.1f}")
    print(f"error of qcheck's KV + activations vs the measured peak growth: {min(errors):+.1%} .. {max(errors):+.1%} "
          f"over {len(errors)} runs")
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    code = main()
    print(f"done in {time.perf_counter() - t0:.1f} s")
    sys.exit(code)
