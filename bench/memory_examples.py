"""docs/memory.md's worked examples: print them, or write them into docs/memory.md.

    python bench/memory_examples.py            # print the table
    python bench/memory_examples.py --write    # update docs/memory.md between its markers

Each row is a published model (its config.json or GGUF keys, its published file size) estimated through
apply_memory, the code every front end calls (tests/support/memory_examples.py; tests/test_memory_validation.py
checks the docs are current).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.memory_examples import END, START, docs_block, render

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update docs/memory.md between its markers")
    args = parser.parse_args()
    table = render()
    if not args.write:
        print(table)
        return 0
    docs = ROOT / "docs" / "memory.md"
    text = docs.read_text(encoding="utf-8")
    if docs_block(text) == table:
        print("docs/memory.md already current")
        return 0
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    docs.write_text(f"{head}{START}\n{table}\n{END}{tail}", encoding="utf-8")
    print("docs/memory.md updated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
