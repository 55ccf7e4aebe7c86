"""Tiny GGUF models llama.cpp loads, of several architectures, and llama.cpp's own buffer log parsed.

Used by tests/test_memory_llamacpp.py and bench/bench_memory.py to check qcheck's llama.cpp memory formula
against what llama.cpp allocates: llama-cpp-python loads each file on the CPU at a context and ubatch, and
llama.cpp logs its model, KV cache, compute and output buffer sizes (``... buffer size = N MiB``). The weights
are zeros: memory does not depend on their values.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


@dataclass(frozen=True)
class Arch:
    """One tiny model: an architecture and its dimensions."""

    arch: str = "llama"
    n_embd: int = 128
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 256
    n_vocab: int = 1000
    head_dim: int | None = None
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 64
    swa: int = 0  # sliding window (gemma3: 5 of every 6 layers slide)
    tied: bool = False
    n_ctx_train: int = 8192

    @property
    def hd(self) -> int:
        return self.head_dim or self.n_embd // self.n_head

    def label(self) -> str:
        moe = f"-moe{self.n_expert}x{self.n_expert_used}" if self.n_expert else ""
        return (f"{self.arch}-e{self.n_embd}-l{self.n_layer}-h{self.n_head}/{self.n_head_kv}-ff{self.n_ff}"
                f"-v{self.n_vocab}{moe}{'-swa' + str(self.swa) if self.swa else ''}")


def _vocab(writer: Any, n_vocab: int) -> None:
    tokens = [f"<t{i}>" for i in range(n_vocab)]
    tokens[0], tokens[1], tokens[2] = "<unk>", "<s>", "</s>"
    for i, b in enumerate(("a", "b", "c", "ab", "\u0120", "\u0120a")):
        if 3 + i < n_vocab:
            tokens[3 + i] = b
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3, 3] + [1] * (n_vocab - 3))
    writer.add_token_merges(["a b", "\u0120 a"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)


def write_model(path: Path, a: Arch, wtype: str = "F16", expert_wtype: str | None = None) -> Path:
    """Write ``path``: a GGUF of architecture ``a.arch`` (llama, qwen2, qwen3, qwen3moe, gemma3, gpt-oss: attention
    sinks, biases, every other layer sliding), its matrices in ``wtype`` (F16, or a block type gguf-py can quantise:
    Q8_0, Q4_0) and its routed experts in ``expert_wtype`` when given (any block type, e.g. MXFP4 as GPT-OSS ships
    them: zero blocks written as raw bytes, so a full-width expert costs no quantising)."""
    import gguf
    import numpy as np
    from gguf.quants import quantize

    qtype = gguf.GGMLQuantizationType[wtype]

    w = gguf.GGUFWriter(str(path), a.arch)
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(a.label())
    w.add_context_length(a.n_ctx_train)
    w.add_embedding_length(a.n_embd)
    w.add_block_count(a.n_layer)
    w.add_feed_forward_length(a.n_ff)
    w.add_head_count(a.n_head)
    w.add_head_count_kv(a.n_head_kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(gguf.LlamaFileType["MOSTLY_" + wtype])
    if a.head_dim:
        w.add_key_length(a.hd)
        w.add_value_length(a.hd)
    if a.n_expert:
        w.add_expert_count(a.n_expert)
        w.add_expert_used_count(a.n_expert_used)
        w.add_expert_feed_forward_length(a.n_ff_exp)
    if a.swa:
        w.add_sliding_window(a.swa)
    if a.arch == "gpt-oss":  # attention sinks, biases everywhere, every other layer sliding (llama.cpp openai_moe)
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(32.0)
        w.add_rope_scaling_orig_ctx_len(4096)
    _vocab(w, a.n_vocab)

    def t(name: str, *shape: int) -> None:
        if expert_wtype and "_exps.weight" in name:
            etype = gguf.GGMLQuantizationType[expert_wtype]
            block, size = gguf.GGML_QUANT_SIZES[etype]
            w.add_tensor(name, np.zeros((*shape[:-1], shape[-1] // block * size), dtype=np.uint8), raw_dtype=etype)
        elif len(shape) == 1:
            w.add_tensor(name, np.zeros(shape, dtype=np.float32))
        elif qtype == gguf.GGMLQuantizationType.F16 or shape[-1] % 32:
            w.add_tensor(name, np.zeros(shape, dtype=np.float16))
        else:
            w.add_tensor(name, quantize(np.zeros(shape, dtype=np.float32), qtype), raw_dtype=qtype)

    e, hd = a.n_embd, a.hd
    t("token_embd.weight", a.n_vocab, e)
    t("output_norm.weight", e)
    if not a.tied and a.arch != "gemma3":
        t("output.weight", a.n_vocab, e)
    for i in range(a.n_layer):
        p = f"blk.{i}."
        t(p + "attn_norm.weight", e)
        t(p + "attn_q.weight", a.n_head * hd, e)
        t(p + "attn_k.weight", a.n_head_kv * hd, e)
        t(p + "attn_v.weight", a.n_head_kv * hd, e)
        t(p + "attn_output.weight", e, a.n_head * hd)
        if a.arch == "gpt-oss":
            t(p + "attn_output.bias", e)
            t(p + "attn_sinks.weight", a.n_head)
            t(p + "post_attention_norm.weight", e)
        if a.arch in ("qwen2", "gpt-oss"):
            t(p + "attn_q.bias", a.n_head * hd)
            t(p + "attn_k.bias", a.n_head_kv * hd)
            t(p + "attn_v.bias", a.n_head_kv * hd)
        if a.arch in ("qwen3", "qwen3moe", "gemma3"):
            t(p + "attn_q_norm.weight", hd)
            t(p + "attn_k_norm.weight", hd)
        if a.arch == "gemma3":
            t(p + "post_attention_norm.weight", e)
            t(p + "post_ffw_norm.weight", e)
        if a.arch != "gpt-oss":
            t(p + "ffn_norm.weight", e)
        if a.arch == "gpt-oss":
            t(p + "ffn_gate_inp.bias", a.n_expert)
            t(p + "ffn_gate_exps.bias", a.n_expert, a.n_ff_exp)
            t(p + "ffn_up_exps.bias", a.n_expert, a.n_ff_exp)
            t(p + "ffn_down_exps.bias", a.n_expert, e)
        if a.n_expert:
            t(p + "ffn_gate_inp.weight", a.n_expert, e)
            t(p + "ffn_gate_exps.weight", a.n_expert, a.n_ff_exp, e)
            t(p + "ffn_up_exps.weight", a.n_expert, a.n_ff_exp, e)
            t(p + "ffn_down_exps.weight", a.n_expert, e, a.n_ff_exp)
        else:
            t(p + "ffn_gate.weight", a.n_ff, e)
            t(p + "ffn_up.weight", a.n_ff, e)
            t(p + "ffn_down.weight", e, a.n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


_BUFFER = re.compile(r"(\w+)\s+(model|KV|compute|output)\s+buffer size\s*=\s*([\d.]+)\s*MiB")


@dataclass
class Buffers:
    """llama.cpp's logged buffer sizes, in MiB, summed over backends (one CPU backend here)."""

    model: float = 0.0  # the mapped/loaded weights (CPU_Mapped, CPU)
    repack: float = 0.0  # extra CPU copies in repacked layouts (AMX, CPU_REPACK): a CPU-only cost
    kv: float = 0.0
    compute: float = 0.0
    output: float = 0.0
    log: str = ""


