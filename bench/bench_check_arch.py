"""What the architecture dimension costs ``qcheck check``: CPU time of fresh ``qcheck check`` processes on the
bundled examples, and the in-process cost of reading one engine's ``matrices/architectures/`` file.

    python bench/bench_check_arch.py [REPO_DIR ...]     # default: this checkout; give an older one to compare

Prints measurements only (no assertions): CPU time, not wall time, since the machine is shared.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

CASES = (["examples/tiny-llama-Q4_0.gguf", "--engine", "llama.cpp", "--gpu", "h100"],
         ["examples/tiny-llama-fp8-block", "--engine", "vllm", "--gpu", "h100"],
         ["examples/tiny-llama-fp8-block", "--engine", "transformers", "--gpu", "h100"],
         ["examples/tiny-llama-Q4_0.gguf", "--engine", "ollama", "--gpu", "rtx-4090"])


def cold(root: Path, runs: int = 7) -> None:
    env = {**os.environ, "PYTHONPATH": str(root)}
    for args in CASES:
        cpu = []
        for _ in range(runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([sys.executable, "-m", "qcheck", "check", *args, "--json"], cwd=root, env=env,
                           capture_output=True, check=False)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        print(f"  {args[0]} {args[2]}: median CPU {statistics.median(cpu) * 1000:.0f} ms "
              f"(min {min(cpu) * 1000:.0f})")


def parse_cost(root: Path) -> None:
    sys.path.insert(0, str(root))
    from qcheck.matrix.architectures import clear_cache, load_architectures

    for engine in ("vllm", "transformers", "llama.cpp", "ollama"):
        best = 1e9
        for _ in range(20):
            clear_cache()
            t = time.process_time()
            load_architectures((root / "matrices").resolve(), engine)
            best = min(best, time.process_time() - t)
        print(f"  read + validate architectures/{engine}.toml: {best * 1000:.1f} ms CPU (best of 20)")


if __name__ == "__main__":
    roots = [Path(p).resolve() for p in sys.argv[1:]] or [Path(__file__).resolve().parent.parent]
    for root in roots:
        print(f"== {root}")
        cold(root)
    parse_cost(Path(__file__).resolve().parent.parent)
