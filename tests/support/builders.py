"""Header-only fixture builders: real safetensors headers (data bytes all zero, written sparse) and
real config JSON, with the tensor names, dtypes, shapes and config fields each producer writes
(docs/research/formats.md §3-§7). Other tests may reuse them.

A ``Fixture`` can be written to a directory (``write``) for end-to-end tests through the readers and
the CLI, or turned straight into a ``Checkpoint`` (``checkpoint``) for classifier unit tests.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qcheck.model import Checkpoint, SourceFile, TensorInfo

BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
        "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
        "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64}

Spec = dict[str, tuple[str, tuple[int, ...]]]


def nbytes(dtype: str, shape: Iterable[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * BITS[dtype] // 8


@dataclass
class Fixture:
    """A checkpoint described by its tensors (name -> (dtype, shape)), side JSON files and metadata."""

    tensors: Spec
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    metadata: dict[str, str] | None = None
    filename: str = "model.safetensors"

    def header(self) -> bytes:
        """The safetensors header exactly as the Rust writer lays it out (8-byte aligned, space padded)."""
        entries: dict[str, Any] = {}
        if self.metadata is not None:
            entries["__metadata__"] = self.metadata
        offset = 0
        for name, (dtype, shape) in self.tensors.items():
            size = nbytes(dtype, shape)
            entries[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
            offset += size
        raw = json.dumps(entries, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        return struct.pack("<Q", len(raw)) + raw

    @property
    def data_bytes(self) -> int:
        return sum(nbytes(d, s) for d, s in self.tensors.values())

    def write(self, directory: str | Path) -> Path:
        """Write the safetensors file (zero data, sparse) and every config JSON into ``directory``."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        head = self.header()
        with open(path / self.filename, "wb") as fh:
            fh.write(head)
            fh.truncate(len(head) + self.data_bytes)
        for name, content in self.configs.items():
            (path / name).write_text(json.dumps(content, indent=2))
        return path

    def write_sharded(self, directory: str | Path, shards: int = 2) -> Path:
        """Write ``model-0000k-of-0000n.safetensors`` shards and ``model.safetensors.index.json`` the way
        transformers' ``save_pretrained`` does (tensors split in order, index maps each to its shard)."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        names = list(self.tensors)
        per = -(-len(names) // shards)
        weight_map: dict[str, str] = {}
        for k in range(shards):
            part = Fixture({n: self.tensors[n] for n in names[k * per:(k + 1) * per]}, metadata=self.metadata,
                           filename=f"model-{k + 1:05d}-of-{shards:05d}.safetensors")
            part.write(path)
            weight_map.update({n: part.filename for n in part.tensors})
        index = {"metadata": {"total_size": self.data_bytes}, "weight_map": weight_map}
        (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
        for name, content in self.configs.items():
            (path / name).write_text(json.dumps(content, indent=2))
        return path

    def checkpoint(self, path: str = "fixture") -> Checkpoint:
        """The Checkpoint a reader would produce for ``write()``'s directory, built directly."""
        ck = Checkpoint(path=path, container="safetensors", metadata=dict(self.metadata or {}),
                        configs={k: json.loads(json.dumps(v)) for k, v in self.configs.items()})
        head = len(self.header())
        offset = head
        for name, (dtype, shape) in self.tensors.items():
            size = nbytes(dtype, shape)
            ck.tensors[name] = TensorInfo(name=name, dtype=dtype, shape=tuple(shape), nbytes=size, offset=offset,
                                          file=self.filename)
            offset += size
        ck.files.append(SourceFile(self.filename, head + self.data_bytes, "safetensors"))
        for name in self.configs:
            ck.files.append(SourceFile(name, len(json.dumps(self.configs[name], indent=2)), "config"))
        return ck


# --------------------------------------------------------------------------------------- model shape

