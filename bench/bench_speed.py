"""Speed estimate against measured decode speed: qcheck's decode ceiling (bandwidth / bytes read per token) next
to what llama.cpp actually generates on this machine's CPU.

    python bench/bench_speed.py [--threads 1] [--tokens 32] [--layers 2,4,8] [--types F16,Q8_0,Q4_0]

1. This machine's memory bandwidth, measured: a STREAM-style copy of 512 MiB with numpy (bytes read + bytes
   written per second; best of 5), one thread and two.
2. GGUFs of several sizes and weight types (tests/memory_gguf.py: Llama-3.2-1B-like widths, 2-8 layers, F16 /
   Q8_0 / Q4_0), each loaded with llama-cpp-python (weight repacking off, as a GPU holds the weights) and
   timed for ``--tokens`` single-token decode steps at a short context (median step).
3. qcheck's estimate for the same file: ``bandwidth / (weight bytes read per step + KV bytes)`` from
   ``estimate_memory`` (the same ``active_weight_bytes`` the speed line uses), at the measured bandwidth.

Prints estimate / measured per model. On a GPU the decode is memory-bound and the ratio is the engine's
bandwidth efficiency (published figures in docs/memory.md); on a small shared CPU it is often compute-bound,
which the ratio shows as well.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def stream_copy_gbs(threads: int = 1, mib: int = 512, reps: int = 5) -> float:
    """STREAM 'copy' bandwidth in GB/s (10^9 bytes): (bytes read + bytes written) / time, best of ``reps``."""
    import numpy as np

    n = mib * 1024 * 1024 // 8
    a = np.ones(n)
    b = np.empty_like(a)
    bounds = [(i * n // threads, (i + 1) * n // threads) for i in range(threads)]

    def part(lo: int, hi: int) -> None:
        np.copyto(b[lo:hi], a[lo:hi])  # releases the GIL

    best = float("inf")
    for _ in range(reps):
        workers = [threading.Thread(target=part, args=bnd) for bnd in bounds]
        t = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best / 1e9


def decode_tokens_per_s(path: Path, threads: int, tokens: int, n_ctx: int = 512) -> float:
    """Median single-token decode rate of llama.cpp on the CPU (after an 8-token prompt)."""
    import llama_cpp

    from qcheck.eval.runners.llamacpp import without_weight_repacking

    with without_weight_repacking():
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                              n_gpu_layers=0, verbose=False)
    try:
        llm.eval([1, 3, 4, 5, 6, 7, 8, 3])
        steps = []
        for i in range(tokens):
            t = time.perf_counter()
            llm.eval([3 + i % 5])
            steps.append(time.perf_counter() - t)
        return 1.0 / statistics.median(steps)
    finally:
        llm.close()


def estimate_for(path: Path, bandwidth_gbs: float, context: int) -> tuple[float, int]:
    """qcheck's decode ceiling at ``bandwidth_gbs`` for the file (and the bytes it counts per step)."""
    from qcheck.classify import classify
    from qcheck.memory import MemoryTarget, estimate_memory
    from qcheck.readers import load_checkpoint
    from qcheck.request import Deploy

    cp = load_checkpoint(str(path))
    ins = classify(cp)
    est = estimate_memory(ins, Deploy(context=context), MemoryTarget.for_engine("llama.cpp", device="RAM"))
    step = (est.active_weight_bytes or est.weights_bytes) + (est.kv_bytes_per_token or 0) * context
    return bandwidth_gbs * 1e9 / step, int(step)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--layers", default="2,4,8")
    ap.add_argument("--types", default="F16,Q8_0,Q4_0")
    args = ap.parse_args()
    from memory_gguf import Arch, write_model

    bw1 = stream_copy_gbs(1)
    bw = stream_copy_gbs(args.threads) if args.threads > 1 else bw1
    print(f"memory bandwidth (numpy STREAM copy, 512 MiB, best of 5): {bw1:.1f} GB/s on 1 thread"
          + (f", {bw:.1f} GB/s on {args.threads}" if args.threads > 1 else ""))
    print(f"{'model':34} {'type':5} {'bytes/step':>10} {'estimate tok/s':>14} {'measured':>9} {'est/meas':>8}")
    ratios = []
    with tempfile.TemporaryDirectory(prefix="qcheck-bench-speed-") as tmp:
        for wtype in args.types.split(","):
            for n_layer in (int(x) for x in args.layers.split(",")):
                a = Arch("llama", n_embd=2048, n_layer=n_layer, n_head=32, n_head_kv=8, n_ff=8192, n_vocab=32000,
                         n_ctx_train=4096)
                path = write_model(Path(tmp) / f"{a.label().replace('/', '_')}-{wtype}.gguf", a, wtype)
                est, step = estimate_for(path, bw, context=8 + args.tokens // 2)
                meas = decode_tokens_per_s(path, args.threads, args.tokens)
                ratios.append(est / meas)
                print(f"{a.label()[:34]:34} {wtype:5} {step / 1e6:8.0f} MB {est:14.1f} {meas:9.1f} {est / meas:8.2f}")
                path.unlink()
    print(f"estimate / measured: median {statistics.median(ratios):.2f}, range {min(ratios):.2f} .. "
          f"{max(ratios):.2f} over {len(ratios)} models ({args.threads} thread(s); the estimate is a ceiling, so a "
          "ratio above 1 is expected)")
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    code = main()
    print(f"done in {time.perf_counter() - t0:.1f} s")
    sys.exit(code)
