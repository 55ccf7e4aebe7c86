"""Weights as a tensor-parallel engine holds them (vLLM, SGLang): per kernel, per rank.

The bytes in the checkpoint are not the bytes on the GPU:

* **Kernel layouts.** vLLM pads MXFP4 MoE weights to its kernel's alignment and repacks them
  (``mxfp4_round_up_hidden_size_and_intermediate_size``, 0.19 ``fused_moe/oracle/mxfp4.py:376-400``; 0.11
  ``quantization/mxfp4.py:187-226``): Marlin (Ampere, and Hopper without Triton kernels) rounds the hidden size to
  256 and the expert width of the rank to 128 and keeps E8M0 scales (``marlin_utils_fp4.py``
  ``prepare_moe_mxfp4_layer_for_marlin``); the Triton matmul_ogs kernel (Hopper) rounds the expert width to 64,
  swizzles values to 64-byte tiles and scales to 256-row tiles (``triton_kernels`` ``HopperMXValueLayout`` and
  ``HopperMXScaleLayout``), converts the biases to FP32 and leaves the loaded scales registered beside the swizzled
  copy (0.19 ``quantization/mxfp4.py:297-307``); with torch < 2.8.1 (vLLM 0.11) the swizzle is off
  (``mxfp4_utils._swizzle_mxfp4``: ``StridedLayout``) but the scale copy stays; FlashInfer's TRT-LLM kernels
  (Blackwell) and ROCm round both dimensions to 256, FlashInfer CUTLASS to 128. Which kernel runs on which
  architecture is the engine's ``[memory]`` key ``mxfp4_moe_backends``.
* **Tensor parallelism.** Each rank holds 1/tp of the embeddings and output layer (``VocabParallelEmbedding``,
  ``ParallelLMHead``), of the attention and MLP projections and of every expert's width, but a whole copy of the
  MoE router (``ReplicatedLinear``), the norms, and one K/V head per rank when there are fewer KV heads than ranks
  (``QKVParallelLinear`` replicates them).

Checked against vLLM's "Model loading took" lines for GPT-OSS (docs/memory.md: 0.11 and 0.19 on H100, 0.19 on
A100) and the dense and MoE runs of the validation table.
"""

from __future__ import annotations

from dataclasses import dataclass

from qcheck.model import Inspection, ModelShape


