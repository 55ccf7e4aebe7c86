"""Behaviour comparison for refactors: the JSON of ``qcheck inspect`` and ``qcheck check`` (and the text of
``qcheck inspect``) over the bundled examples and a corpus of checkpoints built with the tests' own builders, saved and diffed.

A refactor that must not change behaviour runs this before (``run --out before.json``) and after
(``run --out after.json``), then ``diff before.json after.json``: every output is compared as parsed JSON
and every difference is printed with its case and path. The corpus is written once into ``--corpus``
(reused when it exists) so both runs read exactly the same bytes; absolute paths of the corpus and the
examples are replaced by ``<corpus>`` / ``<examples>`` in the outputs.

    PYTHONPATH=$PWD python bench/compare_outputs.py run --corpus /tmp/qcheck-corpus --out /tmp/before.json
    ... refactor ...
    PYTHONPATH=$PWD python bench/compare_outputs.py run --corpus /tmp/qcheck-corpus --out /tmp/after.json
    python bench/compare_outputs.py diff /tmp/before.json /tmp/after.json

To compare against another code tree (e.g. main after a rebase), export it (``git archive main | tar -x -C
/tmp/base``) and run ``run`` with ``PYTHONPATH=/tmp/base``: the check cases are read from the baseline with
``--cases-from``, so both runs ask the same engine/GPU questions even if the matrix data changed.

Every output is produced in-process through the click command (``qcheck.cli.main``), exactly as the
``qcheck`` script runs it: stdout, exit code and (for errors) stderr are recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect as pyinspect
import io
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: GPUs every case is judged on with every engine of their vendor (``--gpu`` only: explore mode)
GPUS = ("h100", "b200", "rtx-4090", "a100", "mi300x", "m3-max", "cpu")
#: explicit engine versions (``--engine name==version``) judged on a Hopper and an Ampere GPU; the list is
#: read from the matrix at baseline time (oldest, middle and newest version of each engine) and stored
ENGINE_GPUS = ("h100", "a100")
#: the memory-fit estimate (``Verdict.memory``, with its speed ceiling): every engine on products with and
#: without speed data, an architecture (no product memory: the note), the CPU (RAM) and Apple (unified memory)
MEMORY_ARGS = ("--gpu", "h100", "--gpu", "rtx-4090", "--gpu", "m3-max", "--gpu", "cpu", "--gpu", "hopper",
               "--context", "8192")
#: and a loaded deployment: a long context, a batch, a KV cache dtype, tensor parallelism
MEMORY_LOADED_ARGS = ("--engine", "vllm", "--engine", "llama.cpp", "--engine", "sglang", "--gpu", "h100",
                      "--gpu", "a100", "--context", "65536", "--batch", "4", "--kv-cache-dtype", "fp8", "--tp", "2")


# ------------------------------------------------------------------------------------------ corpus

def _support_path() -> None:
    """``tests/support`` importable, appended: ``qcheck`` itself must keep coming from ``PYTHONPATH`` (the code tree
    under comparison), never from this script's tree."""
    if str(REPO / "tests") not in sys.path:
        sys.path.append(str(REPO / "tests"))


def _builders() -> Any:
    _support_path()
    from support import builders

    return builders


