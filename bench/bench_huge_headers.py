"""Huge safetensors headers: qcheck against safetensors.safe_open, and a 160-shard FP8 model on a slow Hub.

    python bench/bench_huge_headers.py [--entries 300000] [--rounds 3] [--skip-hub] [--spaced] [--sorted] [--zero]

1. One file whose JSON header lists ``--entries`` tensors (300,000 entries: 35.8 MB of header, a sparse
   file with no data on disk), spelled as the safetensors writer spells it (compact), or with ``--spaced`` as
   ``json.dumps`` does by default (``", "`` and ``": "``), and with ``--sorted`` with each entry's fields sorted
   (data_offsets, dtype, shape: nlohmann::json in MLX's writer, ``sort_keys``), and with ``--zero`` every tensor
   an empty U8 pack (shape ``[0, 16]``, no data: the red-team case of issue #32, which every FP4/INT4 scanner
   looks at). In each of ``--rounds`` rounds every tool runs in a fresh subprocess that calls
   it three times and keeps the best CPU time (``time.process_time``: the machine may be shared); the rounds
   interleave the tools, so load from other jobs hits all of them alike. Printed: the median over rounds of
   each tool's CPU time (min-max), its peak RSS increase, and the qcheck / safe_open ratio of the medians
   with the per-round ratios. ``qcheck read_safetensors_header`` is the reader (every bound checked:
   nesting depth, object count, offsets, shapes, duplicate keys); ``qcheck inspect_path`` adds the
   classification. safe_open's call is what a user writes to list names, shapes and dtypes.
2. ``bench/bench_hub.py --shards 160 --tensors 120 --latency 0.05 --rounds 5``: 19,200 tensors from a fake Hub
   at 50 ms per request, qcheck against ``huggingface_hub.get_safetensors_metadata``, five alternating rounds.
No timed assertions: targets are read from this output.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
def kb(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
path = sys.argv[1]
exec(sys.argv[2])
base = kb("VmRSS")
best = None
for _ in range(3):
    t0 = time.process_time()
    n = eval(sys.argv[3])
    spent = time.process_time() - t0
    best = spent if best is None else min(best, spent)
print(json.dumps({"cpu_s": best, "rss_mb": (kb("VmHWM") - base) / 1024, "tensors": n}))
"""

TOOLS = {
    "qcheck read_safetensors_header": (
        "from qcheck.readers.safetensors import read_safetensors_header\nfrom qcheck.source import LocalFileSource",
        "len(read_safetensors_header(LocalFileSource(path)).tensors)"),
    "qcheck inspect_path": ("from qcheck.inspect import inspect_path", "inspect_path(path).tensor_count"),
    "safetensors safe_open": (
        "from safetensors import safe_open",
        "len([(k, f.get_slice(k).get_shape(), f.get_slice(k).get_dtype()) for f in [safe_open(path, 'numpy')] "
        "for k in f.keys()])"),
}


def build(path: Path, entries: int, spaced: bool = False, sorted_keys: bool = False, zero: bool = False) -> int:
    """A MoE-like header: ``entries`` BF16 tensors of 16x16, or U8 of 0x16 (``zero``: no data), names as a
    256-expert model spells them."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for i in range(entries):
        layer, rest = divmod(i, 768)
        expert, proj = divmod(rest, 3)
        name = f"model.layers.{layer}.mlp.experts.{expert}.{('gate', 'up', 'down')[proj]}_proj.weight"
        size = 0 if zero else 512
        header[name] = {"dtype": "U8" if zero else "BF16", "shape": [0 if zero else 16, 16],
                        "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(", ", ": ") if spaced else (",", ":"), sort_keys=sorted_keys).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw)
    os.truncate(path, 8 + len(raw) + offset)
    return len(raw)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of fresh processes, the tools interleaved")
    ap.add_argument("--skip-hub", action="store_true")
    ap.add_argument("--spaced", action="store_true", help="spell the header as json.dumps does by default")
    ap.add_argument("--sorted", action="store_true", help="sort each entry's fields, as nlohmann::json (MLX) does")
    ap.add_argument("--zero", action="store_true", help="every tensor an empty U8 pack (shape [0, 16], no data)")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with tempfile.TemporaryDirectory(prefix="qcheck-bench-") as tmp:
        path = Path(tmp) / "huge.safetensors"
        size = build(path, args.entries, args.spaced, args.sorted, args.zero)
        spelling = ("spaced " if args.spaced else "") + ("sorted " if args.sorted else "") + \
            ("zero-size " if args.zero else "")
        print(f"1. one file, {args.entries:,} entries, {size / 1e6:.1f} MB of {spelling}"
              f"header ({args.rounds} rounds; CPU "
              "seconds, best of 3 calls per process, median over rounds (min-max); peak RSS increase)")
        runs: dict[str, list[dict]] = {tool: [] for tool in TOOLS}
        for _ in range(args.rounds):
            for tool, (setup, call) in TOOLS.items():
                out = subprocess.run([sys.executable, "-c", CHILD, str(path), setup, call], capture_output=True,
                                     text=True, env=env, timeout=3600)
                if out.returncode:
                    raise SystemExit(f"{tool} failed:\n{out.stderr}")
                runs[tool].append(json.loads(out.stdout.strip().splitlines()[-1]))
        cpu = {tool: [r["cpu_s"] for r in rs] for tool, rs in runs.items()}
        for tool, rs in runs.items():
            median = statistics.median(cpu[tool])
            print(f"   {tool:34s} {median:7.2f} s ({min(cpu[tool]):.2f}-{max(cpu[tool]):.2f}) "
                  f"{max(r['rss_mb'] for r in rs):6.0f} MB  {median * 1e6 / args.entries:6.1f} us/tensor")
        peer = "safetensors safe_open"
        for tool in ("qcheck read_safetensors_header", "qcheck inspect_path"):
            per_round = sorted(a / b for a, b in zip(cpu[tool], cpu[peer], strict=True))
            memory = max(r["rss_mb"] for r in runs[tool]) / max(max(r["rss_mb"] for r in runs[peer]), 1)
            print(f"   ratio {tool} / safe_open: {statistics.median(cpu[tool]) / statistics.median(cpu[peer]):.2f}x "
                  f"CPU time (per round {' '.join(f'{r:.2f}' for r in per_round)}), {memory:.2f}x memory")
    if not args.skip_hub:
        print("\n2. 160 shards x 120 tensors (19,200) from a fake Hub at 50 ms per request")
        sys.stdout.flush()
        subprocess.run([sys.executable, str(ROOT / "bench" / "bench_hub.py"), "--shards", "160", "--tensors", "120",
                        "--latency", "0.05", "--rounds", "5"], env=env, check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
