#!/usr/bin/env python3
"""Draw matrix rules at random for a self-audit, and say what must be read to check each.

    PYTHONPATH=. python matrices/tools/audit_rules.py [--seed N] [--count 40] [--only vllm,sglang] [--json]

The draw is over the hand-written rules (``[[rule]]``, ``[[kv_rule]]``, ``[[attention_rule]]``) of every engine file
but vLLM's and SGLang's (``EXCLUDE``: those are re-derived from every wheel by extract_vllm.py / extract_sglang.py
and audited with them), in file order, with ``random.Random(seed).sample``; the rules generated from released code
are checked by their extractors' ``--check``. The same seed gives the same rules as long as the files keep them.
For each rule it prints the engine versions it answers (the listed versions its ``verified`` covers and its
``versions`` holds), its conditions and outcome, and every source it names with the version that source was read at:
what an auditor reads, at each of those versions, before recording right / partly / wrong (docs/matrix.md, the
"Self-audit" section; matrices/AUDIT.md holds it). ``--only`` draws from the named engines' hand-written rules
instead (AUDIT.md's second draw: the vLLM and SGLang rules, whose gates alone are generated).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any

from qcheck.matrix.loader import load_matrix
from qcheck.matrix.schema import Engine, Rule
from qcheck.matrix.versions import contains

SEED = 35  # issue #35; docs/matrix.md names it
COUNT = 40
EXCLUDE = ("vllm", "sglang")


def hand_rules(engine: Engine) -> list[tuple[str, Rule]]:
    """(kind, rule) of an engine's hand-written rules, in file order."""
    out: list[tuple[str, Rule]] = [("rule", r) for r in engine.rules if not r.generated and not r.modifier]
    out += [("kv_rule", k.rule) for k in engine.kv_rules if not k.rule.generated]
    out += [("attention_rule", a.rule) for a in engine.attention_rules if not a.rule.generated]
    return out


def covered(engine: Engine, rule: Rule) -> list[str]:
    """The listed versions the rule answers: inside its ``versions`` and its ``verified`` (all, if not migrated)."""
    out = []
    for text, version in zip(engine.versions, engine.parsed_versions, strict=True):
        if rule.versions is not None and not contains(rule.versions, version):
            continue
        if rule.verified is not None and not rule.verified.covers(version):
            continue
        out.append(text)
    return out


def draw(seed: int = SEED, count: int = COUNT, only: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """``count`` rules drawn with ``seed`` (from the ``only`` engines' rules if given), each as what an auditor
    needs."""
    matrix = load_matrix()
    matrix.validate()
    pool = [(engine, kind, rule) for engine in sorted(matrix.engines.values(), key=lambda e: e.id)
            if (engine.id in only if only else engine.id not in EXCLUDE) for kind, rule in hand_rules(engine)]
    picked = random.Random(seed).sample(range(len(pool)), count)
    out = []
    for n, index in enumerate(picked, 1):
        engine, kind, rule = pool[index]
        out.append({
            "n": n, "engine": engine.id, "kind": kind, "id": rule.id, "status": rule.status,
            "kernel": rule.kernel, "versions": rule.versions_text,
            "verified": rule.verified.label if rule.verified else None,
            "answers_at": covered(engine, rule),
            "reasons": list(rule.reasons), "requires": list(rule.requires),
            "sources": [{"ref": s.ref, "version": s.version} for s in rule.sources],
        })
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--count", type=int, default=COUNT)
    parser.add_argument("--only", default="", help="comma-separated engine ids to draw from (default: all but "
                                                   + ", ".join(EXCLUDE) + ")")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    drawn = draw(args.seed, args.count, tuple(e for e in args.only.split(",") if e))
    if args.json:
        print(json.dumps(drawn, indent=1))
        return 0
    for d in drawn:
        print(f"{d['n']:2}. {d['engine']} {d['kind']} {d['id']} -> {d['status']}"
              f"{' (' + d['kernel'] + ')' if d['kernel'] else ''}")
        print(f"    answers at: {', '.join(d['answers_at']) or 'no listed version'} (versions {d['versions'] or 'all'},"
              f" verified {d['verified'] or 'not stated'})")
        for reason in d["reasons"] + d["requires"]:
            print(f"    says: {reason}")
        for s in d["sources"]:
            print(f"    read: {s['ref']} @ {s['version']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
