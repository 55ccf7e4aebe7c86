"""Header-reading speed and memory: qcheck against gguf-py's GGUFReader and safetensors' safe_open.

    python bench/bench_inspect.py [--runs 3] [--workdir DIR] [--keep]

Builds, in a temporary directory, sparse files whose data costs no disk:
- a Llama-3-8B Q4_K_M GGUF (291 tensors with the real shapes and llama.cpp's Q4_K_M type choice,
  a 128,256-token vocabulary with 280,147 merges, ~4.9 GB apparent size, a few MB on disk);
- a Llama-3-8B BF16 safetensors model in 4 shards with its index and config.json (~16 GB apparent).
Each tool runs in a fresh subprocess: import time, first-call time, median of the next calls, and
the peak-RSS increase over the post-import RSS (``VmHWM - VmRSS``, Linux) and the peak Python
heap (tracemalloc, a separate call). Prints a table and the
qcheck/peer ratios. Speed targets are read from this output, never asserted in the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.model_headers import write_sparse_tensors  # noqa: E402

N_LAYERS, D_MODEL, D_FF, N_KV_HEADS, HEAD_DIM, VOCAB, N_MERGES = 32, 4096, 14336, 8, 128, 128_256, 280_147


# ---------------------------------------------------------------------------------------- builders
def _use_more_bits(i: int, n: int) -> bool:
    """llama.cpp quantize: the layers that get Q6_K for attn_v/ffn_down in Q4_K_M."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def llama3_q4_k_m_tensors() -> list[tuple[str, tuple[int, ...], str]]:
    """(name, row-major shape, ggml type) for Llama-3-8B as llama.cpp's Q4_K_M recipe stores it."""
    kv = N_KV_HEADS * HEAD_DIM
    out = [("token_embd.weight", (VOCAB, D_MODEL), "Q4_K")]
    for i in range(N_LAYERS):
        more = _use_more_bits(i, N_LAYERS)
        out += [
            (f"blk.{i}.attn_norm.weight", (D_MODEL,), "F32"),
            (f"blk.{i}.ffn_down.weight", (D_MODEL, D_FF), "Q6_K" if more else "Q4_K"),
            (f"blk.{i}.ffn_gate.weight", (D_FF, D_MODEL), "Q4_K"),
            (f"blk.{i}.ffn_up.weight", (D_FF, D_MODEL), "Q4_K"),
            (f"blk.{i}.ffn_norm.weight", (D_MODEL,), "F32"),
            (f"blk.{i}.attn_k.weight", (kv, D_MODEL), "Q4_K"),
            (f"blk.{i}.attn_output.weight", (D_MODEL, D_MODEL), "Q4_K"),
            (f"blk.{i}.attn_q.weight", (D_MODEL, D_MODEL), "Q4_K"),
            (f"blk.{i}.attn_v.weight", (kv, D_MODEL), "Q6_K" if more else "Q4_K"),
        ]
    out += [("output_norm.weight", (D_MODEL,), "F32"), ("output.weight", (VOCAB, D_MODEL), "Q6_K")]
    return out


def _vocab(rng: random.Random) -> tuple[list[str], list[str]]:
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ĠĊ.,;:!?-_()[]"
    tokens = [f"{''.join(rng.choices(alphabet, k=rng.randint(1, 10)))}{i}" for i in range(VOCAB)]
    merges = [f"{rng.choice(tokens)} {rng.choice(tokens)}" for _ in range(N_MERGES)]
    return tokens, merges


def build_gguf(path: Path) -> tuple[int, int]:
    """Write the header with gguf-py's GGUFWriter, then extend the file sparsely to its full size."""
    import gguf

    rng = random.Random(0)
    tokens, merges = _vocab(rng)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("Meta Llama 3 8B Instruct")
    writer.add_context_length(8192)
    writer.add_embedding_length(D_MODEL)
    writer.add_block_count(N_LAYERS)
    writer.add_feed_forward_length(D_FF)
    writer.add_head_count(32)
    writer.add_head_count_kv(N_KV_HEADS)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_K_M))
    writer.add_vocab_size(VOCAB)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * VOCAB)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(128000)
    writer.add_eos_token_id(128009)
    writer.add_chat_template("{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
                             "{{ m.content }}<|eot_id|>{% endfor %}" * 20)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    return write_sparse_tensors(writer, llama3_q4_k_m_tensors(), path)


