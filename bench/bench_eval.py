"""Benchmark ``qcheck eval``: harness overhead against a bare transformers loop, and reference-cache reuse.

    python bench/bench_eval.py [--vocab 32000] [--hidden 256] [--layers 2] [--repeat 5] [--threads 1]

1. Overhead. One candidate (already loaded, so only the eval work is timed) is scored with ``run_eval``
   against a warm reference cache, and the same model runs a bare loop over the same token ids doing only
   what any evaluation must do: one forward per request with ``logits_to_keep``, ``log_softmax`` and the
   same greedy decoding for ``generate`` items. Ratio = eval / bare; target <= 1.15. The best of
   ``--repeat`` alternating runs of each is used (the machine may be shared); one torch thread by default.
2. Cache reuse. Three simulated GGUF candidates (Q8_0, Q5_0, Q4_0 of the same model) in one cold run, then
   again with the cache warm; without a cache each candidate would pay for the reference too.

The model is a random Llama with a realistic vocabulary-to-width ratio (default 32000 x 256; the vocab is
padded beyond the tokenizer's, as real checkpoints often are, and the output head dominates, as in small
real models), so the per-token metric cost, which grows with the vocabulary, is not hidden behind an
unrealistically large transformer.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tiny-model builders: tests/support/


def build_model(path: Path, vocab: int, hidden: int, layers: int) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from support.tiny_llama import build_tokenizer

    tok = build_tokenizer(512)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 3,
                         num_hidden_layers=layers, num_attention_heads=hidden // 64, num_key_value_heads=hidden // 128,
                         max_position_embeddings=2048, initializer_range=0.1, tie_word_embeddings=False,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return path


def bare_loop(model, encoded) -> float:
    """The minimum any evaluation does: forwards, log-softmax, greedy decoding; returns seconds."""
    import torch

    t0 = time.perf_counter()
    with torch.inference_mode():
        for enc in encoded:
            for req in enc.score:
                ids = torch.tensor([req.input_ids[:-1]])
                logits = model(input_ids=ids, use_cache=False, logits_to_keep=req.n_rows).logits[0].float()
                torch.log_softmax(logits, dim=-1)
            if enc.generate is not None:
                g = enc.generate
                out = model(input_ids=torch.tensor([g.prompt_ids]), use_cache=True, logits_to_keep=1)
                cache = out.cache if hasattr(out, "cache") else out.past_key_values
                arg = "cache" if hasattr(out, "cache") else "past_key_values"
                for _ in range(g.max_new_tokens - 1):
                    token = int(out.logits[0, -1].argmax())
                    if token in g.stop_ids:
                        break
                    out = model(input_ids=torch.tensor([[token]]), use_cache=True, logits_to_keep=1, **{arg: cache})
                    cache = getattr(out, arg)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: timings are far less sensitive to other load on the machine)")
    ap.add_argument("--skip-reuse", action="store_true", help="only measure the overhead (part 1)")
    ap.add_argument("--tasks", action="append", default=[], help="task files/names (default: bundled sets)")
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from qcheck.eval.encode import Encoder
    from qcheck.eval.run import CandidateSpec, EvalConfig, run_eval
    from qcheck.eval.runners.reference import TransformersRunner, load_tokenizer, vocab_info
    from qcheck.eval.tasks import load_tasks

    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    work = Path(tempfile.mkdtemp(prefix="qcheck-bench-eval-"))
    try:
        ref = build_model(work / "ref", args.vocab, args.hidden, args.layers)
        tasks = load_tasks(args.tasks)
        tok = load_tokenizer(str(ref))
        encoder = Encoder(tok)
        encoded = [encoder.encode_item(i) for i in tasks.items]
        n_req = sum(len(e.score) for e in encoded)
        n_tok = sum(r.n_rows for e in encoded for r in e.score)
        print(f"model: Llama vocab {args.vocab}, hidden {args.hidden}, {args.layers} layers; torch threads "
              f"{torch.get_num_threads()}")
        print(f"tasks: {len(tasks.items)} items, {n_req} scored requests, {n_tok} scored tokens, "
              f"{sum(1 for e in encoded if e.generate)} generations")

        cache_dir = work / "cache"
        model = AutoModelForCausalLM.from_pretrained(ref, dtype=torch.float32).eval()
        runner = TransformersRunner(model, vocab_info(model, tok, encoder.add_bos), "same", backend="bench")
        t0 = time.perf_counter()
        run_eval(EvalConfig(reference=str(ref), candidates=[CandidateSpec("same", runner=runner)], tasks=args.tasks,
                            cache_dir=str(cache_dir)))
        cold_one = time.perf_counter() - t0

        bare, warm = [], []
        for _ in range(args.repeat):
            bare.append(bare_loop(model, encoded))
            t0 = time.perf_counter()
            r = run_eval(EvalConfig(reference=str(ref), candidates=[CandidateSpec("same", runner=runner)],
                                    tasks=args.tasks, cache_dir=str(cache_dir)))
            warm.append(time.perf_counter() - t0)
            assert r.cache.hit
        b, w = min(bare), min(warm)
        pairs = sorted(wi / bi for wi, bi in zip(warm, bare, strict=True))
        print(f"\n[1] harness overhead, one candidate (model already loaded, reference cache warm; best of "
              f"{args.repeat} alternating runs)")
        print(f"    bare forward loop      {b:8.2f} s")
        print(f"    qcheck eval            {w:8.2f} s   (tokenise, read cache, metrics, bootstrap, gate)")
        print(f"    ratio eval/bare        {w / b:8.3f}   (target <= 1.15); per-pair ratios "
              + " ".join(f"{x:.2f}" for x in pairs))
        print(f"    cold run (reference computed + cached, then the candidate): {cold_one:.2f} s "
              f"= {cold_one / w:.2f} x the warm run")

        if args.skip_reuse:
            return
        from support.gguf_export import export_gguf

        cands = []
        for t in ("Q8_0", "Q5_0", "Q4_0"):
            cands.append(f"{t.lower()}={export_gguf(ref, work / f'm-{t}.gguf', t)}")
        cache2 = work / "cache2"
        t0 = time.perf_counter()
        r1 = run_eval(EvalConfig(reference=str(ref), candidates=cands, tasks=args.tasks, cache_dir=str(cache2)))
        cold3 = time.perf_counter() - t0
        t0 = time.perf_counter()
        r2 = run_eval(EvalConfig(reference=str(ref), candidates=cands, tasks=args.tasks, cache_dir=str(cache2)))
        warm3 = time.perf_counter() - t0
        ref_cost = max(cold3 - warm3, 0.0)
        print("\n[2] reference cache reuse, 3 simulated GGUF candidates (Q8_0, Q5_0, Q4_0)")
        print(f"    cold run (reference computed once)   {cold3:8.2f} s   cache hit={r1.cache.hit}, "
              f"requests written {r1.cache.requests_written}, read {r1.cache.requests_read}")
        print(f"    warm run (reference from cache)      {warm3:8.2f} s   cache hit={r2.cache.hit}, "
              f"requests written {r2.cache.requests_written}")
        print(f"    reference pass ≈ {ref_cost:.2f} s; without a cache 3 candidates would cost ≈ "
              f"{warm3 + 3 * ref_cost:.2f} s -> the cache saves {1 - cold3 / (warm3 + 3 * ref_cost):.0%} "
              f"on a cold run and {1 - warm3 / (warm3 + 3 * ref_cost):.0%} on a warm one")
        print(f"    cache entry: {r1.cache.bytes / 1e6:.1f} MB ({r1.cache.kind}), mean KLD: "
              + ", ".join(f"{c.name} {c.metrics['kld_mean']:.4g}" for c in r2.candidates))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