@dataclass(frozen=True)
class Shape:
    hidden: int = 256
    intermediate: int = 512
    layers: int = 2
    vocab: int = 512
    heads: int = 4
    kv_heads: int = 2
    #: the head width when the config states one that is not hidden / heads (Qwen3: 128 at any hidden size)
    hd: int | None = None

    @property
    def head_dim(self) -> int:
        return self.hd or self.hidden // self.heads

    def linears(self) -> list[tuple[str, int, int]]:
        """(module prefix, out_features, in_features) of every Linear in the decoder layers."""
        h, i, kv, q = self.hidden, self.intermediate, self.kv_heads * self.head_dim, self.heads * self.head_dim
        out = []
        for n in range(self.layers):
            p = f"model.layers.{n}"
            out += [(f"{p}.self_attn.q_proj", q, h), (f"{p}.self_attn.k_proj", kv, h),
                    (f"{p}.self_attn.v_proj", kv, h), (f"{p}.self_attn.o_proj", h, q),
                    (f"{p}.mlp.gate_proj", i, h), (f"{p}.mlp.up_proj", i, h), (f"{p}.mlp.down_proj", h, i)]
        return out

    def logical_parameters(self) -> int:
        """What a model card would say: embeddings + lm_head + linears + norms."""
        linear = sum(o * i for _, o, i in self.linears())
        return 2 * self.vocab * self.hidden + linear + (2 * self.layers + 1) * self.hidden

    def linear_elements(self) -> int:
        return sum(o * i for _, o, i in self.linears())


DEFAULT = Shape()


def llama_config(shape: Shape = DEFAULT, **extra: Any) -> dict[str, Any]:
    """A real LlamaForCausalLM config.json (the fields transformers writes)."""
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate, "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads, "num_key_value_heads": shape.kv_heads, "head_dim": shape.head_dim,
        "vocab_size": shape.vocab, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 1,
        "eos_token_id": 2, "attention_bias": False, "mlp_bias": False, "transformers_version": "4.56.0",
    }
    cfg.update(extra)
    return cfg


def model_tensors(shape: Shape, linear: Callable[[str, int, int], Spec], *, dtype: str = "BF16",
                  lm_head: Callable[[str, int, int], Spec] | None = None) -> Spec:
    """Embeddings, norms and lm_head in ``dtype``; every decoder Linear through ``linear``."""
    t: Spec = {"model.embed_tokens.weight": (dtype, (shape.vocab, shape.hidden))}
    for n in range(shape.layers):
        p = f"model.layers.{n}"
        t[f"{p}.input_layernorm.weight"] = (dtype, (shape.hidden,))
        t[f"{p}.post_attention_layernorm.weight"] = (dtype, (shape.hidden,))
    for prefix, o, i in shape.linears():
        t.update(linear(prefix, o, i))
    t["model.norm.weight"] = (dtype, (shape.hidden,))
    t.update((lm_head or plain(dtype))("lm_head", shape.vocab, shape.hidden))
    return t


def plain(dtype: str = "BF16") -> Callable[[str, int, int], Spec]:
    return lambda p, o, i: {f"{p}.weight": (dtype, (o, i))}


# ------------------------------------------------------------------------------------- per-method layouts

def fp8_channel(p: str, o: int, i: int, *, static_input: bool = False) -> Spec:
    t: Spec = {f"{p}.weight": ("F8_E4M3", (o, i)), f"{p}.weight_scale": ("BF16", (o, 1))}
    if static_input:
        t[f"{p}.input_scale"] = ("BF16", (1,))
    return t


def fp8_tensor(p: str, o: int, i: int) -> Spec:
    return {f"{p}.weight": ("F8_E4M3", (o, i)), f"{p}.weight_scale": ("F32", ()), f"{p}.input_scale": ("F32", ())}