def build_safetensors(directory: Path, shards: int = 4) -> int:
    """A Llama-3-8B BF16 model directory: 4 sparse shards, index and config.json."""
    kv = N_KV_HEADS * HEAD_DIM
    layers: list[list[tuple[str, tuple[int, ...]]]] = []
    for i in range(N_LAYERS):
        p = f"model.layers.{i}."
        layers.append([(p + "input_layernorm.weight", (D_MODEL,)), (p + "mlp.down_proj.weight", (D_MODEL, D_FF)),
                       (p + "mlp.gate_proj.weight", (D_FF, D_MODEL)), (p + "mlp.up_proj.weight", (D_FF, D_MODEL)),
                       (p + "post_attention_layernorm.weight", (D_MODEL,)),
                       (p + "self_attn.k_proj.weight", (kv, D_MODEL)), (p + "self_attn.o_proj.weight", (D_MODEL, D_MODEL)),
                       (p + "self_attn.q_proj.weight", (D_MODEL, D_MODEL)), (p + "self_attn.v_proj.weight", (kv, D_MODEL))])
    per = (N_LAYERS + shards - 1) // shards
    groups = [[item for layer in layers[k * per:(k + 1) * per] for item in layer] for k in range(shards)]
    groups[0].insert(0, ("model.embed_tokens.weight", (VOCAB, D_MODEL)))
    groups[-1] += [("model.norm.weight", (D_MODEL,)), ("lm_head.weight", (VOCAB, D_MODEL))]
    weight_map: dict[str, str] = {}
    total_size = 0
    for k, group in enumerate(groups, 1):
        fname = f"model-{k:05d}-of-{shards:05d}.safetensors"
        header: dict[str, object] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for name, shape in group:
            n = 2
            for d in shape:
                n *= d
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
            offset += n
            weight_map[name] = fname
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * ((8 - len(raw) % 8) % 8)
        path = directory / fname
        with open(path, "wb") as fh:
            fh.write(len(raw).to_bytes(8, "little") + raw)
        os.truncate(path, 8 + len(raw) + offset)
        total_size += offset
    (directory / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total_size}, "weight_map": weight_map}, indent=2))
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D_MODEL,
        "intermediate_size": D_FF, "num_attention_heads": 32, "num_hidden_layers": N_LAYERS,
        "num_key_value_heads": N_KV_HEADS, "vocab_size": VOCAB, "max_position_embeddings": 8192,
        "rope_theta": 500000.0, "torch_dtype": "bfloat16", "tie_word_embeddings": False}, indent=2))
    return sum(f.stat().st_size for f in directory.iterdir())


# ------------------------------------------------------------------------------------ measurement
TOOLS = {
    # name: (import statement, call expression on `path`)
    "qcheck read_gguf_header": ("from qcheck.readers.gguf import read_gguf_file",
                                "len(read_gguf_file(path).tensors)"),
    "qcheck inspect_path (gguf)": ("from qcheck.inspect import inspect_path",
                                   "inspect_path(path).tensor_count"),
    "gguf-py GGUFReader": ("from gguf import GGUFReader",
                           "len([(t.name, t.tensor_type, tuple(t.shape)) for t in GGUFReader(path).tensors])"),
    "qcheck read_safetensors_header x4": (
        "from qcheck.readers.safetensors import read_safetensors_header\n"
        "from qcheck.source import LocalFileSource\nimport glob, os",
        "sum(len(read_safetensors_header(LocalFileSource(p)).tensors) "
        "for p in sorted(glob.glob(os.path.join(path, '*.safetensors'))))"),
    "qcheck inspect_path (safetensors dir)": ("from qcheck.inspect import inspect_path",
                                              "inspect_path(path).tensor_count"),
    "safetensors safe_open x4": (
        "from safetensors import safe_open\nimport glob, os",
        "sum(len([(k, f.get_slice(k).get_shape(), f.get_slice(k).get_dtype()) for k in f.keys()]) "
        "for f in (safe_open(p, framework='numpy') for p in sorted(glob.glob(os.path.join(path, '*.safetensors')))))"),
}

CHILD = r"""
import json, statistics, sys, time, tracemalloc
def status_kb(field):
    # VmHWM, not ru_maxrss: Linux carries the parent's peak RSS into ru_maxrss across fork+exec
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise SystemExit("needs /proc/self/status (Linux)")
path, runs = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter()
exec(sys.argv[3])
t_import = time.perf_counter() - t0
base = status_kb("VmRSS")
t0 = time.perf_counter()
result = eval(sys.argv[4])
first = time.perf_counter() - t0
peak = status_kb("VmHWM")
tracemalloc.start()
eval(sys.argv[4])
heap_peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
times = []
budget = time.perf_counter() + 30
while len(times) < runs and (not times or time.perf_counter() < budget):
    t0 = time.perf_counter()
    eval(sys.argv[4])
    times.append(time.perf_counter() - t0)
print(json.dumps({"import_s": t_import, "first_s": first, "median_s": statistics.median(times) if times else first,
                  "n_timed": len(times), "rss_delta_kb": max(0, peak - base), "heap_peak_kb": heap_peak / 1024,
                  "result": result}))
"""