def _fixture_cases(b: Any) -> dict[str, Any]:
    """Every builder returning a ``Fixture`` with default arguments, plus variants of the arguments."""
    cases: dict[str, Any] = {}
    for name, fn in sorted(vars(b).items()):
        if not callable(fn) or name.startswith("_") or getattr(fn, "__module__", "") != b.__name__:
            continue
        try:
            sig = pyinspect.signature(fn)
        except (TypeError, ValueError):
            continue
        if "Fixture" not in str(sig.return_annotation):
            continue
        if any(p.default is p.empty for p in sig.parameters.values()):
            continue
        cases[name] = fn()
    variants = {
        "gptq_fixture-8bit-g32": lambda: b.gptq_fixture(bits=8, group=32),
        "gptq_fixture-perchannel-noact": lambda: b.gptq_fixture(group=-1, desc_act=False),
        "mlx_fixture-8bit-g32": lambda: b.mlx_fixture(bits=8, group=32),
        "mlx_fixture-mxfp4": lambda: b.mlx_fixture(mode="mxfp4", group=32),
        "mlx_fixture-nvfp4": lambda: b.mlx_fixture(mode="nvfp4", group=16),
        "mlx_fixture-mxfp8": lambda: b.mlx_fixture(bits=8, mode="mxfp8", group=32),
        "nvfp4_modelopt_fixture-noquant": lambda: b.nvfp4_modelopt_fixture(config_quant=False),
        "exl2_fixture-noconfig": lambda: b.exl2_fixture(with_config=False),
        "torchao_fixture-legacy": lambda: b.torchao_fixture(legacy=True),
        "bnb_nf4_fixture-double": lambda: b.bnb_nf4_fixture(double=True),
        "w4a16_ct-zp": lambda: b.w4a16_ct(zero_point=True),
        "gpt_oss_fixture-small": lambda: b.gpt_oss_fixture(experts=2, hidden=64, inter=64, layers=1),
    }
    for name, make in variants.items():
        try:
            cases[name] = make()
        except TypeError:  # a builder whose arguments changed: skip the variant, keep the rest
            continue
    return cases


def _extra_specs(b: Any) -> dict[str, Any]:
    """Layouts no fixture builder covers as a whole model: one linear kind each over the default shape."""
    kinds = {
        "fp8_tensor": b.fp8_tensor, "fp8_block": b.fp8_block, "fp8_channel": b.fp8_channel,
        "nvfp4_modelopt": b.nvfp4_modelopt, "nvfp4_ct": b.nvfp4_ct, "mxfp4_ct": b.mxfp4_ct, "mxfp8_ct": b.mxfp8_ct,
        "int_pack_ct": b.int_pack_ct, "int8_ct": b.int8_ct, "gptq": b.gptq, "awq_gemm": b.awq_gemm,
        "awq_gemv": b.awq_gemv, "mlx_affine": b.mlx_affine, "mlx_mx": b.mlx_mx, "bnb_nf4": b.bnb_nf4,
        "bnb_int8": b.bnb_int8, "exl2": b.exl2, "exl3": b.exl3, "hqq": b.hqq, "aqlm": b.aqlm,
        "torchao_fp8": b.torchao_fp8, "quark_fp8": b.quark_fp8, "quark_mxfp4": b.quark_mxfp4,
        "native_mxfp4": b.native_mxfp4,
    }
    out = {}
    for name, linear in kinds.items():
        tensors = b.model_tensors(b.DEFAULT, linear)
        out[f"tensors-only-{name}"] = b.Fixture(tensors, {"config.json": b.llama_config()})
    return out


def _mismatches(b: Any) -> dict[str, Any]:
    """Configs that contradict the tensors: the classifier's cross-checks (findings and warnings)."""
    out = {}
    gptq = b.gptq_fixture()
    awq = b.awq_fixture()
    fp8 = b.fp8_ct_channel()
    nv = b.nvfp4_modelopt_fixture()
    out["mismatch-gptq-tensors-awq-config"] = b.Fixture(gptq.tensors, awq.configs)
    out["mismatch-awq-tensors-gptq-config"] = b.Fixture(awq.tensors, gptq.configs)
    out["mismatch-fp8-tensors-nvfp4-config"] = b.Fixture(fp8.tensors, nv.configs)
    out["mismatch-bf16-tensors-fp8-config"] = b.Fixture(b.bf16_llama().tensors, fp8.configs)
    cfg = b.llama_config()
    cfg["quantization_config"] = {"quant_method": "made-up-method", "bits": 4}
    out["unknown-quant-method"] = b.Fixture(gptq.tensors, {"config.json": cfg})
    for named in ("eetq", "quanto", "vptq", "higgs"):
        c = b.llama_config()
        c["quantization_config"] = {"quant_method": named, "weights": "int8"}
        out[f"named-{named}"] = b.Fixture(b.model_tensors(b.DEFAULT, b.int8_ct), {"config.json": c})
    return out