def fp8_block(p: str, o: int, i: int, block: int = 128) -> Spec:
    return {f"{p}.weight": ("F8_E4M3", (o, i)),
            f"{p}.weight_scale_inv": ("F32", (-(-o // block), -(-i // block)))}


def nvfp4_modelopt(p: str, o: int, i: int) -> Spec:
    return {f"{p}.weight": ("U8", (o, i // 2)), f"{p}.weight_scale": ("F8_E4M3", (o, i // 16)),
            f"{p}.weight_scale_2": ("F32", ()), f"{p}.input_scale": ("F32", ())}


def nvfp4_ct(p: str, o: int, i: int, *, activations: bool = True) -> Spec:
    t: Spec = {f"{p}.weight_packed": ("U8", (o, i // 2)), f"{p}.weight_scale": ("F8_E4M3", (o, i // 16)),
               f"{p}.weight_global_scale": ("F32", (1,))}
    if activations:
        t[f"{p}.input_global_scale"] = ("F32", (1,))
    return t


def mxfp4_ct(p: str, o: int, i: int) -> Spec:
    return {f"{p}.weight_packed": ("U8", (o, i // 2)), f"{p}.weight_scale": ("U8", (o, i // 32))}


def mxfp8_ct(p: str, o: int, i: int) -> Spec:
    return {f"{p}.weight": ("F8_E4M3", (o, i)), f"{p}.weight_scale": ("U8", (o, i // 32))}


def int_pack_ct(p: str, o: int, i: int, *, bits: int = 4, group: int = 128, zero_point: bool = False) -> Spec:
    t: Spec = {f"{p}.weight_packed": ("I32", (o, i * bits // 32)),
               f"{p}.weight_scale": ("BF16", (o, i // group if group > 0 else 1)),
               f"{p}.weight_shape": ("I64", (2,))}
    if zero_point:
        t[f"{p}.weight_zero_point"] = ("I32", (o * bits // 32, i // group if group > 0 else 1))
    return t


def int8_ct(p: str, o: int, i: int) -> Spec:
    return {f"{p}.weight": ("I8", (o, i)), f"{p}.weight_scale": ("BF16", (o, 1))}


def gptq(p: str, o: int, i: int, *, bits: int = 4, group: int = 128) -> Spec:
    g = i // group if group > 0 else 1
    return {f"{p}.qweight": ("I32", (i * bits // 32, o)), f"{p}.qzeros": ("I32", (g, o * bits // 32)),
            f"{p}.scales": ("F16", (g, o)), f"{p}.g_idx": ("I32", (i,))}


def awq_gemm(p: str, o: int, i: int, *, bits: int = 4, group: int = 128) -> Spec:
    g = i // group
    return {f"{p}.qweight": ("I32", (i, o * bits // 32)), f"{p}.qzeros": ("I32", (g, o * bits // 32)),
            f"{p}.scales": ("F16", (g, o))}


def awq_gemv(p: str, o: int, i: int, *, bits: int = 4, group: int = 128) -> Spec:
    """AutoAWQ ``WQLinear_GEMV``: qweight [out, in/8], scales/qzeros padded to multiples of 8 columns."""
    width = -(-i // group // 8)
    return {f"{p}.qweight": ("I32", (o, i * bits // 32)), f"{p}.qzeros": ("I32", (o, width)),
            f"{p}.scales": ("F16", (o, width * 8))}


def mlx_affine(p: str, o: int, i: int, *, bits: int = 4, group: int = 64) -> Spec:
    return {f"{p}.weight": ("U32", (o, i * bits // 32)), f"{p}.scales": ("BF16", (o, i // group)),
            f"{p}.biases": ("BF16", (o, i // group))}


def mlx_mx(p: str, o: int, i: int, *, bits: int = 4, group: int = 32) -> Spec:
    return {f"{p}.weight": ("U32", (o, i * bits // 32)), f"{p}.scales": ("U8", (o, i // group))}


def bnb_nf4(p: str, o: int, i: int, *, blocksize: int = 64, kind: str = "nf4", double: bool = False) -> Spec:
    n = o * i
    t: Spec = {f"{p}.weight": ("U8", ((n + 1) // 2, 1)), f"{p}.weight.absmax": ("F32", (n // blocksize,)),
               f"{p}.weight.quant_map": ("F32", (16,)),
               f"{p}.weight.quant_state.bitsandbytes__{kind}": ("U8", (96,))}
    if double:
        t[f"{p}.weight.absmax"] = ("U8", (n // blocksize,))
        t[f"{p}.weight.nested_absmax"] = ("F32", (max(1, n // blocksize // 256),))
        t[f"{p}.weight.nested_quant_map"] = ("F32", (256,))
    return t


def bnb_int8(p: str, o: int, i: int) -> Spec:
    return {f"{p}.weight": ("I8", (o, i)), f"{p}.SCB": ("F32", (o,)), f"{p}.weight_format": ("U8", ())}


def exl2(p: str, o: int, i: int, *, bits: int = 4) -> Spec:
    groups = i // 32
    return {f"{p}.q_weight": ("I32", (i * bits // 32, o)), f"{p}.q_invperm": ("I16", (i,)),
            f"{p}.q_scale": ("I32", (groups, o // 8)), f"{p}.q_scale_max": ("F16", (groups,)),
            f"{p}.q_groups": ("I16", (groups * 2,))}


def exl3(p: str, o: int, i: int, *, k: int = 4) -> Spec:
    return {f"{p}.trellis": ("I16", (i // 16, o // 16, 16 * k)), f"{p}.suh": ("F16", (i,)),
            f"{p}.svh": ("F16", (o,))}


def hqq(p: str, o: int, i: int, *, bits: int = 4, group: int = 64) -> Spec:
    n = o * i
    return {f"{p}.W_q": ("U8", (n * bits // 8 // group, group)), f"{p}.scale": ("F16", (n // group, 1)),
            f"{p}.zero": ("F16", (n // group, 1)), f"{p}.nbits": ("U8", ()), f"{p}.group_size": ("I64", ()),
            f"{p}.shape": ("I64", (2,)), f"{p}.axis": ("U8", ()), f"{p}.packing": ("U8", (7,))}


def aqlm(p: str, o: int, i: int, *, ncb: int = 1, nbits: int = 8, ig: int = 8, og: int = 1) -> Spec:
    return {f"{p}.codes": ("U8" if nbits <= 8 else "I16", (o // og, i // ig, ncb)),
            f"{p}.codebooks": ("F16", (ncb, 2 ** nbits, og, ig)), f"{p}.scales": ("F16", (o // og, 1, 1, 1))}


def torchao_fp8(p: str, o: int, i: int, *, legacy: bool = False) -> Spec:
    """torchao Float8Tensor flattened for safetensors: ``{module}._weight_qdata`` (``{param}:qdata`` before)."""
    if legacy:
        return {f"{p}.weight:qdata": ("F8_E4M3", (o, i)), f"{p}.weight:scale": ("F32", (o, 1))}
    return {f"{p}._weight_qdata": ("F8_E4M3", (o, i)), f"{p}._weight_scale": ("F32", (o, 1))}


def quark_fp8(p: str, o: int, i: int) -> Spec:
    return {f"{p}.weight": ("F8_E4M3", (o, i)), f"{p}.weight_scale": ("F32", ()), f"{p}.input_scale": ("F32", ())}


def quark_mxfp4(p: str, o: int, i: int) -> Spec:
    return {f"{p}.weight": ("U8", (o, i // 2)), f"{p}.weight_scale": ("U8", (o, i // 32))}


def native_mxfp4(p: str, o: int, i: int) -> Spec:
    return {f"{p}.weight": ("F4", (o, i)), f"{p}.weight_scale": ("F8_E8M0", (o, i // 32))}


# ---------------------------------------------------------------------------------------- configs

def ct_config(groups: dict[str, dict[str, Any]], *, fmt: str, ignore: Iterable[str] = ("lm_head",),
              kv: dict[str, Any] | None = None) -> dict[str, Any]:
    """A compressed-tensors ``quantization_config`` as llm-compressor writes it."""
    return {"quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
            "config_groups": groups, "ignore": list(ignore), "kv_cache_scheme": kv, "global_compression_ratio": None,
            "sparsity_config": {}, "transform_config": {}, "version": "0.12.2"}


def qargs(num_bits: int, type_: str, strategy: str, **extra: Any) -> dict[str, Any]:
    args = {"num_bits": num_bits, "type": type_, "symmetric": True, "group_size": None, "strategy": strategy,
            "block_structure": None, "dynamic": False, "actorder": None, "observer": "minmax",
            "observer_kwargs": {}}
    args.update(extra)
    return args


def scheme(weights: dict[str, Any], inputs: dict[str, Any] | None = None, fmt: str | None = None) -> dict[str, Any]:
    s = {"targets": ["Linear"], "weights": weights, "input_activations": inputs, "output_activations": None}
    if fmt:
        s["format"] = fmt
    return s


# ------------------------------------------------------------------------------------- whole fixtures

def bf16_llama(shape: Shape = DEFAULT) -> Fixture:
    return Fixture(model_tensors(shape, plain("BF16")), {"config.json": llama_config(shape)}, {"format": "pt"})


def _q(shape: Shape, linear: Callable[[str, int, int], Spec], quant: dict[str, Any] | None,
       metadata: dict[str, str] | None = None, extra_configs: dict[str, dict[str, Any]] | None = None,
       **cfg_extra: Any) -> Fixture:
    cfg = llama_config(shape, **cfg_extra)
    if quant is not None:
        cfg["quantization_config"] = quant
    configs = {"config.json": cfg, **(extra_configs or {})}
    return Fixture(model_tensors(shape, linear), configs, metadata if metadata is not None else {"format": "pt"})


def fp8_ct_channel(shape: Shape = DEFAULT) -> Fixture:
    """RedHat "FP8-dynamic": FP8 per-channel weights, dynamic per-token FP8 activations."""
    quant = ct_config({"group_0": scheme(qargs(8, "float", "channel"),
                                         qargs(8, "float", "token", dynamic=True))}, fmt="float-quantized")
    return _q(shape, fp8_channel, quant)


def fp8_ct_static(shape: Shape = DEFAULT) -> Fixture:
    quant = ct_config({"group_0": scheme(qargs(8, "float", "tensor"), qargs(8, "float", "tensor"))},
                      fmt="float-quantized", kv={"num_bits": 8, "type": "float", "strategy": "tensor",
                                                 "dynamic": False, "symmetric": True})
    fx = _q(shape, fp8_tensor, quant)
    for n in range(shape.layers):
        fx.tensors[f"model.layers.{n}.self_attn.k_scale"] = ("F32", ())
        fx.tensors[f"model.layers.{n}.self_attn.v_scale"] = ("F32", ())
    return fx


def fp8_block_deepseek(shape: Shape = DEFAULT) -> Fixture:
    quant = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    return _q(shape, fp8_block, quant)


def fbgemm_fp8(shape: Shape = DEFAULT) -> Fixture:
    quant = {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0, "modules_to_not_convert": ["lm_head"]}
    return _q(shape, fp8_channel, quant)


def modelopt_fp8(shape: Shape = DEFAULT) -> Fixture:
    hq = {"producer": {"name": "modelopt", "version": "0.19.0"},
          "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}}
    fx = _q(shape, fp8_tensor, None, extra_configs={"hf_quant_config.json": hq})
    for n in range(shape.layers):
        fx.tensors[f"model.layers.{n}.self_attn.k_proj.k_scale"] = ("F32", ())
        fx.tensors[f"model.layers.{n}.self_attn.v_proj.v_scale"] = ("F32", ())
    return fx


def nvfp4_modelopt_fixture(shape: Shape = DEFAULT, *, config_quant: bool = True) -> Fixture:
    hq = {"producer": {"name": "modelopt", "version": "0.37.0"},
          "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                           "exclude_modules": ["lm_head"]}}
    quant = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "ignore": ["lm_head"],
             "kv_cache_scheme": None, "producer": {"name": "modelopt", "version": "0.37.0"},
             "config_groups": {"group_0": {"input_activations": {"dynamic": False, "num_bits": 4, "type": "float",
                                                                 "group_size": 16},
                                           "weights": {"dynamic": False, "num_bits": 4, "type": "float",
                                                       "group_size": 16}, "targets": ["Linear"]}}}
    return _q(shape, nvfp4_modelopt, quant if config_quant else None, extra_configs={"hf_quant_config.json": hq})


def nvfp4_ct_fixture(shape: Shape = DEFAULT) -> Fixture:
    w = qargs(4, "float", "tensor_group", group_size=16, scale_dtype="torch.float8_e4m3fn")
    a = qargs(4, "float", "tensor_group", group_size=16, dynamic="local")
    return _q(shape, nvfp4_ct, ct_config({"group_0": scheme(w, a)}, fmt="nvfp4-pack-quantized"))


def mxfp4_ct_fixture(shape: Shape = DEFAULT) -> Fixture:
    w = qargs(4, "float", "group", group_size=32, scale_dtype="torch.uint8")
    return _q(shape, mxfp4_ct, ct_config({"group_0": scheme(w)}, fmt="mxfp4-pack-quantized"))


def mxfp8_ct_fixture(shape: Shape = DEFAULT) -> Fixture:
    w = qargs(8, "float", "group", group_size=32, scale_dtype="torch.uint8")
    return _q(shape, mxfp8_ct, ct_config({"group_0": scheme(w)}, fmt="mxfp8-quantized"))


def w4a16_ct(shape: Shape = DEFAULT, *, zero_point: bool = False) -> Fixture:
    w = qargs(4, "int", "group", group_size=128, symmetric=not zero_point, actorder="group")
    return _q(shape, lambda p, o, i: int_pack_ct(p, o, i, zero_point=zero_point),
              ct_config({"group_0": scheme(w)}, fmt="pack-quantized"))


def w8a8_int8_ct(shape: Shape = DEFAULT) -> Fixture:
    w = qargs(8, "int", "channel")
    a = qargs(8, "int", "token", dynamic=True)
    return _q(shape, int8_ct, ct_config({"group_0": scheme(w, a)}, fmt="int-quantized"))


def gptq_fixture(shape: Shape = DEFAULT, *, bits: int = 4, group: int = 128, desc_act: bool = True,
                 side: dict[str, Any] | None = None) -> Fixture:
    quant = {"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": desc_act, "sym": True,
             "damp_percent": 0.01, "true_sequential": True, "checkpoint_format": "gptq",
             "meta": {"quantizer": ["gptqmodel:2.2.0"]}, "pack_dtype": "int32"}
    extra = {"quantize_config.json": side} if side is not None else None
    return _q(shape, lambda p, o, i: gptq(p, o, i, bits=bits, group=group), quant, extra_configs=extra)


def awq_fixture(shape: Shape = DEFAULT) -> Fixture:
    quant = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm",
             "modules_to_not_convert": None}
    return _q(shape, awq_gemm, quant)


def mlx_fixture(shape: Shape = DEFAULT, *, bits: int = 4, group: int = 64, mode: str | None = None,
                overrides: dict[str, Any] | None = None) -> Fixture:
    block: dict[str, Any] = {"group_size": group, "bits": bits}
    if mode:
        block["mode"] = mode
    block.update(overrides or {})

    def linear(p: str, o: int, i: int) -> Spec:
        ov = (overrides or {}).get(p)
        if ov is False:
            return {f"{p}.weight": ("BF16", (o, i))}
        b = ov.get("bits", bits) if isinstance(ov, dict) else bits
        g = ov.get("group_size", group) if isinstance(ov, dict) else group
        return mlx_mx(p, o, i, bits=b, group=g) if mode and mode != "affine" else mlx_affine(p, o, i, bits=b, group=g)

    cfg = llama_config(shape, quantization=block, quantization_config=block)
    return Fixture(model_tensors(shape, linear), {"config.json": cfg}, {"format": "mlx"})


def gpt_oss_fixture(experts: int = 4, hidden: int = 128, inter: int = 128, layers: int = 2,
                    vocab: int = 256) -> Fixture:
    """transformers' GptOssForCausalLM layout: MXFP4 ``*_blocks``/``*_scales`` on fused experts."""
    t: Spec = {"model.embed_tokens.weight": ("BF16", (vocab, hidden))}
    heads, kv, hd = 4, 2, 32
    for n in range(layers):
        p = f"model.layers.{n}"
        t[f"{p}.input_layernorm.weight"] = ("BF16", (hidden,))
        t[f"{p}.post_attention_layernorm.weight"] = ("BF16", (hidden,))
        t[f"{p}.self_attn.q_proj.weight"] = ("BF16", (heads * hd, hidden))
        t[f"{p}.self_attn.q_proj.bias"] = ("BF16", (heads * hd,))
        t[f"{p}.self_attn.k_proj.weight"] = ("BF16", (kv * hd, hidden))
        t[f"{p}.self_attn.k_proj.bias"] = ("BF16", (kv * hd,))
        t[f"{p}.self_attn.v_proj.weight"] = ("BF16", (kv * hd, hidden))
        t[f"{p}.self_attn.v_proj.bias"] = ("BF16", (kv * hd,))
        t[f"{p}.self_attn.o_proj.weight"] = ("BF16", (hidden, heads * hd))
        t[f"{p}.self_attn.o_proj.bias"] = ("BF16", (hidden,))
        t[f"{p}.self_attn.sinks"] = ("BF16", (heads,))
        t[f"{p}.mlp.router.weight"] = ("BF16", (experts, hidden))
        t[f"{p}.mlp.router.bias"] = ("BF16", (experts,))
        t[f"{p}.mlp.experts.gate_up_proj_blocks"] = ("U8", (experts, 2 * inter, hidden // 32, 16))
        t[f"{p}.mlp.experts.gate_up_proj_scales"] = ("U8", (experts, 2 * inter, hidden // 32))
        t[f"{p}.mlp.experts.gate_up_proj_bias"] = ("BF16", (experts, 2 * inter))
        t[f"{p}.mlp.experts.down_proj_blocks"] = ("U8", (experts, hidden, inter // 32, 16))
        t[f"{p}.mlp.experts.down_proj_scales"] = ("U8", (experts, hidden, inter // 32))
        t[f"{p}.mlp.experts.down_proj_bias"] = ("BF16", (experts, hidden))
    t["model.norm.weight"] = ("BF16", (hidden,))
    t["lm_head.weight"] = ("BF16", (vocab, hidden))
    cfg = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": hidden,
           "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": kv, "head_dim": hd, "vocab_size": vocab, "num_local_experts": experts,
           "num_experts_per_tok": 2, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
           "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert":
                                   ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                    "lm_head"]}}
    return Fixture(t, {"config.json": cfg}, {"format": "pt"})


def gpt_oss_logical(experts: int = 4, hidden: int = 128, inter: int = 128, layers: int = 2, vocab: int = 256) -> int:
    heads, kv, hd = 4, 2, 32
    attn = heads * hd * hidden * 2 + kv * hd * hidden * 2 + heads * hd + 2 * kv * hd + hidden + heads
    moe = experts * hidden + experts + experts * 2 * inter * hidden + experts * 2 * inter \
        + experts * hidden * inter + experts * hidden
    return 2 * vocab * hidden + layers * (attn + moe + 2 * hidden) + hidden


def bnb_nf4_fixture(shape: Shape = DEFAULT, *, double: bool = False) -> Fixture:
    quant = {"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False,
             "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": double,
             "bnb_4bit_compute_dtype": "bfloat16", "bnb_4bit_quant_storage": "uint8",
             "llm_int8_skip_modules": ["lm_head"], "llm_int8_threshold": 6.0}
    return _q(shape, lambda p, o, i: bnb_nf4(p, o, i, double=double), quant)


def bnb_int8_fixture(shape: Shape = DEFAULT) -> Fixture:
    quant = {"quant_method": "bitsandbytes", "load_in_8bit": True, "load_in_4bit": False,
             "llm_int8_threshold": 6.0, "llm_int8_skip_modules": None}
    return _q(shape, bnb_int8, quant)


def exl2_fixture(shape: Shape = DEFAULT, *, with_config: bool = True) -> Fixture:
    quant = {"quant_method": "exl2", "version": "0.2.8", "bits": 4.0, "head_bits": 6,
             "calibration": {"rows": 115, "length": 2048, "dataset": "(default)"}} if with_config else None
    return _q(shape, exl2, quant)


def exl3_fixture(shape: Shape = DEFAULT) -> Fixture:
    quant = {"quant_method": "exl3", "version": "0.0.4", "bits": 4.0, "head_bits": 6,
             "calibration": {"rows": 250, "cols": 2048}, "out_scales": "auto"}
    return _q(shape, exl3, quant, extra_configs={"quantization_config.json": {**quant, "tensor_storage": {}}})


def hqq_fixture(shape: Shape = DEFAULT) -> Fixture:
    quant = {"quant_method": "hqq", "quant_config": {"quant_zero": False, "quant_scale": False, "offload_meta": False,
                                                     "view_as_float": False, "weight_quant_params":
                                                     {"nbits": 4, "group_size": 64, "axis": 1,
                                                      "channel_wise": True, "optimize": True, "round_zero": True}},
             "skip_modules": ["lm_head"]}
    return _q(shape, hqq, quant)


def aqlm_fixture(shape: Shape = DEFAULT) -> Fixture:
    quant = {"quant_method": "aqlm", "in_group_size": 8, "out_group_size": 1, "num_codebooks": 1,
             "nbits_per_codebook": 8, "linear_weights_not_to_quantize": ["model.embed_tokens.weight",
                                                                         "lm_head.weight"]}
    return _q(shape, aqlm, quant)


def torchao_fixture(shape: Shape = DEFAULT, *, legacy: bool = False) -> Fixture:
    """torchao's ``flatten_tensor_state_dict`` output: one ``tensor_names`` JSON list plus one JSON
    string per parameter (``_type``/``_data``/``_tensor_data_names``), plain tensors typed ``Tensor``."""
    quant = {"quant_method": "torchao", "quant_type": {"default": {"_type": "Float8DynamicActivationFloat8WeightConfig",
                                                                   "_version": 2, "_data": {}}},
             "modules_to_not_convert": None, "include_input_output_embeddings": False}
    fx = _q(shape, lambda p, o, i: torchao_fp8(p, o, i, legacy=legacy), quant)
    params: list[str] = []
    md: dict[str, str] = {}
    for n in fx.tensors:
        if n.endswith(("_weight_qdata", ".weight:qdata")):
            param = n[: -len(":qdata")] if legacy else n[: -len("._weight_qdata")] + ".weight"
            params.append(param)
            md[param] = json.dumps({"_type": "Float8Tensor", "_data": {"block_size": [1, 256]},
                                    "_tensor_data_names": ["qdata", "scale"]})
        elif not n.endswith(("_weight_scale", ":scale")):
            params.append(n)
            md[n] = json.dumps({"_type": "Tensor"})
    md["tensor_names"] = json.dumps(params)
    fx.metadata = md
    return fx


def quark_fp8_fixture(shape: Shape = DEFAULT) -> Fixture:
    spec = {"dtype": "fp8_e4m3", "is_dynamic": False, "qscheme": "per_tensor", "ch_axis": None, "group_size": None,
            "symmetric": True, "round_method": "half_even", "scale_type": "float", "observer_cls": "PerTensorMinMaxObserver"}
    quant = {"quant_method": "quark", "global_quant_config": {"weight": spec, "input_tensors": spec,
                                                              "output_tensors": None, "bias": None},
             "layer_quant_config": {"*k_proj": {"weight": spec, "input_tensors": spec, "output_tensors": spec},
                                    "*v_proj": {"weight": spec, "input_tensors": spec, "output_tensors": spec}},
             "layer_type_quant_config": {}, "exclude": ["lm_head"],
             "export": {"kv_cache_group": ["*k_proj", "*v_proj"], "pack_method": "reorder",
                        "weight_format": "real_quantized", "min_kv_scale": 0.0}, "quant_mode": "eager_mode",
             "version": "0.9"}
    fx = _q(shape, quark_fp8, quant)
    for n in range(shape.layers):
        fx.tensors[f"model.layers.{n}.self_attn.k_proj.output_scale"] = ("F32", ())
        fx.tensors[f"model.layers.{n}.self_attn.v_proj.output_scale"] = ("F32", ())
    return fx


def quark_mxfp4_fixture(shape: Shape = DEFAULT) -> Fixture:
    spec = {"dtype": "fp4", "is_dynamic": False, "qscheme": "per_group", "group_size": 32, "ch_axis": -1,
            "scale_format": "e8m0", "scale_calculation_mode": "even", "observer_cls": "PerBlockMXObserver"}
    inp = dict(spec, is_dynamic=True)
    quant = {"quant_method": "quark", "global_quant_config": {"weight": spec, "input_tensors": inp,
                                                              "output_tensors": None, "bias": None},
             "layer_quant_config": {}, "exclude": ["lm_head"],
             "export": {"kv_cache_group": [], "pack_method": "reorder", "weight_format": "real_quantized"}}
    return _q(shape, quark_mxfp4, quant)