def measure(tool: str, path: Path, runs: int) -> dict:
    setup, call = TOOLS[tool]
    # warm-up: compile bytecode caches so import time is a warm import, as a user sees on the second run
    subprocess.run([sys.executable, "-c", setup], cwd=ROOT, capture_output=True, timeout=600)
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(runs), setup, call], capture_output=True,
                         text=True, cwd=ROOT, timeout=3600)
    if out.returncode:
        raise SystemExit(f"{tool} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _mb(kb: float) -> str:
    return f"{kb / 1024:.1f} MB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5,
                        help="timed calls after the first (median reported; slow tools stop after 30 s)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="qcheck-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        gguf_path = work / "Meta-Llama-3-8B-Instruct-Q4_K_M.gguf"
        t0 = time.perf_counter()
        header_bytes, gguf_size = build_gguf(gguf_path)
        st_dir = work / "llama3-8b-bf16"
        st_dir.mkdir(exist_ok=True)
        st_size = build_safetensors(st_dir)
        disk = sum(p.stat().st_blocks * 512 for p in work.rglob("*") if p.is_file())
        print(f"built in {time.perf_counter() - t0:.1f} s: GGUF {gguf_size / 1e9:.2f} GB apparent, header "
              f"{header_bytes / 1e6:.2f} MB; safetensors {st_size / 1e9:.2f} GB apparent in 4 shards; "
              f"{disk / 1e6:.1f} MB on disk in total")
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, runs={args.runs}\n")
        rows = []
        for tool in TOOLS:
            target = gguf_path if "gguf" in tool.lower() and "safetensors" not in tool else st_dir
            rows.append((tool, measure(tool, target, args.runs)))
        print("| tool | import | first call | median call (n) | peak RSS increase | peak Python heap | tensors |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for tool, m in rows:
            print(f"| {tool} | {m['import_s'] * 1000:.0f} ms | {m['first_s'] * 1000:.1f} ms | "
                  f"{m['median_s'] * 1000:.1f} ms ({m['n_timed']}) | {_mb(m['rss_delta_kb'])} | "
                  f"{_mb(m['heap_peak_kb'])} | {m['result']} |")
        by = dict(rows)
        ours, theirs = by["qcheck read_gguf_header"], by["gguf-py GGUFReader"]
        print("\nGGUF (qcheck reader vs GGUFReader): "
              f"{theirs['median_s'] / ours['median_s']:.1f}x faster per call, "
              f"{(theirs['import_s'] + theirs['first_s']) / (ours['import_s'] + ours['first_s']):.1f}x faster "
              "including import, "
              f"peak RSS increase {_mb(ours['rss_delta_kb'])} vs {_mb(theirs['rss_delta_kb'])}, "
              f"peak Python heap {_mb(ours['heap_peak_kb'])} vs {_mb(theirs['heap_peak_kb'])} "
              f"({theirs['heap_peak_kb'] / max(ours['heap_peak_kb'], 1):.0f}x less)")
        full = by["qcheck inspect_path (gguf)"]
        print(f"GGUF full inspect (read + classify) vs GGUFReader alone: "
              f"{theirs['median_s'] / full['median_s']:.1f}x faster per call")
        ours, theirs = by["qcheck read_safetensors_header x4"], by["safetensors safe_open x4"]
        print("safetensors (qcheck header reader vs safe_open, 4 shards): "
              f"{theirs['median_s'] / ours['median_s']:.1f}x per call, "
              f"peak Python heap {_mb(ours['heap_peak_kb'])} vs {_mb(theirs['heap_peak_kb'])}")
        full = by["qcheck inspect_path (safetensors dir)"]
        print(f"safetensors full inspect (index + config + 4 headers + classify): {full['median_s'] * 1000:.1f} ms "
              f"per call, peak Python heap {_mb(full['heap_peak_kb'])}")
        print(f"\nmemory vs size: qcheck GGUF peak Python heap {_mb(by['qcheck read_gguf_header']['heap_peak_kb'])} "
              f"for a {header_bytes / 1e6:.1f} MB header in a {gguf_size / 1e9:.1f} GB file")
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.exit(main())