def round_up(n: int, to: int) -> int:
    return n if to <= 1 else -(-n // to) * to


@dataclass(frozen=True)
class Mxfp4Layout:
    """How one vLLM MXFP4 MoE kernel holds an expert's weights (per rank)."""

    name: str
    hidden_align: int
    inter_align: int
    #: the triton_kernels Hopper swizzle (values in 64-byte tiles, scales in 256-row tiles)
    hopper_swizzle: bool = False
    #: the loaded scale parameters stay registered beside the kernel's copy
    keeps_scales: bool = False
    bias_bytes: int = 2
    what: str = ""


MXFP4_LAYOUTS: dict[str, Mxfp4Layout] = {layout.name: layout for layout in (
    Mxfp4Layout("marlin", 256, 128, what="Marlin: hidden padded to 256, expert width to 128, E8M0 scales"),
    Mxfp4Layout("triton", 1, 64, hopper_swizzle=True, keeps_scales=True, bias_bytes=4,
                what="Triton matmul_ogs: expert width padded to 64, Hopper swizzle (64-byte value tiles, 256-row "
                     "scale tiles), FP32 biases, the loaded scales kept beside the swizzled copy"),
    Mxfp4Layout("triton-strided", 1, 64, keeps_scales=True, bias_bytes=4,
                what="Triton matmul_ogs without the swizzle (torch < 2.8.1): FP32 biases, the loaded scales kept "
                     "beside a transposed copy"),
    Mxfp4Layout("flashinfer-trtllm", 256, 256, what="FlashInfer TRT-LLM: hidden and expert width padded to 256"),
    Mxfp4Layout("flashinfer-cutlass", 128, 128, what="FlashInfer CUTLASS: hidden and expert width padded to 128"),
    Mxfp4Layout("rocm", 256, 256, what="ROCm: hidden and expert width padded to 256"),
)}


def mxfp4_expert_bytes(experts: int, hidden: int, width: int, layout: Mxfp4Layout | None) -> int:
    """One MoE layer's MXFP4 experts at one rank's expert width: gate-up and down values (4 bits), their E8M0
    scales (one byte per 32), the biases; as stored (``layout`` None) or as the kernel holds them."""
    if layout is None:
        h, w = hidden, width
        return experts * (2 * w * h // 2 + h * w // 2 + 2 * w * h // 32 + h * w // 32 + (2 * w + h) * 2)
    h, w = round_up(hidden, layout.hidden_align), round_up(width, layout.inter_align)
    if layout.hopper_swizzle:
        values = round_up(h // 2, 64) * round_up(2 * w, 64) + round_up(w // 2, 64) * round_up(h, 64)
        scales = round_up(2 * w, 256) * round_up(h // 32, 2) + round_up(h, 256) * round_up(w // 32, 2)
    else:
        values = 2 * w * h // 2 + h * w // 2
        scales = 2 * w * h // 32 + h * w // 32
    kept = (2 * w * hidden // 32 + hidden * w // 32) if layout.keeps_scales else 0
    return experts * (values + scales + kept + (2 * w + h) * layout.bias_bytes)


def mxfp4_backend(choices: tuple[str, ...] | list[str] | None, arch: str | None, vendor: str | None) -> str | None:
    """The MXFP4 MoE kernel for an architecture from the engine's ``mxfp4_moe_backends`` entries
    (``"hopper:triton"``, ``"*:marlin"``; a vendor name also matches: ``"amd:rocm"``)."""
    default = None
    for entry in choices or ():
        key, _, backend = str(entry).partition(":")
        if key in (arch, vendor):
            return backend
        if key == "*":
            default = backend
    return default


@dataclass(frozen=True)
class TensorSplit:
    """Where a tensor-parallel engine's weight bytes go: what splits over the ranks, what each rank holds whole,
    and the MoE experts (split by width, laid out by the kernel)."""

    shape: ModelShape
    model: Inspection | None
    layout: Mxfp4Layout | None = None

    @property
    def mxfp4_moe(self) -> bool:
        q = self.model.quantization.method if self.model is not None else None
        return q == "mxfp4" and self.shape.moe and self.shape.from_tensors

    def _experts(self, n: int) -> int:
        """All MoE layers' expert bytes on one of n ranks."""
        s = self.shape
        stored = sum(s.expert_bytes)
        if not self.mxfp4_moe or not s.hidden:
            return -(-stored // n)
        from qcheck.memory.vllm_profile import expert_width

        width = expert_width(s)
        layers = sum(1 for b in s.expert_bytes if b)
        if not width or not layers:
            return -(-stored // n)
        per_layer = mxfp4_expert_bytes(s.n_expert, s.hidden, -(-width // n), self.layout)
        return layers * per_layer

    def _replicated(self, n: int) -> int:
        """Bytes each of n ranks holds beyond its 1/n share: whole norms and routers, K/V heads copied when
        there are fewer KV heads than ranks."""
        if n <= 1:
            return 0
        s, lay = self.shape, self.shape.attention
        elem = self._elem_bytes()
        extra = int(s.other_bytes * (1 - 1 / n))  # final norm and the like
        moe_layers = sum(1 for b in s.expert_bytes if b)
        # the router: quantisers leave it in 16 bits (GPT-OSS, Mixtral AWQ/GPTQ keep the gate unquantised)
        extra += int(moe_layers * s.n_expert * s.hidden * 2 * (1 - 1 / n))
        kv = lay.kv_heads
        if kv and not lay.mla_dim and kv < n and lay.k_dim and lay.v_dim:
            per_head = (lay.k_dim + lay.v_dim) * s.hidden * elem
            layers = lay.full_layers + lay.window_layers
            extra += int(layers * per_head * (1 - kv / n))  # one head per rank instead of kv/n
        return extra

    def _elem_bytes(self) -> float:
        m = self.model
        if m is None:
            return 2.0
        bpw = m.quantization.bits_per_weight
        if m.quantization.method not in (None, "none") and bpw:
            return bpw / 8
        return {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}.get((m.dtype or "").lower(), 2.0)

    def on_rank(self, n: int) -> int:
        """Weight bytes on one of n tensor-parallel ranks."""
        s = self.shape
        rest = s.total_bytes - sum(s.expert_bytes)
        return -(-rest // n) + self._experts(n) + self._replicated(n)

    def how(self, n: int) -> str:
        text = []
        if self.mxfp4_moe and self.layout is not None:
            stored = sum(self.shape.expert_bytes)
            held = self._experts(1)
            text.append(f"MXFP4 experts as the {self.layout.name} kernel holds them ({self.layout.what}): "
                        f"{held / 2**30:.2f} GiB for {stored / 2**30:.2f} GiB in the file")
        if n > 1:
            text.append(f"at tp {n} each rank holds 1/{n} of the embeddings, output layer, projections and expert "
                        f"widths, and whole norms, routers and any KV heads copied to reach {n} ranks "
                        f"(+{self._replicated(n) / 2**30:.2f} GiB)")
        return "; ".join(text)
