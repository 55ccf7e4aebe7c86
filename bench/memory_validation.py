"""qcheck's memory estimate against published engine runs: print the validation table, or write it into
docs/memory.md.

    python bench/memory_validation.py            # print the table and each run's parts
    python bench/memory_validation.py --write    # update docs/memory.md between its markers

The runs and their inputs are tests/data/memory_validation.toml; qcheck's figures come from apply_memory, the code
every front end calls (tests/support/memory_validation.py; tests/test_memory_validation.py checks the same).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.memory_validation import render, rows, update_docs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update docs/memory.md between its markers")
    args = parser.parse_args()
    table = rows()
    if args.write:
        print("docs/memory.md updated" if update_docs() else "docs/memory.md already current")
        return 0 if all(r.ok for r in table) else 1
    print(render(table))
    for r in table:
        parts = ", ".join(f"{p.name} {p.bytes / 2**30:.2f}" for p in r.estimate.parts)
        print(f"{r.run['id']}: {'ok' if r.ok else 'OUTSIDE 5%'}; {parts} GiB")
    return 0 if all(r.ok for r in table) else 1


if __name__ == "__main__":
    raise SystemExit(main())
