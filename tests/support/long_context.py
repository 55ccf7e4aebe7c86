"""Builds ``evals/long_context.jsonl``: long items for the per-position report (docs/eval.md "Position buckets").

Written for qcheck, from qcheck's own documentation and code (nothing copied from elsewhere), so the set is free to
ship. ``text`` items are 10-20 thousand tokens of English prose or Python (for Llama-3-like tokenizers), so a run
with ``--max-length 16384`` scores positions in every bucket up to 8k+; ``choice`` items plant a fact early in a
long context and ask for it at the end (a model whose KV cache or long-range attention degrades loses it).

Run from the repository root: ``python tests/support/long_context.py`` (rewrites the file; the items are a snapshot
of the sources at the time, so the bundled file does not change when the docs do).
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TEXT_ITEMS = {
    "long-eval-guide": ["docs/eval.md", "docs/engines.md"],
    "long-project-guide": ["README.md", "docs/design.md", "docs/ci.md"],
    "long-memory-security": ["docs/memory.md", "docs/security.md"],
    "long-code": ["qcheck/eval/metrics.py", "qcheck/eval/stats.py", "qcheck/eval/encode.py", "qcheck/eval/cache.py",
                  "qcheck/eval/tasks.py"],
}
#: (id, filler files, where the fact goes as a share of the context, fact, question, choices, answer index)
RETRIEVAL = [
    ("long-recall-code", ["docs/hub.md", "docs/limits.md", "docs/architectures.md"], 0.05,
     "A note for whoever reads this far: the archive access code is 4729.",
     "What is the archive access code mentioned in the text above?", ["4729", "5821", "3067", "9154"], 0),
    ("long-recall-colour", ["docs/security.md"], 0.10,
     "Aside: the maintainers' favourite colour is teal.",
     "What is the maintainers' favourite colour, as mentioned in the text above?",
     ["crimson", "teal", "amber", "violet"], 1),
    ("long-recall-city", ["docs/memory.md", "docs/limits.md"], 0.50,
     "For the record, the first release was tagged in Ljubljana.",
     "In which city was the first release tagged, according to the text above?",
     ["Lisbon", "Tallinn", "Ljubljana", "Valletta"], 2),
]


def _read(paths: list[str]) -> str:
    return "\n\n".join((ROOT / p).read_text(encoding="utf-8").strip() for p in paths)


def items() -> list[dict]:
    out = [{"id": item_id, "kind": "text", "task": "long_context", "text": _read(paths)}
           for item_id, paths in TEXT_ITEMS.items()]
    for item_id, paths, share, fact, question, choices, answer in RETRIEVAL:
        filler = _read(paths)
        cut = filler.find("\n\n", int(len(filler) * share))
        context = f"{filler[:cut]}\n\n{fact}\n\n{filler[cut:].lstrip()}\n\nQuestion: {question}\nAnswer:"
        out.append({"id": item_id, "kind": "choice", "task": "long_context_recall", "context": context,
                    "choices": choices, "answer": answer})
    return out


def main() -> None:
    target = ROOT / "evals" / "long_context.jsonl"
    lines = [json.dumps(item, ensure_ascii=False) for item in items()]
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{target}: {len(lines)} items, {target.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