def _gguf_cases(root: Path) -> list[Path]:
    """GGUF files of many tensor types (gguf-py's writer), one per type, with the matching file type."""
    sys.path.insert(0, str(REPO / "tests"))
    from gguf.constants import GGMLQuantizationType as Q
    from gguf.constants import LlamaFileType as F

    from support import gguf_helpers

    types = {
        "F32": (Q.F32, F.ALL_F32), "F16": (Q.F16, F.MOSTLY_F16), "BF16": (Q.BF16, F.MOSTLY_BF16),
        "Q8_0": (Q.Q8_0, F.MOSTLY_Q8_0), "Q4_0": (Q.Q4_0, F.MOSTLY_Q4_0), "Q4_1": (Q.Q4_1, F.MOSTLY_Q4_1),
        "Q5_0": (Q.Q5_0, F.MOSTLY_Q5_0), "Q5_1": (Q.Q5_1, F.MOSTLY_Q5_1), "Q2_K": (Q.Q2_K, F.MOSTLY_Q2_K),
        "Q3_K": (Q.Q3_K, F.MOSTLY_Q3_K_M), "Q4_K": (Q.Q4_K, F.MOSTLY_Q4_K_M), "Q5_K": (Q.Q5_K, F.MOSTLY_Q5_K_M),
        "Q6_K": (Q.Q6_K, F.MOSTLY_Q6_K), "IQ4_NL": (Q.IQ4_NL, F.MOSTLY_IQ4_NL), "IQ4_XS": (Q.IQ4_XS, F.MOSTLY_IQ4_XS),
        "IQ2_XXS": (Q.IQ2_XXS, F.MOSTLY_IQ2_XXS), "TQ1_0": (Q.TQ1_0, F.MOSTLY_TQ1_0),
        "TQ2_0": (Q.TQ2_0, F.MOSTLY_TQ2_0), "MXFP4": (Q.MXFP4, F.MOSTLY_MXFP4_MOE),
    }
    out = []
    for name, (qtype, ftype) in types.items():
        path = root / f"tiny-{name}.gguf"
        tensors = [("token_embd.weight", (64, 256), Q.F16), ("blk.0.attn_q.weight", (256, 256), qtype),
                   ("blk.0.attn_k.weight", (256, 256), qtype), ("blk.0.ffn_down.weight", (256, 256), qtype),
                   ("blk.0.attn_norm.weight", (256,), Q.F32), ("output.weight", (64, 256), qtype)]
        gguf_helpers.write_gguf(path, tensors, file_type=int(ftype), vocab=64,
                                kv={"llama.embedding_length": 256, "llama.attention.head_count": 4,
                                    "llama.feed_forward_length": 256})
        out.append(path)
    return out


def _adapter_cases(b: Any, root: Path) -> list[Path]:
    """PEFT LoRA/DoRA adapters (adapter_config.json + adapter_model.safetensors)."""
    out = []
    for name, r, dora in (("lora-r16", 16, False), ("lora-r128", 128, False), ("dora-r8", 8, True)):
        tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
        for layer in range(2):
            for proj in ("q_proj", "v_proj"):
                p = f"base_model.model.model.layers.{layer}.self_attn.{proj}"
                tensors[f"{p}.lora_A.weight"] = ("F32", (r, 256))
                tensors[f"{p}.lora_B.weight"] = ("F32", (256, r))
                if dora:
                    tensors[f"{p}.lora_magnitude_vector"] = ("F32", (256,))
        cfg = {"peft_type": "LORA", "r": r, "lora_alpha": 2 * r, "target_modules": ["q_proj", "v_proj"],
               "base_model_name_or_path": "meta-llama/Llama-3.1-8B-Instruct", "use_dora": dora,
               "task_type": "CAUSAL_LM"}
        path = root / name
        b.Fixture(tensors, {"adapter_config.json": cfg}, filename="adapter_model.safetensors").write(path)
        out.append(path)
    return out