_KEEP: list[Any] = []


def load_buffers(path: Path, n_ctx: int, n_ubatch: int = 512, n_batch: int | None = None,
                 flash_attn: bool | None = None, n_seq: int = 1, *, kv_unified: bool = False,
                 n_outputs_max: int = 0) -> Buffers:
    """Load ``path`` with llama.cpp (llama-cpp-python's bindings) on the CPU and return the buffer sizes it logged.

    The context is built as the front end under test builds it: ``n_seq`` sequences (``n_seq_max``), one KV pool
    shared by all of them (``kv_unified``, llama-server's -np auto) or one stream each, and ``n_outputs_max`` output
    rows (0: n_batch, llama-cpp-python's default; llama-server sets its slot count). ``swa_full`` is off as
    llama-server sets it, and weight repacking off as on a GPU."""
    import llama_cpp

    lines: list[str] = []

    @llama_cpp.llama_log_callback
    def on_log(level: int, text: bytes, user: Any) -> None:
        lines.append(text.decode("utf-8", "replace"))

    _KEEP.append(on_log)  # the C side holds the pointer for the process lifetime
    llama_cpp.llama_log_set(on_log, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = 0
    mparams.use_extra_bufts = False  # --no-repack: no CPU_REPACK copies (MXFP4 experts are repacked otherwise)
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), mparams)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}: {''.join(lines)[-2000:]}")
    try:
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx, cparams.n_ubatch = n_ctx, n_ubatch
        cparams.n_batch = n_batch or max(n_ubatch, 512)
        cparams.n_seq_max = n_seq
        cparams.n_threads = cparams.n_threads_batch = 1
        cparams.swa_full = False
        cparams.kv_unified = kv_unified
        cparams.n_outputs_max = n_outputs_max
        if flash_attn is not None:
            cparams.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn
                                       else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        ctx = llama_cpp.llama_init_from_model(model, cparams)
        if not ctx:
            raise RuntimeError(f"llama.cpp could not create a context for {path}: {''.join(lines)[-2000:]}")
        llama_cpp.llama_free(ctx)
    finally:
        llama_cpp.llama_model_free(model)
    text = "".join(lines)
    out = Buffers(log=text)
    for line in text.splitlines():
        m = _BUFFER.search(line)
        if not m:
            continue
        backend, kind, mib = m.group(1), m.group(2), float(m.group(3))
        if kind == "model" and backend not in ("CPU_Mapped", "CPU"):
            out.repack += mib
            continue
        attr = {"KV": "kv"}.get(kind, kind)
        setattr(out, attr, getattr(out, attr) + mib)
    return out
