"""vLLM's profile run, from the model's operations (what ``determine_available_memory`` measures as the
activation peak), per release.

vLLM sizes its KV pool after one dummy forward pass at ``max_num_batched_tokens`` and one dummy sampler run over
``min(max_num_seqs, max_num_batched_tokens)`` rows (``gpu_model_runner.profile_run``), taking the torch peak of the
two. The tensors alive at each peak, read in the wheels named in the engine's ``[memory.sources]``:

* forward pass (attention skipped): per token the hidden-sized activations alive at the MLP (residual, normed
  input, attention output, MLP output: ``forward_hidden_tensors``) and the feed-forward ones of this rank (gate and
  up projections, their activated product: ``forward_ff_tensors``), in the model's dtype; for MoE layers the
  fused-MoE kernel's workspaces (``TritonExperts.workspace_shapes``: ``M x top_k x max(N/2, K)`` and
  ``M x top_k x max(N, K)``, ``N`` = 2 x the expert width of the rank, ``K`` = hidden);
* sampler run: the logits of the sampled rows in the model's dtype, their FP32 copy, and what the top-k/top-p
  step allocates per row: ``torch.sort`` before 0.17 (sorted values, int64 indices, the arange it sorts and the
  radix sort's alternate key and value buffers: 32 B per entry), an in-place kernel from 0.17 (Triton, then
  FlashInfer from 0.21: the softmax probabilities and the sampling noise or mask, 8 B); beside them the forward
  pass's hidden states (``max_num_batched_tokens x hidden``), the sampled rows' hidden states and their random
  copy, the Triton kernel's per-SM row buffer (``sampler_buffer_rows``, 0.17-0.20), and from 0.15 the fused-MoE
  workspace, which the ``WorkspaceManager`` keeps allocated after the forward pass;
* the cuBLAS workspace PyTorch allocates through its caching allocator on the first GEMM (``:4096:8``, 32 MiB).

Checked against 40 vLLM 0.19 startup logs (``torch peak memory increase``, H100) to 0.04 GiB and against 0.11 to
0.16 logs (38 B per sampled row); docs/memory.md has the table.
"""

from __future__ import annotations

from dataclasses import dataclass

from qcheck.matrix.memory_params import EngineMemory
from qcheck.memory.records import GIB, MIB
from qcheck.model import ModelShape

#: per vocabulary entry of a sampled row, the top-k/top-p step's own tensors: torch.sort (values FP32, indices
#: int64, the int64 arange it sorts, the radix sort's FP32 and int64 alternate buffers) or an in-place kernel
#: (softmax probabilities, exponential noise or the top-k mask, FP32)
SORT_BYTES = 4 + 8 + 8 + 4 + 8
IN_PLACE_BYTES = 4 + 4


def expert_width(shape: ModelShape) -> int:
    """One routed expert's feed-forward width: ``moe_intermediate_size``, else ``intermediate_size`` for
    Mixtral-style configs that only have that one (Mixtral, GPT-OSS); 0 for a dense model."""
    if shape.n_expert <= 1:
        return 0
    return shape.n_ff_exp or shape.n_ff


def dense_ff(shape: ModelShape) -> int:
    """The dense MLP width beside the routed experts (shared experts, DeepSeek's first dense layers), or the MLP
    of a dense model."""
    if shape.n_expert > 1:
        width = expert_width(shape)
        return shape.n_ff if shape.n_ff and shape.n_ff != width else 0
    return shape.n_ff or 4 * shape.hidden


def pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@dataclass(frozen=True)
class ProfileRun:
    """The profile run of one vLLM release for one model on one rank: tokens of the forward pass, sampled rows,
    tensor-parallel size and the model's activation dtype size."""

    shape: ModelShape
    mem: EngineMemory
    tokens: int
    seqs: int
    tp: int = 1
    act_bytes: int = 2
    #: the MoE kernel keeps no fused-MoE workspace (vLLM's monolithic MXFP4 Triton kernel, matmul_ogs)
    monolithic_moe: bool = False

    @property
    def rows(self) -> int:
        return max(1, min(self.seqs, self.tokens))

    def moe_workspace(self) -> int:
        """The fused-MoE workspaces of one layer at the forward pass's tokens (0 for a dense model)."""
        width = expert_width(self.shape)
        if not width or not self.shape.n_expert_used or self.monolithic_moe:
            return 0
        m = self.tokens
        n = 2 * -(-width // self.tp)
        k = self.shape.hidden
        return m * self.shape.n_expert_used * (max(n // 2, k) + max(n, k)) * self.act_bytes

    def persistent_moe(self) -> bool:
        return bool(self.mem.get("moe_workspace_persistent"))

    def forward(self) -> int:
        """The forward pass's peak: the MLP's live activations of every token (plus a transient MoE workspace)."""
        s, a = self.shape, self.act_bytes
        hidden_t = int(self.mem.get("forward_hidden_tensors", 4))
        ff_t = int(self.mem.get("forward_ff_tensors", 3))
        ff = -(-dense_ff(s) // self.tp)
        return self.tokens * (hidden_t * s.hidden + ff_t * ff) * a + self.moe_workspace()

    def row_bytes(self) -> int:
        """Bytes per vocabulary entry of a sampled row: the logits in the model's dtype, their FP32 copy (none
        for an FP32 model) and the top-k/top-p step's tensors."""
        a = self.act_bytes
        topk = SORT_BYTES if self.mem.get("sampler_sort") else IN_PLACE_BYTES
        return a + (4 if a < 4 else 0) + topk

    def sampler(self) -> int:
        """The sampler run's peak: its per-row tensors, the per-SM row buffer, the forward pass's outputs still
        alive, and the fused-MoE workspace when vLLM keeps it."""
        s, a = self.shape, self.act_bytes
        rows = self.rows
        buffer_rows = int(self.mem.get("sampler_buffer_rows", 0))
        buffer = min(pow2(rows), buffer_rows) * s.vocab * 4 if buffer_rows else 0
        alive = self.tokens * s.hidden * a + 2 * rows * s.hidden * a
        kept = self.moe_workspace() if self.persistent_moe() else 0
        return rows * s.vocab * self.row_bytes() + buffer + alive + kept

    def cublas(self) -> int:
        return int(float(self.mem.get("cublas_workspace_mib", 0)) * MIB)

    def peak(self) -> tuple[int, str]:
        """The activation peak and how it was built."""
        fwd, smp = self.forward(), self.sampler()
        which = "sampler run" if smp >= fwd else "forward pass"
        ws = self.moe_workspace()
        moe = ""
        if ws:
            moe = (f"; fused-MoE workspace {ws / GIB:.2f} GiB "
                   + ("(kept by the WorkspaceManager through the sampler run)" if self.persistent_moe()
                      else "(freed after the forward pass)"))
        topk = "torch.sort" if self.mem.get("sampler_sort") else "in-place top-k/top-p"
        how = (f"{which} sets the peak: sampler {self.rows} rows x vocab {self.shape.vocab} x {self.row_bytes()} B "
               f"(logits, FP32 copy, {topk}) + live hidden states = {smp / GIB:.2f} GiB, forward "
               f"{self.tokens} tokens x ({self.mem.get('forward_hidden_tensors', 4)} x hidden + "
               f"{self.mem.get('forward_ff_tensors', 3)} x ff/tp) x {self.act_bytes} B = {fwd / GIB:.2f} GiB{moe}"
               f"; + cuBLAS workspace {self.cublas() / MIB:.0f} MiB")
        return max(fwd, smp) + self.cublas(), how


def capture_sizes(max_size: int) -> int:
    """How many CUDA-graph batch sizes vLLM captures up to ``max_size`` (``_set_cudagraph_sizes``: 1, 2, 4, then
    every 8 below 256, then every 16)."""
    if max_size < 1:
        return 0
    count = len([i for i in (1, 2, 4) if i <= max_size])
    if max_size >= 8:
        count += len(range(8, min(max_size + 1, 256), 8))
    if max_size >= 256:
        count += len(range(256, max_size + 1, 16))
    return count