def build_variants(root: Path) -> Path:
    """A directory of safetensors variants (bf16/, fp8/, awq/, gptq/): ``check DIR --gpu G`` answers with the
    which-quant-fits table. Kept under ``root/.variants`` (not a corpus case of its own)."""
    out = root / ".variants"
    if not (out / ".complete").exists():
        b = _builders()
        for name, make in (("bf16", b.bf16_llama), ("fp8", b.fp8_ct_channel), ("awq", b.awq_fixture),
                           ("gptq", b.gptq_fixture)):
            make().write(out / name)
        (out / ".complete").write_text("ok\n")
    return out


def build_corpus(root: Path) -> list[Path]:
    """Write every corpus case under ``root`` (once) and return their paths, sorted."""
    marker = root / ".complete"
    if not marker.exists():
        root.mkdir(parents=True, exist_ok=True)
        b = _builders()
        cases = {**_fixture_cases(b), **_extra_specs(b), **_mismatches(b)}
        for name, fixture in cases.items():
            fixture.write(root / name)
            bare = b.Fixture(fixture.tensors, {"config.json": b.llama_config()}, metadata=fixture.metadata)
            bare.write(root / f"noconfig-{name}")
        b.gptq_fixture().write_sharded(root / "sharded-gptq")
        _gguf_cases(root)
        _adapter_cases(b, root)
        marker.write_text("ok\n")
    return sorted(p for p in root.iterdir() if not p.name.startswith("."))


def example_paths() -> list[Path]:
    ex = REPO / "examples"
    return sorted(p for p in ex.iterdir() if p.is_dir() or p.suffix == ".gguf")


# ------------------------------------------------------------------------------------------ running

