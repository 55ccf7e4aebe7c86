"""Memory planning benchmarks: qcheck's llama.cpp formula against llama.cpp's buffer log, and what planning
costs `qcheck check`.

    python bench/bench_memory.py [--skip-llamacpp] [--skip-timing] [--runs 7]

1. Formula vs measurement: writes GGUFs (tests/memory_gguf.py: llama GQA/MHA, qwen2, qwen3, qwen3moe,
   gemma3, and a larger llama of ~180 MB), loads each with llama-cpp-python at several contexts, ubatch
   sizes and flash-attention settings, and prints qcheck's KV, output and compute buffers next to the ones
   llama.cpp logs, with the error per row and the range per setting.
2. Planning overhead: `qcheck check` on bench_inspect.py's Llama-3-8B Q4_K_M GGUF (sparse, 4.92 GB apparent)
   on llama.cpp, Ollama and vLLM x RTX 4090, plain and with planning (`--context 8192`: memory, max context,
   max batch, offload, speed), each in a fresh interpreter; the target is a median ratio within 1.5x.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

GRID = [(1024, 512), (4096, 512), (4096, 128), (8192, 256), (2048, 2048), (2000, 256)]


def formula_vs_llamacpp(workdir: Path) -> None:
    from memory_gguf import MIB, Arch, load_buffers, write_model

    from qcheck.classify import classify
    from qcheck.matrix import load_matrix
    from qcheck.memory import MemoryTarget, estimate_memory
    from qcheck.readers import load_checkpoint
    from qcheck.request import Deploy

    archs = [
        Arch("llama", n_embd=128, n_layer=2, n_head=4, n_head_kv=2, n_ff=344, n_vocab=1000),
        Arch("llama", n_embd=256, n_layer=3, n_head=8, n_head_kv=8, n_ff=512, n_vocab=8000),
        Arch("llama", n_embd=128, n_layer=2, n_head=16, n_head_kv=4, n_ff=344, n_vocab=32000),
        Arch("llama", n_embd=512, n_layer=2, n_head=8, n_head_kv=2, n_ff=4096, n_vocab=2000),
        Arch("qwen2", n_embd=192, n_layer=2, n_head=6, n_head_kv=2, n_ff=512, n_vocab=4000),
        Arch("qwen3", n_embd=128, n_layer=2, n_head=4, n_head_kv=2, n_ff=384, n_vocab=3000, head_dim=64),
        Arch("qwen3moe", n_embd=128, n_layer=2, n_head=4, n_head_kv=2, n_ff=256, n_vocab=2000, n_expert=8,
             n_expert_used=2, n_ff_exp=64),
        Arch("gemma3", n_embd=128, n_layer=6, n_head=4, n_head_kv=1, n_ff=256, n_vocab=2000, head_dim=64,
             swa=512, tied=True),
        # the larger one: Llama-3.2-1B-like widths with fewer layers, F16 (~180 MB)
        Arch("llama", n_embd=2048, n_layer=2, n_head=32, n_head_kv=8, n_ff=8192, n_vocab=32000, n_ctx_train=32768),
    ]
    base = load_matrix().engine("llama.cpp").memory
    errors: dict[bool, list[float]] = {True: [], False: []}
    exact = True
    print(f"{'model':46} {'fa':2} {'ctx':>5} {'ub':>4}  {'compute MiB: llama.cpp':>22} {'qcheck':>8} {'err':>7}"
          f"  {'KV llama.cpp/qcheck':>20}  {'output':>11}  {'weights':>17}")
    for a in archs:
        path = write_model(workdir / (a.label().replace("/", "_") + ".gguf"), a)
        ck = load_checkpoint(str(path))
        ins = classify(ck)
        grid = GRID + ([(32768, 512)] if a.n_embd >= 2048 else [])
        for fa in (True, False):
            for ctx, ub in grid:
                b = load_buffers(path, n_ctx=ctx, n_ubatch=ub, n_batch=max(ub, 512), flash_attn=fa)
                # llama-cpp-python's regime: one sequence, every ubatch token an output row
                mem = dataclasses.replace(base, params={**base.params, "n_ubatch": ub, "flash_attn": int(fa),
                                                        "n_seq": 1, "kv_unified": 0, "server_output_rows": 0})
                est = estimate_memory(ins, Deploy(context=ctx), MemoryTarget("llama.cpp", mem, "RAM"))
                parts = {p.name: p.bytes / MIB for p in est.parts}
                c = parts["compute buffer"]
                err = (c - b.compute) / b.compute
                errors[fa].append(err)
                kv, out, w = (est.kv_cache_bytes or 0) / MIB, parts["output buffer"], est.weights_bytes / MIB
                exact &= abs(kv - b.kv) < 0.011 and abs(out - b.output) < 0.011
                print(f"{a.label()[:46]:46} {'on' if fa else '--':2} {ctx:5} {ub:4}  {b.compute:22.2f} {c:8.2f} "
                      f"{err:+7.1%}  {b.kv:9.2f}/{kv:<10.2f}  {b.output:5.2f}/{out:<5.2f}  {b.model:8.2f}/{w:<8.2f}")
    for fa, errs in errors.items():
        print(f"compute buffer, flash attention {'on' if fa else 'off'}: {len(errs)} loads, error "
              f"{min(errs):+.1%} .. {max(errs):+.1%}, mean |error| {statistics.fmean(abs(e) for e in errs):.1%}")
    print(f"KV cache and output buffer exact on every load: {exact}")


def _time(args: list[str], runs: int) -> float:
    code = ("import sys, time\nt = time.perf_counter()\nfrom qcheck.cli import main\ntry:\n    main(sys.argv[1:])\n"
            "except SystemExit:\n    pass\nsys.stderr.write(f'T={time.perf_counter() - t}\\n')\n")
    samples = []
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}, timeout=600)
        samples.append(float(proc.stderr.rsplit("T=", 1)[1]))
    return statistics.median(samples)


def planning_overhead(workdir: Path, runs: int) -> None:
    from bench_inspect import build_gguf

    path = workdir / "Meta-Llama-3-8B-Instruct-Q4_K_M.gguf"
    build_gguf(path)
    base = ["check", str(path), "-e", "llama.cpp", "-e", "ollama", "-e", "vllm", "-g", "rtx-4090", "--json"]
    _time(base, 1)  # warm the page cache
    plain = _time(base, runs)
    planned = _time([*base, "--context", "8192"], runs)
    print(f"qcheck check, Llama-3-8B Q4_K_M GGUF x 3 engines x rtx-4090, median of {runs} fresh runs: "
          f"plain {plain * 1000:.0f} ms, with planning {planned * 1000:.0f} ms, ratio {planned / plain:.2f}x "
          "(target <= 1.5x)")
    # in process, after a warm-up: the same two calls, alternated, so machine load hits both alike
    from qcheck.pipeline import run
    from qcheck.request import CheckRequest, Deploy

    plain_q = CheckRequest(str(path), ("llama.cpp", "ollama", "vllm"), ("rtx-4090",))
    planned_q = plain_q.replace(deploy=Deploy(context=8192), memory=True)
    run(plain_q)
    run(planned_q)
    a, b = [], []
    for _ in range(runs * 3):
        t = time.perf_counter()
        run(plain_q)
        a.append(time.perf_counter() - t)
        t = time.perf_counter()
        run(planned_q)
        b.append(time.perf_counter() - t)
    pa, pb = statistics.median(a), statistics.median(b)
    print(f"in process, median of {runs * 3} alternated calls: plain {pa * 1000:.1f} ms, with planning "
          f"{pb * 1000:.1f} ms, ratio {pb / pa:.2f}x (target <= 1.5x)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="qcheck-bench-mem-") as tmp:
        if not args.skip_llamacpp:
            formula_vs_llamacpp(Path(tmp))
        if not args.skip_timing:
            planning_overhead(Path(tmp), args.runs)
    return 0


if __name__ == "__main__":
    t = time.perf_counter()
    code = main()
    print(f"done in {time.perf_counter() - t:.1f} s")
    sys.exit(code)
