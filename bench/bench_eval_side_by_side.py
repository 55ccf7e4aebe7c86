"""qcheck eval vs llama-perplexity --kl-divergence vs an independent transformers computation, side by side.

No pretrained weights can be downloaded here, so the model is the largest practical random-weight one with a real
shape: Llama 3.2 1B's (hidden 2048, 32 heads / 8 KV heads, MLP 8192, tied 128k-vocabulary embeddings, rope 500k)
with fewer layers, and Llama 3's real tokenizer, read from the vocab-only GGUF that ships in llama.cpp's ``models/``.
Weights are stored in float16 so the F16 GGUF holds exactly the reference's weights; llama.cpp's own
``convert_hf_to_gguf.py`` exports it and ``llama-quantize`` makes the Q8_0 and Q4_K_M candidates.

Rows of the table (per candidate): mean KLD, top-1 agreement, wall time and peak RSS of the whole process:

- ``qcheck eval`` (simulated candidate: the GGUF dequantised into transformers), all candidates in one run;
- ``llama-perplexity --kl-divergence`` against its own F16 logits (its base file written by a first run, whose cost
  is listed as its own row), scoring the second half of each 512-token chunk as it always does;
- an independent transformers computation: the candidate loaded by transformers' own GGUF loader
  (``from_pretrained(gguf_file=...)``, gguf-py's dequantisers), KLD against the float32 reference on qcheck's tokens.

Usage (takes minutes on 2 cores)::

    python bench/bench_eval_side_by_side.py --llama-cpp /path/to/llama.cpp --bin /path/to/llama.cpp/build/bin \
        [--layers 2] [--chunks 4] [--work /tmp/qcheck-side-by-side] [--markdown out.md]

``--llama-cpp`` is a llama.cpp source tree (``convert_hf_to_gguf.py``, ``gguf-py``, ``models/``), ``--bin`` holds
``llama-perplexity`` and ``llama-quantize``. Everything built is cached in ``--work``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CTX = 512
CANDIDATES = ("Q8_0", "Q4_K_M")

#: convert_hf_to_gguf.py with llama.cpp's bundled gguf-py; the pre-tokenizer is Llama 3's ("llama-bpe": the hash
#: check does not know a tokenizer re-serialised by transformers)
_CONVERT = r'''
import runpy, sys
from pathlib import Path
root = Path(sys.argv[1])
sys.path.insert(0, str(root)); sys.path.insert(1, str(root / "gguf-py"))
import conversion
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "llama-bpe"
model_class = conversion.get_model_class
def bpe_vocab_class(name, mmproj=False):
    cls = model_class(name, mmproj)
    if issubclass(cls, base.TextModel):
        cls.set_vocab = base.TextModel._set_vocab_gpt2  # a tokenizer.json BPE: no sentencepiece probing
    return cls
conversion.get_model_class = bpe_vocab_class
sys.argv = [str(root / "convert_hf_to_gguf.py"), sys.argv[2], "--outtype", "f16", "--outfile", sys.argv[3]]
runpy.run_path(str(root / "convert_hf_to_gguf.py"), run_name="__main__")
'''

#: the independent computation: transformers' GGUF loader for the candidate, float32 reference, qcheck's tokens
_INDEPENDENT = r'''
import json, sys
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM
ref_dir, gguf, tokens_file = sys.argv[1:4]
chunks = json.loads(open(tokens_file).read())
torch.set_num_threads(2)
ref = AutoModelForCausalLM.from_pretrained(ref_dir, dtype=torch.float32)
ref_lp = []
with torch.inference_mode():
    for ids in chunks:
        ref_lp.append(ref(torch.tensor([ids])).logits[0, :-1].float().log_softmax(-1))
del ref
cand = AutoModelForCausalLM.from_pretrained(str(Path(gguf).parent), gguf_file=Path(gguf).name, dtype=torch.float32)
kl, same, n = 0.0, 0, 0
with torch.inference_mode():
    for ids, lp in zip(chunks, ref_lp):
        lq = cand(torch.tensor([ids])).logits[0, :-1].float().log_softmax(-1)
        kl += float((lp.exp() * (lp - lq)).sum())
        same += int((lp.argmax(-1) == lq.argmax(-1)).sum())
        n += lp.shape[0]
print(json.dumps({"kld_mean": kl / n, "top1": same / n, "tokens": n}))
'''


def run(cmd: list[str], **kw) -> tuple[str, float, int]:
    """Run ``cmd`` under /usr/bin/time: (stdout + stderr, wall seconds, peak RSS bytes)."""
    done = subprocess.run(["/usr/bin/time", "-f", "QCHECK_TIME %e %M", *cmd], capture_output=True, text=True, **kw)
    out = done.stdout + done.stderr
    if done.returncode:
        raise SystemExit(f"{cmd[0]} failed ({done.returncode}):\n{out[-3000:]}")
    m = re.findall(r"QCHECK_TIME ([\d.]+) (\d+)", out)
    wall, rss_kb = m[-1]
    return out, float(wall), int(rss_kb) * 1024


def build(args: argparse.Namespace, work: Path) -> tuple[Path, dict[str, Path]]:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    model_dir = work / f"llama-1b-shape-{args.layers}L"
    if not (model_dir / "model.safetensors").is_file():
        tok = AutoTokenizer.from_pretrained(Path(args.llama_cpp) / "models", gguf_file="ggml-vocab-llama-bpe.gguf")
        tok.save_pretrained(model_dir)
        bos = tok.convert_tokens_to_ids("<|begin_of_text|>")
        tj = json.loads((model_dir / "tokenizer.json").read_text())
        # transformers' GGUF tokenizer conversion appends '<|endoftext|>' as id 128256, outside Llama 3's vocabulary
        tj["added_tokens"] = [t for t in tj["added_tokens"] if t["id"] < 128256]
        tj["post_processor"] = {"type": "TemplateProcessing",
                                "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                           {"Sequence": {"id": "A", "type_id": 0}}],
                                "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                         {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                                "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos],
                                                                         "tokens": ["<|begin_of_text|>"]}}}
        (model_dir / "tokenizer.json").write_text(json.dumps(tj))
        tc = json.loads((model_dir / "tokenizer_config.json").read_text())
        tc["add_bos_token"] = True
        (model_dir / "tokenizer_config.json").write_text(json.dumps(tc))
        config = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=args.layers,
                             num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                             tie_word_embeddings=True, rope_theta=500000.0, max_position_embeddings=8192,
                             bos_token_id=bos, eos_token_id=tok.convert_tokens_to_ids("<|end_of_text|>"),
                             rms_norm_eps=1e-5, initializer_range=0.04)
        torch.manual_seed(0)
        LlamaForCausalLM(config).to(torch.float16).save_pretrained(model_dir)
    f16 = work / "model-F16.gguf"
    if not f16.is_file():
        subprocess.run([sys.executable, "-c", _CONVERT, args.llama_cpp, str(model_dir), str(f16)], check=True,
                       capture_output=True)
    files = {"F16": f16}
    for q in CANDIDATES:
        out = work / f"model-{q}.gguf"
        if not out.is_file():
            subprocess.run([str(Path(args.bin) / "llama-quantize"), str(f16), str(out), q, "2"], check=True,
                           capture_output=True)
        files[q] = out
    return model_dir, files


def texts(model_dir: Path, chunks: int) -> tuple[list[str], list[list[int]]]:
    """``chunks`` pieces of the repository's English docs that encode to exactly CTX tokens with BOS (qcheck's text
    items, scored whole in one window) and their token ids, which the independent computation scores too."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    words = " ".join((REPO / name).read_text() for name in ("docs/eval.md", "docs/engines.md", "docs/formats.md")).split()
    out, ids, start = [], [], 0
    while len(out) < chunks:
        n = 300
        while len(tok(" ".join(words[start:start + n]))["input_ids"]) < CTX + 8:
            n += 20
        enc = tok(" ".join(words[start:start + n]))["input_ids"][:CTX]
        start += n
        piece = tok.decode(enc[1:])
        if tok(piece)["input_ids"] == enc:  # an item of exactly these CTX tokens: no window, no truncation
            out.append(piece)
            ids.append(enc)
    return out, ids


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-cpp", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--work", default="/tmp/qcheck-side-by-side")
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    model_dir, files = build(args, work)
    pieces, chunks = texts(model_dir, args.chunks)
    (work / "tasks.jsonl").write_text("".join(json.dumps({"id": f"c{i}", "text": t}) + "\n"
                                              for i, t in enumerate(pieces)))
    (work / "tokens.json").write_text(json.dumps(chunks))
    # llama-perplexity reads raw text and makes CTX-token chunks of it; the same text as qcheck's items
    (work / "text.txt").write_text("\n".join(pieces))
    rows: list[dict] = []
    env = {**os.environ, "OMP_NUM_THREADS": "2"}

    # llama-perplexity: base logits from F16, then each candidate against them
    base = work / "base.kld"
    lp = [str(Path(args.bin) / "llama-perplexity"), "-f", str(work / "text.txt"), "-c", str(CTX), "-t", "2",
          "--chunks", str(args.chunks), "-b", str(CTX)]
    out, wall, rss = run([*lp, "-m", str(files["F16"]), "--kl-divergence-base", str(base)], env=env)
    rows.append({"tool": "llama-perplexity (F16 base logits)", "candidate": "-", "kld": None, "top1": None,
                 "wall": wall, "rss": rss, "tokens": None})
    for q in CANDIDATES:
        out, wall, rss = run([*lp, "-m", str(files[q]), "--kl-divergence-base", str(base), "--kl-divergence"],
                             env=env)
        kld = re.search(r"Mean\s+KLD:\s+([-\d.e]+)", out)
        top = re.search(r"Same top p:\s+([\d.]+)", out)
        rows.append({"tool": "llama-perplexity --kl-divergence", "candidate": q,
                     "kld": float(kld.group(1)) if kld else None, "top1": float(top.group(1)) / 100 if top else None,
                     "wall": wall, "rss": rss, "tokens": None})

    # qcheck: one run, both candidates (simulated: dequantised into transformers)
    cmd = [sys.executable, "-m", "qcheck", "eval", "--reference", str(model_dir), "--tasks", str(work / "tasks.jsonl"),
           "--max-length", str(CTX), "--no-cache", "--bootstrap", "100", "--json", "-o", str(work / "qcheck.json"),
           *[a for q in CANDIDATES for a in ("--candidate", f"{q}={files[q]}")]]
    out, wall, rss = run(cmd, env={**env, "PYTHONPATH": str(REPO)}, cwd=REPO)
    data = json.loads((work / "qcheck.json").read_text())
    # qcheck resets the kernel's high-water mark at each phase, so /usr/bin/time (wait4's ru_maxrss) sees only
    # the last phase's peak: the process's peak is the largest phase peak qcheck reports
    rss = max(rss, data["performance"]["peak_rss_bytes"] or 0)
    for c in data["candidates"]:
        m = c["metrics"]
        rows.append({"tool": "qcheck eval (simulated)", "candidate": c["name"], "kld": m["kld_mean"],
                     "top1": m["top1_agreement"], "wall": wall, "rss": rss, "tokens": m["tokens_scored"],
                     "shared": True})

    # independent: transformers' own GGUF loader
    for q in CANDIDATES:
        out, wall, rss = run([sys.executable, "-c", _INDEPENDENT, str(model_dir), str(files[q]),
                              str(work / "tokens.json")], env=env)
        res = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
        rows.append({"tool": "transformers from_pretrained(gguf_file=)", "candidate": q, "kld": res["kld_mean"],
                     "top1": res["top1"], "wall": wall, "rss": rss, "tokens": res["tokens"]})

    size = sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))
    lines = [f"Model: Llama 3.2 1B shape with {args.layers} layers, 128,256-token vocabulary (Llama 3 tokenizer), "
             f"random float16 weights ({size / 2**20:.0f} MB safetensors); {args.chunks} chunks of {CTX} tokens of "
             "qcheck's docs; 2 threads.", "",
             "| tool | candidate | mean KLD | top-1 | tokens scored | wall (s) | peak RSS (MB) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['tool']} | {r['candidate']} | {'-' if r['kld'] is None else format(r['kld'], '.3g')} | "
                     f"{'-' if r['top1'] is None else format(r['top1'], '.1%')} | {r['tokens'] or '-'} | "
                     f"{r['wall']:.1f}{' (both)' if r.get('shared') else ''} | {r['rss'] / 2**20:.0f} |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    (work / "rows.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