def _engine_specs() -> list[str]:
    """Oldest, middle and newest version of every engine the matrix knows: ``name==version``."""
    from qcheck.matrix import load_matrix

    matrix = load_matrix()
    specs = []
    for engine in sorted(matrix.engines.values(), key=lambda e: e.id):
        versions = [str(v) for v in getattr(engine, "versions", ()) or ()]
        picks = sorted({versions[0], versions[len(versions) // 2], versions[-1]}, key=versions.index) if versions else []
        specs.extend(f"{engine.id}=={v}" for v in picks)
        if not versions:
            specs.append(engine.id)
    return specs


def _invoke(args: list[str], raw: bool = False) -> dict[str, Any]:
    """One command's exit code, parsed JSON (or text) and stderr; ``raw`` keeps the JSON's exact text too, so
    key order and number formatting are compared byte for byte."""
    from qcheck.cli import main

    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
        except SystemExit as exc:
            code = exc.code
        except Exception as exc:  # record, do not abort the whole comparison
            code = f"exception {type(exc).__name__}: {exc}"
    text = out.getvalue()
    if "--json" not in args and "json" not in args:
        return {"exit": code, "json": {"text": text}, "stderr": err.getvalue().strip()}
    try:
        parsed: Any = json.loads(text) if text.strip() else None
    except ValueError:
        parsed = {"unparsed_stdout": text}
    result = {"exit": code, "json": parsed, "stderr": err.getvalue().strip() if not parsed else ""}
    if raw:
        result["raw"] = text
    return result


def _normalise(value: Any, roots: dict[str, str]) -> Any:
    text = json.dumps(value, sort_keys=True)
    for path, token in roots.items():
        text = text.replace(path, token)
    return json.loads(text)


def run(corpus: Path, out: Path, cases_from: Path | None) -> int:
    import qcheck

    print(f"qcheck from {Path(qcheck.__file__).parent}", file=sys.stderr)
    paths = build_corpus(corpus) + example_paths()
    specs = (json.loads(cases_from.read_text())["engine_specs"] if cases_from else _engine_specs())
    roots = {str(corpus.resolve()): "<corpus>", str(corpus): "<corpus>", str(REPO / "examples"): "<examples>"}
    results: dict[str, Any] = {}
    gpu_args = [a for g in GPUS for a in ("--gpu", g)]
    engine_args = [a for s in specs for a in ("--engine", s)] + [a for g in ENGINE_GPUS for a in ("--gpu", g)]
    for path in paths:
        key = path.name if path.parent == corpus else f"examples/{path.name}"
        results[f"inspect {key}"] = _invoke(["inspect", str(path), "--json"])
        results[f"inspect-text {key}"] = _invoke(["inspect", str(path)])
        results[f"check-gpus {key}"] = _invoke(["check", str(path), "--json", *gpu_args])
        results[f"check-engines {key}"] = _invoke(["check", str(path), "--json", *engine_args])
        results[f"check-memory {key}"] = _invoke(["check", str(path), "--json", *MEMORY_ARGS], raw=True)
        results[f"check-memory-loaded {key}"] = _invoke(["check", str(path), "--json", *MEMORY_LOADED_ARGS],
                                                        raw=True)
        results[f"check-memory-text {key}"] = _invoke(["check", str(path), *MEMORY_ARGS])
    for path in example_paths():  # every report format that shows the memory estimate
        for fmt in ("markdown", "junit", "github"):
            results[f"check-memory-{fmt} examples/{path.name}"] = _invoke(
                ["check", str(path), "--format", fmt, *MEMORY_ARGS])
    variants = build_variants(corpus)
    results["quant-table json"] = _invoke(["check", str(variants), "--json", *MEMORY_ARGS], raw=True)
    results["quant-table text"] = _invoke(["check", str(variants), *MEMORY_ARGS])
    policy = str(REPO / "examples" / "qcheck.toml")
    results["gate json"] = _invoke(["gate", "--policy", policy, "--format", "json"], raw=True)
    results["gate text"] = _invoke(["gate", "--policy", policy])
    results["gate markdown"] = _invoke(["gate", "--policy", policy, "--format", "markdown"])
    results["matrix markdown"] = _invoke(["matrix", "--format", "markdown"])
    data = {"engine_specs": specs, "gpus": list(GPUS), "results": _normalise(results, roots)}
    out.write_text(json.dumps(data, indent=1, sort_keys=True))
    print(f"{len(results)} outputs over {len(paths)} checkpoints ({len(specs)} engine versions) -> {out}")
    return 0


# ------------------------------------------------------------------------------------------ diffing

def _diff(a: Any, b: Any, path: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                out.append(f"{path}.{k}: added {json.dumps(b[k])[:200]}")
            elif k not in b:
                out.append(f"{path}.{k}: removed {json.dumps(a[k])[:200]}")
            else:
                _diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: {json.dumps(a)[:200]} -> {json.dumps(b)[:200]}")


def diff(before: Path, after: Path) -> int:
    a = json.loads(before.read_text())["results"]
    b = json.loads(after.read_text())["results"]
    problems: list[str] = []
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            problems.append(f"{key}: only in {'after' if key not in a else 'before'}")
            continue
        _diff(a[key], b[key], key, problems)
    for p in problems[:200]:
        print(p)
    print(f"{len(set(a) & set(b))} outputs compared, {len(problems)} differences")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="write every output to --out")
    r.add_argument("--corpus", type=Path, required=True, help="corpus directory (built once, then reused)")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--cases-from", type=Path, default=None, help="reuse the engine versions of this baseline")
    d = sub.add_parser("diff", help="compare two runs")
    d.add_argument("before", type=Path)
    d.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.cmd == "run":
        return run(args.corpus, args.out, args.cases_from)
    return diff(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
