"""Real llama.cpp GGUF exports for the tests: tiny transformers models of several architectures, converted by
llama.cpp's own ``convert_hf_to_gguf.py`` from the llama-cpp-python source package that matches the installed
``llama_cpp`` (the sdist vendors llama.cpp with its converter and gguf-py).

The sdist is fetched once from the package index (the only network the tests use, as CI's install does) into
``$QCHECK_TEST_CACHE`` (default ``~/.cache/qcheck-tests``; ``$QCHECK_LLAMACPP_SOURCE`` names a llama.cpp checkout to use
instead); only the converter, its ``conversion`` package and gguf-py
are extracted. The tiny models carry a 512-token GPT-2 style byte-level BPE tokenizer trained by the tests, for
which llama.cpp knows no pre-tokenizer hash and which has no sentencepiece model: the wrapper below answers the
hash check with ``gpt-2`` (the pre-tokenizer regex it uses) and has every model class write its vocabulary the
gpt2 way. Tensors are converted by llama.cpp's code, untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from support.tiny_llama import build_tokenizer

REPO = Path(__file__).resolve().parents[2]

#: model_type -> config overrides beyond the common tiny shape (real transformers configs, tiny sizes)
ARCHITECTURES: dict[str, dict] = {
    "llama": {},
    "mistral": {},
    "gemma": {"head_dim": 16},
    # query_pre_attn_scalar = head_dim as in the released 2B/9B (and Gemma 3 1B-12B) configs: llama.cpp ignores the
    # field and scales by 1/sqrt(head_dim), so transformers' default of 256 with a head_dim of 16 made llama.cpp's and
    # transformers' tiny Gemma 2 differ by a KLD of 0.025 even in F32 (docs/engines.md)
    "gemma2": {"head_dim": 16, "query_pre_attn_scalar": 16},
    "gemma3_text": {"head_dim": 16, "query_pre_attn_scalar": 16},
    "qwen2": {},
    "qwen3": {"head_dim": 16},
    "phi3": {},
    "qwen2_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                  "shared_expert_intermediate_size": 64},
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
}
#: converters that size the GGUF vocabulary from the tokenizer (gemma3): the embedding matches it exactly, as in the
#: real models
EXACT_VOCAB = frozenset({"gemma3_text"})
#: tokenizers that add no BOS token, as the real models' do not (Qwen)
NO_BOS = frozenset({"qwen2", "qwen3", "qwen2_moe"})

_WRAPPER = r'''
import json, runpy, sys
from pathlib import Path
root = Path(sys.argv[1])
jobs = json.loads(sys.argv[2])
sys.path.insert(0, str(root))
sys.path.insert(1, str(root / "gguf-py"))
import conversion
import conversion.base as base
T = base.TextModel
T.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
model_class = conversion.get_model_class
def gpt2_vocab_class(name, mmproj=False):
    cls = model_class(name, mmproj)
    if issubclass(cls, T):
        cls.set_vocab = T._set_vocab_gpt2
    return cls
conversion.get_model_class = gpt2_vocab_class
for model_dir, outtype, outfile in jobs:
    sys.argv = [str(root / "convert_hf_to_gguf.py"), model_dir, "--outtype", outtype, "--outfile", outfile]
    try:
        runpy.run_path(str(root / "convert_hf_to_gguf.py"), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
'''


def llama_cpp_source() -> Path:
    """The vendored llama.cpp folder (converter, conversion package, gguf-py) of the installed llama-cpp-python."""
    from importlib.metadata import version as installed_version

    given = os.environ.get("QCHECK_LLAMACPP_SOURCE")  # a llama.cpp checkout of one's own
    if given:
        return Path(given)
    version = installed_version("llama-cpp-python")
    cache = Path(os.environ.get("QCHECK_TEST_CACHE", Path.home() / ".cache" / "qcheck-tests"))
    root = cache / f"llama.cpp-{version}"
    if (root / "convert_hf_to_gguf.py").is_file() and (root / "conversion").is_dir():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        # the sdist of this one package: ``--no-binary :all:`` would also build pip's isolated build environment
        # (scikit-build-core, hatchling, setuptools...) from source, minutes on a machine with a cold pip cache
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                               "llama-cpp-python", "--quiet", f"llama-cpp-python=={version}", "-d", tmp],
                              capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise RuntimeError(f"pip download llama-cpp-python=={version} failed: {done.stderr[-500:]}")
        sdist = next(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        staging = Path(tmp) / "src"
        prefix = f"{sdist.name[:-len('.tar.gz')]}/vendor/llama.cpp/"
        wanted = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix)
                       and m.name[len(prefix):].startswith(wanted) and (m.isfile() or m.isdir())]
            tar.extractall(staging, members=members, filter="data")
        extracted = staging / prefix
        if root.exists():
            shutil.rmtree(root)
        shutil.move(str(extracted), str(root))
    return root


def build_tiny_model(model_type: str, out: Path, seed: int = 0, **sizes: int) -> Path:
    """A tiny random transformers model of ``model_type`` saved as BF16 safetensors, with the tests' BPE tokenizer
    (512 tokens, and the class transformers picks for the model type may add its own specials: the embedding has
    576 rows, padded as real vocabularies are, except where the converter trims it to the tokenizer).

    Norm weights get noise so that offsets such as Gemma's ``1 + w`` are visible in the output. ``sizes`` override
    the common shape (``hidden_size=256`` for K-quants, whose blocks are 256 values along a row)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    bos = model_type not in NO_BOS
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(512)
    if not bos:  # the post-processor is what prepends BOS in a fast tokenizer
        tokenizer.backend_tokenizer.post_processor = None
    tokenizer.save_pretrained(out)
    tok_config = json.loads((out / "tokenizer_config.json").read_text())
    tok_config["add_bos_token"] = bos
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2))
    vocab = 576
    if model_type in EXACT_VOCAB:
        from transformers import AutoTokenizer

        vocab = len(AutoTokenizer.from_pretrained(out))
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
    config = AutoConfig.for_model(model_type, **{**common, **ARCHITECTURES[model_type], **sizes})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(torch.randn_like(param) * 0.1)
            elif param.dim() >= 2:
                param.mul_(4.0)  # sharper distributions than the tiny init gives
    model.to(torch.bfloat16).save_pretrained(out)
    return out


def convert(source: Path, jobs: list[tuple[Path, str]]) -> list[Path]:
    """``convert_hf_to_gguf.py MODEL --outtype OUTTYPE`` for each (model folder, outtype), in one process (torch is
    imported once), with llama.cpp's bundled gguf-py; returns the files, ``MODEL/model-OUTTYPE.gguf``."""
    outs = [model_dir / f"model-{outtype}.gguf" for model_dir, outtype in jobs]
    todo = [(str(d), t, str(o)) for (d, t), o in zip(jobs, outs, strict=True) if not o.is_file()]
    if todo:
        done = subprocess.run([sys.executable, "-c", _WRAPPER, str(source), json.dumps(todo)],
                              capture_output=True, text=True, timeout=900,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"})
        missing = [o for o in outs if not o.is_file()]
        if done.returncode or missing:
            raise RuntimeError(f"convert_hf_to_gguf.py failed ({len(missing)} file(s) missing): {done.stderr[-800:]}")
    return outs
