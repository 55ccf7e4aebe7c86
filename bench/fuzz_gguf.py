"""Long mutation-fuzzing run of the GGUF header reader (the suite runs 300 examples; this runs N).

    python bench/fuzz_gguf.py --examples 200000 [--seed 1] [--max-seconds 600]

Seeds: a GGUFWriter file with tensors of several types and a tokenizer, a hand-assembled file, and
the real llama.cpp vocabulary file shipped in tests/data (the suite's seeds and consistency property, from
tests/support/gguf_fuzz.py). Mutations: bit flips, interesting values
written over 1/2/4/8-byte fields, truncation, insertion, deletion, chained 1-4 times, positions
uniform over the header. Any exception other than InputError, or an accepted mutant whose result is
inconsistent, is printed with a reproducer file written to --out. Exit code 1 if any was found.
(An atheris target was not added: this pure-Python parser gains little from coverage guidance that
these structured mutations do not already give, and atheris needs a compiler toolchain here.)
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support/

from qcheck.errors import InputError  # noqa: E402
from qcheck.readers.gguf import read_gguf_header  # noqa: E402
from support.gguf_fuzz import INTERESTING, VOCAB_FILE, assert_consistent, seed_files  # noqa: E402
from support.gguf_helpers import BytesSource  # noqa: E402


def mutate(rng: random.Random, seeds: list[bytes]) -> bytes:
    data = bytearray(rng.choice(seeds))
    header_end = min(len(data), 1 << 20)
    for _ in range(rng.randint(1, 4)):
        if len(data) <= 8:
            break
        limit = min(len(data), header_end)
        pos = rng.randrange(0 if rng.random() < 0.05 else 8, limit)
        kind = rng.choice(["flip", "field", "field", "truncate", "insert", "delete"])
        if kind == "flip":
            data[pos] ^= 1 << rng.randrange(8)
        elif kind == "field":
            width = rng.choice([1, 2, 4, 8])
            value = rng.choice(INTERESTING) if rng.random() < 0.7 else rng.getrandbits(64)
            data[pos: pos + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
        elif kind == "truncate":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = rng.randbytes(rng.randint(1, 16))
        else:
            del data[pos: pos + rng.randint(1, 16)]
    return bytes(data)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=None)
    parser.add_argument("--out", type=Path, default=Path("fuzz-failures"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    seeds = [*seed_files()[:2], VOCAB_FILE.read_bytes()]
    outcomes: Counter[str] = Counter()
    failures = 0
    start = time.perf_counter()
    done = 0
    for done in range(1, args.examples + 1):
        data = mutate(rng, seeds)
        try:
            header = read_gguf_header(BytesSource(data, "fuzz.gguf"))
            assert_consistent(header, len(data))
            outcomes["accepted"] += 1
        except InputError:
            outcomes["InputError"] += 1
        except Exception:  # the bug class this run looks for
            failures += 1
            args.out.mkdir(parents=True, exist_ok=True)
            path = args.out / f"crash-{args.seed}-{done}.gguf"
            path.write_bytes(data)
            print(f"FAILURE on example {done} (saved {path}):", file=sys.stderr)
            traceback.print_exc()
        if args.max_seconds and time.perf_counter() - start > args.max_seconds:
            break
    elapsed = time.perf_counter() - start
    print(f"{done} examples in {elapsed:.1f} s ({done / elapsed:.0f}/s): "
          f"{outcomes['InputError']} rejected with InputError, {outcomes['accepted']} accepted, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
