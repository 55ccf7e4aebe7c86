"""A made-up ``qcheck.eval/1`` record for the HTML report tests (the report renders from the JSON only)."""

from __future__ import annotations

EDGES = [0.0, *[10 ** (e / 4) for e in range(-24, 5)]]


def candidate(name: str, kld: float, failures: list[dict] | None = None, acc: float = 0.5) -> dict:
    counts = [0] * len(EDGES)
    counts[3], counts[10] = 40, 60
    return {"name": name, "backend": "simulated:gguf", "path": f"/models/{name}.gguf",
            "metrics": {"kld_mean": kld, "kld_median": kld / 2, "kld_p99": kld * 3, "kld_max": kld * 9,
                        "top1_agreement": 0.987, "ppl_ratio": 1.0007, "delta_p_rms": 0.000123,
                        "nll_correlation": 0.99, "accuracy_reference": 0.5, "accuracy": acc, "flips": 0.1,
                        "flips_c_to_i_count": 1, "flips_i_to_c_count": 0, "recovery": 1.0,
                        "greedy_agreement": 0.9},
            "intervals": {"kld_mean": {"low": kld * 0.9, "high": kld * 1.1}},
            "gate": {"passed": not failures, "failures": failures or []},
            "per_task": {"arith": {"n": 4, "accuracy_reference": 0.5, "accuracy": 0.0},
                         "trivia": {"n": 6, "accuracy_reference": 1.0, "accuracy": acc}},
            "distribution": {"edges": EDGES, "counts": counts}, "flipped": [], "notes": [], "warnings": []}


def data(thresholds: dict, cands: list[dict]) -> dict:
    return {"schema": "qcheck.eval/1", "reference": {"path": "/models/bf16", "architecture": "LlamaForCausalLM",
                                                     "dtype": "float32", "device": "cpu"},
            "tasks": {"files": ["/tasks/arith.jsonl", "/tasks/trivia.jsonl"], "items": 10, "by_kind": {"choice": 10},
                      "by_task": {"arith": 4, "trivia": 6}},
            "cache": {"hit": False, "kind": "full-u16", "precision": "u16"}, "thresholds": thresholds,
            "settings": {"max_length": 512}, "candidates": cands,
            "notes": [], "exit_code": 0 if all(c["gate"]["passed"] for c in cands) else 1}


META = {"generated": "2026-12-01 16:00 UTC", "command": ["qcheck", "eval", "-r", "/models/bf16"],
        "versions": {"qcheck": "0.1.0", "torch": "2.13.0", "transformers": "5.24.0"}}
