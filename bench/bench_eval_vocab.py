"""Benchmark ``qcheck eval`` against ``llama-perplexity --kl-divergence`` on a 262k-vocabulary model.

    python bench/bench_eval_vocab.py --llama-bin DIR [--vocab 262144 --vocab 32768] [--hidden 256] [--tokens 2048]
                                     [--windows chunks|sliding]

Gemma 3's vocabulary (262,144 entries) makes the output layer the cost centre of an evaluation: per scored
token a 262k-wide matmul, log-softmax and KL divergence. This builds a model with that vocabulary and a few tiny
Llama layers (tied embeddings, as Gemma; the tokenizer is the tests' 512-token BPE and llama.cpp's converter pads
the vocabulary to the model's 262,144 rows, so every logit row is full width), converts it to GGUF with llama.cpp's
own ``convert_hf_to_gguf.py`` (F32 and Q8_0), and measures one candidate (Q8_0) both ways on the same text:

- llama-perplexity: ``--kl-divergence-base`` from the F32 GGUF once, then the timed candidate run
  ``-m Q8_0 --kl-divergence -c 512``: non-overlapping 512-token chunks, the second half of each scored.
- qcheck: ``qcheck eval --candidate q8=Q8_0.gguf --max-length 512 --windows chunks`` with the reference cache
  warm (computed by a first run): llama-perplexity's own windows, so both score the same tokens with the same
  forward work. ``--windows sliding`` runs qcheck's default instead (``--stride 256``: 512-token windows each
  scoring its last 256 tokens, so every token after the first is scored: about twice the tokens and twice the
  forward work).

Wall time and peak RSS are those of each whole process (``/usr/bin/time``: startup, imports and model load
included), plus qcheck's own per-candidate phase from its JSON. The last lines give the eval time **per candidate
per 1,000 scored positions**, llama-perplexity's (its candidate run's wall time) against each qcheck backend's
candidate phase (load included) and against qcheck's whole process, on the same tokens with ``--windows chunks``.
``--backends simulated,llamacpp`` measures the candidate both simulated and under llama.cpp in process;
``--kv-cache-dtype T`` runs every candidate with that KV cache (llama-perplexity ``-ctk T -ctv T``, flash attention on
as its default; qcheck ``--kv-cache-dtype T --no-kv-split``). Ratios are printed per candidate and per scored
token. Run at two vocabulary sizes, the candidate's peak RSS minus the model's own float32 size shows whether
memory grows with the vocabulary beyond the model. Needs llama-perplexity (``--llama-bin``) and the llama.cpp
converter (fetched from the llama-cpp-python sdist, see tests/support/llamacpp_convert.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the tiny-model builders and the converter wrapper: tests/support/


def build_model(path: Path, vocab: int, hidden: int, layers: int) -> int:
    """The reference: Llama layers, ``vocab`` rows, tied embeddings; returns its parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from support.tiny_llama import build_tokenizer

    tok = build_tokenizer(512)
    tok.save_pretrained(path)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 4,
                         num_hidden_layers=layers, num_attention_heads=max(1, hidden // 64),
                         num_key_value_heads=max(1, hidden // 128), max_position_embeddings=4096,
                         initializer_range=0.05, tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(path, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def corpus(min_tokens: int, tokenizer_dir: Path) -> tuple[str, int]:
    """English prose from the bundled task sets, repeated until it tokenises to at least ``min_tokens``."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    texts = []
    from qcheck.eval.tasks import bundled_dir

    for line in (bundled_dir() / "prose.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith(("#", "//")):
            texts.append(json.loads(line)["text"])
    text, n = "", 0
    while n < min_tokens:
        text = (text + "\n\n" if text else "") + "\n\n".join(texts)
        n = len(tok(text)["input_ids"])
    return text, n


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """(wall seconds, peak RSS bytes, stdout + stderr) of ``cmd`` under GNU time (its own small process is the
    parent, so the child's peak is its own, not this Python's)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as fh:
        out = subprocess.run(["/usr/bin/time", "-o", fh.name, "-f", "%e %M", *cmd], capture_output=True, text=True,
                             env=env)
        if out.returncode not in (0, 1):
            raise RuntimeError(f"{cmd[0]} failed ({out.returncode}): {out.stderr[-1500:]}")
        wall, kb = fh.read().split()[-2:]
    return float(wall), int(kb) * 1024, out.stdout + "\n" + out.stderr


def llama_kld(stdout_err: str) -> dict[str, float]:
    """Mean KLD and same-top-p from llama-perplexity's summary."""
    values = {}
    for line in stdout_err.splitlines():
        parts = line.split()
        if line.startswith("Mean    KLD:") or line.startswith("Mean KLD:"):
            values["kld_mean"] = float(parts[2])
        if line.startswith("Same top p:"):
            values["top1"] = float(parts[3]) / 100
    return values


def run_one(work: Path, vocab: int, args: argparse.Namespace, threads: int) -> dict[str, float]:
    from support.llamacpp_convert import convert, llama_cpp_source

    model = work / f"v{vocab}"
    model.mkdir(parents=True)
    params = build_model(model, vocab, args.hidden, args.layers)
    f32, q8 = convert(llama_cpp_source(), [(model, "f32"), (model, "q8_0")])
    text, n_tokens = corpus(args.tokens, model)
    (work / "text.txt").write_text(text, encoding="utf-8")
    (work / "tasks.jsonl").write_text(json.dumps({"id": "doc", "kind": "text", "text": text}) + "\n",
                                      encoding="utf-8")
    perplexity = str(Path(args.llama_bin) / "llama-perplexity")
    # --no-repack: virtual machines may advertise AMX without enabling it, and llama.cpp's repacked Q8_0 weights then
    # die of SIGILL (qcheck's llama.cpp backend loads without repacking for the same reason: without_weight_repacking)
    common = ["-f", str(work / "text.txt"), "-c", "512", "-b", "512", "-t", str(threads), "--no-repack"]
    kv = ["-ctk", args.kv_cache_dtype, "-ctv", args.kv_cache_dtype, "-fa", "on"] if args.kv_cache_dtype else []
    base = work / f"base-{vocab}.kld"
    timed([perplexity, "-m", str(f32), *common, "--kl-divergence-base", str(base)])
    lp_runs = []
    for _ in range(args.repeat):
        wall, rss, text_out = timed([perplexity, "-m", str(q8), *common, *kv, "--kl-divergence-base", str(base),
                                     "--kl-divergence"])
        lp_runs.append((wall, rss, llama_kld(text_out)))
    lp_wall, lp_rss, lp_kld = min(lp_runs, key=lambda r: r[0])
    chunks = n_tokens // 512
    lp_scored = chunks * (512 - 1 - 256)  # n_ctx - 1 - first predictions per chunk

    # glibc returns freed blocks above 1 MB to the system at once (by default the threshold grows to 32 MB and
    # freed heap memory stays resident), so the peak RSS follows the live bytes, not the allocator's history
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads),
           "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
    cache = work / f"cache-{vocab}"
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    candidates = [arg for b in backends for arg in ("--candidate", f"q8-{b}={b}:{q8}")]
    cmd = [sys.executable, "-m", "qcheck", "eval", "--reference", str(model), *candidates,
           *(["--kv-cache-dtype", args.kv_cache_dtype, "--no-kv-split"] if args.kv_cache_dtype else []),
           "--tasks", str(work / "tasks.jsonl"), "--max-length", "512",
           *(["--windows", "chunks"] if args.windows == "chunks" else ["--stride", "256"]), "--cache-dir", str(cache),
           "--json", "--bootstrap", "100"]
    cold_wall, cold_rss, _ = timed(cmd, env)  # computes and caches the reference
    qc_runs = []
    for _ in range(args.repeat):
        wall, rss, stdout = timed(cmd, env)
        qc_runs.append((wall, rss, json.loads(stdout[:stdout.rindex("}") + 1])))
    qc_wall, qc_rss, data = min(qc_runs, key=lambda r: r[0])
    # qcheck resets the kernel's high-water mark at each phase, so /usr/bin/time (wait4's ru_maxrss) sees only
    # the last phase's peak: the process's peak is the largest phase peak qcheck reports
    qc_rss = max(qc_rss, data["performance"]["peak_rss_bytes"] or 0)
    cand = data["candidates"][0]
    perf = cand["performance"]
    per_k = [(c["name"], c["performance"]["seconds"] * 1000 / max(1, c["metrics"]["tokens_scored"]),
              c["metrics"]["kld_mean"], c["metrics"]["top1_agreement"]) for c in data["candidates"]]
    qc_scored = cand["metrics"]["tokens_scored"]
    model_bytes = params * 4
    print(f"\nvocabulary {vocab:,}: {params / 1e6:.1f} M parameters ({model_bytes / 1e6:.0f} MB float32), text "
          f"{n_tokens:,} tokens, {threads} thread(s)")
    print(f"  llama-perplexity Q8_0  {lp_wall:7.2f} s wall, peak RSS {lp_rss / 1e6:6.0f} MB, {lp_scored:,} tokens "
          f"scored ({chunks} chunks x 255), mean KLD {lp_kld.get('kld_mean', float('nan')):.3g}, top-1 "
          f"{lp_kld.get('top1', float('nan')):.1%}")
    print(f"  qcheck eval    Q8_0    {qc_wall:7.2f} s wall, peak RSS {qc_rss / 1e6:6.0f} MB, {qc_scored:,} tokens "
          f"scored, mean KLD {cand['metrics']['kld_mean']:.3g}, top-1 {cand['metrics']['top1_agreement']:.1%}")
    scoring = perf["scoring_peak_rss_bytes"]
    print(f"    of which the candidate phase {perf['seconds']:.2f} s (load {perf['load_seconds']:.2f} s, "
          f"{perf['tokens_per_second']:.0f} tokens/s through the model), phase peak RSS "
          f"{perf['peak_rss_bytes'] / 1e6:.0f} MB = model + {(perf['peak_rss_bytes'] - model_bytes) / 1e6:.0f} MB "
          f"(while loading: the dequantised tensors and the model); while scoring {scoring / 1e6:.0f} MB = model + "
          f"{(scoring - model_bytes) / 1e6:.0f} MB")
    print(f"    (cold run computing the reference too: {cold_wall:.2f} s, peak RSS {cold_rss / 1e6:.0f} MB)")
    # the whole qcheck process shared among its candidates (one per backend)
    ratio = qc_wall / len(per_k) / lp_wall
    per_token = (qc_wall / len(per_k) / qc_scored) / (lp_wall / lp_scored)
    print(f"  ratio qcheck / llama-perplexity: {ratio:.2f}x per candidate (target <= 2; whole process / "
          f"{len(per_k)} candidate(s)), {per_token:.2f}x per scored token")
    lp_per_k = lp_wall * 1000 / lp_scored
    print(f"  eval time per candidate per 1,000 scored positions{' (KV cache ' + args.kv_cache_dtype + ')' if kv else ''}:")
    print(f"    llama-perplexity --kl-divergence   {lp_per_k:7.2f} s   (mean KLD {lp_kld.get('kld_mean', float('nan')):.4g})")
    for name, seconds, kld, top1 in per_k:
        print(f"    qcheck {name:26s}  {seconds:7.2f} s   {seconds / lp_per_k:5.2f}x   (mean KLD {kld:.4g}, top-1 "
              f"{top1:.1%}; candidate phase incl. load)")
    whole = qc_wall * 1000 / qc_scored / len(per_k)
    print(f"    qcheck whole process, per candidate {whole:7.2f} s   {whole / lp_per_k:5.2f}x   (imports, reference cache read)")
    return {"vocab": vocab, "ratio": ratio, "per_token": per_token, "rss_over_model": scoring - model_bytes,
            "qc_rss": qc_rss, "lp_rss": lp_rss}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bin", required=True, help="directory with llama-perplexity")
    ap.add_argument("--vocab", type=int, action="append", default=[])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=2048, help="text length (llama-perplexity needs >= 2 x 512)")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs of each tool; the fastest is reported")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--backends", default="simulated", help="qcheck backends for the candidate: simulated, llamacpp "
                                                             "or both (comma-separated)")
    ap.add_argument("--kv-cache-dtype", default=None, help="a llama.cpp KV cache type (q8_0, q4_0, ...) for both tools")
    ap.add_argument("--windows", choices=["chunks", "sliding"], default="chunks",
                    help="qcheck's windows: chunks (llama-perplexity's, the same tokens) or sliding (its default)")
    args = ap.parse_args()
    vocabs = args.vocab or [262144, 32768]
    work = Path(tempfile.mkdtemp(prefix="qcheck-bench-vocab-"))
    try:
        results = []
        for vocab in vocabs:
            sub = work / f"run-{vocab}"
            sub.mkdir()
            results.append(run_one(sub, vocab, args, args.threads))
            shutil.rmtree(sub / f"cache-{vocab}", ignore_errors=True)
        if len(results) > 1:
            print("\npeak RSS while the qcheck candidate scores, beyond the model's own float32 weights: "
                  + ", ".join(f"vocab {r['vocab']:,}: {r['rss_over_model'] / 1e6:.0f} MB" for r in results))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
