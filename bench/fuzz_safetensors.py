"""Longer fuzzing of the safetensors header reader than the test suite runs.

    python bench/fuzz_safetensors.py --examples 20000 [--seed 1]

Uses the strategies and properties of the suite's fuzz test (tests/support/safetensors_fuzz.py) (any input gives a header or an
InputError; whatever qcheck accepts, the safetensors library accepts with the same tensors) and prints
how many inputs were accepted and rejected, and the throughput. A property failure exits 1 with the
shrunk input.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support/

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

from support import safetensors_fuzz as fuzz  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    counts: Counter[str] = Counter()

    @settings(max_examples=args.examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(fuzz.mutated_files())
    def run(data: bytes) -> None:
        counts[fuzz.check_one(data)] += 1

    if args.seed is not None:
        run = seed(args.seed)(run)
    start = time.perf_counter()
    try:
        run()
    except Exception as exc:  # a property failed: hypothesis already printed the shrunk example
        print(f"FAILED: {type(exc).__name__}: {exc}")
        return 1
    elapsed = time.perf_counter() - start
    total = sum(counts.values())
    print(f"{total} inputs in {elapsed:.1f} s ({total / elapsed:.0f}/s): "
          f"{counts['accepted']} accepted, {counts['rejected']} rejected; no exception other than InputError, "
          "no file accepted that the safetensors library refuses")
    return 0


if __name__ == "__main__":
    sys.exit(main())
